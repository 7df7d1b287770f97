"""Kafka's listeners resolved from the broker config: names, addresses, security protocols and their settings.

Why: a broker serves clients and other brokers on several named listeners, each with its own security
(`listeners=INTERNAL://:9092,EXTERNAL://:9093`, `listener.security.protocol.map`, `advertised.listeners`,
`inter.broker.listener.name`), and Kafka resolves each listener's TLS and SASL settings from
`listener.name.<listener>.` (and `listener.name.<listener>.<mechanism>.`) keys over the plain ones. This
module does that resolution once, when the config loads, and refuses a combination that could not work,
naming the key to change: an SSL listener without a keystore, a SASL listener without mechanisms or
without the JAAS config a mechanism needs, a listener the protocol map does not name, a prefixed key or
an advertised listener for a listener that does not exist, an inter-broker listener that is not there.

Compatibility: without `listeners`, the broker has one PLAINTEXT listener at `host`:`port` (Kelp's keys
before listeners, and `--port`/`--host`); with `listeners`, `host` and `port` given as well (a flag, say)
override the first listener's, and `advertised.host`/`advertised.port` its advertised address
(`advertised.host` is the advertised host of every listener `advertised.listeners` does not name). The
listeners a Kafka `server.properties` names in `controller.listener.names` belong to a KRaft quorum Kelp
does not have: they are not opened (one warning).

What it holds is plain data (`ListenerSetup`); the Kafka listener builds TLS contexts and SASL servers from
it. It must never open a socket or a file: certificate and key files are read when the listeners start.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kelp.errors import ConfigError
from kelp.security.jaas import (
    LOGIN_MODULES,
    JaasConfigError,
    JaasEntry,
    jaas_config_key,
    parse_single_jaas_config,
)
from kelp.security.oauthbearer import JwtValidatorSettings, OAuthBearerConfigError
from kelp.security.plain import plain_users
from kelp.security.principal import PrincipalMappingError, SslPrincipalMapper
from kelp.security.tls import TlsConfigError, TlsSettings

from .listener_keys import SECURITY_KEYS, parse_protocol_map, scoped_base

__all__ = ["Endpoint", "ListenerConfig", "MechanismConfig", "InterBroker", "ListenerSetup", "parse_endpoints",
           "resolve_listeners", "TLS_PROTOCOLS", "SASL_PROTOCOLS"]

log = logging.getLogger("kelp.broker.config")

TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
_ENDPOINT = re.compile(r"(?P<name>[A-Za-z][A-Za-z0-9_]*)://(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:/\[\]]*)):(?P<port>\d+)")

Lookup = Callable[[str], object]
"""`BrokerConfig.__getitem__`: a key of BROKER_KEYS to its value."""


@dataclass(frozen=True)
class Endpoint:
    name: str  # upper case, as Kafka normalises listener names
    host: str  # "" binds every interface
    port: int  # 0: ephemeral

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_endpoints(value: object, key: str) -> list[Endpoint]:
    """`NAME://host:port,...` (host may be empty or a bracketed IPv6 address); names unique."""
    out: list[Endpoint] = []
    for item in (part.strip() for part in str(value or "").split(",")):
        if not item:
            continue
        match = _ENDPOINT.fullmatch(item)
        if match is None:
            raise ConfigError(f"invalid value {item!r} in broker config '{key}': expected NAME://host:port, e.g. "
                              "SASL_SSL://:9093 (the listener name, an optional host, the port)")
        port = int(match.group("port"))
        if port > 65535:
            raise ConfigError(f"invalid port {port} in broker config '{key}' ({item})")
        endpoint = Endpoint(match.group("name").upper(), match.group("v6") or match.group("host") or "", port)
        if any(e.name == endpoint.name for e in out):
            raise ConfigError(f"broker config '{key}' names listener {endpoint.name} twice; each listener needs "
                              "a name of its own")
        out.append(endpoint)
    return out


@dataclass(frozen=True)
class MechanismConfig:
    """One SASL mechanism of one listener: its JAAS entry (None when none is configured) and the key it came from,
    KIP-368's `connections.max.reauth.ms` (0: no re-authentication), and, for OAUTHBEARER, its validation
    settings (`sasl.oauthbearer.*`, resolved for the listener and mechanism)."""

    mechanism: str
    jaas: JaasEntry | None
    jaas_key: str
    max_reauth_ms: int
    oauth: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ListenerConfig:
    """One listener: where it binds, what it advertises, its security protocol and the settings it needs."""

    name: str
    protocol: str  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    host: str
    port: int
    advertised_host: str  # "": the bound host, or 127.0.0.1 for a listener on every interface
    advertised_port: int  # 0: the bound port
    tls: TlsSettings | None = None
    principal_rules: str = "DEFAULT"
    mechanisms: Mapping[str, MechanismConfig] = field(default_factory=dict)  # in sasl.enabled.mechanisms order

    @property
    def uses_tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS


@dataclass(frozen=True)
class InterBroker:
    """How this broker connects to the others: the inter-broker listener, its TLS as a client, and the SASL
    mechanism and credentials (the listener's JAAS `username`/`password`) when the listener authenticates."""

    listener: ListenerConfig
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ListenerSetup:
    listeners: tuple[ListenerConfig, ...]
    inter_broker: InterBroker
    http_tls: TlsSettings | None  # the HTTP listener's, with http.ssl.enabled
    failed_authentication_delay_ms: int
    max_receive_size: int
    reload_interval_ms: int

    def named(self, name: str) -> ListenerConfig | None:
        return next((listener for listener in self.listeners if listener.name == name.upper()), None)


class _Config:
    """The config as resolution reads it: plain keys, and the listener- and mechanism-prefixed ones."""

    def __init__(self, get: Lookup, scoped: Mapping[str, object]) -> None:
        self.get = get
        self.scoped = {key.lower(): (key, value) for key, value in scoped.items()}

    def text(self, key: str) -> str | None:
        value = self.get(key)
        return None if value is None else _text(value)

    def resolved(self, key: str, listener: str, mechanism: str | None = None) -> tuple[object, str]:
        """(value, the key it came from): the mechanism-prefixed key, the listener-prefixed one, the plain one."""
        candidates = []
        if mechanism is not None:
            candidates.append(f"listener.name.{listener.lower()}.{mechanism.lower()}.{key}")
        candidates.append(f"listener.name.{listener.lower()}.{key}")
        for candidate in candidates:
            if candidate in self.scoped:
                return self.scoped[candidate][1], self.scoped[candidate][0]
        return self.get(key), key

    def tls_map(self) -> dict[str, str]:
        """Every ssl.* value as text, plain and prefixed, for `TlsSettings.from_kafka_config`."""
        out = {k: _text(v) for k in SECURITY_KEYS if k.startswith("ssl.") and (v := self.get(k)) is not None}
        out.update({key: _text(value) for key, value in self.scoped.values() if ".ssl." in key})
        return out


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def resolve_listeners(get: Lookup, *, explicit: set[str], scoped: Mapping[str, object]) -> ListenerSetup:
    """The listeners of a loaded config (`get` reads a key, `explicit` says which were set, `scoped` holds the
    prefixed keys as given); raises ConfigError naming the key to change."""
    config = _Config(get, scoped)
    endpoints = parse_endpoints(get("listeners"), "listeners")
    if not endpoints:
        endpoints = [Endpoint("PLAINTEXT", str(get("host")), int(_int(get("port"))))]
    else:
        first = endpoints[0]
        host = str(get("host")) if "host" in explicit else first.host
        port = int(_int(get("port"))) if "port" in explicit else first.port
        endpoints[0] = Endpoint(first.name, host, port)
    controller_names = {n.strip().upper() for n in str(get("controller.listener.names") or "").split(",") if n.strip()}
    dropped = [e.name for e in endpoints if e.name in controller_names]
    if dropped:
        log.warning("listener(s) %s are KRaft controller listeners (controller.listener.names): Kelp has no "
                    "controller quorum and does not open them", ", ".join(dropped))
    endpoints = [e for e in endpoints if e.name not in controller_names]
    if not endpoints:
        raise ConfigError("broker config 'listeners' names only controller listeners (controller.listener.names): "
                          "add a listener for clients, e.g. PLAINTEXT://:9092")
    _check_ports(endpoints)
    names = [e.name for e in endpoints]
    known = set(names) | controller_names
    _check_scoped(scoped, known)

    protocol_map = parse_protocol_map(get("listener.security.protocol.map"))
    advertised = {e.name: e for e in parse_endpoints(get("advertised.listeners"), "advertised.listeners")}
    for name in advertised:
        if name not in known:
            raise ConfigError(f"broker config 'advertised.listeners' names listener {name}, which is not in "
                              f"'listeners' ({', '.join(names)})")
    advertised_host = str(get("advertised.host") or "")
    listeners: list[ListenerConfig] = []
    for index, endpoint in enumerate(endpoints):
        protocol = protocol_map.get(endpoint.name)
        if protocol is None:
            raise ConfigError(f"listener {endpoint.name} has no security protocol: add {endpoint.name}:<PROTOCOL> "
                              "(PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL) to 'listener.security.protocol.map', or "
                              "name the listener after its protocol")
        ad = advertised.get(endpoint.name)
        ad_host = ad.host if ad is not None and ad.host else advertised_host
        ad_port = ad.port if ad is not None else 0
        if index == 0 and ad is None and get("advertised.port"):
            ad_port = int(_int(get("advertised.port")))
        listeners.append(_listener(config, endpoint, protocol, ad_host, ad_port))
    inter_broker = _inter_broker(config, listeners, explicit)
    http_tls = _http_tls(config) if get("http.ssl.enabled") else None
    return ListenerSetup(
        listeners=tuple(listeners), inter_broker=inter_broker, http_tls=http_tls,
        failed_authentication_delay_ms=int(_int(get("connection.failed.authentication.delay.ms"))),
        max_receive_size=int(_int(get("sasl.server.max.receive.size"))),
        reload_interval_ms=int(_int(get("ssl.reload.interval.ms"))))


def _int(value: object) -> int:
    return int(str(value))


def _check_ports(endpoints: list[Endpoint]) -> None:
    seen: dict[tuple[str, int], str] = {}
    for e in endpoints:
        if e.port == 0:
            continue
        for host in {e.host, ""} if e.host else {""}:
            other = seen.get((host, e.port))
            if other is not None:
                raise ConfigError(f"broker config 'listeners': listeners {other} and {e.name} both bind port "
                                  f"{e.port}; give each listener a port of its own")
        seen[(e.host, e.port)] = e.name


def _check_scoped(scoped: Mapping[str, object], known: set[str]) -> None:
    for key in scoped:
        parsed = scoped_base(key)
        if parsed is not None and parsed[0] not in known:
            raise ConfigError(f"broker config '{key}' is for listener {parsed[0]}, which is not in 'listeners' "
                              f"({', '.join(sorted(known))}); check the listener name")


def _listener(config: _Config, endpoint: Endpoint, protocol: str, advertised_host: str,
              advertised_port: int) -> ListenerConfig:
    name = endpoint.name
    tls: TlsSettings | None = None
    if protocol in TLS_PROTOCOLS:
        tls = _tls(config.tls_map(), name, f"listener {name} ({protocol})")
    rules, rules_key = config.resolved("ssl.principal.mapping.rules", name)
    try:
        SslPrincipalMapper(str(rules) if rules is not None else None)
    except PrincipalMappingError as exc:
        raise ConfigError(f"invalid value for broker config '{rules_key}': {exc}") from None
    mechanisms: dict[str, MechanismConfig] = {}
    if protocol in SASL_PROTOCOLS:
        enabled, enabled_key = config.resolved("sasl.enabled.mechanisms", name)
        names = list(enabled) if isinstance(enabled, list) else []
        if not names:
            raise ConfigError(f"listener {name} ({protocol}) has no SASL mechanism: set '{enabled_key}' (or "
                              f"'listener.name.{name.lower()}.sasl.enabled.mechanisms') to some of PLAIN, "
                              "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER")
        for mechanism in names:
            mechanisms[mechanism] = _mechanism(config, name, mechanism)
    return ListenerConfig(name=name, protocol=protocol, host=endpoint.host, port=endpoint.port,
                          advertised_host=advertised_host, advertised_port=advertised_port, tls=tls,
                          principal_rules=str(rules) if rules is not None else "DEFAULT",
                          mechanisms=mechanisms)


def _tls(values: Mapping[str, str], listener: str | None, what: str, *, server: bool = True) -> TlsSettings:
    try:
        settings = TlsSettings.from_kafka_config(values, listener=listener)
    except TlsConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    prefix = f"listener.name.{listener.lower()}." if listener else ""
    if server and settings.keystore_location is None:
        raise ConfigError(f"{what} needs a certificate: set 'ssl.keystore.location' (or '{prefix}ssl.keystore."
                          "location') to a PEM file with the certificate chain and its private key")
    if server and settings.client_auth.value != "none" and settings.truststore_location is None:
        raise ConfigError(f"{what} has ssl.client.auth={settings.client_auth.value} but no CA to check client "
                          f"certificates: set 'ssl.truststore.location' (or '{prefix}ssl.truststore.location')")
    return settings


def _mechanism(config: _Config, listener: str, mechanism: str) -> MechanismConfig:
    raw_jaas, jaas_key = config.resolved("sasl.jaas.config", listener, mechanism)
    if raw_jaas is None:
        jaas_key = jaas_config_key(listener, mechanism)
    jaas: JaasEntry | None = None
    if raw_jaas is not None:
        try:
            jaas = parse_single_jaas_config(str(raw_jaas))
        except JaasConfigError as exc:
            raise ConfigError(f"invalid value for broker config '{jaas_key}': {exc}") from None
        if jaas.login_module != LOGIN_MODULES[mechanism]:
            raise ConfigError(f"broker config '{jaas_key}' names {jaas.login_module}; SASL/{mechanism} needs "
                              f"{LOGIN_MODULES[mechanism]}")
    if mechanism == "PLAIN":
        if jaas is None:
            raise ConfigError(f"listener {listener} enables SASL/PLAIN but has no users: set '{jaas_key}' to "
                              f'{LOGIN_MODULES["PLAIN"]} required user_alice="alice-secret";')
        if not plain_users([jaas]):
            raise ConfigError(f"broker config '{jaas_key}' names no PLAIN user: add user_NAME=\"password\" options")
    reauth, _ = config.resolved("connections.max.reauth.ms", listener, mechanism)
    oauth: dict[str, str] = {}
    if mechanism == "OAUTHBEARER":
        for key in SECURITY_KEYS:
            if key.startswith("sasl.oauthbearer."):
                value, _ = config.resolved(key, listener, mechanism)
                if value is not None:
                    oauth[key] = _text(value)
        if "sasl.oauthbearer.jwks.endpoint.url" not in oauth and "sasl.oauthbearer.public.key.location" not in oauth:
            raise ConfigError(f"listener {listener} enables SASL/OAUTHBEARER but names no keys to check tokens: set "
                              "'sasl.oauthbearer.jwks.endpoint.url' to file:/path/to/jwks.json or "
                              "'sasl.oauthbearer.public.key.location' to a PEM public key (Kelp fetches nothing "
                              "over the network)")
        url = oauth.get("sasl.oauthbearer.jwks.endpoint.url", "file:")
        if not url.lower().startswith("file:"):
            raise ConfigError(f"broker config 'sasl.oauthbearer.jwks.endpoint.url'={url}: Kelp reads a JWKS file "
                              "(file:/path), never a URL; write the provider's keys to a file")
        try:
            JwtValidatorSettings.from_kafka_config(oauth)
        except OAuthBearerConfigError as exc:
            raise ConfigError(f"listener {listener}, SASL/OAUTHBEARER: {exc}") from None
    return MechanismConfig(mechanism=mechanism, jaas=jaas, jaas_key=jaas_key, max_reauth_ms=int(_int(reauth or 0)),
                           oauth=oauth)


def _inter_broker(config: _Config, listeners: list[ListenerConfig], explicit: set[str]) -> InterBroker:
    by_name = {listener.name: listener for listener in listeners}
    name_set = "inter.broker.listener.name" in explicit and config.text("inter.broker.listener.name")
    protocol_set = "security.inter.broker.protocol" in explicit and config.text("security.inter.broker.protocol")
    if name_set and protocol_set:
        raise ConfigError("only one of 'inter.broker.listener.name' and 'security.inter.broker.protocol' may be set "
                          "(as in Kafka); keep inter.broker.listener.name")
    if name_set:
        name = str(config.text("inter.broker.listener.name")).strip().upper()
        key = "inter.broker.listener.name"
    elif protocol_set:
        name = str(config.text("security.inter.broker.protocol")).strip().upper()
        key = "security.inter.broker.protocol"
    elif "PLAINTEXT" in by_name or len(listeners) > 1:
        name, key = "PLAINTEXT", "inter.broker.listener.name"
    else:
        name, key = listeners[0].name, "inter.broker.listener.name"
    listener = by_name.get(name)
    if listener is None:
        raise ConfigError(f"broker config '{key}' ({name}) must name one of the listeners "
                          f"({', '.join(by_name)}): set inter.broker.listener.name to the listener brokers "
                          "replicate over")
    if not listener.uses_sasl:
        return InterBroker(listener)
    mechanism = config.text("sasl.mechanism.inter.broker.protocol") or ""
    if not mechanism:
        if len(listener.mechanisms) != 1:
            raise ConfigError(f"the inter-broker listener {name} enables {', '.join(listener.mechanisms)}: set "
                              "'sasl.mechanism.inter.broker.protocol' to the one brokers use")
        mechanism = next(iter(listener.mechanisms))
    settings = listener.mechanisms.get(mechanism)
    if settings is None:
        raise ConfigError(f"broker config 'sasl.mechanism.inter.broker.protocol' ({mechanism}) is not enabled on the "
                          f"inter-broker listener {name} ({', '.join(listener.mechanisms)})")
    if mechanism == "OAUTHBEARER":
        raise ConfigError("broker config 'sasl.mechanism.inter.broker.protocol': OAUTHBEARER between brokers needs "
                          "a token provider Kelp does not have; use PLAIN or SCRAM-SHA-256/512 for brokers")
    options = settings.jaas.options if settings.jaas is not None else {}
    username, password = options.get("username"), options.get("password")
    if not username or not password:
        raise ConfigError(f"the inter-broker listener {name} authenticates brokers with SASL/{mechanism}: set "
                          f"username=\"...\" password=\"...\" in '{settings.jaas_key}' (the credentials this "
                          "broker presents to the others)")
    return InterBroker(listener, mechanism, username, password)


def _http_tls(config: _Config) -> TlsSettings:
    values = {k: v for k, v in config.tls_map().items() if not k.startswith("listener.name.")}
    for key in list(SECURITY_KEYS):
        if key.startswith("http.ssl.") and key != "http.ssl.enabled":
            value = config.get(key)
            if value is not None:
                values[key[len("http."):]] = _text(value)
    return _tls(values, None, "the HTTP listener (http.ssl.enabled=true)")

