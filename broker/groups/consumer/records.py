"""A consumer group's state as Kafka's coordinator records in `__consumer_offsets` (KIP-848), and their replay.

Why: a consumer group must survive a coordinator move (the partition's leadership goes to another broker,
which replays the partition): its epochs, members, target assignment and each member's current assignment
are records in the compacted topic beside the offsets, in Kafka 4's own formats, so compaction keeps the
newest per key and Kafka's tools can read them. The key is the record type (int16, Kafka's "apiKey" of the
record) then the key's fields at version 0; the value is its version (int16, 0) then its fields, flexible
(compact strings, tagged fields). A tombstone (value None) removes the key. The schemas are Kafka 4.3.1's
(`schemas/`, Apache License 2.0, from kafka-group-coordinator's `common/message`), encoded with kafka-python's
schema codec:

| type | key | value |
| --- | --- | --- |
| 3 | ConsumerGroupMetadataKey(group) | ConsumerGroupMetadataValue(epoch) |
| 4 | ConsumerGroupPartitionMetadataKey(group) | subscribed topics: id, name, partition count |
| 5 | ConsumerGroupMemberMetadataKey(group, member) | instance, rack, client, topics, rebalance timeout, assignor, |
|   |                                               | a classic member's ClassicMemberMetadata (`migration`) |
| 6 | ConsumerGroupTargetAssignmentMetadataKey(group) | the assignment epoch |
| 7 | ConsumerGroupTargetAssignmentMemberKey(group, member) | the member's target partitions |
| 8 | ConsumerGroupCurrentMemberAssignmentKey(group, member) | epochs, state, assigned and revoking partitions |

`replay` folds the newest value per key (the loader's worker thread collects them) into `ConsumerGroup`s.
This module must never touch logs, timers or sockets: bytes in, objects out.
"""

from __future__ import annotations

import uuid
from typing import Any, Mapping

from ..coordinator_records import RecordCodec, schema_class
from .assignors import Assignment
from .model import ClassicMetadata, ConsumerGroup, ConsumerMember, MemberState

__all__ = ["CONSUMER_RECORD_TYPES", "RecordKey", "record_key_of", "group_epoch_record", "subscription_record",
           "member_record", "target_epoch_record", "target_member_record", "current_assignment_record",
           "member_tombstones", "group_tombstones", "replay", "member_fields", "assignment_fields"]

_SCHEMAS = __name__.rsplit(".", 1)[0] + ".schemas"
Record = tuple[bytes, bytes | None]
RecordKey = tuple[int, str, str]  # (record type, group id, member id or "")


def _schema(name: str) -> Any:
    """The kafka-python data class of Kafka's schema `schemas/<name>.json` (its codec is kafka-python's)."""
    return schema_class(name, package=_SCHEMAS, module=__name__)


ConsumerGroupMetadataKey = _schema("ConsumerGroupMetadataKey")
ConsumerGroupMetadataValue = _schema("ConsumerGroupMetadataValue")
ConsumerGroupPartitionMetadataKey = _schema("ConsumerGroupPartitionMetadataKey")
ConsumerGroupPartitionMetadataValue = _schema("ConsumerGroupPartitionMetadataValue")
ConsumerGroupMemberMetadataKey = _schema("ConsumerGroupMemberMetadataKey")
ConsumerGroupMemberMetadataValue = _schema("ConsumerGroupMemberMetadataValue")
ConsumerGroupTargetAssignmentMetadataKey = _schema("ConsumerGroupTargetAssignmentMetadataKey")
ConsumerGroupTargetAssignmentMetadataValue = _schema("ConsumerGroupTargetAssignmentMetadataValue")
ConsumerGroupTargetAssignmentMemberKey = _schema("ConsumerGroupTargetAssignmentMemberKey")
ConsumerGroupTargetAssignmentMemberValue = _schema("ConsumerGroupTargetAssignmentMemberValue")
ConsumerGroupCurrentMemberAssignmentKey = _schema("ConsumerGroupCurrentMemberAssignmentKey")
ConsumerGroupCurrentMemberAssignmentValue = _schema("ConsumerGroupCurrentMemberAssignmentValue")


