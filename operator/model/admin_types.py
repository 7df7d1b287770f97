"""The brokers' admin API as the operator speaks it: each answer and request body, as types.

Why: status, restarts, plans and topic reconciliation all decide from what the brokers answer
(`/admin/v1/...`, served by `kelp.broker.http`); typed, a field the broker renamed or a decision
that reads the wrong one fails `make typecheck` rather than a reconciliation. The shapes are the
broker's (`broker/http/topic_views.py`, `cluster/routes.py`, `admin/groups.py`, `admin/topics.py`), as far
as the operator reads them; keys are optional where the broker may leave them out. `brokers.py` is
where an answer becomes one of these types.

Types only: no logic, no I/O.
"""

from __future__ import annotations

from typing import Literal, NotRequired, Required, TypedDict

from kelp.security.acl_json import AclBindingJson, AclFilterJson

__all__ = [
    "BrokerInfo", "ClusterView", "TopicListing", "TopicList", "ConfigValue", "PartitionInfo", "TopicDescription",
    "NewTopic", "PartitionMove", "Reassignment", "ReassignmentList", "BrokerConfigs", "ElectionResults",
    "AssignedPartitions", "GroupMemberInfo", "GroupOffsetInfo", "GroupDescription", "ResetTarget", "OffsetResetRequest",
    "AclBinding", "AclFilter", "AclList", "AclCreateResult", "AclCreateResults", "AclDeleteResult", "AclDeleteResults",
    "ScramCredentialInfo", "UserCredentials", "UserList", "ScramCredentialUpsert"
]


class BrokerInfo(TypedDict, total=False):
    """A registered broker (`GET /admin/v1/cluster`)."""

    id: Required[int]
    host: str
    port: int
    http_host: str
    http_port: int
    rack: str | None
    incarnation: str


class ClusterView(TypedDict, total=False):
    """`GET /admin/v1/cluster`: the brokers registered with the controller, and which one it is (-1: none)."""

    cluster: str
    controller: int
    controller_epoch: int
    metadata_offset: int
    brokers: list[BrokerInfo]
    decommissioned: list[int]  # broker ids leaving the cluster (absent from brokers before issue 32)


class TopicListing(TypedDict, total=False):
    """One entry of `GET /admin/v1/topics`."""

    name: Required[str]
    internal: bool


class TopicList(TypedDict):
    """`GET /admin/v1/topics`."""

    topics: list[TopicListing]


class ConfigValue(TypedDict):
    value: str
    source: str  # "topic" (an override) or "default"


class PartitionInfo(TypedDict, total=False):
    """One partition of a described topic; `adding`/`removing` only while it is being reassigned."""

    partition: Required[int]
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    adding: list[int]
    removing: list[int]
    log_start_offset: int | None
    log_end_offset: int | None
    high_watermark: int | None
    size_bytes: int | None


class TopicDescription(TypedDict, total=False):
    """`GET /admin/v1/topics/{name}` (and what creating or growing a topic answers)."""

    name: Required[str]
    topic_id: str
    internal: bool
    partitions_count: int
    replication_factor: int
    partitions: list[PartitionInfo]
    configs: dict[str, ConfigValue]


class NewTopic(TypedDict):
    """The body of `POST /admin/v1/topics`."""

    name: str
    partitions: int
    configs: dict[str, str]
    replication_factor: NotRequired[int]


class PartitionMove(TypedDict):
    """One entry of `POST /admin/v1/partitions/reassign`: the target replicas, or None to cancel a move."""

    topic: str
    partition: int
    replicas: list[int] | None


class Reassignment(TypedDict, total=False):
    """A move in flight (`GET /admin/v1/partitions/reassignments`), with each replica's log end offset."""

    topic: Required[str]
    partition: Required[int]
    replicas: list[int]
    adding: list[int]
    removing: list[int]
    isr: list[int]
    leader: int
    log_end_offsets: dict[str, int]  # broker id (as a string, JSON keys are) -> its log end offset


class ReassignmentList(TypedDict):
    """`GET /admin/v1/partitions/reassignments`."""

    reassignments: list[Reassignment]


class BrokerConfigs(TypedDict):
    """`GET /admin/v1/brokers/configs`: the dynamic configs of the cluster-wide default entity."""

    broker: int | None
    configs: dict[str, str]


class ElectionResults(TypedDict):
    """`POST /admin/v1/partitions/elect-leaders`: an error code per `topic-partition` (0: elected)."""

    results: dict[str, int]


class BrokerHoldings(TypedDict):
    """`GET`/`POST`/`DELETE /admin/v1/brokers/{id}/decommission`: the broker's mark and what it holds, as the
    controller has it."""

    broker_id: int
    decommissioned: bool
    registered: bool
    alive: bool
    replicas: int
    leaders: int
    partitions: list[str]


class AssignedPartitions(TypedDict):
    topic: str
    partitions: list[int]


class GroupMemberInfo(TypedDict, total=False):
    member_id: Required[str]
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[AssignedPartitions]


class GroupOffsetInfo(TypedDict, total=False):
    topic: Required[str]
    partition: Required[int]
    committed_offset: int | None
    metadata: str | None
    log_end_offset: int | None
    lag: int | None
    member_id: str | None


class GroupDescription(TypedDict, total=False):
    """`GET /admin/v1/groups/{id}`, answered by the group's coordinator."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation: int
    leader: str | None
    coordinator_partition: int
    members: list[GroupMemberInfo]
    offsets: list[GroupOffsetInfo]
    total_lag: int


# Where reset-offsets moves a group's committed offsets (`value` gives the time or the offset).
ResetTarget = Literal["earliest", "latest", "datetime", "offset"]


class OffsetResetRequest(TypedDict):
    """The body of `POST /admin/v1/groups/{id}/reset-offsets` (`value`: an offset, or an RFC 3339 time)."""

    topic: str
    to: ResetTarget
    execute: bool
    partitions: NotRequired[list[int]]
    value: NotRequired[int | str]


# -- security (issue 20): ACLs and SCRAM credentials -------------------------------------------------

# One ACL as `/admin/v1/acls` carries it (Kafka's enum names: `TOPIC`, `PREFIXED`, `READ`, `ALLOW`), and a
# DeleteAcls filter (each field optional; `ANY`, and `MATCH` for patternType): the broker's own JSON types.
AclBinding = AclBindingJson
AclFilter = AclFilterJson


class AclList(TypedDict):
    """`GET /admin/v1/acls`."""

    acls: list[AclBinding]


class AclCreateResult(TypedDict):
    error: str | None


class AclCreateResults(TypedDict):
    """`POST /admin/v1/acls`: one result per binding, in order."""

    results: list[AclCreateResult]


class AclDeleteResult(TypedDict, total=False):
    error: Required[str | None]
    deleted: list[AclBinding]


class AclDeleteResults(TypedDict):
    """`POST /admin/v1/acls/delete`: one result per filter, in order."""

    results: list[AclDeleteResult]


class ScramCredentialInfo(TypedDict):
    mechanism: str
    iterations: int


class UserCredentials(TypedDict):
    name: str
    credentials: list[ScramCredentialInfo]


class UserList(TypedDict):
    """`GET /admin/v1/users`: the users with SCRAM credentials, and which (never a secret)."""

    users: list[UserCredentials]


class ScramCredentialUpsert(TypedDict):
    """The body of `PUT /admin/v1/users/{name}/scram-credentials` (AlterUserScramCredentials: salted, never the
    clear password; `salt` and `saltedPassword` base64)."""

    mechanism: str
    iterations: int
    salt: str
    saltedPassword: str
