"""Who an HTTP request comes from: HTTP Basic, a TLS client certificate or a bearer token.

Why: the admin API, the REST proxy and the brokers' `/cluster/v1` control plane authorize with the same ACLs as
the Kafka listeners, so an HTTP request needs a principal as a Kafka connection has one. `http.authentication.
methods` says which proofs the listener takes (`basic`, `mtls`, `bearer`; empty: none, and every request is
User:ANONYMOUS, as a PLAINTEXT Kafka connection is). A request that must authenticate and does not, or fails
to, is answered 401 with a JSON body saying why and a `WWW-Authenticate` challenge naming what is accepted.
`/healthz` and `/readyz` (`http.health.public`) need no proof unless switched off, so probes keep working.
`/metrics` names topics, groups, offsets and lag the ACLs may hide: it needs no proof only while HTTP
authentication is off, unless `http.metrics.public` says otherwise (issue 33, item 6); with an authorizer, a
scraper must be a super user or listed in `http.metrics.principals` (`route_access`).

A Kafka user who turned authentication on expects no anonymous way in (issue 33, item 4): when
`http.authentication.methods` is left unset and any Kafka listener authenticates (SASL, or TLS with
`ssl.client.auth=required`), HTTP takes what those listeners take (`resolve_methods`): HTTP Basic for their
PLAIN and SCRAM users, bearer tokens for OAUTHBEARER, client certificates when the HTTP listener asks for them;
a broker whose listeners authenticate in a way HTTP cannot (mutual TLS on Kafka, plain HTTP) refuses to start,
naming the keys. `http.authentication.methods=none` is the explicit opt-out, logged as a warning at start.

`/cluster/v1` always identifies its caller, whatever the methods (`control_plane_principal`): HTTP Basic and
client certificates are checked whenever they are presented, since brokers present them to each other
(`cluster.trust` decides which identities are brokers').

The proofs are checked by slots the composition root fills (`kelp.broker.app`):
- `basic(user, password)`: the broker's SASL users (`basic_credentials`: the listeners' PLAIN users, the SCRAM
  credentials of the metadata log); a principal, or None for wrong credentials. Brokers call one another's
  `/cluster/v1` with their inter-broker SASL credentials this way (`cluster.state.inter_broker`);
- `bearer(token)`: an OAUTHBEARER JWT validator (`bearer_tokens`: a Kafka listener's); a principal, or
  `BearerRefused` with the reason (expired, wrong signature, `alg: none`, ...), answered 401 with it and an
  RFC 6750 `error="invalid_token"` challenge;
- `certificate(der)`: the client certificate's principal by `ssl.principal.mapping.rules` (Kafka's DEFAULT
  rule, the whole subject, unless given); it needs the HTTP listener to run TLS (`http.ssl.*`) and ask for
  client certificates.
A method configured without its check refuses to start the broker (it would turn every request away).

This module must never log a password or a token, nor decide what a principal may do (`route_access` does).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from kelp.config.broker import BrokerConfig
from kelp.config.listeners import ListenerSetup
from kelp.errors import ConfigError
from kelp.security.principal import ANONYMOUS, KafkaPrincipal, SslPrincipalMapper, principal_from_certificate
from kelp.security.tls import ClientAuth

__all__ = ["HttpAuthenticator", "Unauthenticated", "BearerRefused", "BasicCheck", "BearerCheck", "CertificateCheck",
           "PUBLIC_HEALTH", "PUBLIC_METRICS", "resolve_methods", "authenticating_listeners"]

log = logging.getLogger("kelp.broker.http")

BasicCheck = Callable[[str, str, str], Awaitable[KafkaPrincipal | None]]
"""(user, password, the client's address) -> the principal, or None for wrong credentials."""
BearerCheck = Callable[[str], Awaitable[KafkaPrincipal | None]]
CertificateCheck = Callable[[bytes], KafkaPrincipal]

PUBLIC_HEALTH = ("/healthz", "/readyz")
PUBLIC_METRICS = ("/metrics",)


class BearerRefused(Exception):
    """A bearer token that does not validate; `reason` says why (never the token)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unauthenticated(Exception):
    """A request that had to prove who it comes from and did not: 401, with the challenge to answer."""

    def __init__(self, message: str, challenge: str, *, waited: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.challenge = challenge
        self.waited = waited  # connection.failed.authentication.delay.ms already waited out (a wrong password)


def authenticating_listeners(setup: ListenerSetup) -> list[str]:
    """The Kafka listeners that authenticate every client: SASL, or TLS with `ssl.client.auth=required`."""
    return [listener.name for listener in setup.listeners if listener.uses_sasl or (
        listener.tls is not None and listener.tls.client_auth is ClientAuth.REQUIRED)]


def resolve_methods(config: BrokerConfig) -> tuple[str, ...]:
    """`http.authentication.methods` as the listener applies it: as set; `none` as nothing; unset, what the Kafka
    listeners take when any of them authenticates (see the module docstring). ConfigError when the Kafka
    listeners authenticate and HTTP cannot take any of their proofs."""
    configured = list(config.get("http.authentication.methods") or ())
    if configured == ["none"]:
        return ()
    if configured:
        return tuple(configured)
    setup = config.listener_setup
    secured = authenticating_listeners(setup)
    if not secured:
        return ()
    mechanisms = {m for listener in setup.listeners if listener.uses_sasl for m in listener.mechanisms}
    methods: list[str] = []
    if setup.http_tls is not None and setup.http_tls.client_auth is not ClientAuth.NONE:
        methods.append("mtls")
    if mechanisms & {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}:
        methods.append("basic")
    if "OAUTHBEARER" in mechanisms:
        methods.append("bearer")
    if not methods:
        raise ConfigError(
            f"the Kafka listener(s) {', '.join(secured)} authenticate clients, so the HTTP listener must too, and it "
            "can take none of their proofs: enable client certificates on it (http.ssl.enabled=true with "
            "http.ssl.client.auth=required or requested) and set http.authentication.methods=mtls, or opt out "
            "with http.authentication.methods=none (anyone who reaches the HTTP port may then use the admin API)")
    return tuple(methods)


def _default_certificate_check(der: bytes) -> KafkaPrincipal:
    return principal_from_certificate(der, SslPrincipalMapper())


@dataclass
class HttpAuthenticator:
    """The listener's authentication: which proofs it takes, their checks, and the paths that need none."""

    methods: tuple[str, ...] = ()
    basic: BasicCheck | None = None
    bearer: BearerCheck | None = None
    certificate: CertificateCheck = _default_certificate_check
    public_paths: frozenset[str] = field(default_factory=lambda: frozenset(PUBLIC_HEALTH + PUBLIC_METRICS))
    realm: str = "kelp"
    failed_delay_s: float = 0.0  # connection.failed.authentication.delay.ms: a failed HTTP Basic is answered after it

    @classmethod
    def from_config(cls, config: BrokerConfig, *, basic: BasicCheck | None = None, bearer: BearerCheck | None = None,
                    certificate: CertificateCheck | None = None) -> HttpAuthenticator:
        methods = resolve_methods(config)
        if not methods and (secured := authenticating_listeners(config.listener_setup)):
            log.warning("HTTP authentication is off (http.authentication.methods=none) while the Kafka listener(s) "
                        "%s authenticate: anyone who reaches the HTTP port may use the admin API and the REST "
                        "proxy as User:ANONYMOUS", ", ".join(secured))
        missing = [m for m, check in (("basic", basic), ("bearer", bearer)) if m in methods and check is None]
        if missing:
            raise ConfigError(
                f"http.authentication.methods names {', '.join(missing)}, but this broker has no credential check "
                f"for {'it' if len(missing) == 1 else 'them'} (HTTP Basic needs the SASL users, bearer tokens "
                "a listener enabling SASL/OAUTHBEARER, http.authentication.oauthbearer.listener); leave it out or "
                "configure the SASL mechanism")
        public: tuple[str, ...] = ()
        if config.get("http.health.public", True):
            public += PUBLIC_HEALTH
        # /metrics names topics, groups and their lag: public by default only while HTTP takes no proof at all.
        metrics_public = config.get("http.metrics.public", True) if "http.metrics.public" in config.explicit \
            else not methods
        if metrics_public:
            public += PUBLIC_METRICS
        return cls(methods=methods, basic=basic, bearer=bearer,
                   certificate=certificate or _default_certificate_check, public_paths=frozenset(public),
                   failed_delay_s=config.listener_setup.failed_authentication_delay_ms / 1000)

    @property
    def required(self) -> bool:
        return bool(self.methods)

    def _challenge(self, bearer_error: str | None = None) -> str:
        parts = []
        if "basic" in self.methods:
            parts.append(f'Basic realm="{self.realm}", charset="UTF-8"')
        if "bearer" in self.methods:
            parts.append(f'Bearer realm="{self.realm}"' + (f', error="{bearer_error}"' if bearer_error else ""))
        return ", ".join(parts) or f'Certificate realm="{self.realm}"'

    def is_public(self, path: str) -> bool:
        return path in self.public_paths

    async def principal(self, request: web.Request) -> KafkaPrincipal:
        """The request's principal; Unauthenticated when it must authenticate and does not."""
        if not self.methods:
            return ANONYMOUS
        header = request.headers.get("Authorization", "")
        scheme, _, credentials = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "basic" and "basic" in self.methods and self.basic is not None:
            return await self._basic(request, credentials)
        if scheme == "bearer" and "bearer" in self.methods and self.bearer is not None:
            try:
                principal = await self.bearer(credentials.strip())
            except BearerRefused as exc:
                raise Unauthenticated(f"the bearer token was refused: {exc.reason}",
                                      self._challenge("invalid_token")) from None
            if principal is None:
                raise Unauthenticated("the bearer token was refused: invalid, expired or not signed by a trusted key",
                                      self._challenge())
            return principal
        if header:
            raise Unauthenticated(f"the {scheme or 'empty'} Authorization scheme is not accepted here; "
                                  f"http.authentication.methods is {','.join(self.methods)}", self._challenge())
        if "mtls" in self.methods:
            der = _peer_certificate(request)
            if der is not None:
                return self.certificate(der)
        raise Unauthenticated(f"authentication required: this listener takes {_proofs(self.methods)} "
                              f"(http.authentication.methods={','.join(self.methods)})", self._challenge())

    async def control_plane_principal(self, request: web.Request) -> KafkaPrincipal:
        """The principal of a `/cluster/v1` call: HTTP Basic and a client certificate are checked whenever they
        are presented, whatever `methods` say (brokers present them to each other); other proofs as `principal`.
        ANONYMOUS when none is presented and none is required."""
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "basic" and self.basic is not None:
            return await self._basic(request, credentials)
        if not scheme:
            der = _peer_certificate(request)
            if der is not None:
                return self.certificate(der)
        return await self.principal(request)

    async def _basic(self, request: web.Request, credentials: str) -> KafkaPrincipal:
        assert self.basic is not None
        user, password = self._basic_credentials(credentials.strip())
        principal = await self.basic(user, password, request.remote or "")
        if principal is None:
            if self.failed_delay_s > 0:  # as a Kafka listener answers a failed authentication
                await asyncio.sleep(self.failed_delay_s)
            raise Unauthenticated(f"HTTP Basic authentication failed for user '{user}': wrong user name or "
                                  "password", self._challenge(), waited=True)
        return principal

    def _basic_credentials(self, encoded: str) -> tuple[str, str]:
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthenticated("malformed HTTP Basic credentials: expected base64 of user:password",
                                  self._challenge()) from None
        if not sep or not user:
            raise Unauthenticated("malformed HTTP Basic credentials: expected base64 of user:password",
                                  self._challenge())
        return user, password


def _proofs(methods: tuple[str, ...]) -> str:
    names = {"basic": "HTTP Basic credentials", "bearer": "a bearer token", "mtls": "a TLS client certificate"}
    return " or ".join(names[m] for m in methods)


def _peer_certificate(request: web.Request) -> bytes | None:
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return der if isinstance(der, bytes) else None
