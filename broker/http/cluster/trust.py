"""Who may call `/cluster/v1`: the brokers of this cluster, with or without an authorizer.

Why: `/cluster/v1` is the control plane — the controller's metadata deliveries, controller operations, REST
consumer forwarding, Schema Registry writes. A metadata push with `controller_epoch` 2147483647 and no brokers
made every partition LEADER_NOT_AVAILABLE and deposed the real controller every second; without an authorizer
any caller could send one (issue 33, item 3). Kafka's controllers talk over a listener of their own; Kelp's
brokers call each other's HTTP listener, so the listener must know a broker when it sees one.

A broker is recognised by what brokers present to each other (`kelp.broker.cluster.inter_broker`): the
inter-broker SASL user as HTTP Basic (over HTTPS, or when the inter-broker listener is SASL_PLAINTEXT), and the
broker's own HTTP certificate (`http.ssl.keystore.location`) as a client certificate when the HTTP listener asks
for one (`http.ssl.client.auth`). Every broker of a cluster shares these (the operator gives them one broker
certificate subject and one inter-broker user), so this broker's own identities are its peers'. Also admitted:
principals listed in `super.users`, and with an authorizer, those granted CLUSTER_ACTION on the cluster
(Kafka's broker permission). Brokers configured with no identity at all (plaintext HTTP and no inter-broker
credentials: `make run`) call each other as nobody; without an authorizer such a broker takes anonymous calls
from loopback only, unless `http.control.plane.open=true` says its network is trusted (a warning at start).
A caller that proves some other identity is a client there, never a broker.

This module decides; `access.route_access` asks it for every `/cluster/v1` request. It must never log a credential.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass

from kelp.config.broker import BrokerConfig
from kelp.security.acl import AclOperation
from kelp.security.principal import ANONYMOUS, KafkaPrincipal
from kelp.security.tls import ClientAuth

from ...acl_manager import Access
from ...cluster.inter_broker import certificate_principal, http_credentials

__all__ = ["ClusterTrust"]

log = logging.getLogger("kelp.broker.http")


def _is_loopback(remote: str | None) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ClusterTrust:
    """The identities brokers present on `/cluster/v1` calls, and whether a broker without one trusts its network."""

    brokers: frozenset[KafkaPrincipal] = frozenset()
    open: bool = False

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ClusterTrust:
        """This broker's identities as a caller (read once at start: the certificate's subject survives rotation)."""
        setup = config.listener_setup
        brokers: set[KafkaPrincipal] = set()
        credentials = http_credentials(setup)
        if credentials is not None:
            brokers.add(KafkaPrincipal.user(credentials[0]))
        tls = setup.http_tls
        if tls is not None and tls.client_auth is not ClientAuth.NONE and tls.keystore_location:
            principal = certificate_principal(tls.keystore_location,
                                              config.get("ssl.principal.mapping.rules") or "DEFAULT")
            if principal is not None:
                brokers.add(principal)
        trust = cls(frozenset(brokers), bool(config.get("http.control.plane.open", False)))
        if not brokers:
            if trust.open:
                log.warning("/cluster/v1 takes calls from any address without a broker identity "
                            "(http.control.plane.open=true): anyone who reaches the HTTP port can push metadata")
            else:
                log.info("/cluster/v1 takes calls from loopback only: the brokers present no identity over HTTP "
                         "(no inter-broker SASL credentials over HTTPS or SASL_PLAINTEXT, no HTTP client "
                         "certificates; http.control.plane.open=true trusts the network instead)")
        return trust

    def refusal(self, acc: Access, remote: str | None, path: str) -> str | None:
        """Why the caller may not call `path` (a `/cluster/v1` route), or None."""
        principal = acc.principal
        if principal in self.brokers or acc.acls.is_listed_super_user(principal):
            return None
        if acc.enabled and acc.allows_cluster(AclOperation.CLUSTER_ACTION):
            return None
        if not self.brokers and not acc.enabled and principal == ANONYMOUS and (self.open or _is_loopback(remote)):
            return None  # brokers without an identity call as nobody: on loopback (or a network said to be trusted)
        if self.brokers:
            expected = " or ".join(sorted(str(p) for p in self.brokers))
            return (f"{principal} is not authorized to call {path}: the /cluster/v1 routes are for brokers only "
                    f"({expected}, a super user, or a principal with CLUSTER_ACTION on the cluster)")
        return (f"{principal} from {remote} is not authorized to call {path}: the /cluster/v1 routes are for "
                "brokers only, and these brokers present no identity over HTTP, so only loopback callers are "
                "taken (give the brokers inter-broker SASL credentials over HTTPS or client certificates, or set "
                "http.control.plane.open=true on a trusted network)")
