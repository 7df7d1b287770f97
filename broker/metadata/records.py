"""The metadata log's documents: its records, entries and snapshots, and the controller's delivery of them.

Why: the controller writes these documents, the stores keep them as JSON, and every broker reads them
back and replays them (`image`). One declaration of their shapes holds the writer and every
reader to the same fields. They are TypedDicts, not classes, because the JSON is the format: what is
stored and sent is exactly what the builders here return.

The records (one decision of the controller is one entry, `{"offset", "epoch", "records"}`):

| type | fields | meaning |
| --- | --- | --- |
| `controller` | `epoch`, `broker_id` | a new controller incarnation; its epoch is larger than every earlier one |
| `topic` | `topic` (a `TopicState` JSON) | a topic created, its configs altered, or partitions added |
| `partition` | `topic`, `topic_id`, `partition`, `state` | one partition's leader, ISR, replicas changed |
| `remove_topic` | `topic`, `topic_id` | the topic is deleted (the only way a topic ever goes) |
| `producer_ids` | `next` | the next producer id block starts here |
| `broker` | `id`, `incarnation`, `shutting_down`, `decommissioned` (1) | registered, or shutting down (1) |
| `broker_config` | `broker` (-1: cluster-wide default), `configs` | dynamic configs set (a value) or deleted (null) |
| `scram_credential` | `user`, `mechanism`, `salt`, `stored_key`, `server_key`, `iterations` | a SCRAM credential set |
| `remove_scram_credential` | `user`, `mechanism` | a SCRAM credential deleted |
| `acl` | `id`, `acl` (a binding, `security.acl_json`) | an ACL created (CreateAcls) |
| `remove_acl` | `id` | the ACL of that id deleted (DeleteAcls) |
| `client_quota` | `entity` (`[{entity_type, entity_name}]`), `key`, `value` | a client quota set, or removed (null) |
| `group_config` | `group`, `configs` | a group's configs set (a value) or deleted (null); rules in `group_configs` |

(1) a broker process registered, began a controlled shutdown, or (`decommissioned` true / false) the broker id
was decommissioned / recommissioned (`decommission`); a record without `decommissioned` (a registration) keeps
the mark the image has.

What is read back (from a store, or from a delivery over HTTP) is JSON that only claims one of these
shapes. The `as_*` functions name the one step where a decoded document is taken for its shape; nothing
acts on it before `image` has checked every field it applies (a violation is MetadataCorrupt),
and the stores check the offset they filed an entry under. This module does no I/O and holds no logic
beyond building documents.
"""

from __future__ import annotations

import uuid
from typing import Literal, Mapping, NotRequired, TypedDict, cast

from kelp.json_types import JsonObject
from kelp.security.acl_json import AclBindingJson

from .model import BrokerEndpointJson, PartitionState, PartitionStateJson, TopicState, TopicStateJson

__all__ = [
    "ControllerRecord",
    "TopicRecord",
    "PartitionRecord",
    "RemoveTopicRecord",
    "ProducerIdsRecord",
    "BrokerRecord",
    "BrokerConfigRecord",
    "ScramCredentialRecord",
    "RemoveScramCredentialRecord",
    "AclRecord",
    "RemoveAclRecord",
    "ClientQuotaRecord",
    "GroupConfigRecord",
    "GroupConfigsJson",
    "EntityJson",
    "AclEntryJson",
    "MetadataRecord",
    "MetadataEntry",
    "MetadataSnapshot",
    "BrokerConfigsJson",
    "MetadataPush",
    "LegacyClusterDoc",
    "controller_record",
    "topic_record",
    "partition_record",
    "remove_topic_record",
    "producer_ids_record",
    "broker_record",
    "broker_config_record",
    "scram_credential_record",
    "remove_scram_credential_record",
    "acl_record",
    "remove_acl_record",
    "as_entry",
    "as_snapshot",
    "as_topic",
    "as_legacy_cluster",
]


class ControllerRecord(TypedDict):
    type: Literal["controller"]
    epoch: int
    broker_id: int
    # Unique per controller incarnation (a random id), so no two histories hold the same controller entry even when
    # a controller re-claims an epoch a lost tail held: the entry's digest names that incarnation's run of entries.
    incarnation: NotRequired[str]


class TopicRecord(TypedDict):
    type: Literal["topic"]
    topic: TopicStateJson


