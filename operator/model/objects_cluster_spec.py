"""The spec of a Cluster as written (crds/kelp.dev_clusters.yaml): its settings, as types.

Why: kept apart from objects.py (the Kubernetes objects the operator builds and reads) and objects_kelp.py
(the custom resources, a Cluster among them) so none grows past a size one can read; the same rules hold —
types only, no logic, no I/O, the fields exactly the CRD's (structural pruning drops anything else).
`manifests/spec.ClusterSpec` is this spec read, with defaults and checks.
"""

from __future__ import annotations

from typing import Literal, Required, TypedDict

from kelp.json_types import JsonObject

__all__ = [
    "TemplateMeta", "PodTemplateOverrides", "StorageSettings", "RackSettings", "ExternalListener",
    "ListenerAuthentication", "KafkaListenerSettings", "ListenerSettings", "AuthorizationSettings", "IssuerRef",
    "TlsSettings", "NetworkPolicySettings", "HttpServiceSwitch", "HttpServiceSettings", "HttpSettings",
    "DisruptionSettings", "ReassignmentSettings", "ClusterResourceSpec", "ListenerType", "ListenerAuthType",
    "HttpServiceType"
]


class TemplateMeta(TypedDict, total=False):
    labels: dict[str, str]
    annotations: dict[str, str]


class PodTemplateOverrides(TypedDict, total=False):
    """`spec.podTemplate` of a Cluster: what it may set on the broker pods (builders merge it)."""

    metadata: TemplateMeta
    affinity: JsonObject
    tolerations: list[JsonObject]
    topologySpreadConstraints: list[JsonObject]
    priorityClassName: str
    nodeSelector: dict[str, str]
    securityContext: JsonObject


class StorageSettings(TypedDict, total=False):
    size: str
    storageClassName: str
    deleteClaim: bool


class RackSettings(TypedDict, total=False):
    topologyKey: str


class ExternalListener(TypedDict, total=False):
    type: str  # required by the CRD
    nodePorts: list[int]
    annotations: dict[str, str]


ListenerType = Literal["internal", "external"]
ListenerAuthType = Literal["none", "scram-sha-512", "tls", "plain"]


class ListenerAuthentication(TypedDict):
    type: ListenerAuthType


class KafkaListenerSettings(TypedDict, total=False):
    """One entry of `spec.listeners.kafka` (security/listener_security.py reads it)."""

    name: Required[str]
    port: Required[int]
    type: ListenerType
    tls: bool
    authentication: ListenerAuthentication
    networkPolicyPeers: list[JsonObject]  # core NetworkPolicyPeer objects (network_policy.py)


class ListenerSettings(TypedDict, total=False):
    kafkaPort: int
    httpPort: int
    advertise: str
    external: ExternalListener
    kafka: list[KafkaListenerSettings]


class AuthorizationSettings(TypedDict, total=False):
    type: Required[Literal["simple"]]
    superUsers: list[str]


class IssuerRef(TypedDict, total=False):
    name: Required[str]
    kind: str
    group: str


class TlsSettings(TypedDict, total=False):
    issuerRef: IssuerRef
    certificateValidityDays: int
    renewalDays: int


class NetworkPolicySettings(TypedDict, total=False):
    enabled: bool
    httpPeers: list[JsonObject]


class HttpServiceSwitch(TypedDict, total=False):
    """`spec.http.restProxy` / `spec.http.schemaRegistry`: whether the brokers serve it (default true)."""

    enabled: bool


HttpServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]


class HttpServiceSettings(TypedDict, total=False):
    """`spec.http.service`: the Service `<cluster>-http` in front of the brokers' HTTP port."""

    type: HttpServiceType
    port: int
    nodePort: int
    annotations: dict[str, str]


class HttpSettings(TypedDict, total=False):
    """`spec.http`: the HTTP services of the brokers (REST Proxy, Schema Registry) and their Service."""

    restProxy: HttpServiceSwitch
    schemaRegistry: HttpServiceSwitch
    service: HttpServiceSettings


class DisruptionSettings(TypedDict, total=False):
    maxUnavailable: int


class ReassignmentSettings(TypedDict, total=False):
    stallTimeoutSeconds: int
    throttleBytesPerSecond: int | None


class RestartSettings(TypedDict, total=False):
    podReadyTimeoutSeconds: int


class ClusterResourceSpec(TypedDict, total=False):
    """A Cluster's spec as written (`spec.ClusterSpec` is it read, with defaults and checks)."""

    brokers: int
    image: str
    imagePullPolicy: str
    storage: StorageSettings
    resources: JsonObject
    config: dict[str, str]
    rack: RackSettings
    listeners: ListenerSettings
    podTemplate: PodTemplateOverrides
    podDisruptionBudget: DisruptionSettings
    reassignment: ReassignmentSettings
    restart: RestartSettings
    authorization: AuthorizationSettings
    tls: TlsSettings
    networkPolicy: NetworkPolicySettings
    http: HttpSettings
