"""Keys and values of `__consumer_offsets` records, in Kafka's own formats.

Why: a group's committed offsets and its membership are records in the
compacted `__consumer_offsets` topic; a coordinator rebuilds its groups by
replaying them. Using Kafka's byte layout keeps the topic readable by Kafka
tools (kafka-console-consumer's OffsetsMessageFormatter) and lets compaction
keep exactly the newest record per (group, topic, partition) and per group.

Formats (all big-endian, non-flexible, strings int16-length, bytes int32-length):
- OffsetCommitKey v1:   version, group, topic, partition:int32
- OffsetCommitValue v3: version, offset:int64, leader_epoch:int32, metadata, commit_timestamp:int64
- GroupMetadataKey v2:  version, group
- GroupMetadataValue v3: version, protocol_type, generation:int32, protocol:nullable,
  leader:nullable, current_state_timestamp:int64, members[member_id,
  group_instance_id:nullable, client_id, client_host, rebalance_timeout:int32,
  session_timeout:int32, subscription:bytes, assignment:bytes]
A tombstone (value None) deletes the key. Older value versions (0-2) are read
too, so a topic written by Kafka replays.

This module must never touch logs or sockets: bytes in, objects out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = [
    "OffsetKey",
    "GroupKey",
    "OffsetValue",
    "MemberValue",
    "GroupValue",
    "encode_offset_key",
    "encode_offset_value",
    "encode_group_key",
    "encode_group_value",
    "decode_key",
    "decode_offset_value",
    "decode_group_value",
    "TxnRecord",
    "TxnMarker",
    "ReplayItem",
]


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only in value v1 written by old Kafka


@dataclass
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberValue] = field(default_factory=list)


class _Writer:
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i16(self, v: int) -> "_Writer":
        self.parts.append(struct.pack(">h", v))
        return self

    def i32(self, v: int) -> "_Writer":
        self.parts.append(struct.pack(">i", v))
        return self

    def i64(self, v: int) -> "_Writer":
        self.parts.append(struct.pack(">q", v))
        return self

    def string(self, v: str | None) -> "_Writer":
        if v is None:
            return self.i16(-1)
        raw = v.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise ValueError(f"string of {len(raw)} bytes is longer than Kafka's 32767-byte limit")
        self.i16(len(raw))
        self.parts.append(raw)
        return self

    def bytes_(self, v: bytes | None) -> "_Writer":
        if v is None:
            return self.i32(-1)
        self.i32(len(v))
        self.parts.append(bytes(v))
        return self

    def done(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def _take(self, fmt: str, size: int) -> int:
        if self.pos + size > len(self.data):
            raise ValueError("record is truncated")
        v: int = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += size
        return v

    def i16(self) -> int:
        return self._take(">h", 2)

    def i32(self) -> int:
        return self._take(">i", 4)

    def i64(self) -> int:
        return self._take(">q", 8)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise ValueError("string runs past the end of the record")
        v = bytes(self.data[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return v

    def bytes_(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise ValueError("bytes field runs past the end of the record")
        v = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return v


@dataclass(frozen=True)
class TxnRecord:
    """A record of a transactional batch of `producer_id` (a TxnOffsetCommit), pending until its marker."""

    producer_id: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class TxnMarker:
    """A control batch: `producer_id`'s transaction ended, committed or aborted."""

    producer_id: int
    commit: bool


ReplayItem = tuple[bytes | None, bytes | None] | TxnRecord | TxnMarker


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return _Writer().i16(1).string(group).string(topic).i32(partition).done()


def encode_group_key(group: str) -> bytes:
    return _Writer().i16(2).string(group).done()


def encode_offset_value(value: OffsetValue) -> bytes:
    return (
        _Writer().i16(3).i64(value.offset).i32(value.leader_epoch)
        .string(value.metadata or "").i64(value.commit_timestamp).done()
    )


def encode_group_value(value: GroupValue) -> bytes:
    w = _Writer().i16(3).string(value.protocol_type or "").i32(value.generation)
    w.string(value.protocol).string(value.leader).i64(value.current_state_timestamp)
    w.i32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
        w.i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms)
        w.bytes_(m.subscription or b"").bytes_(m.assignment or b"")
    return w.done()


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    """Decode a key; raises ValueError for an unknown key version."""
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.i32())
    if version == 2:
        return GroupKey(r.string() or "")
    raise ValueError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.i16()
    if version == 0:
        return OffsetValue(offset=r.i64(), metadata=r.string() or "", commit_timestamp=r.i64())
    if version == 1:
        offset, metadata, commit, expire = r.i64(), r.string() or "", r.i64(), r.i64()
        return OffsetValue(offset=offset, metadata=metadata, commit_timestamp=commit, expire_timestamp=expire)
    if version == 2:
        return OffsetValue(offset=r.i64(), metadata=r.string() or "", commit_timestamp=r.i64())
    if version == 3:
        return OffsetValue(
            offset=r.i64(), leader_epoch=r.i32(), metadata=r.string() or "", commit_timestamp=r.i64()
        )
    raise ValueError(f"unknown OffsetCommitValue version {version}")


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.i16()
    if version not in (0, 1, 2, 3):
        raise ValueError(f"unknown GroupMetadataValue version {version}")
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(max(r.i32(), 0)):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        rebalance = r.i32() if version >= 1 else -1
        session = r.i32()
        subscription = r.bytes_() or b""
        assignment = r.bytes_() or b""
        if rebalance < 0:
            rebalance = session
        members.append(MemberValue(member_id, instance, client_id, client_host, rebalance, session, subscription,
                                   assignment))
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, members)