class PartitionRecord(TypedDict):
    type: Literal["partition"]
    topic: str
    topic_id: str
    partition: int
    state: PartitionStateJson


class RemoveTopicRecord(TypedDict):
    type: Literal["remove_topic"]
    topic: str
    topic_id: str


class ProducerIdsRecord(TypedDict):
    type: Literal["producer_ids"]
    next: int


class BrokerRecord(TypedDict):
    type: Literal["broker"]
    id: int
    incarnation: str
    shutting_down: NotRequired[bool]  # absent in records written before controlled shutdowns were recorded
    # Leaving the cluster: no new replica or leader goes there (absent: unchanged, e.g. a re-registration).
    decommissioned: NotRequired[bool]


class BrokerConfigRecord(TypedDict):
    type: Literal["broker_config"]
    broker: int  # -1: the cluster-wide default
    configs: dict[str, str | None]  # None: the key is deleted


class ScramCredentialRecord(TypedDict):
    """A user's SCRAM credential for one mechanism (Kafka's UserScramCredentialRecord): never a password, nor the
    salted password; salt and keys in base64."""

    type: Literal["scram_credential"]
    user: str
    mechanism: str  # SCRAM-SHA-256 | SCRAM-SHA-512
    salt: str
    stored_key: str
    server_key: str
    iterations: int


class RemoveScramCredentialRecord(TypedDict):
    type: Literal["remove_scram_credential"]
    user: str
    mechanism: str


class AclRecord(TypedDict):
    type: Literal["acl"]
    id: str  # the ACL's id (a UUID's hex): what a remove_acl record names
    acl: AclBindingJson


class RemoveAclRecord(TypedDict):
    type: Literal["remove_acl"]
    id: str


class EntityJson(TypedDict):
    """One part of a client quota entity: `user`, `client-id` or `ip`, and its name (None: the default)."""

    entity_type: str
    entity_name: str | None


class ClientQuotaRecord(TypedDict):
    """One quota key of one entity (Kafka's ClientQuotaRecord); rules in `client_quotas`."""

    type: Literal["client_quota"]
    entity: list[EntityJson]
    key: str
    value: float | None  # None: the key is removed


class GroupConfigRecord(TypedDict):
    """One group's configs changed (Kafka's ConfigRecord of resource type GROUP)."""

    type: Literal["group_config"]
    group: str
    configs: dict[str, str | None]  # None: the key is deleted


MetadataRecord = (ControllerRecord | TopicRecord | PartitionRecord | RemoveTopicRecord | ProducerIdsRecord
                  | BrokerRecord | BrokerConfigRecord | ScramCredentialRecord | RemoveScramCredentialRecord | AclRecord
                  | RemoveAclRecord | ClientQuotaRecord | GroupConfigRecord)


class MetadataEntry(TypedDict):
    """One decision of the controller, at one offset of the metadata log."""

    offset: int
    epoch: int  # the controller epoch that wrote it
    records: list[MetadataRecord]
    # The digest of the entry before it (`image.entry_digest`): the history this one extends. Absent in
    # entries written before the digest chain, and in the first entry of a log.
    prev: NotRequired[str]


class BrokerConfigsJson(TypedDict):
    """One entity's dynamic broker configs in a snapshot (-1: the cluster-wide default)."""

    broker: int
    configs: dict[str, str]


class GroupConfigsJson(TypedDict):
    """One group's configs in a snapshot."""

    group: str
    configs: dict[str, str]


class AclEntryJson(TypedDict):
    """One ACL in a snapshot: its id and binding."""

    id: str
    acl: AclBindingJson


class MetadataSnapshot(TypedDict):
    """The image at an offset. Fields after `topics` are absent from snapshots of older versions (and from
    the one-time import of the store before the log)."""

    offset: int
    epoch: int
    topics: list[TopicStateJson]
    controller_id: NotRequired[int]
    next_producer_id: NotRequired[int]
    removed: NotRequired[list[list[str]]]  # [topic id, name] of removed topics, oldest first
    brokers: NotRequired[list[BrokerRecord]]
    broker_configs: NotRequired[list[BrokerConfigsJson]]
    scram_credentials: NotRequired[list[ScramCredentialRecord]]
    acls: NotRequired[list[AclEntryJson]]
    client_quotas: NotRequired[list[ClientQuotaRecord]]
    group_configs: NotRequired[list[GroupConfigsJson]]
    digest: NotRequired[str]  # the digest of the entry at `offset` (the chain goes on from it)
    runs: NotRequired[list[list[int | str]]]  # where each controller run starts: [offset, digest of its entry]


