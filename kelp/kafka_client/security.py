"""What a connection needs to reach a secured listener: a TLS context and SASL credentials, from Kafka's properties.

Why: Kelp's clients connect to SSL, SASL_PLAINTEXT and SASL_SSL listeners as Kafka's clients do, configured
with the properties a Kafka user already has. `ConnectionSecurity` is what a connection is given (the broker's
replica fetcher builds one from its inter-broker listener, with the broker's own TLS context);
`connection_security(properties)` builds one from Kafka client properties, Java's and librdkafka's names
alike (the Spark source's `kafka.*` options, the CLI's client properties file):

- `security.protocol`: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL;
- `sasl.mechanism` (librdkafka: `sasl.mechanisms`): PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with the user
  and password from `sasl.jaas.config` (`... required username="alice" password="...";`) or
  `sasl.username`/`sasl.password`;
- `ssl.truststore.location` (type PEM; librdkafka: `ssl.ca.location`): the CAs that sign the brokers'
  certificates, else the system's; `ssl.keystore.location` (PEM, certificate chain and key; librdkafka:
  `ssl.certificate.location` and `ssl.key.location`) and `ssl.key.password` for mutual TLS;
  `ssl.endpoint.identification.algorithm` (`https`, the default, checks the broker's host name; empty or
  `none` does not). TLS 1.2 is the floor.

A JKS or PKCS12 store is refused with the conversion to make; OAUTHBEARER needs a token provider and is
refused from properties (a caller with a token passes `SaslCredentials(..., token=...)`). Errors are
ValueError naming the property (with the caller's `prefix`, e.g. `kafka.` for Spark).

`read_client_properties(path)` reads a client properties file (Java properties, what Kafka's tools take with
`--command-config` and its clients with `--producer.config`) into the mapping `connection_security` takes,
so the CLI and the examples read one the same way; `ConnectionSecurity.kafka_python_options()` hands the
result to their kafka-python clients. This module reads the properties and certificate files it
is named, nothing else, and never logs a password.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from .sasl import SaslCredentials

__all__ = ["ConnectionSecurity", "connection_security", "read_client_properties", "SECURITY_PROTOCOLS",
           "CLIENT_SECURITY_PROPERTIES"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CLIENT_SECURITY_PROPERTIES = (
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.username", "sasl.password",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password", "ssl.ca.location",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.certificate.location",
    "ssl.key.location", "ssl.key.password", "ssl.endpoint.identification.algorithm",
)
"""The client properties `connection_security` reads."""
_JAAS_OPTION = re.compile(r"""([A-Za-z_][\w.-]*)\s*=\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s;]+)""")


@dataclass(frozen=True)
class ConnectionSecurity:
    """TLS (a client context; None: plaintext) and SASL (None: no authentication) for a connection."""

    ssl_context: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None

    @property
    def protocol(self) -> str:
        tls, sasl = self.ssl_context is not None, self.sasl is not None
        return {(False, False): "PLAINTEXT", (True, False): "SSL", (False, True): "SASL_PLAINTEXT",
                (True, True): "SASL_SSL"}[(tls, sasl)]


    def kafka_python_options(self) -> dict[str, object]:
        """The same security as kafka-python's client options (`KafkaProducer(**options)`; nothing for PLAINTEXT),
        for the CLI's and the examples' kafka-python clients."""
        options: dict[str, object] = {}
        if self.ssl_context is not None or self.sasl is not None:
            options["security_protocol"] = self.protocol
        if self.ssl_context is not None:
            options["ssl_context"] = self.ssl_context
        if self.sasl is not None:
            options.update(sasl_mechanism=self.sasl.mechanism, sasl_plain_username=self.sasl.username,
                           sasl_plain_password=self.sasl.password)
        return options


PLAINTEXT = ConnectionSecurity()


def connection_security(properties: Mapping[str, str], *, prefix: str = "") -> ConnectionSecurity:
    """A connection's security from Kafka client properties (see the module docstring)."""
    props = {k.lower(): v for k, v in properties.items()}
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"property '{prefix}security.protocol' is {protocol!r}; expected one of "
                         f"{', '.join(SECURITY_PROTOCOLS)}")
    context = _ssl_context(props, prefix) if protocol in ("SSL", "SASL_SSL") else None
    credentials = _sasl(props, prefix) if protocol.startswith("SASL_") else None
    return ConnectionSecurity(context, credentials)


