"""The RecordBatch v2 header: its layout, `BatchInfo`, header walks and in-place header rewrites.

Why it exists: the broker's hot paths work per batch, on the 61-byte header alone. `read_header`
turns one header into a `BatchInfo`, the one object every later stage of a write uses (the
produce path reads it once, in `validation.parse_batches`, and hands it down); `iter_headers` and
`whole_batches_end` walk bytes the log already validated; `assign_offsets` rewrites the two header
fields that sit outside the CRC, `set_log_append_time` stamps LogAppendTime (inside the CRC, so it
recomputes it), and `rewrite_header` patches any field for the cleaner.

It checks nothing (`validation` does) and never looks at records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, Sequence

# The extension itself: the package's __init__ reads its version with importlib.metadata (kelp.lazy_packages).
from crc32c._crc32c import crc32c

from .compression import COMPRESSION_NAMES

# BaseOffset Length PartitionLeaderEpoch Magic CRC Attributes LastOffsetDelta
# BaseTimestamp MaxTimestamp ProducerId ProducerEpoch BaseSequence RecordCount
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base offset (8) + length (4): what precedes the length-counted part
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # value of the Length field for an empty batch

BASE_OFFSET_AT = 0
LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21  # the CRC covers attributes..end
LAST_OFFSET_DELTA_AT = 23
BASE_TIMESTAMP_AT = 27
MAX_TIMESTAMP_AT = 35

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40  # KIP-534: the cleaner set the batch's delete horizon, kept in its base timestamp

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1


@dataclass(slots=True)
class BatchInfo:
    """One batch's header, as read from the bytes at `position` (per batch, never per record).

    `base_offset` and `partition_leader_epoch` are updated by `assign_offsets`;
    `max_timestamp`/`attributes` by `set_log_append_time`.
    """

    position: int
    size: int  # whole batch, header included (Length field + 12)
    base_offset: int
    last_offset_delta: int
    record_count: int
    max_timestamp: int
    base_timestamp: int
    attributes: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    partition_leader_epoch: int
    crc: int = 0

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def compression_name(self) -> str:
        return COMPRESSION_NAMES.get(self.compression, f"unknown({self.compression})")

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the cleaner may remove this batch's tombstones or marker (KIP-534), None when not set yet."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Sequence of the batch's last record (wraps at 2**31-1 like Kafka), or -1."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % 2**31

    @property
    def end(self) -> int:
        """Position just past this batch in the buffer it was parsed from."""
        return self.position + self.size


def read_header(data: bytes | bytearray | memoryview, position: int = 0) -> BatchInfo:
    """Decode one 61-byte header at `position` without any check (the caller bounds it)."""
    (
        base_offset, length, leader_epoch, _magic, crc, attributes, last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    ) = HEADER.unpack_from(data, position)
    return BatchInfo(
        position=position,
        size=length + LOG_OVERHEAD,
        base_offset=base_offset,
        last_offset_delta=last_offset_delta,
        record_count=count,
        max_timestamp=max_timestamp,
        base_timestamp=base_timestamp,
        attributes=attributes,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=leader_epoch,
        crc=crc,
    )


def length_at(data: bytes | bytearray | memoryview, position: int = 0) -> int:
    """The Length field of the batch at `position` (the batch's size less LOG_OVERHEAD), unchecked."""
    length: int = _I32.unpack_from(data, position + LENGTH_AT)[0]
    return length


def stamp_offset_and_epoch(buf: bytearray | memoryview, position: int, base_offset: int, leader_epoch: int) -> None:
    """Write the base offset and partition leader epoch of the batch at `position`: both outside the CRC."""
    _I64.pack_into(buf, position + BASE_OFFSET_AT, base_offset)
    _I32.pack_into(buf, position + LEADER_EPOCH_AT, leader_epoch)


def iter_headers(data: bytes | bytearray | memoryview, start: int = 0) -> Iterator[BatchInfo]:
    """Headers of the complete batches in `data` (no CRC check): for bytes the log already validated."""
    end = len(data)
    position = start
    while end - position >= HEADER_SIZE:
        size = length_at(data, position) + LOG_OVERHEAD
        if size < HEADER_SIZE or position + size > end:
            return
        yield read_header(data, position)
        position += size


_OFFSET_AND_LENGTH = struct.Struct(">qi")


def whole_batches_end(data: bytes | bytearray | memoryview, *, max_offset: int | None = None) -> int:
    """Length of the longest prefix of `data` made of complete batches (all starting below `max_offset`).

    The fetch path's cut: two integers per batch, no objects.
    """
    end = len(data)
    position = 0
    unpack = _OFFSET_AND_LENGTH.unpack_from
    while end - position >= HEADER_SIZE:
        base_offset, length = unpack(data, position)
        size = length + LOG_OVERHEAD
        if size < HEADER_SIZE or position + size > end:
            break
        if max_offset is not None and base_offset >= max_offset:
            break
        position += size
    return position


def assign_offsets(
    buf: bytearray | memoryview,
    batches: Sequence[BatchInfo],
    *,
    base_offset: int,
    leader_epoch: int,
) -> int:
    """Give `batches` consecutive offsets from `base_offset` and stamp the leader epoch.

    Both fields sit outside the CRC, so nothing is recomputed. The `BatchInfo`s
    are updated in place. Returns the next offset after the last batch.
    """
    offset = base_offset
    for info in batches:
        stamp_offset_and_epoch(buf, info.position, offset, leader_epoch)
        info.base_offset = offset
        info.partition_leader_epoch = leader_epoch
        offset += info.last_offset_delta + 1
    return offset


def set_log_append_time(buf: bytearray | memoryview, batch: BatchInfo, timestamp_ms: int) -> None:
    """Mark `batch` as LogAppendTime with max timestamp `timestamp_ms`; recomputes its CRC."""
    attributes = batch.attributes | TIMESTAMP_TYPE_MASK
    if attributes == batch.attributes and batch.max_timestamp == timestamp_ms:
        return
    _I16.pack_into(buf, batch.position + ATTRIBUTES_AT, attributes)
    _I64.pack_into(buf, batch.position + MAX_TIMESTAMP_AT, timestamp_ms)
    crc = crc32c(memoryview(buf)[batch.position + ATTRIBUTES_AT : batch.position + batch.size])
    _U32.pack_into(buf, batch.position + CRC_AT, crc)
    batch.attributes = attributes
    batch.max_timestamp = timestamp_ms
    batch.crc = crc


def rewrite_header(
    buf: bytearray,
    position: int = 0,
    *,
    attributes: int | None = None,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
    base_offset: int | None = None,
    leader_epoch: int | None = None,
    base_timestamp: int | None = None,
) -> None:
    """Patch header fields of the batch at `position` and recompute its CRC (the cleaner uses this)."""
    fields = ((attributes, _I16, ATTRIBUTES_AT), (base_timestamp, _I64, BASE_TIMESTAMP_AT),
              (last_offset_delta, _I32, LAST_OFFSET_DELTA_AT), (max_timestamp, _I64, MAX_TIMESTAMP_AT),
              (base_offset, _I64, BASE_OFFSET_AT), (leader_epoch, _I32, LEADER_EPOCH_AT))
    for value, layout, at in fields:
        if value is not None:
            layout.pack_into(buf, position + at, value)
    size = length_at(buf, position) + LOG_OVERHEAD
    crc = crc32c(memoryview(buf)[position + ATTRIBUTES_AT : position + size])
    _U32.pack_into(buf, position + CRC_AT, crc)
