"""Keys and values of `__transaction_state` records, in Kafka's own formats (TransactionLog.scala).

Why: a transaction coordinator's state is one record per transactional id in the compacted
`__transaction_state` topic; a broker that becomes a partition's leader rebuilds its transactions by
replaying it. Kafka's byte layout keeps the topic readable by Kafka's tools (kafka-dump-log's
TransactionLogMessageFormatter) and lets compaction keep the newest record per id.

Formats (big-endian; Kafka's generated TransactionLogKey.json / TransactionLogValue.json, version-prefixed):
- TransactionLogKey v0: version:int16, transactional_id:string(int16 length)
- TransactionLogValue v0: version:int16, producer_id:int64, producer_epoch:int16, transaction_timeout_ms:int32,
  transaction_status:int8, transaction_partitions: nullable array(int32 length) of
  {topic:string, partition_ids: array of int32}, last_update_timestamp_ms:int64, start_timestamp_ms:int64
- TransactionLogValue v1 (flexible, written by Kafka with transaction.version >= 1): the same fields with
  compact strings and arrays (unsigned varint length + 1) and tagged fields (previous producer id tag 0, next
  producer id tag 1, client transaction version tag 2). Kelp writes v1 when its `transaction.version` is 1
  or more (a tag written only when it differs from its default, as Kafka's generated code does) and v0
  otherwise, as Kafka does; it reads both.

A tombstone (None value) removes the id. An Empty transaction is written with a null partition array.
This module must never do I/O; it is pure encoding.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["TxnLogValue", "encode_txn_key", "decode_txn_key", "encode_txn_value", "decode_txn_value"]


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int  # TxnState's id (metadata.TxnState)
    partitions: tuple[tuple[str, int], ...]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1  # v1 tag 0
    next_producer_id: int = -1  # v1 tag 1
    client_transaction_version: int = 0  # v1 tag 2


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise ValueError("truncated varint")
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise ValueError("varint too long")

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated record")
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def string(self, compact: bool) -> str:
        n = self.uvarint() - 1 if compact else self.take(">h")
        if n < 0:
            raise ValueError("null string where Kafka's format has none")
        return self.raw(n).decode("utf-8")

    def array_len(self, compact: bool) -> int:
        return self.uvarint() - 1 if compact else self.take(">i")


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def encode_txn_key(transactional_id: str) -> bytes:
    return struct.pack(">h", 0) + _string(transactional_id)


def decode_txn_key(data: bytes) -> str:
    """The transactional id of a key; raises ValueError for a version Kafka never wrote."""
    r = _Reader(data)
    version = r.take(">h")
    if version != 0:
        raise ValueError(f"unknown __transaction_state key version {version}")
    return r.string(False)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _compact_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return _uvarint(len(data) + 1) + data


def encode_txn_value(value: TxnLogValue, *, version: int = 0) -> bytes:
    """TransactionLogValue v0, or v1 (flexible, with the tagged fields) when `version` is 1; an Empty
    transaction has a null partition array, as Kafka writes it."""
    if version not in (0, 1):
        raise ValueError(f"unknown TransactionLogValue version {version}")
    compact = version == 1
    out = [struct.pack(">hqhib", version, value.producer_id, value.producer_epoch, value.timeout_ms, value.status)]
    if value.status == 0:
        if value.partitions:
            raise ValueError("an Empty transaction has no partitions")
        out.append(b"\x00" if compact else struct.pack(">i", -1))
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in value.partitions:
            by_topic.setdefault(topic, []).append(partition)
        out.append(_uvarint(len(by_topic) + 1) if compact else struct.pack(">i", len(by_topic)))
        for topic, parts in by_topic.items():
            if compact:
                out.append(_compact_string(topic) + _uvarint(len(parts) + 1)
                           + struct.pack(f">{len(parts)}i", *sorted(parts)) + b"\x00")
            else:
                out.append(_string(topic))
                out.append(struct.pack(f">i{len(parts)}i", len(parts), *sorted(parts)))
    out.append(struct.pack(">qq", value.last_update_ms, value.start_ms))
    if compact:
        tags = []
        if value.previous_producer_id != -1:
            tags.append((0, struct.pack(">q", value.previous_producer_id)))
        if value.next_producer_id != -1:
            tags.append((1, struct.pack(">q", value.next_producer_id)))
        if value.client_transaction_version != 0:
            tags.append((2, struct.pack(">h", value.client_transaction_version)))
        out.append(_uvarint(len(tags)))
        out.extend(_uvarint(tag) + _uvarint(len(data)) + data for tag, data in tags)
    return b"".join(out)


def decode_txn_value(data: bytes) -> TxnLogValue:
    """A TransactionLogValue v0 or v1; raises ValueError for other versions or a malformed value."""
    try:
        return _decode_value(data)
    except struct.error as exc:
        raise ValueError(f"malformed __transaction_state value: {exc}") from exc


def _decode_value(data: bytes) -> TxnLogValue:
    r = _Reader(data)
    version = r.take(">h")
    if version not in (0, 1):
        raise ValueError(f"unknown TransactionLogValue version {version}")
    compact = version >= 1
    pid, epoch, timeout, status = r.take(">q"), r.take(">h"), r.take(">i"), r.take(">b")
    partitions: list[tuple[str, int]] = []
    for _ in range(max(r.array_len(compact), 0)):
        topic = r.string(compact)
        for _ in range(max(r.array_len(compact), 0)):
            partitions.append((topic, r.take(">i")))
        if compact:
            _skip_tags(r)
    last_update, start = r.take(">q"), r.take(">q")
    previous = nxt = -1
    client_tv = 0
    if compact:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            field = _Reader(r.raw(size))
            if tag == 0:
                previous = field.take(">q")
            elif tag == 1:
                nxt = field.take(">q")
            elif tag == 2:
                client_tv = field.take(">h")
    return TxnLogValue(pid, epoch, timeout, status, tuple(partitions), last_update, start, previous, nxt, client_tv)


def _skip_tags(r: _Reader) -> None:
    for _ in range(r.uvarint()):
        r.uvarint()
        r.raw(r.uvarint())
