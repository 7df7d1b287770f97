"""Kelp's custom resources as the operator reads and writes them: Cluster, Topic, ConsumerGroup, KelpUser.

Why: their spec and status follow the CRDs in `crds/` exactly (structural pruning drops anything
else), and status shaping (`status.py`) and every reconciler are checked against them by
`make typecheck`. A Cluster's spec settings are in objects_cluster_spec.py; the Kubernetes kinds the
operator builds and reads in objects.py. Types only: no logic, no I/O.
"""

from __future__ import annotations

from typing import Literal, NotRequired, Required, TypedDict

from .objects import ObjectMeta
from .objects_cluster_spec import ClusterResourceSpec

__all__ = [
    "ConditionStatus", "Condition", "ReassignmentStatus", "ListenerStatus", "ClusterStatus", "ClusterResource",
    "TopicSpec", "PartitionStatus", "TopicStatus", "TopicResource", "OffsetReset", "ConsumerGroupSpec",
    "AssignmentStatus", "MemberStatus", "OffsetStatus", "ConsumerGroupStatus", "ConsumerGroupResource", "UserAuthType",
    "AclResourceType", "AclPatternType", "AclOperationName", "AclType", "UserAuthentication", "AclResource", "AclRule",
    "UserAuthorization", "KelpUserSpec", "KelpUserStatus", "KelpUserResource", "KelpResource", "KelpStatus"
]


# -- Kelp's custom resources (crds/) ------------------------------------------------------------

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(TypedDict):
    """A metav1.Condition; `status.merge_conditions` adds the generation and the transition time."""

    type: str
    status: ConditionStatus
    reason: str
    message: str
    observedGeneration: NotRequired[int]
    lastTransitionTime: NotRequired[str]


class ReassignmentStatus(TypedDict, total=False):
    partitions: int
    progress: int
    lastProgressTime: str
    stalledPartitions: list[str]


class ListenerStatus(TypedDict):
    """One Kafka listener as clients use it (`status.listeners`, with `spec.listeners.kafka`)."""

    name: str
    type: str
    securityProtocol: str
    bootstrapServers: str


class ClusterStatus(TypedDict, total=False):
    observedGeneration: int
    conditions: list[Condition]
    brokers: int
    controller: int
    topics: int | None
    unmanagedTopics: list[str] | None
    underReplicatedPartitions: int | None
    offlinePartitions: int | None
    bootstrap: str
    externalAddresses: list[str] | None
    readyBrokers: str
    leaderSkew: int | None
    preferredLeaderImbalance: int | None
    reassignment: ReassignmentStatus | None
    listeners: list[ListenerStatus] | None
    httpUrl: str | None


class ClusterResource(TypedDict, total=False):
    apiVersion: str
    kind: Required[Literal["Cluster"]]
    metadata: Required[ObjectMeta]
    spec: ClusterResourceSpec
    status: ClusterStatus


class TopicSpec(TypedDict, total=False):
    cluster: str  # required by the CRD
    topicName: str
    partitions: int
    replicationFactor: int
    config: dict[str, str]
    deletePolicy: str


class PartitionStatus(TypedDict):
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]


class TopicStatus(TypedDict, total=False):
    observedGeneration: int
    conditions: list[Condition]
    topicName: str
    partitions: int | None
    replicationFactor: int | None
    partitionStates: list[PartitionStatus] | None


class TopicResource(TypedDict, total=False):
    apiVersion: str
    kind: Required[Literal["Topic"]]
    metadata: Required[ObjectMeta]
    spec: TopicSpec
    status: TopicStatus


class OffsetReset(TypedDict, total=False):
    """`spec.resetOffsets` of a ConsumerGroup: applied once per `requestId`, only while the group is Empty."""

    requestId: Required[str]
    topic: Required[str]
    to: Required[Literal["earliest", "latest", "timestamp", "offset"]]
    partitions: list[int]
    timestamp: str
    offset: int


class ConsumerGroupSpec(TypedDict, total=False):
    cluster: str  # required by the CRD
    groupId: str
    resetOffsets: OffsetReset


class AssignmentStatus(TypedDict):
    topic: str
    partitions: list[int]


class MemberStatus(TypedDict):
    memberId: str
    clientId: str
    host: str
    assignments: list[AssignmentStatus]


class OffsetStatus(TypedDict):
    topic: str
    partition: int
    committedOffset: int
    logEndOffset: int
    lag: NotRequired[int]


class ConsumerGroupStatus(TypedDict, total=False):
    observedGeneration: int
    conditions: list[Condition]
    state: str | None
    members: int | None
    memberList: list[MemberStatus] | None
    offsets: list[OffsetStatus] | None
    totalLag: int | None
    lastAppliedRequestId: str


class ConsumerGroupResource(TypedDict, total=False):
    apiVersion: str
    kind: Required[Literal["ConsumerGroup"]]
    metadata: Required[ObjectMeta]
    spec: ConsumerGroupSpec
    status: ConsumerGroupStatus


UserAuthType = Literal["scram-sha-512", "tls"]
AclResourceType = Literal["topic", "group", "cluster", "transactionalId"]
AclPatternType = Literal["literal", "prefix"]
AclOperationName = Literal["Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "AlterConfigs",
                           "DescribeConfigs", "IdempotentWrite", "All"]
AclType = Literal["allow", "deny"]


class UserAuthentication(TypedDict):
    type: UserAuthType


class AclResource(TypedDict, total=False):
    type: Required[AclResourceType]
    name: str
    patternType: AclPatternType


class AclRule(TypedDict, total=False):
    """One entry of a KelpUser's `spec.authorization.acls` (Strimzi's AclRule)."""

    resource: Required[AclResource]
    operations: Required[list[AclOperationName]]
    host: str
    type: AclType


class UserAuthorization(TypedDict, total=False):
    type: Required[Literal["simple"]]
    acls: list[AclRule]


class KelpUserSpec(TypedDict, total=False):
    cluster: str  # required by the CRD
    authentication: UserAuthentication  # required by the CRD
    authorization: UserAuthorization


class KelpUserStatus(TypedDict, total=False):
    observedGeneration: int
    conditions: list[Condition]
    username: str | None
    principal: str | None
    secret: str | None


class KelpUserResource(TypedDict, total=False):
    apiVersion: str
    kind: Required[Literal["KelpUser"]]
    metadata: Required[ObjectMeta]
    spec: KelpUserSpec
    status: KelpUserStatus


# One of Kelp's resources; `body["kind"]` tells which (mypy narrows on it).
KelpResource = ClusterResource | TopicResource | ConsumerGroupResource | KelpUserResource
KelpStatus = ClusterStatus | TopicStatus | ConsumerGroupStatus | KelpUserStatus
