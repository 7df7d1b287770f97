"""How `kelp` reaches a secured cluster: Kafka's client properties, from `--command-config FILE` and flags.

Why: Kafka's tools take a client properties file (`--command-config admin.properties`) and Kelp's users have
one already; `kelp` takes the same file for every command that talks to a broker, the Kafka-protocol ones
(`produce`, `consume`) and the HTTP ones (`topics`, `groups`, `partitions`, `cluster`, `acls`) alike, so one
file opens both doors. The properties are Kafka's (`security.protocol`, `sasl.mechanism`, `sasl.jaas.config`
or `sasl.username`/`sasl.password`, `ssl.truststore.location` or `ssl.ca.location` as PEM,
`ssl.keystore.location` for mutual TLS, `ssl.endpoint.identification.algorithm`), read and checked by
`kelp.kafka_client.security` (the one reader of them; nothing here parses a property's value). Flags for the
common ones override the file: `--security-protocol`, `--sasl-mechanism`, `--sasl-username`,
`--sasl-password` (or `KELP_SASL_PASSWORD`, kept off the command line), `--ssl-ca`, `--ssl-certificate`,
`--ssl-key`; `KELP_COMMAND_CONFIG` names a file when `--command-config` does not.

Credentials from flags replace the file's: a `--sasl-username` or `--sasl-password` drops the file's
`sasl.jaas.config`. `KELP_SASL_PASSWORD` is the password when `--sasl-password` is not given and neither the
flags nor the file's `sasl.jaas.config` carry one.

Over HTTP the same properties mean: TLS (the URL's `https://`) trusts the given CA and presents the given
client certificate (`http.authentication.methods=mtls`); a SASL user name and password go as HTTP Basic,
which the broker checks against the same PLAIN and SCRAM users (`http.authentication.methods=basic`); a JWT
from `--bearer-token-file` (or `KELP_BEARER_TOKEN`) goes as `Authorization: Bearer` instead
(`http.authentication.methods=bearer`).

It must never print or log a password, nor read a file it is not named.
"""

from __future__ import annotations

import argparse
import base64
import os
from pathlib import Path
from typing import Any

from kelp.kafka_client import AuthenticationFailed, BlockingConnection, BrokerUnavailable, ConnectionSecurity
from kelp.kafka_client.security import connection_security, read_client_properties

from .endpoints import CONNECT_TIMEOUT_S, split_address
from .errors import CliError
from .http_client import AdminClient, HttpSecurity, default_http_url

__all__ = ["add_security_options", "client_properties", "kafka_security", "http_security",
           "check_kafka_security", "kafka_client_options", "admin_client", "ENV_COMMAND_CONFIG", "ENV_SASL_PASSWORD"]

ENV_COMMAND_CONFIG = "KELP_COMMAND_CONFIG"
ENV_SASL_PASSWORD = "KELP_SASL_PASSWORD"
ENV_BEARER_TOKEN = "KELP_BEARER_TOKEN"

# flag dest -> the client property it sets
_FLAG_PROPERTIES = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_username": "sasl.username",
    "sasl_password": "sasl.password",
    "ssl_ca": "ssl.truststore.location",
    "ssl_certificate": "ssl.keystore.location",
    "ssl_key": "ssl.key.location",
}


