"""A Cluster's Kafka listeners, TLS and authorization as the brokers' Kafka config (`spec.listeners.kafka`,
`spec.tls`, `spec.authorization`).

Why: a Kafka user secures a broker with a handful of Kafka keys — `listeners`, `advertised.listeners`,
`listener.security.protocol.map`, `inter.broker.listener.name`, `ssl.*`, per-listener
`listener.name.<x>.` overrides, `authorizer.class.name`, `super.users` — and Strimzi turns a short list of
listeners (name, port, type, tls, authentication) into exactly those. So does this module, as pure
functions of the spec: the brokers read Kafka's own keys, and what the operator writes can be reviewed
without a cluster (docs/operator.md lists every key).

The layout it builds (the *secured layout*, chosen by `spec.listeners.kafka`):

- every listener the user lists, plus `REPLICATION` on 9091 (Strimzi's replication listener): TLS with
  client certificates from the cluster CA only, the `inter.broker.listener.name`, so replication and
  the brokers' own calls never share a listener with clients;
- per-pod values (the pod's name, IP, node IP) come from the environment through Kafka's
  `EnvVarConfigProvider` (`config.providers=env`, `${env:POD_NAME}`), so one config file serves every
  broker; an external listener's per-broker address goes into each broker's own file (`listeners.py`);
- the HTTP listener is HTTPS with client certificates requested (probes and scrapes present none; the
  operator and the brokers present theirs): `http.ssl.*`;
- principals of the brokers (`CN=<cluster>-broker,O=kelp.dev`) and of the operator
  (`CN=kelp-operator,O=kelp.dev`), mapped by `ssl.principal.mapping.rules` when set, are super users.
  The `O=kelp.dev` keeps them apart from every user certificate, whose subject is `CN=<user>` alone.

Pure: no Kubernetes client, no network, no time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from kelp.json_types import JsonObject
from kelp.security.principal import PrincipalMappingError, SslPrincipalMapper

from ..model.objects_cluster_spec import ClusterResourceSpec
from ..model.objects_kelp import ListenerStatus

__all__ = ["ListenerError", "KafkaListener", "Security", "REPLICATION", "REPLICATION_PORT", "TLS_DIR",
           "KELP_AUTHORIZER", "KAFKA_AUTHORIZER", "OPERATOR_DN", "broker_dn", "principal_of", "OWNED_EXACT",
           "OWNED_PREFIXES", "owned_by_security", "DNS_DOMAIN", "ORGANIZATION", "ENV_PROVIDER", "REPLICATION_LISTENER",
           "IssuerReference"]

REPLICATION = "replication"
REPLICATION_PORT = 9091
TLS_DIR = "/etc/kelp/tls"
DNS_DOMAIN = "cluster.local"
ORGANIZATION = "kelp.dev"
OPERATOR_DN = f"CN=kelp-operator,O={ORGANIZATION}"
KELP_AUTHORIZER = "kelp.broker.security.authorizer.Authorizer"
KAFKA_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ENV_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
DEFAULT_VALIDITY_DAYS = 365
DEFAULT_RENEWAL_DAYS = 30
NAME = re.compile(r"^[a-z][a-z0-9]{0,10}$")
AUTH_TYPES = ("none", "scram-sha-512", "tls", "plain")

# Keys of spec.config the secured layout owns (a user value would break how brokers, the operator and
# clients find and trust each other), refused in every layout: none of them existed before it.
OWNED_EXACT = frozenset({
    "advertised.listeners", "listener.security.protocol.map", "inter.broker.listener.name",
    "security.inter.broker.protocol", "super.users", "authorizer.class.name", "allow.everyone.if.no.acl.found",
    "sasl.enabled.mechanisms", "config.providers", "ssl.client.auth", "http.authentication.methods",
})
OWNED_PREFIXES = ("listener.name.", "ssl.keystore.", "ssl.truststore.", "ssl.key.", "http.ssl.", "config.providers.")
# ... but a PLAIN listener's users come from Kafka's own JAAS key, the one listener-scoped key a user sets.
_PLAIN_JAAS = re.compile(r"^listener\.name\.[a-z0-9]+\.plain\.sasl\.jaas\.config$")


def owned_by_security(key: str) -> bool:
    """A spec.config key the secured layout writes itself (refused in spec.config)."""
    if _PLAIN_JAAS.match(key):
        return False
    return key in OWNED_EXACT or key.startswith(OWNED_PREFIXES)


class ListenerError(ValueError):
    """A listener, TLS or authorization setting the operator cannot build brokers from; names the field."""


def broker_dn(cluster: str) -> str:
    """The subject every broker certificate of `cluster` has, as Java renders it (RFC 2253)."""
    return f"CN={cluster}-broker,O={ORGANIZATION}"


def principal_of(dn: str, mapping_rules: str | None) -> str:
    """`User:<name>` for a certificate subject, as a broker with these `ssl.principal.mapping.rules` sees it."""
    try:
        return "User:" + SslPrincipalMapper(mapping_rules).name_for(dn)
    except PrincipalMappingError as exc:
        raise ListenerError(f"spec.config ssl.principal.mapping.rules: {exc}; the rules must map the brokers' "
                            f"and the operator's certificates ({dn})") from None


@dataclass(frozen=True)
class KafkaListener:
    """One Kafka listener: `name` (lower case), `port`, `type` internal|external, `tls`, `authentication`."""

    name: str
    port: int
    type: str = "internal"
    tls: bool = False
    authentication: str = "none"
    # spec.listeners.kafka[].networkPolicyPeers: who may connect when spec.networkPolicy is enabled (empty: anyone).
    network_policy_peers: tuple[JsonObject, ...] = field(default=(), hash=False)

    @property
    def kafka_name(self) -> str:
        """The listener's name in Kafka's keys (`listeners=PLAIN://:9092`)."""
        return self.name.upper()

    @property
    def port_name(self) -> str:
        """The container and Service port name (at most 15 characters: names are at most 11)."""
        return f"tcp-{self.name}"

    @property
    def sasl(self) -> bool:
        return self.authentication in ("scram-sha-512", "plain")

    @property
    def security_protocol(self) -> str:
        if self.sasl:
            return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"
        return "SSL" if self.tls else "PLAINTEXT"

    @property
    def mechanism(self) -> str | None:
        return {"scram-sha-512": "SCRAM-SHA-512", "plain": "PLAIN"}.get(self.authentication)


REPLICATION_LISTENER = KafkaListener(REPLICATION, REPLICATION_PORT, "internal", True, "tls")


@dataclass(frozen=True)
class IssuerReference:
    name: str
    kind: str = "Issuer"
    group: str = "cert-manager.io"


@dataclass(frozen=True)
class Security:
    """`spec.listeners.kafka` with `spec.tls` and `spec.authorization`: the secured layout of a Cluster."""

    listeners: tuple[KafkaListener, ...]
    # spec.authorization.superUsers as principals (`User:` added where missing); None: no authorizer.
    super_users: tuple[str, ...] | None = None
    issuer: IssuerReference | None = None
    validity_days: int = DEFAULT_VALIDITY_DAYS
    renewal_days: int = DEFAULT_RENEWAL_DAYS

    @classmethod
    def from_spec(cls, spec: ClusterResourceSpec) -> Security | None:
        """The secured layout, or None when `spec.listeners.kafka` is absent (`spec.tls` and `spec.authorization`
        without it are refused: they need the listeners' TLS)."""
        listeners = (spec.get("listeners") or {}).get("kafka")
        if listeners is None:
            for field in ("tls", "authorization"):
                if spec.get(field) is not None:
                    raise ListenerError(f"spec.{field} needs spec.listeners.kafka (the secured layout: TLS and "
                                        "authenticated listeners); list the Kafka listeners there")
            return None
        parsed = tuple(KafkaListener(
            name=str(item.get("name", "")), port=int(item.get("port", 0)), type=str(item.get("type") or "internal"),
            tls=bool(item.get("tls", False)),
            authentication=str(auth["type"] if (auth := item.get("authentication")) else "none"),
            network_policy_peers=tuple(item.get("networkPolicyPeers") or ()))
            for item in listeners)
        authorization = spec.get("authorization")
        supers = None
        if authorization is not None:
            if authorization.get("type") != "simple":
                raise ListenerError(f"spec.authorization.type must be simple, got {authorization.get('type')!r}")
            supers = tuple(u if u.startswith("User:") else f"User:{u}" for u in authorization.get("superUsers") or ())
        tls = spec.get("tls") or {}
        ref = tls.get("issuerRef")
        issuer = None if ref is None else IssuerReference(
            name=ref["name"], kind=ref.get("kind") or "Issuer", group=ref.get("group") or "cert-manager.io")
        return cls(listeners=parsed, super_users=supers, issuer=issuer,
                   validity_days=int(tls.get("certificateValidityDays", DEFAULT_VALIDITY_DAYS)),
                   renewal_days=int(tls.get("renewalDays", DEFAULT_RENEWAL_DAYS)))

    # -- checks (the CRD's CEL rules say the same; this also covers objects written before them) ---------
    def validate(self, *, http_port: int, external_type: str | None) -> None:
        if not self.listeners:
            raise ListenerError("spec.listeners.kafka must list at least one listener")
        names: set[str] = set()
        ports: dict[int, str] = {REPLICATION_PORT: "the replication listener", http_port: "listeners.httpPort"}
        for n, listener in enumerate(self.listeners):
            where = f"spec.listeners.kafka[{n}]"
            if not NAME.match(listener.name):
                raise ListenerError(f"{where}.name {listener.name!r}: 1 to 11 lower-case letters and digits, starting "
                                    "with a letter (the port name tcp-<name> must fit Kubernetes' 15 characters)")
            if listener.name == REPLICATION:
                raise ListenerError(f"{where}.name: 'replication' is the operator's own inter-broker listener")
            if listener.name in names:
                raise ListenerError(f"{where}.name {listener.name!r} is listed twice; names must be unique")
            names.add(listener.name)
            if not 1 <= listener.port <= 65535:
                raise ListenerError(f"{where}.port must be 1..65535, got {listener.port}")
            if listener.port in ports:
                raise ListenerError(f"{where}.port {listener.port} is already used by {ports[listener.port]}")
            ports[listener.port] = f"listener {listener.name!r}"
            if listener.type not in ("internal", "external"):
                raise ListenerError(f"{where}.type must be internal or external, got {listener.type!r}")
            if listener.authentication not in AUTH_TYPES:
                raise ListenerError(f"{where}.authentication.type must be one of {', '.join(AUTH_TYPES)}, got "
                                    f"{listener.authentication!r}")
            if listener.authentication == "tls" and not listener.tls:
                raise ListenerError(f"{where}: authentication tls (client certificates) needs tls: true")
        if not any(listener.type == "internal" for listener in self.listeners):
            raise ListenerError("spec.listeners.kafka needs at least one internal listener (clients in the "
                                "Kubernetes cluster, KelpUser client properties)")
        external = [listener for listener in self.listeners if listener.type == "external"]
        if len(external) > 1:
            raise ListenerError("spec.listeners.kafka lists more than one external listener; the brokers' external "
                                "Services (spec.listeners.external) expose one")
        if external and external_type is None:
            raise ListenerError(f"listener {external[0].name!r} is external: set spec.listeners.external.type "
                                "(NodePort or LoadBalancer) to say how it is exposed")
        if not external and external_type is not None:
            raise ListenerError("spec.listeners.external is set but no listener in spec.listeners.kafka has type "
                                "external; mark the listener it exposes")
        if not 1 <= self.renewal_days < self.validity_days:
            raise ListenerError(f"spec.tls.renewalDays ({self.renewal_days}) must be at least 1 and less than "
                                f"certificateValidityDays ({self.validity_days})")

    # -- what the rest of the operator asks -----------------------------------------------------------
    @property
    def all_listeners(self) -> tuple[KafkaListener, ...]:
        """The replication listener first, then the user's."""
        return (REPLICATION_LISTENER, *self.listeners)

    @property
    def external(self) -> KafkaListener | None:
        return next((listener for listener in self.listeners if listener.type == "external"), None)

    @property
    def cert_manager(self) -> bool:
        return self.issuer is not None

    def listener_for(self, authentication: str) -> KafkaListener | None:
        """The listener a user with this authentication connects to: an internal one first."""
        matching = [listener for listener in self.listeners if listener.authentication == authentication]
        return next((listener for listener in matching if listener.type == "internal"), matching[0] if matching
                    else None)

    def files(self) -> Mapping[str, str]:
        """Where the brokers find their TLS material (the `tls` volume at TLS_DIR)."""
        if self.cert_manager:
            # One cert-manager Certificate for every broker: its Secret's CombinedPEM output and the issuer's CA.
            ca = f"{TLS_DIR}/ca.crt"
            return {"keystore": f"{TLS_DIR}/tls-combined.pem", "cluster-ca": ca, "clients-ca": ca, "trusted-ca": ca}
        return {"keystore": f"{TLS_DIR}/${{env:POD_NAME}}.pem", "cluster-ca": f"{TLS_DIR}/cluster-ca.crt",
                "clients-ca": f"{TLS_DIR}/clients-ca.crt", "trusted-ca": f"{TLS_DIR}/trusted-ca.crt"}

    def advertised_host(self, *, name: str, namespace: str, advertise: str) -> str:
        """What a broker advertises on its internal listeners: its per-pod DNS name, or its pod IP."""
        if advertise == "podIP":
            return "${env:POD_IP}"
        return f"${{env:POD_NAME}}.{name}-brokers.{namespace}.svc"

    def advertised_listeners(self, *, name: str, namespace: str, advertise: str,
                             external: str | None = None) -> str:
        """`advertised.listeners`: every internal listener at the pod's address, the external one (in a broker's
        own file) at `external` (host:port)."""
        host = self.advertised_host(name=name, namespace=namespace, advertise=advertise)
        parts = [f"{listener.kafka_name}://{host}:{listener.port}" for listener in self.all_listeners
                 if listener.type == "internal"]
        ext = self.external
        if ext is not None and external is not None:
            parts.append(f"{ext.kafka_name}://{external}")
        return ",".join(parts)

    def principals(self, *, cluster: str, mapping_rules: str | None) -> tuple[str, str]:
        """(the brokers' principal, the operator's principal) as the brokers will see them."""
        return principal_of(broker_dn(cluster), mapping_rules), principal_of(OPERATOR_DN, mapping_rules)

    def broker_config(self, *, name: str, namespace: str, http_port: int, advertise: str,
                      mapping_rules: str | None) -> dict[str, str | int | bool]:
        """Every Kafka key of the secured layout (docs/operator.md, "Broker config of the secured layout")."""
        files = self.files()
        out: dict[str, str | int | bool] = {
            "config.providers": "env",
            "config.providers.env.class": ENV_PROVIDER,
            "listeners": ",".join(f"{listener.kafka_name}://:{listener.port}" for listener in self.all_listeners),
            "advertised.listeners": self.advertised_listeners(name=name, namespace=namespace, advertise=advertise),
            "listener.security.protocol.map": ",".join(f"{listener.kafka_name}:{listener.security_protocol}"
                                                       for listener in self.all_listeners),
            "inter.broker.listener.name": REPLICATION.upper(),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": files["keystore"],
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": files["clients-ca"],
            "ssl.client.auth": "none",
            f"listener.name.{REPLICATION}.ssl.truststore.location": files["cluster-ca"],
            f"listener.name.{REPLICATION}.ssl.client.auth": "required",
            "http.ssl.enabled": True,
            "http.ssl.keystore.type": "PEM",
            "http.ssl.keystore.location": files["keystore"],
            "http.ssl.truststore.type": "PEM",
            "http.ssl.truststore.location": files["trusted-ca"],
            "http.ssl.client.auth": "requested",
            # Brokers (cluster CA) and the operator present certificates; REST users with SCRAM or PLAIN
            # credentials use HTTP Basic. /healthz and /readyz stay open for probes; /metrics needs an identity
            # (issue 33): a scraper's certificate whose principal spec.config lists in http.metrics.principals
            # (or a super user), unless spec.config sets http.metrics.public.
            "http.authentication.methods": "mtls,basic" if any(
                listener.mechanism is not None for listener in self.listeners) else "mtls",
        }
        if advertise == "podIP":
            # Pod IPs change at every restart and a certificate learns its pod's new IP a moment later; the
            # brokers authenticate each other by their cluster-CA client certificates, not by address.
            out[f"listener.name.{REPLICATION}.ssl.endpoint.identification.algorithm"] = ""
        for listener in self.listeners:
            if listener.authentication == "tls":
                out[f"listener.name.{listener.name}.ssl.client.auth"] = "required"
            if listener.mechanism is not None:
                out[f"listener.name.{listener.name}.sasl.enabled.mechanisms"] = listener.mechanism
        if self.super_users is not None:
            brokers, operator = self.principals(cluster=name, mapping_rules=mapping_rules)
            supers = dict.fromkeys((operator, brokers, *self.super_users))
            out["authorizer.class.name"] = KELP_AUTHORIZER
            out["super.users"] = ";".join(supers)
            out["allow.everyone.if.no.acl.found"] = False
        return out

    def listener_status(self, *, name: str, namespace: str, external: list[str]) -> list[ListenerStatus]:
        """`status.listeners`: where clients bootstrap for each listener (an external one: its known addresses)."""
        out: list[ListenerStatus] = []
        for listener in self.listeners:
            bootstrap = (",".join(external) if listener.type == "external"
                         else f"{name}.{namespace}.svc:{listener.port}")
            out.append({"name": listener.name, "type": listener.type, "securityProtocol": listener.security_protocol,
                        "bootstrapServers": bootstrap})
        return out
