"""A share group's membership as Kafka's coordinator records in `__consumer_offsets` (KIP-932), and their replay.

Why: a share group's members must outlive a coordinator restart or move, as Kafka's do: the member ids, epochs,
subscriptions and assignments are records in the compacted topic beside the offsets, in Kafka 4.4's own formats
(`schemas/`, Apache License 2.0, from kafka-group-coordinator's `common/message`; the key is the record type,
int16, then the key's fields at version 0; the value its version, int16, then its fields, flexible). The
coordinator that loads the partition replays them and serves the members where they were, each with a session
starting at the load:

| type | key | value |
| --- | --- | --- |
| 10 | ShareGroupMemberMetadataKey(group, member) | rack, client id and host, subscribed topic names |
| 11 | ShareGroupMetadataKey(group) | the group epoch (and Kafka's metadata hash, 0 here) |
| 14 | ShareGroupCurrentMemberAssignmentKey(group, member) | member epoch, previous epoch, state, assigned partitions |

Kafka also writes the target assignment (types 12 and 13); the simple assignor's target is each member's current
assignment, so they are not written, and read back from no one. A tombstone (value None) removes a key.
This module must never touch logs, timers or sockets: bytes in, objects out.
"""

from __future__ import annotations

import uuid
from typing import Any, Mapping

from ..coordinator_records import RecordCodec, schema_class
from .model import ShareGroup, ShareMember

__all__ = ["SHARE_RECORD_TYPES", "RecordKey", "share_record_key_of", "group_epoch_record", "member_record",
           "assignment_record", "member_tombstones", "group_tombstones", "replay"]

_SCHEMAS = __name__.rsplit(".", 1)[0] + ".schemas"
Record = tuple[bytes, bytes | None]
RecordKey = tuple[int, str, str]  # (record type, group id, member id or "")


def _schema(name: str) -> Any:
    return schema_class(name, package=_SCHEMAS, module=__name__)


MEMBER, GROUP, CURRENT = 10, 11, 14
_KEYS: dict[int, Any] = {MEMBER: _schema("ShareGroupMemberMetadataKey"), GROUP: _schema("ShareGroupMetadataKey"),
                         CURRENT: _schema("ShareGroupCurrentMemberAssignmentKey")}
_VALUES: dict[int, Any] = {MEMBER: _schema("ShareGroupMemberMetadataValue"), GROUP: _schema("ShareGroupMetadataValue"),
                           CURRENT: _schema("ShareGroupCurrentMemberAssignmentValue")}
SHARE_RECORD_TYPES = frozenset(_KEYS)
STABLE = 0  # MemberState: a share group member is always stable (no revocation step)


_CODEC = RecordCodec(_KEYS, _VALUES)
_key = _CODEC.key
_value = _CODEC.value


def share_record_key_of(data: bytes) -> RecordKey | None:
    """(type, group, member or "") of a share-group record key; None for any other key."""
    return _CODEC.key_of(data)


def group_epoch_record(group_id: str, epoch: int) -> Record:
    return _key(GROUP, group_id), _value(GROUP, epoch=epoch, metadata_hash=0)


def member_record(group_id: str, m: ShareMember) -> Record:
    return _key(MEMBER, group_id, m.member_id), _value(
        MEMBER, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=list(m.subscribed_topic_names))


def assignment_record(group_id: str, m: ShareMember, previous_epoch: int) -> Record:
    TP = _VALUES[CURRENT].TopicPartitions
    return _key(CURRENT, group_id, m.member_id), _value(
        CURRENT, member_epoch=m.member_epoch, previous_member_epoch=previous_epoch, state=STABLE,
        assigned_partitions=[TP(topic_id=uuid.UUID(hex=t), partitions=sorted(ps))
                             for t, ps in sorted(m.assigned.items()) if ps])


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member leaves: its current assignment, then its metadata go (Kafka's order)."""
    return [(_key(CURRENT, group_id, member_id), None), (_key(MEMBER, group_id, member_id), None)]


def group_tombstones(group_id: str) -> list[Record]:
    """The group is deleted (no members left): its metadata goes."""
    return [(_key(GROUP, group_id), None)]


def replay(values: Mapping[RecordKey, bytes | None]) -> dict[str, ShareGroup]:
    """The share groups the newest record per key describes (a group exists while its metadata record does)."""
    groups: dict[str, ShareGroup] = {}
    members: dict[tuple[str, str], ShareMember] = {}
    for (kind, gid, mid), raw in sorted(values.items(), key=lambda kv: kv[0][0] != GROUP):
        if raw is None:
            continue
        v = _VALUES[kind].decode(raw)
        if kind == GROUP:
            groups[gid] = ShareGroup(gid, group_epoch=v.epoch, assignment_epoch=v.epoch)
        elif kind == MEMBER:
            m = members.setdefault((gid, mid), ShareMember(mid, 0, "", "", None, ()))
            m.rack_id, m.client_id, m.client_host = v.rack_id, v.client_id, v.client_host
            m.subscribed_topic_names = tuple(v.subscribed_topic_names)
        elif kind == CURRENT:
            m = members.setdefault((gid, mid), ShareMember(mid, 0, "", "", None, ()))
            m.member_epoch = v.member_epoch
            m.assigned = {tp.topic_id.hex: frozenset(tp.partitions) for tp in v.assigned_partitions or []
                          if tp.partitions}
    for (gid, mid), m in members.items():
        if gid in groups and m.member_epoch > 0:  # a member's metadata without its assignment is a torn leave
            groups[gid].members[mid] = m
    return groups
