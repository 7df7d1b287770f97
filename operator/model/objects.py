"""Kubernetes objects as the operator reads and writes them: the fields it uses, as types.

Why: every object the operator builds, reads back or patches was an untyped dict, so a
misspelt field or a string where the API wants an integer reached the API server (or was silently
pruned) instead of failing `make typecheck`. These TypedDicts name the fields the operator uses —
an object the API server answers has more, which pass through untouched — and the custom
resources' spec and status follow the CRDs in `crds/` exactly (structural pruning drops anything
else). Keys are optional (`total=False`) wherever the API server may leave them out. Parts the
operator only passes through (a user's affinity, probes, security contexts) are free-form JSON
(`kelp.json_types`).

A status field set to None is a JSON merge patch's deletion: the field was not observed this pass
(`status.py`). `kube/client.py` is where an API answer becomes one of these types; builders return them.

Kelp's own custom resources (Cluster, Topic, ConsumerGroup, KelpUser) live in objects_kelp.py, a
Cluster's spec settings in objects_cluster_spec.py, the NetworkPolicy in objects_network.py. Types only:
no logic, no I/O.
"""

from __future__ import annotations

from typing import NotRequired, Required, TypedDict

from kelp.json_types import JsonObject

from .objects_cluster_spec import TemplateMeta

__all__ = [
    "OwnerReference", "ObjectMeta", "KubeObject", "LabelSelector", "ServiceAccount", "Secret", "KeyToPath",
    "CertificateIssuerRef", "CertificateSpec", "Certificate", "PolicyRule", "Role", "RoleRef", "Subject",
    "RoleBinding", "ConfigMap", "ServicePort", "ServiceSpec", "LoadBalancerIngress", "LoadBalancerStatus",
    "ServiceStatus", "Service", "DisruptionBudgetSpec", "PodDisruptionBudget", "EnvVar", "ContainerPort",
    "VolumeMount", "Container", "PodSpec", "PodTemplate", "ClaimResources", "ClaimSpec", "ClaimTemplate",
    "UpdateStrategy", "ClaimRetention", "StatefulSetSpec", "StatefulSetStatus", "StatefulSet", "PodCondition",
    "ContainerStateWaiting", "ContainerState", "ContainerStatus", "PodStatus", "Pod", "ClaimStatus",
    "PersistentVolumeClaim", "StorageClass", "ObjectReference", "EventSource", "Event"
]


# -- what every object has ------------------------------------------------------------------

class OwnerReference(TypedDict):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    generation: int
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]


class KubeObject(TypedDict, total=False):
    """An object of a built-in kind."""

    apiVersion: str
    kind: str
    metadata: Required[ObjectMeta]


class LabelSelector(TypedDict):
    matchLabels: dict[str, str]


# -- what a Cluster's children are (builders.py, rack.py) --------------------------------------------

class ServiceAccount(KubeObject, total=False):
    pass


class Secret(KubeObject, total=False):
    """A core/v1 Secret: `data` values are base64 (certificates.py reads and writes them)."""

    type: str
    data: dict[str, str]


class KeyToPath(TypedDict):
    key: str
    path: str


class CertificateIssuerRef(TypedDict):
    name: str
    kind: str
    group: str


class CertificateSpec(TypedDict, total=False):
    """cert-manager.io/v1 Certificate's spec, as far as cert_manager.py fills it."""

    secretName: str
    issuerRef: CertificateIssuerRef
    commonName: str
    subject: JsonObject
    dnsNames: list[str]
    ipAddresses: list[str]
    duration: str
    renewBefore: str
    usages: list[str]
    privateKey: JsonObject
    additionalOutputFormats: list[JsonObject]
    secretTemplate: JsonObject


class Certificate(KubeObject, total=False):
    """A cert-manager.io/v1 Certificate (with `spec.tls.issuerRef`; cert-manager writes its Secret)."""

    spec: CertificateSpec
    status: JsonObject


class PolicyRule(TypedDict):
    apiGroups: list[str]
    resources: list[str]
    verbs: list[str]


class Role(KubeObject, total=False):
    """A Role or a ClusterRole."""

    rules: list[PolicyRule]


class RoleRef(TypedDict):
    apiGroup: str
    kind: str
    name: str


class Subject(TypedDict):
    kind: str
    name: str
    namespace: str


class RoleBinding(KubeObject, total=False):
    """A RoleBinding or a ClusterRoleBinding."""

    roleRef: RoleRef
    subjects: list[Subject]


class ConfigMap(KubeObject, total=False):
    data: dict[str, str]


class ServicePort(TypedDict, total=False):
    name: str
    port: int
    targetPort: str
    protocol: str
    nodePort: int
    appProtocol: str


