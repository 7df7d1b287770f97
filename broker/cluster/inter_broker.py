"""How this broker reaches the others: the inter-broker listener's TLS and SASL, and TLS for their HTTP listeners.

Why: replica fetching connects to each leader's inter-broker listener (`inter.broker.listener.name`) with that
listener's security, as Kafka's replica fetcher does: TLS with a client context made from the listener's own
`ssl.*` settings (the truststore checks the other broker's certificate, the broker's keystore is its client
certificate, so a listener with `ssl.client.auth=required` is mutual TLS between brokers), and SASL with
`sasl.mechanism.inter.broker.protocol` and the `username`/`password` of the listener's JAAS config. The
control plane (metadata deliveries, controller operations, leader lookups) is HTTP: with
`http.ssl.enabled` it is HTTPS with a client context from the `http.ssl.*` settings (the broker's certificate
presented as its client certificate), and its requests carry the inter-broker SASL credentials as HTTP Basic
authentication, for the HTTP listener's authentication, whenever they would not cross the network in clear
text where the Kafka listener itself would not (over HTTPS, or when the inter-broker listener is
SASL_PLAINTEXT anyway).

The client contexts follow their certificate files like the listeners' (`maybe_reload`). This module builds
what connections are given; it opens none itself and never logs a password.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from kelp.config.listeners import ListenerSetup
from kelp.kafka_client import ConnectionSecurity, SaslCredentials
from kelp.security.principal import KafkaPrincipal, SslPrincipalMapper, principal_from_certificate
from kelp.security.tls import ClientAuth, TlsReloader

__all__ = ["InterBrokerSecurity", "http_credentials", "kafka_identities", "certificate_principal"]


def certificate_principal(path: str, rules: str) -> KafkaPrincipal | None:
    """The principal the leaf certificate of the PEM file at `path` maps to by `ssl.principal.mapping.rules`
    `rules` (None: no certificate in it). Read at start: a rotated certificate keeps its subject."""
    text = Path(path).read_text(encoding="ascii", errors="replace")
    begin = text.find("-----BEGIN CERTIFICATE-----")
    end = text.find("-----END CERTIFICATE-----", begin)
    if begin < 0 or end < 0:
        return None
    der = ssl.PEM_cert_to_DER_cert(text[begin:end + len("-----END CERTIFICATE-----")])
    return principal_from_certificate(der, SslPrincipalMapper(rules))


def kafka_identities(setup: ListenerSetup) -> frozenset[KafkaPrincipal]:
    """The principals this broker's replica fetcher and inter-broker requests have on the other brokers' inter-broker
    listener (every broker of a cluster shares them): the inter-broker SASL user, or the principal of the
    listener's own certificate where the listener takes client certificates."""
    inter = setup.inter_broker
    out: set[KafkaPrincipal] = set()
    if inter.username is not None and inter.listener.uses_sasl:
        out.add(KafkaPrincipal.user(inter.username))
    tls = inter.listener.tls
    if tls is not None and not inter.listener.uses_sasl and tls.client_auth is not ClientAuth.NONE \
            and tls.keystore_location:
        principal = certificate_principal(tls.keystore_location, inter.listener.principal_rules)
        if principal is not None:
            out.add(principal)
    return frozenset(out)


def http_credentials(setup: ListenerSetup) -> tuple[str, str] | None:
    """The inter-broker SASL user and password the control plane's HTTP requests carry as HTTP Basic: only where
    they would not cross the network in clear text where the Kafka listener itself would not (over HTTPS, or
    when the inter-broker listener is SASL_PLAINTEXT anyway). None: the requests carry none."""
    inter = setup.inter_broker
    if inter.username is None or inter.password is None:
        return None
    if setup.http_tls is not None or inter.listener.protocol == "SASL_PLAINTEXT":
        return inter.username, inter.password
    return None


class InterBrokerSecurity:
    """The client side of `setup`'s inter-broker listener and HTTP listener (see the module docstring)."""

    def __init__(self, setup: ListenerSetup) -> None:
        inter = setup.inter_broker
        interval = setup.reload_interval_ms / 1000.0
        self.listener = inter.listener.name
        self._kafka_tls = TlsReloader.client(inter.listener.tls, check_interval_s=interval) \
            if inter.listener.tls is not None else None
        credentials = None
        if inter.mechanism is not None and inter.username is not None and inter.password is not None:
            credentials = SaslCredentials(inter.mechanism, inter.username, inter.password)
        self.kafka = ConnectionSecurity(self._kafka_tls.context if self._kafka_tls is not None else None, credentials)
        self._http_tls = TlsReloader.client(setup.http_tls, check_interval_s=interval) \
            if setup.http_tls is not None else None
        self.http_ssl: ssl.SSLContext | None = self._http_tls.context if self._http_tls is not None else None
        self.http_credentials = http_credentials(setup)

    def maybe_reload(self) -> None:
        """Pick up rotated certificate files (at most once per ssl.reload.interval.ms; cheap to call often)."""
        for reloader in (self._kafka_tls, self._http_tls):
            if reloader is not None:
                reloader.maybe_reload()
