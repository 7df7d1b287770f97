"""A Cluster resource's spec read once, with the CRD's defaults and the broker's own config validator.

Why: the builders, the status code and the handlers all need the same facts
(how many brokers, which ports, what each broker's config file says), and
the API server fills the CRD's defaults only on objects it stores — a unit
test, or an object written before a default was added, may lack them. One
reader applies the same defaults the schema declares, and hands the broker
config to `kelp.config.broker.BrokerConfig` (the one config validator), so
a wrong `spec.config` is refused with the broker's own message before any
pod sees it.

Pure: no Kubernetes client, no network.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from kelp.config.broker import BrokerConfig
from kelp.config.keys import DYNAMIC_BROKER_KEYS
from kelp.errors import ConfigError
from kelp.json_types import JsonObject

from ..model.objects_cluster_spec import PodTemplateOverrides
from ..model.objects_kelp import ClusterResource
from ..security.listener_security import ListenerError, Security, owned_by_security

__all__ = ["ClusterSpec", "SpecError", "OPERATOR_OWNED_KEYS", "DATA_DIR", "CONFIG_DIR", "REPLICATION_DEFAULT_KEYS",
           "DEFAULTS_ANNOTATION", "parse_defaults", "format_defaults"]

DATA_DIR = "/var/lib/kelp"
CONFIG_DIR = "/etc/kelp"
DEFAULT_IMAGE = "kelp:0.1.0"

# Broker properties the operator sets itself: a user value would break how pods find
# each other, where data lives, or which broker id a pod has.
OPERATOR_OWNED_KEYS = frozenset({
    "broker.id", "broker.id.from.hostname", "log.dirs", "listeners", "host", "port", "http.host", "http.port",
    "advertised.host", "advertised.port", "cluster.name", "cluster.backend", "cluster.dir", "kube.namespace",
    "kube.config", "cluster.id", "broker.rack", "broker.rack.node.label", "kube.node.name",
    "http.rest.proxy.enable", "http.schema.registry.enable",  # spec.http
})
HTTP_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")


# Labels that select a cluster's broker pods (builders.selector_for): a pod template may not override them.
SELECTOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
CONFIG_HASH_ANNOTATION = "kelp.dev/config-hash"
# On the broker pod template (secured layout, own CAs): the lowest CA generations the brokers trust.
TRUST_FLOOR_ANNOTATION = "kelp.dev/trust-floor"
# Defaults that once depended on the broker count: chosen at creation, then kept (`replication_defaults`).
REPLICATION_DEFAULT_KEYS = ("default.replication.factor", "offsets.topic.replication.factor", "min.insync.replicas")
# On the broker ConfigMap: the defaults chosen when the cluster was created, `key=value,key=value`.
DEFAULTS_ANNOTATION = "kelp.dev/replication-defaults"
# What a broker pod's environment gives the secured layout's `${env:...}` values (builders.py), as the spec's
# validation stands them in: the file is checked whole, as a broker would read it.
VALIDATION_POD_ENV = {"POD_NAME": "validation-0", "POD_IP": "192.0.2.1", "NODE_IP": "192.0.2.2"}
# spec.reassignment.throttleBytesPerSecond: Redpanda's default recovery rate (raft_learner_recovery_rate), 100 MiB/s;
# Kafka's tool has no default (unthrottled), which is what issue 32 found a drain to be.
DEFAULT_REASSIGNMENT_THROTTLE = 100 * 1024 * 1024
MIN_REASSIGNMENT_THROTTLE = 1024 * 1024


def _throttle(reassignment: Mapping[str, object]) -> int | None:
    if "throttleBytesPerSecond" not in reassignment:
        return DEFAULT_REASSIGNMENT_THROTTLE
    value = reassignment["throttleBytesPerSecond"]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise SpecError(f"spec.reassignment.throttleBytesPerSecond must be a number of bytes per second or null "
                        f"(unthrottled), got {value!r}")
    return int(str(value).strip())


def parse_defaults(text: str | None) -> dict[str, str]:
    """The ConfigMap annotation back into a dict; unknown keys and malformed items are ignored."""
    out = {}
    for item in (text or "").split(","):
        key, sep, value = item.strip().partition("=")
        if sep and key in REPLICATION_DEFAULT_KEYS and value.strip().isdigit():
            out[key] = value.strip()
    return out


def format_defaults(defaults: Mapping[str, str]) -> str:
    return ",".join(f"{k}={defaults[k]}" for k in REPLICATION_DEFAULT_KEYS if k in defaults)


class SpecError(ValueError):
    """A Cluster spec the operator cannot turn into brokers; the message names the field."""


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    namespace: str
    uid: str
    generation: int
    brokers: int = 3
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    storage_size: str = "10Gi"
    storage_class: str | None = None
    # spec.storage.deleteClaim: the claims go with the Cluster and with brokers a scale-down removes.
    storage_delete_claim: bool = False
    resources: JsonObject = field(default_factory=dict)
    config: Mapping[str, str] = field(default_factory=dict)
    rack_topology_key: str | None = None
    kafka_port: int = 9092
    http_port: int = 8080
    advertise: str = "dns"
    reassignment_stall_s: int = 300
    # spec.reassignment.throttleBytesPerSecond: the replication quota on the moves the operator submits
    # (throttles.py); None with `throttleBytesPerSecond: null`, unthrottled.
    reassignment_throttle: int | None = DEFAULT_REASSIGNMENT_THROTTLE
    # spec.restart.podReadyTimeoutSeconds: how long a broker pod may stay not Ready before a roll calls it stuck.
    restart_ready_timeout_s: int = 300
    # spec.podTemplate as given (metadata.labels/annotations, affinity, tolerations, ...); merged by builders.
    pod_template: PodTemplateOverrides = field(default_factory=PodTemplateOverrides)
    # spec.listeners.external: None, "NodePort" or "LoadBalancer"; node ports pinned per broker (else allocated).
    external_type: str | None = None
    external_node_ports: tuple[int, ...] = ()
    external_annotations: Mapping[str, str] = field(default_factory=dict)
    # spec.podDisruptionBudget.maxUnavailable; None: follow the min.insync rule (`disruptions_allowed`).
    pdb_max_unavailable: int | None = None
    # Replication defaults chosen when the cluster was created (see `replication_defaults`); None: choose now.
    pinned_defaults: Mapping[str, str] | None = None
    # spec.listeners.kafka with spec.tls and spec.authorization (listener_security); None: the plain layout, one
    # PLAINTEXT listener on kafkaPort and plain HTTP, as before issue 20.
    security: Security | None = None
    # spec.networkPolicy (network_policy.py): write the NetworkPolicy; who may reach the HTTP port (empty: anyone).
    network_policy: bool = False
    http_peers: tuple[JsonObject, ...] = ()
    # spec.http: the REST Proxy (v2 and v3) and the Schema Registry on the HTTP port, and the Service
    # `<cluster>-http` in front of them (type, port: None is httpPort, nodePort with NodePort, annotations).
    rest_proxy: bool = True
    schema_registry: bool = True
    http_service_type: str = "ClusterIP"
    http_service_port: int | None = None
    http_service_node_port: int | None = None
    http_service_annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_resource(cls, body: ClusterResource, *,
                      pinned_defaults: Mapping[str, str] | None = None) -> "ClusterSpec":
        meta = body.get("metadata") or {}
        spec = body.get("spec") or {}
        storage = spec.get("storage") or {}
        listeners = spec.get("listeners") or {}
        rack = spec.get("rack") or {}
        external = listeners.get("external") or {}
        pdb = spec.get("podDisruptionBudget") or {}
        resources = spec.get("resources")
        if resources is None:
            resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}
        pod_template: PodTemplateOverrides = spec.get("podTemplate") or {}
        http = spec.get("http") or {}
        http_service = http.get("service") or {}
        try:
            security = Security.from_spec(spec)
        except ListenerError as exc:
            raise SpecError(str(exc)) from None
        out = cls(
            name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "")),
            uid=str(meta.get("uid", "")), generation=int(meta.get("generation") or 0),
            brokers=int(spec.get("brokers", 3)), image=str(spec.get("image") or DEFAULT_IMAGE),
            image_pull_policy=str(spec.get("imagePullPolicy") or "IfNotPresent"),
            storage_size=str(storage.get("size") or "10Gi"), storage_class=storage.get("storageClassName"),
            storage_delete_claim=bool(storage.get("deleteClaim", False)),
            resources=resources, config={str(k): str(v) for k, v in (spec.get("config") or {}).items()},
            rack_topology_key=rack.get("topologyKey"),
            kafka_port=int(listeners.get("kafkaPort", 9092)), http_port=int(listeners.get("httpPort", 8080)),
            advertise=str(listeners.get("advertise") or "dns"),
            reassignment_stall_s=int((spec.get("reassignment") or {}).get("stallTimeoutSeconds", 300)),
            reassignment_throttle=_throttle((spec.get("reassignment") or {})),
            restart_ready_timeout_s=int((spec.get("restart") or {}).get("podReadyTimeoutSeconds", 300)),
            pod_template=pod_template.copy(),
            external_type=external.get("type"),
            external_node_ports=tuple(int(p) for p in external.get("nodePorts") or ()),
            external_annotations={str(k): str(v) for k, v in (external.get("annotations") or {}).items()},
            pdb_max_unavailable=None if pdb.get("maxUnavailable") is None else int(pdb["maxUnavailable"]),
            pinned_defaults=dict(pinned_defaults) if pinned_defaults else None,
            security=security,
            network_policy=bool((spec.get("networkPolicy") or {}).get("enabled", False)),
            http_peers=tuple((spec.get("networkPolicy") or {}).get("httpPeers") or ()),
            rest_proxy=bool((http.get("restProxy") or {}).get("enabled", True)),
            schema_registry=bool((http.get("schemaRegistry") or {}).get("enabled", True)),
            http_service_type=str(http_service.get("type") or "ClusterIP"),
            http_service_port=None if http_service.get("port") is None else int(http_service["port"]),
            http_service_node_port=None if http_service.get("nodePort") is None else int(http_service["nodePort"]),
            http_service_annotations={str(k): str(v) for k, v in (http_service.get("annotations") or {}).items()},
        )
        out.validate()
        return out

    # -- derived names ------------------------------------------------------------
    @property
    def headless_service(self) -> str:
        return f"{self.name}-brokers"

    @property
    def config_map(self) -> str:
        return f"{self.name}-config"

    @property
    def service_account(self) -> str:
        return f"{self.name}-broker"

    @property
    def bootstrap(self) -> str:
        """The client Service's address of the first internal Kafka listener."""
        port = self.kafka_port
        if self.security is not None:
            port = next(listener.port for listener in self.security.listeners if listener.type == "internal")
        return f"{self.name}.{self.namespace}.svc:{port}"

    @property
    def http_service(self) -> str:
        """The Service in front of the brokers' HTTP port for REST Proxy and Schema Registry clients."""
        return f"{self.name}-http"

    @property
    def http_service_wanted(self) -> bool:
        """`<cluster>-http` exists while the brokers serve the REST Proxy or the Schema Registry."""
        return self.rest_proxy or self.schema_registry

    @property
    def http_service_port_number(self) -> int:
        return self.http_service_port if self.http_service_port is not None else self.http_port

    @property
    def http_url(self) -> str | None:
        """The in-cluster URL of `<cluster>-http` (HTTPS in the secured layout); None without the Service."""
        if not self.http_service_wanted:
            return None
        scheme = "https" if self.security is not None else "http"
        return f"{scheme}://{self.http_service}.{self.namespace}.svc:{self.http_service_port_number}"

    @property
    def secured(self) -> bool:
        """The secured layout (spec.listeners.kafka): TLS, authenticated listeners, HTTPS."""
        return self.security is not None

    @property
    def external_port(self) -> int:
        """The port of the external listener: its own in the secured layout, kafkaPort in the plain one."""
        ext = self.security.external if self.security is not None else None
        return ext.port if ext is not None else self.kafka_port

    @property
    def external_port_name(self) -> str:
        ext = self.security.external if self.security is not None else None
        return ext.port_name if ext is not None else "kafka"

    def pod_dns(self, ordinal: int) -> str:
        return f"{self.name}-{ordinal}.{self.headless_service}.{self.namespace}.svc"

    # -- the secured layout's Secrets (certificates) -------------------------------------------------
    def ca_secret(self, kind: str) -> str:
        """The CA's private key (`cluster` or `clients`), as Strimzi names it."""
        return f"{self.name}-{kind}-ca"

    def ca_cert_secret(self, kind: str) -> str:
        """The CA's trust bundle `ca.crt`, what clients mount to trust the brokers (cluster CA)."""
        return f"{self.name}-{kind}-ca-cert"

    @property
    def broker_tls_secret(self) -> str:
        """What the brokers mount at TLS_DIR: the operator's `-broker-certs`, or cert-manager's `-broker-tls`."""
        cert_manager = self.security is not None and self.security.cert_manager
        return f"{self.name}-broker-tls" if cert_manager else f"{self.name}-broker-certs"

    @property
    def operator_tls_secret(self) -> str:
        """The operator's client certificate for this cluster's HTTPS admin API (`tls.crt`, `tls.key`, `ca.crt`)."""
        return f"{self.name}-operator-tls"

    # -- validation and the broker config ------------------------------------------
    def validate(self) -> None:
        if self.brokers < 1:
            raise SpecError(f"spec.brokers must be at least 1, got {self.brokers}")
        if self.kafka_port == self.http_port:
            raise SpecError("listeners.kafkaPort and listeners.httpPort must differ")
        self._validate_knobs()
        if self.reassignment_throttle is not None and self.reassignment_throttle < MIN_REASSIGNMENT_THROTTLE:
            raise SpecError("spec.reassignment.throttleBytesPerSecond must be at least "
                            f"{MIN_REASSIGNMENT_THROTTLE} (1 MiB/s) or null (unthrottled), got "
                            f"{self.reassignment_throttle}")
        if self.reassignment_stall_s < 10:
            raise SpecError("spec.reassignment.stallTimeoutSeconds must be at least 10, got "
                            f"{self.reassignment_stall_s}")
        if not 10 <= self.restart_ready_timeout_s <= 86400:
            raise SpecError("spec.restart.podReadyTimeoutSeconds must be between 10 and 86400, got "
                            f"{self.restart_ready_timeout_s}")
        if self.advertise not in ("dns", "podIP"):
            raise SpecError(f"spec.listeners.advertise must be dns or podIP, got {self.advertise!r}")
        owned = sorted(k for k in self.config if k in OPERATOR_OWNED_KEYS or owned_by_security(k))
        if owned:
            raise SpecError(f"spec.config sets {', '.join(owned)}, which the operator manages; remove "
                            f"{'it' if len(owned) == 1 else 'them'} (ports, listeners and their TLS and "
                            "authentication live under spec.listeners, super users under spec.authorization, "
                            "the REST Proxy and Schema Registry switches under spec.http)")
        if self.security is not None:
            try:
                self.security.validate(http_port=self.http_port, external_type=self.external_type)
            except ListenerError as exc:
                raise SpecError(str(exc)) from None
        try:
            # The whole file as a pod would read it: its per-pod `${env:...}` values are stand-ins here.
            BrokerConfig.load(env=dict(VALIDATION_POD_ENV), overrides={
                **self.effective_config(), "broker.id": 0, "broker.id.from.hostname": False})
        except ConfigError as exc:
            raise SpecError(f"spec.config: {exc}") from None

    def _validate_knobs(self) -> None:
        labels = ((self.pod_template.get("metadata") or {}).get("labels") or {})
        taken = sorted(set(labels) & set(SELECTOR_LABELS))
        if taken:
            raise SpecError(f"spec.podTemplate.metadata.labels sets {', '.join(taken)}, which select the broker pods; "
                            "use other label keys")
        annotations = ((self.pod_template.get("metadata") or {}).get("annotations") or {})
        for owned_annotation in (CONFIG_HASH_ANNOTATION, TRUST_FLOOR_ANNOTATION):
            if owned_annotation in annotations:
                raise SpecError(f"spec.podTemplate.metadata.annotations sets {owned_annotation}, which the operator "
                                "owns (it rolls the pods when the broker config or the trusted CAs change)")
        if self.external_type not in (None, "NodePort", "LoadBalancer"):
            raise SpecError("spec.listeners.external.type must be NodePort or LoadBalancer, got "
                            f"{self.external_type!r}")
        if self.external_node_ports:
            if self.external_type != "NodePort":
                raise SpecError("spec.listeners.external.nodePorts is only used with type NodePort")
            if len(self.external_node_ports) < self.brokers:
                raise SpecError(f"spec.listeners.external.nodePorts lists {len(self.external_node_ports)} port(s) "
                                f"for {self.brokers} brokers; give one per broker (broker n uses the n-th)")
            if len(set(self.external_node_ports)) != len(self.external_node_ports):
                raise SpecError("spec.listeners.external.nodePorts must not repeat a port")
        self._validate_http()
        if self.pdb_max_unavailable is not None and self.pdb_max_unavailable < 0:
            raise SpecError(f"spec.podDisruptionBudget.maxUnavailable must be >= 0, got {self.pdb_max_unavailable}")

    def _validate_http(self) -> None:
        if self.http_service_type not in HTTP_SERVICE_TYPES:
            raise SpecError(f"spec.http.service.type must be one of {', '.join(HTTP_SERVICE_TYPES)}, got "
                            f"{self.http_service_type!r}")
        for name, port in (("port", self.http_service_port), ("nodePort", self.http_service_node_port)):
            if port is not None and not 1 <= port <= 65535:
                raise SpecError(f"spec.http.service.{name} must be in 1..65535, got {port}")
        if self.http_service_node_port is not None and self.http_service_type != "NodePort":
            raise SpecError("spec.http.service.nodePort is only used with type NodePort")

    def disruptions_allowed(self) -> int:
        """Broker pods a voluntary disruption (a node drain) may take down at once: the min.insync rule.

        default.replication.factor - min.insync.replicas brokers may be down
        while every partition of that factor keeps acks=all writes; when the
        factor leaves no room (RF <= min.insync, e.g. a one-broker cluster)
        no disruption can keep them, and 1 lets drains proceed one broker at
        a time, as the rolling-restart rule does (restarts.py).
        `spec.podDisruptionBudget.maxUnavailable` overrides it.
        """
        if self.pdb_max_unavailable is not None:
            return self.pdb_max_unavailable
        config = self.effective_config()
        rf, min_isr = int(config["default.replication.factor"]), int(config["min.insync.replicas"])
        return rf - min_isr if rf > min_isr else 1

    def replication_defaults(self) -> dict[str, str]:
        """Replication factor and min.insync defaults, fixed for the cluster's life.

        Chosen once, from the broker count the cluster is created with
        (RF min(3, brokers), min.insync min(2, brokers)), then read back from
        the ConfigMap (`DEFAULTS_ANNOTATION`) and passed in as
        `pinned_defaults`: were they recomputed from `spec.brokers`, scaling
        1 -> 3 would change every broker's config and roll every pod, and new
        topics would silently get another replication factor. To change them,
        set the keys in `spec.config`.
        """
        rf = str(min(3, self.brokers))
        chosen = {"default.replication.factor": rf, "offsets.topic.replication.factor": rf,
                  "min.insync.replicas": str(min(2, self.brokers))}
        pinned = self.pinned_defaults or {}
        return {k: str(pinned.get(k, chosen[k])) for k in REPLICATION_DEFAULT_KEYS}

    def dynamic_config(self) -> dict[str, str]:
        """The keys of spec.config that brokers change without a restart (Kafka's dynamic broker configs,
        `kelp.config.keys.DYNAMIC_BROKER_KEYS`): applied through the admin API as the cluster-wide
        default, never written into the config file, so changing them rolls no pod."""
        return {k: v for k, v in self.config.items() if k in DYNAMIC_BROKER_KEYS}

    def effective_config(self) -> dict[str, str | int | bool]:
        """What the brokers run with: the config file, then the dynamic keys (which win, as in Kafka)."""
        return {**self.broker_config(), **self.dynamic_config()}

    def broker_config(self) -> dict[str, str | int | bool]:
        """The brokers' YAML config: the operator's keys, the replication defaults, then spec.config's static keys
        (a change to these rolls the pods: the config hash is a pod annotation)."""
        defaults = self.replication_defaults()
        owned: dict[str, str | int | bool] = {
            "cluster.name": self.name,
            "cluster.backend": "kube",
            "kube.namespace": self.namespace,
            "broker.id.from.hostname": True,
            # log.dirs is the image's (KELP_LOG_DIRS=/var/lib/kelp, the volume's root; lost+found is skipped):
            # the environment beats the config file, so writing another path here would only mislead.
            "host": "0.0.0.0",
            "port": self.kafka_port,
            "http.host": "0.0.0.0",
            "http.port": self.http_port,
        }
        if self.security is None:
            # Plaintext brokers present no identity to each other's /cluster/v1 (broker/http/cluster/trust.py):
            # the pod network (and spec.networkPolicy) is what protects it; a secured Cluster's brokers use mTLS.
            owned["http.control.plane.open"] = True
        if self.security is not None:
            # The secured layout binds its listeners from `listeners` (listener_security), never `host`/`port`.
            del owned["host"], owned["port"]
            try:
                owned.update(self.security.broker_config(
                    name=self.name, namespace=self.namespace, http_port=self.http_port, advertise=self.advertise,
                    mapping_rules=self.config.get("ssl.principal.mapping.rules")))
            except ListenerError as exc:
                raise SpecError(str(exc)) from None
        # spec.http: only a service switched off is written (the brokers' default is on), so a Cluster without
        # spec.http keeps the config, and the pods, it had before spec.http existed.
        if not self.rest_proxy:
            owned["http.rest.proxy.enable"] = False
        if not self.schema_registry:
            owned["http.schema.registry.enable"] = False
        if self.rack_topology_key:
            # Each broker reads this label off its node at start-up (kelp.broker.cluster.rack).
            owned["broker.rack.node.label"] = self.rack_topology_key
        static = {k: v for k, v in self.config.items() if k not in DYNAMIC_BROKER_KEYS}
        return {**defaults, **static, **owned}

    @property
    def rack_binding(self) -> str:
        """The ClusterRoleBinding letting this cluster's brokers read node labels (cluster-scoped: ns in the name)."""
        return f"kelp-{self.namespace}-{self.name}-rack"
