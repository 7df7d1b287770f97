"""The listener and security keys of the broker config: Kafka's names, Kelp's parsers, the per-listener prefixes.

Why a module of its own: `keys.BROKER_KEYS` takes these in (one table of every broker key), while
`listeners.py` resolves them into listeners; both read the names here. A Kafka `server.properties` with
`listeners`, `ssl.*`, `sasl.*` and `listener.name.<listener>.` keys loads unchanged:

- `SECURITY_KEYS`: the keys with their parser and default (Kafka's default where Kelp serves what it
  means; `sasl.enabled.mechanisms` and `sasl.mechanism.inter.broker.protocol` default to empty instead of
  Kafka's GSSAPI, which Kelp does not serve).
- `scoped_base(key)`: Kafka's per-listener forms, `listener.name.<listener>.<key>` for the keys of
  `LISTENER_SCOPED`, and `listener.name.<listener>.<mechanism>.<key>` for those of `MECHANISM_SCOPED`
  (the listener and mechanism in lower case, as Kafka writes them); it returns the key they override.
- `SENSITIVE`: keys whose values are secrets (DescribeConfigs answers them as sensitive, without a value).

This module must never read files or import anything of Kelp: `keys` imports it.
"""

from __future__ import annotations

import re
from typing import Callable

__all__ = ["SECURITY_KEYS", "LISTENER_SCOPED", "MECHANISM_SCOPED", "SENSITIVE", "SECURITY_PROTOCOLS",
           "SASL_MECHANISMS", "DEFAULT_PROTOCOL_MAP", "HTTP_SSL_KEYS", "scoped_base", "is_sensitive",
           "parse_protocol_map", "parse_mechanisms"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
"""The SASL mechanisms Kelp serves (Kafka's GSSAPI is not among them)."""
DEFAULT_PROTOCOL_MAP = "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"
"""Kafka's default `listener.security.protocol.map`: each protocol's name is a listener name for it."""
_LISTENER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")

Value = str | int | bool | list[str] | None


def _str(value: object) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError(f"expected a string, got {value!r}")
    return str(value)


def _int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    return value if isinstance(value, int) else int(str(value).strip())


def _nonneg(value: object) -> int:
    number = _int(value)
    if number < 0:
        raise ValueError(f"must be >= 0, got {number}")
    return number


def _positive(value: object) -> int:
    number = _int(value)
    if number <= 0:
        raise ValueError(f"must be > 0, got {number}")
    return number


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"expected true/false, got {value!r}")
    return text == "true"


def _names(value: object) -> list[str]:
    items = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value).split(",")
    return [item.strip() for item in items if item.strip()]


def parse_mechanisms(value: object) -> list[str]:
    """`sasl.enabled.mechanisms`: mechanism names in upper case; one Kelp does not serve is refused."""
    names = [name.upper() for name in _names(value)]
    for name in names:
        if name not in SASL_MECHANISMS:
            hint = " (Kerberos is not served)" if name == "GSSAPI" else ""
            raise ValueError(f"SASL mechanism {name!r} is not served by Kelp{hint}; expected some of "
                             f"{', '.join(SASL_MECHANISMS)}")
    return list(dict.fromkeys(names))


def _mechanism(value: object) -> str:
    names = parse_mechanisms(value)
    if len(names) > 1:
        raise ValueError(f"expected one SASL mechanism, got {', '.join(names)}")
    return names[0] if names else ""


def parse_protocol_map(value: object) -> dict[str, str]:
    """`listener.security.protocol.map`: `NAME:PROTOCOL,...`, names upper-cased (Kafka normalises them)."""
    out: dict[str, str] = {}
    for item in _names(value):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not _LISTENER_NAME.fullmatch(name):
            raise ValueError(f"entry {item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"entry {item!r} names the security protocol {protocol!r}; expected one of "
                             f"{', '.join(SECURITY_PROTOCOLS)}")
        if name in out and out[name] != protocol:
            raise ValueError(f"listener {name} is mapped twice ({out[name]} and {protocol})")
        out[name] = protocol
    return out


def _protocol_map(value: object) -> str:
    parsed = parse_protocol_map(value)
    return ",".join(f"{name}:{protocol}" for name, protocol in parsed.items())


def _protocol(value: object) -> str:
    text = _str(value).strip().upper()
    if text and text not in SECURITY_PROTOCOLS:
        raise ValueError(f"expected one of {', '.join(SECURITY_PROTOCOLS)}, got {value!r}")
    return text


def _client_auth(value: object) -> str:
    text = _str(value).strip().lower()
    if text not in ("none", "requested", "required"):
        raise ValueError(f"expected none, requested or required, got {value!r}")
    return text


def _store_type(value: object) -> str:
    text = _str(value).strip().upper()
    if text != "PEM":
        raise ValueError(f"Kelp reads PEM files only, got {value!r}: set PEM and convert the store (e.g. "
                         "openssl pkcs12 -in store.p12 -nodes)")
    return text


def _callback_handler(value: object) -> str:
    text = _str(value).strip()
    if text and text != OAUTHBEARER_VALIDATOR:
        raise ValueError(f"Kelp cannot load Java classes; the only server callback handler it accepts is "
                         f"{OAUTHBEARER_VALIDATOR} (its own JWT validation for OAUTHBEARER), got {text!r}")
    return text


OAUTHBEARER_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"

Parser = Callable[[object], Value]

# The TLS keys, as the Kafka listeners, the HTTP listener (`http.` + key) and the inter-broker clients read them.
_SSL_KEYS: dict[str, tuple[Parser, Value]] = {
    "ssl.keystore.type": (_store_type, None),
    "ssl.keystore.location": (_str, None),
    "ssl.key.password": (_str, None),
    "ssl.truststore.type": (_store_type, None),
    "ssl.truststore.location": (_str, None),
    "ssl.client.auth": (_client_auth, "none"),
    "ssl.enabled.protocols": (_str, "TLSv1.2,TLSv1.3"),
    "ssl.cipher.suites": (_str, ""),
    "ssl.endpoint.identification.algorithm": (_str, "https"),
}