class ServiceSpec(TypedDict, total=False):
    type: str
    clusterIP: str
    selector: dict[str, str]
    ports: list[ServicePort]
    publishNotReadyAddresses: bool
    externalTrafficPolicy: str


class LoadBalancerIngress(TypedDict, total=False):
    ip: str
    hostname: str


class LoadBalancerStatus(TypedDict, total=False):
    ingress: list[LoadBalancerIngress]


class ServiceStatus(TypedDict, total=False):
    loadBalancer: LoadBalancerStatus


class Service(KubeObject, total=False):
    spec: ServiceSpec
    status: ServiceStatus


class DisruptionBudgetSpec(TypedDict):
    maxUnavailable: int
    selector: LabelSelector


class PodDisruptionBudget(KubeObject, total=False):
    spec: DisruptionBudgetSpec


class EnvVar(TypedDict):
    name: str
    value: NotRequired[str]
    valueFrom: NotRequired[JsonObject]


class ContainerPort(TypedDict):
    name: str
    containerPort: int
    protocol: str


class VolumeMount(TypedDict):
    name: str
    mountPath: str
    readOnly: NotRequired[bool]


class Container(TypedDict, total=False):
    name: str
    image: str
    imagePullPolicy: str
    args: list[str]
    env: list[EnvVar]
    ports: list[ContainerPort]
    readinessProbe: JsonObject
    livenessProbe: JsonObject
    startupProbe: JsonObject
    lifecycle: JsonObject
    resources: JsonObject
    volumeMounts: list[VolumeMount]
    securityContext: JsonObject


class PodSpec(TypedDict, total=False):
    serviceAccountName: str
    terminationGracePeriodSeconds: int
    securityContext: JsonObject
    containers: list[Container]
    volumes: list[JsonObject]
    topologySpreadConstraints: list[JsonObject]
    affinity: JsonObject
    tolerations: list[JsonObject]
    nodeSelector: dict[str, str]
    priorityClassName: str


class PodTemplate(TypedDict):
    metadata: TemplateMeta
    spec: PodSpec


class ClaimResources(TypedDict, total=False):
    requests: dict[str, str]


class ClaimSpec(TypedDict, total=False):
    accessModes: list[str]
    resources: ClaimResources
    storageClassName: str


class ClaimTemplate(TypedDict):
    metadata: ObjectMeta
    spec: ClaimSpec


class UpdateStrategy(TypedDict):
    type: str


class ClaimRetention(TypedDict):
    whenDeleted: str
    whenScaled: str


class StatefulSetSpec(TypedDict, total=False):
    replicas: int
    serviceName: str
    podManagementPolicy: str
    updateStrategy: UpdateStrategy
    persistentVolumeClaimRetentionPolicy: ClaimRetention
    selector: LabelSelector
    template: PodTemplate
    volumeClaimTemplates: list[ClaimTemplate]


class StatefulSetStatus(TypedDict, total=False):
    readyReplicas: int
    updatedReplicas: int
    observedGeneration: int
    updateRevision: str


class StatefulSet(KubeObject, total=False):
    spec: StatefulSetSpec
    status: StatefulSetStatus


# -- what the operator reads -----------------------------------------------------------------

class PodCondition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class ContainerStateWaiting(TypedDict, total=False):
    reason: str
    message: str


class ContainerState(TypedDict, total=False):
    waiting: ContainerStateWaiting


class ContainerStatus(TypedDict, total=False):
    name: str
    ready: bool
    restartCount: int
    state: ContainerState


class PodStatus(TypedDict, total=False):
    podIP: str
    hostIP: str
    phase: str
    conditions: list[PodCondition]
    containerStatuses: list[ContainerStatus]


class Pod(KubeObject, total=False):
    status: PodStatus


class ClaimStatus(TypedDict, total=False):
    phase: str
    capacity: dict[str, str]
    conditions: list[PodCondition]  # Resizing, FileSystemResizePending: the same shape as a pod's


class PersistentVolumeClaim(KubeObject, total=False):
    spec: ClaimSpec
    status: ClaimStatus


class StorageClass(KubeObject, total=False):
    allowVolumeExpansion: bool


class ObjectReference(TypedDict):
    apiVersion: str
    kind: str
    name: str
    namespace: str
    uid: str


class EventSource(TypedDict):
    component: str


class Event(KubeObject, total=False):
    """A core/v1 Event (events.py)."""

    involvedObject: ObjectReference
    reason: str
    message: str
    type: str
    source: EventSource
    reportingComponent: str
    reportingInstance: str
    firstTimestamp: str
    lastTimestamp: str
    count: int
