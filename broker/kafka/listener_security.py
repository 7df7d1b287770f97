"""One Kafka listener's security at run time: its TLS context, its principal mapping and its SASL servers.

Why: `kelp.config.listeners` resolves what the config says (plain data, checked at load); a listener that
serves needs live objects made from it, once, when the broker starts: the `TlsReloader` whose context every
TLS handshake uses and which re-reads rotated certificate files, the `SslPrincipalMapper` of
`ssl.principal.mapping.rules`, the PLAIN users of its JAAS config, the JWT validator of OAUTHBEARER (its
keys read from their files here), and a factory for one SASL server per authentication. SCRAM credentials
live in the cluster metadata: the server looks them up through `scram_lookup`, which the Kafka server binds
to the broker's metadata image once the broker serves (until then no SCRAM user exists).

Connections reach it only through `Session` (`session.py`). This module must never log a password, a salted
password, a key or a token; a failure to read a certificate or key file at start is a ConfigError naming it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from kelp.config.listeners import InterBroker, ListenerConfig, ListenerSetup
from kelp.security.oauthbearer import JwtValidator, OAuthBearerServer
from kelp.security.plain import PlainServer, plain_users
from kelp.security.principal import KafkaPrincipal, SslPrincipalMapper, principal_from_certificate
from kelp.security.sasl import SaslServer
from kelp.security.scram import ScramCredential, ScramMechanism
from kelp.security.scram_exchange import ScramServer
from kelp.security.tls import TlsReloader

__all__ = ["ListenerSecurity", "ScramLookup"]

ScramLookup = Callable[[str, str], ScramCredential | None]
"""(user name, mechanism name such as SCRAM-SHA-512) -> the stored credential, or None."""


def _no_scram_user(_user: str, _mechanism: str) -> ScramCredential | None:
    return None


class ListenerSecurity:
    """The security of the listener `config` (see the module docstring)."""

    def __init__(self, config: ListenerConfig, setup: ListenerSetup, *, max_request_bytes: int) -> None:
        self.name = config.name
        self.protocol = config.protocol
        self.uses_sasl = config.uses_sasl
        self.max_request_bytes = max_request_bytes
        self.max_receive_size = min(setup.max_receive_size, max_request_bytes)
        self.failed_delay_s = setup.failed_authentication_delay_ms / 1000.0
        # Principals whose first authentication on this listener was logged (at INFO; later ones at DEBUG).
        self.seen_principals: set[str] = set()
        self.tls: TlsReloader | None = None
        # How often the certificate files are looked at: the reloader reads them at most once per interval.
        self.reload_check_s = min(setup.reload_interval_ms / 1000.0 / 4, 5.0)
        if config.tls is not None:
            self.tls = TlsReloader.server(config.tls, check_interval_s=setup.reload_interval_ms / 1000.0)
        self.mapper = SslPrincipalMapper(config.principal_rules)
        self.mechanisms = tuple(config.mechanisms)
        self._max_reauth_ms = {m: c.max_reauth_ms for m, c in config.mechanisms.items()}
        self._plain_users: dict[str, str] = {}
        plain = config.mechanisms.get("PLAIN")
        if plain is not None and plain.jaas is not None:
            self._plain_users = plain_users([plain.jaas])
        self._validator: JwtValidator | None = None
        oauth = config.mechanisms.get("OAUTHBEARER")
        if oauth is not None:
            self._validator = JwtValidator.from_kafka_config(oauth.oauth)
        # Keys the salts shown for SCRAM users that do not exist: the same salt every time, on this broker.
        self._mock_secret = secrets.token_bytes(32)
        self.scram_lookup: ScramLookup = _no_scram_user

    @classmethod
    def plaintext(cls, name: str = "PLAINTEXT", *, max_request_bytes: int) -> ListenerSecurity:
        """A listener without TLS or SASL (every connection is User:ANONYMOUS)."""
        listener = ListenerConfig(name=name, protocol="PLAINTEXT", host="", port=0, advertised_host="",
                                  advertised_port=0)
        setup = ListenerSetup(listeners=(listener,), inter_broker=InterBroker(listener), http_tls=None,
                              failed_authentication_delay_ms=0, max_receive_size=max_request_bytes,
                              reload_interval_ms=60000)
        return cls(listener, setup, max_request_bytes=max_request_bytes)

    def server_for(self, mechanism: str) -> SaslServer:
        """A new SASL server for one authentication with `mechanism` (one of `mechanisms`)."""
        if mechanism == "PLAIN":
            return PlainServer(self._plain_users, max_message_bytes=self.max_receive_size)
        if mechanism.startswith("SCRAM-"):
            scram = ScramMechanism.from_name(mechanism)
            lookup = self.scram_lookup
            return ScramServer(scram, lambda user: lookup(user, mechanism), mock_secret=self._mock_secret,
                               max_message_bytes=self.max_receive_size)
        if mechanism == "OAUTHBEARER" and self._validator is not None:
            return OAuthBearerServer(self._validator, max_message_bytes=self.max_receive_size)
        raise ValueError(f"listener {self.name} does not serve SASL/{mechanism}")

    def max_reauth_ms(self, mechanism: str) -> int:
        """`connections.max.reauth.ms` for `mechanism` on this listener (0: no bound)."""
        return self._max_reauth_ms.get(mechanism, 0)

    def certificate_principal(self, certificate_der: bytes | None) -> KafkaPrincipal:
        """A TLS client's principal from its certificate (ANONYMOUS without one); raises PrincipalMappingError."""
        return principal_from_certificate(certificate_der, self.mapper)