GROUP, SUBSCRIPTION, MEMBER, TARGET_EPOCH, TARGET_MEMBER, CURRENT = 3, 4, 5, 6, 7, 8
_KEYS: dict[int, Any] = {
    GROUP: ConsumerGroupMetadataKey, SUBSCRIPTION: ConsumerGroupPartitionMetadataKey,
    MEMBER: ConsumerGroupMemberMetadataKey, TARGET_EPOCH: ConsumerGroupTargetAssignmentMetadataKey,
    TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberKey, CURRENT: ConsumerGroupCurrentMemberAssignmentKey,
}
_VALUES: dict[int, Any] = {
    GROUP: ConsumerGroupMetadataValue, SUBSCRIPTION: ConsumerGroupPartitionMetadataValue,
    MEMBER: ConsumerGroupMemberMetadataValue, TARGET_EPOCH: ConsumerGroupTargetAssignmentMetadataValue,
    TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberValue, CURRENT: ConsumerGroupCurrentMemberAssignmentValue,
}
CONSUMER_RECORD_TYPES = frozenset(_KEYS)
_STATES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}
_STATE_OF = {v: k for k, v in _STATES.items()}


_CODEC = RecordCodec(_KEYS, _VALUES)
_key = _CODEC.key
_value = _CODEC.value


def record_key_of(data: bytes) -> RecordKey | None:
    """(type, group, member or "") of a consumer-group record key; None for any other key (offsets, classic)."""
    return _CODEC.key_of(data)


def _partitions(cls: Any, a: Mapping[str, frozenset[int]]) -> list[Any]:
    return [cls(topic_id=uuid.UUID(hex=t), partitions=sorted(ps)) for t, ps in sorted(a.items()) if ps]


def _assignment(items: list[Any] | None) -> Assignment:
    return {tp.topic_id.hex: frozenset(tp.partitions) for tp in items or [] if tp.partitions}


def group_epoch_record(group_id: str, epoch: int) -> Record:
    return _key(GROUP, group_id), _value(GROUP, epoch=epoch)


def subscription_record(group_id: str, topics: Mapping[str, tuple[str, int]]) -> Record:
    T = ConsumerGroupPartitionMetadataValue.TopicMetadata
    return _key(SUBSCRIPTION, group_id), _value(SUBSCRIPTION, topics=[
        T(topic_id=uuid.UUID(hex=tid), topic_name=name, num_partitions=count, partition_metadata=[])
        for name, (tid, count) in sorted(topics.items())])


