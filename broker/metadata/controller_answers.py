"""What each controller operation answers: one shape per operation, each naming the offset that holds it.

Why: the controller's operations run in-process on the controller and over HTTP
(`/cluster/v1/controller/<op>`) everywhere else, so their answers are JSON. Declaring each shape once
lets the controller's role objects build them checked, and lets the callers that read an answer (topic
changes, producer-id blocks, controlled shutdown, ISR changes) name what they read. Every answer
carries `metadata_offset`, the metadata-log offset holding the change, so the caller can wait until
its broker applied it (`routing.LeaderRouting.call`). Only shapes here: no logic, no I/O.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from kelp.security.acl_json import AclBindingJson

from .model import PartitionStateJson, TopicStateJson

__all__ = [
    "TopicAnswer",
    "DeleteTopicAnswer",
    "PartitionAnswer",
    "AlterPartitionItem",
    "AlterPartitionResult",
    "AlterPartitionsAnswer",
    "ShutdownAnswer",
    "DecommissionAnswer",
    "ProducerIdsAnswer",
    "BrokerConfigsAnswer",
    "ElectionAnswer",
    "Reassignment",
    "AclError",
    "CreateAclsAnswer",
    "DeleteAclsResult",
    "DeleteAclsAnswer",
]


class TopicAnswer(TopicStateJson):
    """create_topic, ensure_internal_topic, create_partitions, alter_configs: the topic afterwards."""

    metadata_offset: int


class DeleteTopicAnswer(TypedDict):
    name: str
    deleted: bool
    metadata_offset: int


class PartitionAnswer(PartitionStateJson):
    """alter_partition, reassign: the partition afterwards."""

    metadata_offset: int


class AlterPartitionItem(TypedDict):
    """One ISR change in an alter_partitions request (the leader is the request's): what alter_partition takes."""

    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    isr: list[int]


class AlterPartitionResult(TypedDict):
    """One item's outcome in alter_partitions, in the request's order: `error_code` 0 and the partition
    afterwards in `state`, or the error's code and message (as alter_partition would have raised it)."""

    error_code: int
    message: NotRequired[str]
    state: NotRequired[PartitionStateJson]


class AlterPartitionsAnswer(TypedDict):
    """alter_partitions: one result per item, all of them held at `metadata_offset` or before."""

    results: list[AlterPartitionResult]
    metadata_offset: int


class ShutdownAnswer(TypedDict):
    """controlled_shutdown: the partitions the broker still leads, and those another replica may yet take."""

    broker_id: int
    remaining_leaderships: list[str]  # "<topic>-<partition>"
    awaiting_replicas: list[str]
    metadata_offset: int


class DecommissionAnswer(TypedDict):
    """decommission_broker, broker_holdings: the broker's mark, and what it holds as of `metadata_offset`."""

    broker_id: int
    decommissioned: bool
    registered: bool  # a process of that id registered at some point
    alive: bool  # its lease is live now
    replicas: int  # partitions with a replica on it (moves to it included)
    leaders: int  # partitions it leads
    partitions: list[str]  # "<topic>-<partition>" of the first of them (decommission.MAX_LISTED_PARTITIONS)
    metadata_offset: int


class ProducerIdsAnswer(TypedDict):
    """allocate_producer_ids: the block [first, first + count)."""

    first: int
    count: int
    metadata_offset: int


class BrokerConfigsAnswer(TypedDict):
    """alter_broker_configs: the entity's dynamic configs afterwards."""

    broker: int
    configs: dict[str, str]
    metadata_offset: int


class ElectionAnswer(TypedDict):
    """elect_preferred_leaders: an error code (0: elected) per "<topic>-<partition>"."""

    results: dict[str, int]
    metadata_offset: int


class Reassignment(TypedDict):
    """One running reassignment (`Controller.reassignments`)."""

    topic: str
    partition: int
    replicas: list[int]
    adding: list[int]
    removing: list[int]
    isr: list[int]
    leader: int


class AclError(TypedDict):
    """Why one ACL or filter of an ACL operation was refused: Kafka's error code and message."""

    error_code: int
    message: str


class CreateAclsAnswer(TypedDict):
    """create_acls: per binding, in the request's order, None (created, or there already) or the error."""

    results: list[AclError | None]
    metadata_offset: int


class DeleteAclsResult(TypedDict):
    """delete_acls, one filter: the bindings it deleted, or the error (`deleted` then empty)."""

    error: AclError | None
    deleted: list[AclBindingJson]


class DeleteAclsAnswer(TypedDict):
    results: list[DeleteAclsResult]
    metadata_offset: int