def add_security_options(p: argparse.ArgumentParser, default: object) -> None:
    """The client-properties options (`default`: None on the top-level parser, SUPPRESS after a subcommand)."""
    g = p.add_argument_group("security (Kafka client properties; flags override the file)")
    g.add_argument("--command-config", default=default, metavar="FILE",
                   help=f"Kafka client properties file, as Kafka's tools take it (env {ENV_COMMAND_CONFIG})")
    g.add_argument("--security-protocol", default=default, metavar="PROTOCOL",
                   help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (security.protocol)")
    g.add_argument("--sasl-mechanism", default=default, metavar="MECHANISM",
                   help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (sasl.mechanism)")
    g.add_argument("--sasl-username", default=default, metavar="USER", help="SASL user; HTTP Basic over HTTP")
    g.add_argument("--sasl-password", default=default, metavar="PASSWORD",
                   help=f"SASL password (better: env {ENV_SASL_PASSWORD}, kept out of the process list)")
    g.add_argument("--ssl-ca", default=default, metavar="PEM",
                   help="CA certificates that sign the brokers' certificates (ssl.truststore.location, PEM)")
    g.add_argument("--ssl-certificate", default=default, metavar="PEM",
                   help="client certificate chain (and key) for mutual TLS (ssl.keystore.location, PEM)")
    g.add_argument("--ssl-key", default=default, metavar="PEM", help="its private key, when not in the same file")
    g.add_argument("--bearer-token-file", default=default, metavar="FILE",
                   help=f"a JWT the HTTP API takes as `Authorization: Bearer` (http.authentication.methods=bearer; "
                        f"or the token itself in env {ENV_BEARER_TOKEN}); it replaces HTTP Basic")


def client_properties(args: argparse.Namespace) -> dict[str, str]:
    """The Kafka client properties `args` give: the file's, then the flags' (see the module docstring)."""
    path = getattr(args, "command_config", None) or os.environ.get(ENV_COMMAND_CONFIG)
    props: dict[str, str] = {}
    if path:
        try:
            props = read_client_properties(path)
        except ValueError as exc:
            raise CliError(f"--command-config: {exc}") from None
    flags = {prop: str(getattr(args, dest)) for dest, prop in _FLAG_PROPERTIES.items()
             if getattr(args, dest, None) is not None}
    if "sasl.username" in flags or "sasl.password" in flags:
        props.pop("sasl.jaas.config", None)  # the flags' credentials replace the file's
    if "ssl.truststore.location" in flags:
        props.pop("ssl.truststore.type", None)
    props.update(flags)
    password = os.environ.get(ENV_SASL_PASSWORD)
    if password and "sasl.password" not in props and "sasl.jaas.config" not in props:
        props["sasl.password"] = password
    return props


def _security(props: dict[str, str]) -> ConnectionSecurity:
    try:
        return connection_security(props)
    except ValueError as exc:
        raise CliError(f"client properties: {exc}") from None


def kafka_security(args: argparse.Namespace) -> ConnectionSecurity:
    """TLS and SASL for the Kafka listener, from the client properties."""
    return _security(client_properties(args))


def kafka_client_options(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    """kafka-python's security options for the Kafka commands, once one broker of `bootstrap` accepted them."""
    security = kafka_security(args)
    addresses = [split_address(a, default_port=9092) for a in bootstrap.split(",") if a.strip()]
    check_kafka_security(addresses, security, timeout_s=getattr(args, "connect_timeout", CONNECT_TIMEOUT_S))
    return security.kafka_python_options()


def check_kafka_security(addresses: list[tuple[str, int]], security: ConnectionSecurity, *, timeout_s: float) -> None:
    """Connect once with `security` (TLS handshake, SASL exchange) so a wrong CA or password fails now, with the
    broker's reason, rather than as a client library's metadata timeout. PLAINTEXT needs no check."""
    if security.ssl_context is None and security.sasl is None:
        return
    last: BrokerUnavailable | None = None
    for host, port in addresses:
        try:
            with BlockingConnection(host, port, client_id="kelp-cli", timeout_s=max(timeout_s, 1.0),
                                    security=security) as conn:  # the handshake and authentication are the check
                conn.api_versions()
            return
        except AuthenticationFailed as exc:
            raise CliError(f"authentication to Kafka at {host}:{port} failed ({security.protocol}): {exc}; "
                           "check the user name and password (sasl.jaas.config, --sasl-username/--sasl-password)"
                           ) from None
        except BrokerUnavailable as exc:
            last = exc
    hint = " (is the broker's CA in ssl.truststore.location / --ssl-ca?)" if "TLS" in str(last) else ""
    raise CliError(f"cannot connect to Kafka with {security.protocol}: {last}{hint}")


def bearer_token(args: argparse.Namespace) -> str | None:
    """The JWT for the HTTP API: `--bearer-token-file`'s content, else env KELP_BEARER_TOKEN; None without one."""
    path = getattr(args, "bearer_token_file", None)
    if path:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"--bearer-token-file: cannot read {path}: {exc}") from None
        if not token:
            raise CliError(f"--bearer-token-file: {path} is empty")
        return token
    return os.environ.get(ENV_BEARER_TOKEN, "").strip() or None


def http_security(args: argparse.Namespace, url: str) -> HttpSecurity:
    """The client properties read for the HTTP API at `url`: TLS by its scheme, SASL user and password as Basic,
    or a bearer token instead of them."""
    props = client_properties(args)
    token = bearer_token(args)
    bearer = None if token is None else f"Bearer {token}"
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    sasl = protocol.startswith("SASL_") and bearer is None
    https = url.lower().startswith("https://")
    props["security.protocol"] = ("SASL_" if sasl else "") + ("SSL" if https else "PLAINTEXT")
    if props["security.protocol"] == "PLAINTEXT":
        return HttpSecurity(None, bearer)
    security = _security(props)
    authorization = bearer
    if security.sasl is not None:
        basic = base64.b64encode(f"{security.sasl.username}:{security.sasl.password}".encode()).decode()
        authorization = f"Basic {basic}"
    return HttpSecurity(security.ssl_context, authorization)


def admin_client(args: argparse.Namespace) -> AdminClient:
    """The HTTP API client of a command: `--http` (or KELP_HTTP), its TLS and credentials from the properties."""
    url = args.http or default_http_url()
    if "://" not in url:
        url = "http://" + url
    return AdminClient(url, connect_timeout_s=args.connect_timeout, security=http_security(args, url))