class MetadataPush(TypedDict):
    """One delivery from the controller to a broker (in-process, or `POST /cluster/v1/metadata`): the entries
    after the broker's applied offset, or a snapshot when it is further behind than the entries kept. The
    broker answers with the offset it has applied afterwards."""

    controller_id: int
    controller_epoch: int
    brokers: list[BrokerEndpointJson]  # the live brokers
    end_offset: int
    entries: list[MetadataEntry]
    snapshot: NotRequired[MetadataSnapshot]


class LegacyClusterDoc(TypedDict, total=False):
    """The cluster document of the store before the log: only its producer-id counter is imported."""

    next_producer_id: int


# -- builders ----------------------------------------------------------------------
def controller_record(epoch: int, broker_id: int) -> ControllerRecord:
    return {"type": "controller", "epoch": epoch, "broker_id": broker_id, "incarnation": uuid.uuid4().hex}


def topic_record(state: TopicState) -> TopicRecord:
    return {"type": "topic", "topic": state.to_json()}


def partition_record(topic: TopicState, partition: int, state: PartitionState) -> PartitionRecord:
    return {"type": "partition", "topic": topic.name, "topic_id": topic.topic_id, "partition": partition,
            "state": state.to_json()}


def remove_topic_record(topic: TopicState) -> RemoveTopicRecord:
    return {"type": "remove_topic", "topic": topic.name, "topic_id": topic.topic_id}


def producer_ids_record(next_producer_id: int) -> ProducerIdsRecord:
    return {"type": "producer_ids", "next": next_producer_id}


def broker_record(broker_id: int, incarnation: str, *, shutting_down: bool = False,
                  decommissioned: bool | None = None) -> BrokerRecord:
    """A broker's registration; `decommissioned` None leaves the decommission mark as the image has it."""
    rec: BrokerRecord = {"type": "broker", "id": broker_id, "incarnation": incarnation, "shutting_down": shutting_down}
    if decommissioned is not None:
        rec["decommissioned"] = decommissioned
    return rec


def broker_config_record(broker: int, configs: Mapping[str, str | None]) -> BrokerConfigRecord:
    """Dynamic broker configs of one entity (`broker` -1: the cluster-wide default) set, or deleted (None)."""
    return {"type": "broker_config", "broker": broker, "configs": dict(configs)}


def scram_credential_record(user: str, mechanism: str, *, salt: str, stored_key: str, server_key: str,
                            iterations: int) -> ScramCredentialRecord:
    """A SCRAM credential (salt and keys in base64) set for `user` and `mechanism`."""
    return {"type": "scram_credential", "user": user, "mechanism": mechanism, "salt": salt,
            "stored_key": stored_key, "server_key": server_key, "iterations": iterations}


def remove_scram_credential_record(user: str, mechanism: str) -> RemoveScramCredentialRecord:
    return {"type": "remove_scram_credential", "user": user, "mechanism": mechanism}


def acl_record(acl_id: str, acl: AclBindingJson) -> AclRecord:
    """An ACL created, under a new id."""
    return {"type": "acl", "id": acl_id, "acl": acl}


def remove_acl_record(acl_id: str) -> RemoveAclRecord:
    return {"type": "remove_acl", "id": acl_id}


# -- decoded documents taken for their shape -------------------------------------------
def as_entry(doc: JsonObject) -> MetadataEntry:
    """A stored entry as decoded; `image.apply_entry` checks it as it applies it."""
    return cast(MetadataEntry, doc)


def as_snapshot(doc: JsonObject) -> MetadataSnapshot:
    """A stored snapshot as decoded; `image.image_from_snapshot` checks it as it loads it."""
    return cast(MetadataSnapshot, doc)


def as_topic(doc: JsonObject) -> TopicStateJson:
    """A topic document of the store before the log; checked as part of the snapshot it is imported into."""
    return cast(TopicStateJson, doc)


def as_legacy_cluster(doc: JsonObject) -> LegacyClusterDoc:
    """The cluster document of the store before the log; its counter is converted with `int()` when imported."""
    return cast(LegacyClusterDoc, doc)