def read_client_properties(path: str) -> dict[str, str]:
    """A Kafka client properties file (Java properties: `#` comments, `key=value`, `\\` continuations) as a
    mapping; ValueError naming the file when it cannot be read or parsed."""
    from jproperties import Properties

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ValueError(f"cannot read the client properties file {path}: {exc.strerror or exc}") from None
    props = Properties()
    try:
        props.load(data, "utf-8")
    except Exception as exc:  # jproperties raises its own ParseError, and ValueError on bad escapes
        raise ValueError(f"{path} is not a Java properties file: {exc}") from None
    return {str(key): str(value.data) for key, value in props.items()}


def _sasl(props: Mapping[str, str], prefix: str) -> SaslCredentials:
    mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "").strip().upper()
    if not mechanism:
        raise ValueError(f"property '{prefix}sasl.mechanism' is required with a SASL security.protocol (PLAIN, "
                         "SCRAM-SHA-256 or SCRAM-SHA-512)")
    if mechanism == "OAUTHBEARER":
        raise ValueError(f"property '{prefix}sasl.mechanism': OAUTHBEARER needs a token provider, which Kelp's "
                         "clients do not have; use PLAIN or SCRAM")
    username, password = props.get("sasl.username"), props.get("sasl.password")
    jaas = props.get("sasl.jaas.config")
    if jaas:
        options = {m.group(1): _unquote(m.group(2)) for m in _JAAS_OPTION.finditer(jaas)}
        username = options.get("username", username)
        password = options.get("password", password)
    if not username or not password:
        raise ValueError(f"SASL/{mechanism} needs a user and a password: set '{prefix}sasl.jaas.config' "
                         f"(username=\"...\" password=\"...\") or '{prefix}sasl.username' and '{prefix}sasl.password'")
    try:
        return SaslCredentials(mechanism, username, password)
    except ValueError as exc:
        raise ValueError(f"property '{prefix}sasl.mechanism': {exc}") from None


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def _ssl_context(props: Mapping[str, str], prefix: str) -> ssl.SSLContext:
    for kind in ("truststore", "keystore"):
        store_type = props.get(f"ssl.{kind}.type", "PEM").strip().upper()
        if store_type != "PEM":
            raise ValueError(f"property '{prefix}ssl.{kind}.type' is {store_type}: Kelp's clients read PEM files; "
                             f"convert the store (openssl pkcs12 -in store.p12 -nodes) and set PEM")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", "", "none"):
        raise ValueError(f"property '{prefix}ssl.endpoint.identification.algorithm' is {algorithm!r}; expected "
                         "https or empty")
    context.check_hostname = algorithm == "https"
    trust_key = "ssl.truststore.location" if "ssl.truststore.location" in props else "ssl.ca.location"
    trust = props.get(trust_key)
    if trust:
        try:
            context.load_verify_locations(cafile=trust)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"property '{prefix}{trust_key}': cannot load CA certificates from {trust}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
    chain_key = "ssl.keystore.location" if "ssl.keystore.location" in props else "ssl.certificate.location"
    chain = props.get(chain_key)
    if chain:
        key = props.get("ssl.key.location")
        password = props.get("ssl.key.password")
        try:
            context.load_cert_chain(chain, key, password if password is not None else _no_password)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"property '{prefix}{chain_key}': cannot load the certificate chain and key from "
                             f"{chain}{' and ' + key if key else ''}: {getattr(exc, 'strerror', None) or exc} (PEM, "
                             f"and '{prefix}ssl.key.password' for an encrypted key)") from None
    return context


def _no_password() -> str:
    raise ValueError("the private key is encrypted: set ssl.key.password")