SECURITY_KEYS: dict[str, tuple[Parser, Value]] = {
    # -- listeners (docs/security.md, "The listener and security keys"); `listeners` itself is keys.py's
    "advertised.listeners": (_str, ""),
    "listener.security.protocol.map": (_protocol_map, DEFAULT_PROTOCOL_MAP),
    "inter.broker.listener.name": (_str, ""),
    "security.inter.broker.protocol": (_protocol, ""),
    # Listeners of a KRaft controller quorum: Kelp has none, so a Kafka server.properties' CONTROLLER listener
    # is not opened (a warning says so).
    "controller.listener.names": (_str, ""),
    # -- TLS from PEM files (kelp.security.tls)
    **_SSL_KEYS,
    "ssl.protocol": (_str, "TLS"),
    # Accepted so a server.properties written for JKS stores loads; PEM files need neither (ssl.key.password
    # decrypts an encrypted key).
    "ssl.keystore.password": (_str, None),
    "ssl.truststore.password": (_str, None),
    "ssl.principal.mapping.rules": (_str, "DEFAULT"),
    # Kelp's: how often each listener looks at its certificate files for a rotation (ms).
    "ssl.reload.interval.ms": (_positive, 60000),
    # -- SASL (kelp.security's servers)
    "sasl.enabled.mechanisms": (parse_mechanisms, []),
    "sasl.mechanism.inter.broker.protocol": (_mechanism, ""),
    "sasl.jaas.config": (_str, None),
    "sasl.server.callback.handler.class": (_callback_handler, None),
    "sasl.server.max.receive.size": (_positive, 524288),
    "connections.max.reauth.ms": (_nonneg, 0),
    "connection.failed.authentication.delay.ms": (_nonneg, 100),
    "sasl.oauthbearer.jwks.endpoint.url": (_str, None),
    "sasl.oauthbearer.expected.audience": (_str, None),
    "sasl.oauthbearer.expected.issuer": (_str, None),
    "sasl.oauthbearer.clock.skew.seconds": (_nonneg, 30),
    "sasl.oauthbearer.sub.claim.name": (_str, "sub"),
    "sasl.oauthbearer.scope.claim.name": (_str, "scope"),
    # Kelp's: static PEM public keys (or certificates) that sign the tokens, instead of a JWKS file.
    "sasl.oauthbearer.public.key.location": (_str, None),
    # -- the HTTP listener's TLS (each falls back to its ssl.* key)
    "http.ssl.enabled": (_bool, False),
    **{f"http.{key}": (parser, None) for key, (parser, _default) in _SSL_KEYS.items()},
}

HTTP_SSL_KEYS = tuple(_SSL_KEYS)
"""The ssl.* keys the HTTP listener reads as `http.<key>`, each falling back to `<key>`."""

LISTENER_SCOPED = frozenset({*_SSL_KEYS, "ssl.protocol", "ssl.keystore.password", "ssl.truststore.password",
                             "ssl.principal.mapping.rules", "sasl.enabled.mechanisms", "connections.max.reauth.ms",
                             "max.connections", "max.connection.creation.rate"})
"""Keys a `listener.name.<listener>.` prefix overrides for that listener."""
MECHANISM_SCOPED = frozenset({"sasl.jaas.config", "connections.max.reauth.ms", "sasl.server.callback.handler.class",
                              *(k for k in SECURITY_KEYS if k.startswith("sasl.oauthbearer."))})
"""Keys a `listener.name.<listener>.<mechanism>.` prefix overrides for that listener and mechanism."""
SENSITIVE = frozenset({"ssl.key.password", "ssl.keystore.password", "ssl.truststore.password", "sasl.jaas.config",
                       "http.ssl.key.password"})

_SCOPED = re.compile(r"listener\.name\.([A-Za-z][A-Za-z0-9_]*)\.(.+)")


def scoped_base(key: str) -> tuple[str, str, str | None, str] | None:
    """`listener.name.<l>.<key>` or `listener.name.<l>.<mech>.<key>` -> (listener upper-cased, base key,
    mechanism upper-cased or None, the key as given); None for any other key. Raises ValueError for a prefixed
    key no listener or mechanism can take."""
    match = _SCOPED.fullmatch(key)
    if match is None:
        return None
    listener, rest = match.group(1).upper(), match.group(2)
    if rest in LISTENER_SCOPED:
        return listener, rest, None, key
    mechanism, _, base = rest.partition(".")
    if mechanism.upper() in SASL_MECHANISMS and base in MECHANISM_SCOPED:
        return listener, base, mechanism.upper(), key
    if mechanism.upper() == "GSSAPI":
        raise ValueError(f"{key}: the SASL mechanism GSSAPI (Kerberos) is not served by Kelp")
    raise ValueError(f"{key}: no such per-listener setting; a listener.name.<listener>. prefix takes "
                     f"{', '.join(sorted(LISTENER_SCOPED))}, and a listener.name.<listener>.<mechanism>. prefix "
                     f"(mechanisms {', '.join(m.lower() for m in SASL_MECHANISMS)}) takes "
                     f"{', '.join(sorted(MECHANISM_SCOPED))}")


def is_sensitive(key: str) -> bool:
    """Whether `key` (plain or listener-prefixed) holds a secret."""
    try:
        scoped = scoped_base(key)
    except ValueError:
        return False
    return (scoped[1] if scoped is not None else key) in SENSITIVE