def member_record(group_id: str, m: ConsumerMember) -> Record:
    return _key(MEMBER, group_id, m.member_id), _value(
        MEMBER, instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=list(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
        classic_member_metadata=_classic(m.classic))  # None: a consumer-protocol member


def _classic(c: ClassicMetadata | None) -> Any:
    if c is None:
        return None
    C = ConsumerGroupMemberMetadataValue.ClassicMemberMetadata
    return C(session_timeout_ms=c.session_timeout_ms,
             supported_protocols=[C.ClassicProtocol(name=n, metadata=meta) for n, meta in c.protocols])


def _classic_of(v: Any) -> ClassicMetadata | None:
    if v is None:
        return None
    return ClassicMetadata(v.session_timeout_ms, tuple((p.name, bytes(p.metadata)) for p in v.supported_protocols))


def target_epoch_record(group_id: str, epoch: int) -> Record:
    return _key(TARGET_EPOCH, group_id), _value(TARGET_EPOCH, assignment_epoch=epoch)


def target_member_record(group_id: str, member_id: str, target: Assignment) -> Record:
    TP = ConsumerGroupTargetAssignmentMemberValue.TopicPartition
    return _key(TARGET_MEMBER, group_id, member_id), _value(TARGET_MEMBER, topic_partitions=_partitions(TP, target))


def current_assignment_record(group_id: str, m: ConsumerMember) -> Record:
    """With Kafka 4.4's AssignmentEpochs (KIP-1251): the epoch at which the member got each partition."""
    TP = ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions

    def held(a: Assignment) -> list[Any]:
        return [TP(topic_id=uuid.UUID(hex=t), partitions=sorted(ps),
                   assignment_epochs=[m.assigned_at.get((t, p), m.member_epoch) for p in sorted(ps)])
                for t, ps in sorted(a.items()) if ps]

    return _key(CURRENT, group_id, m.member_id), _value(
        CURRENT, member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=_STATES[m.state],
        assigned_partitions=held(m.assigned), partitions_pending_revocation=held(m.revoking))


def _assigned_at(*parts: list[Any] | None) -> dict[tuple[str, int], int]:
    """The AssignmentEpochs of replayed partitions (a record without them, as Kafka before 4.4 writes: none)."""
    return {(tp.topic_id.hex, p): e for items in parts for tp in items or [] if tp.assignment_epochs is not None
            for p, e in zip(tp.partitions, tp.assignment_epochs, strict=False)}


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member leaves: its current assignment, its target and its metadata go (Kafka's order)."""
    return [(_key(CURRENT, group_id, member_id), None), (_key(TARGET_MEMBER, group_id, member_id), None),
            (_key(MEMBER, group_id, member_id), None)]


def group_tombstones(group_id: str) -> list[Record]:
    """The group is deleted (no members left): its target epoch, subscription and metadata go."""
    return [(_key(TARGET_EPOCH, group_id), None), (_key(SUBSCRIPTION, group_id), None), (_key(GROUP, group_id), None)]


def replay(values: Mapping[RecordKey, bytes | None]) -> dict[str, ConsumerGroup]:
    """The consumer groups the newest record per key describes (a group exists while its metadata record does)."""
    groups: dict[str, ConsumerGroup] = {}
    members: dict[tuple[str, str], dict[str, Any]] = {}
    for (kind, gid, mid), raw in sorted(values.items(), key=lambda kv: kv[0][0]):
        if raw is None:
            continue
        v = _VALUES[kind].decode(raw)
        if kind == GROUP:
            groups[gid] = ConsumerGroup(gid, group_epoch=v.epoch)
        elif gid not in groups:
            continue
        elif kind == SUBSCRIPTION:
            groups[gid].subscribed_topics = {t.topic_name: (t.topic_id.hex, t.num_partitions) for t in v.topics}
        elif kind == MEMBER:
            members[(gid, mid)] = dict(
                member_id=mid, instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id,
                client_host=v.client_host, subscribed_topic_names=tuple(v.subscribed_topic_names),
                subscribed_topic_regex=v.subscribed_topic_regex or None,
                rebalance_timeout_ms=v.rebalance_timeout_ms, server_assignor=v.server_assignor,
                classic=_classic_of(v.classic_member_metadata))
        elif kind == TARGET_EPOCH:
            groups[gid].assignment_epoch = v.assignment_epoch
        elif kind == TARGET_MEMBER:
            groups[gid].target[mid] = _assignment(v.topic_partitions)
        elif kind == CURRENT and (gid, mid) in members:
            members[(gid, mid)].update(
                member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch,
                state=_STATE_OF.get(v.state, MemberState.STABLE), assigned=_assignment(v.assigned_partitions),
                revoking=_assignment(v.partitions_pending_revocation),
                assigned_at=_assigned_at(v.assigned_partitions, v.partitions_pending_revocation))
    for (gid, _mid), fields in members.items():
        groups[gid].put_member(ConsumerMember(**fields))
    for group in groups.values():
        group.target = {m: a for m, a in group.target.items() if m in group.members}
    return groups


def member_fields(m: ConsumerMember) -> tuple[object, ...]:
    """What ConsumerGroupMemberMetadataValue holds of a member (a change of these is written)."""
    return (m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names, m.subscribed_topic_regex,
            m.rebalance_timeout_ms, m.server_assignor, m.classic)


def assignment_fields(m: ConsumerMember) -> tuple[object, ...]:
    """What ConsumerGroupCurrentMemberAssignmentValue holds of a member (a change of these is written)."""
    return m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.revoking, m.assigned_at
