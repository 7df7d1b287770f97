"""The RecordBatch v2 codec: pure functions on bytes, shared by broker and clients.

Why it exists: every byte a producer sends is checked here once (sizes, magic,
CRC32C) and then stored and served unchanged, so the broker's hot path works
per *batch*: `parse_batches` reads the 61-byte headers, `assign_offsets`
rewrites the two header fields that sit outside the CRC, `set_log_append_time`
stamps LogAppendTime (which is inside the CRC, so it recomputes it).

The per-*record* helpers (`build_batch`, `iter_records`, `records_have_keys`)
are for the HTTP API, the CLI, the log cleaner and compacted-topic validation,
and are built on kafka-python's `kafka.record` codec.

What it must never do: import networking or anything from `kelp.broker`, keep
state between calls, or touch records one by one on the produce/fetch path.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

from crc32c import crc32c

from kelp.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)

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
_LENGTH_AND_MAGIC = struct.Struct(">iib")  # length, leader epoch, magic at offset 8

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40  # KIP-534: the cleaner set the batch's delete horizon, kept in its base timestamp

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

COMPRESSION_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COMPRESSION_NAMES = {v: k for k, v in COMPRESSION_CODECS.items()}
# The Python library each codec needs (none for "none" and gzip), named in errors when it is missing.
COMPRESSION_LIBRARIES = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}


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


@dataclass(frozen=True, slots=True)
class Record:
    """One record for building or as read back. `timestamp` is in milliseconds.

    `offset` is the absolute offset when read back; when building, records
    get consecutive offset deltas unless `keep_offsets=True` is passed to
    `build_batch` (then `offset` is absolute and must be >= `base_offset`).
    """

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())
    timestamp: int | None = None
    offset: int = 0


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


def _check_one(
    data: bytes | bytearray | memoryview,
    position: int,
    end: int,
    *,
    max_batch_bytes: int | None,
    verify_crc: bool,
) -> BatchInfo:
    """Validate the batch at `position`; raise a `KelpError` naming what is wrong."""
    remaining = end - position
    if remaining < LOG_OVERHEAD:
        raise CorruptRecordError(
            f"truncated batch at byte {position}: {remaining} bytes left, a batch needs at least {HEADER_SIZE}"
        )
    length = _I32.unpack_from(data, position + LENGTH_AT)[0]
    size = length + LOG_OVERHEAD
    if remaining >= MAGIC_AT + 1:
        magic = data[position + MAGIC_AT]
        if magic in (0, 1):
            raise UnsupportedForMessageFormatError(
                f"message format v{magic} (magic {magic}) at byte {position} is not supported: "
                "Kelp stores RecordBatch v2 only; use a client that produces with magic 2 (Kafka >= 0.11 "
                "clients, Produce v3+)"
            )
        if magic != 2:
            raise CorruptRecordError(f"batch at byte {position} has unknown magic {magic} (expected 2)")
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at byte {position} declares length {length}, below the minimum {MIN_BATCH_LENGTH} of a v2 header"
        )
    if max_batch_bytes is not None and size > max_batch_bytes:
        raise RecordTooLargeError(
            f"batch at byte {position} is {size} bytes, over the limit of {max_batch_bytes} bytes "
            "(max.message.bytes of the topic / message.max.bytes of the broker)"
        )
    if size > remaining:
        raise CorruptRecordError(
            f"truncated batch at byte {position}: declares {size} bytes but only {remaining} are present"
        )
    info = read_header(data, position)
    if info.record_count < 0:
        raise CorruptRecordError(f"batch at byte {position} has a negative record count {info.record_count}")
    if info.last_offset_delta < 0:
        raise CorruptRecordError(
            f"batch at byte {position} has a negative last offset delta {info.last_offset_delta}"
        )
    if verify_crc:
        actual = crc32c(memoryview(data)[position + ATTRIBUTES_AT : position + size])
        if actual != info.crc:
            raise CorruptRecordError(
                f"CRC mismatch in batch at byte {position} (base offset {info.base_offset}): "
                f"stored {info.crc:#010x}, computed {actual:#010x}"
            )
    return info


def parse_batches(
    data: bytes | bytearray | memoryview,
    *,
    max_batch_bytes: int | None = None,
    verify_crc: bool = True,
) -> list[BatchInfo]:
    """Walk concatenated RecordBatch v2 batches and validate each one.

    Raises `CorruptRecordError` (torn, bad length, CRC), `UnsupportedForMessageFormatError`
    (magic 0/1), `RecordTooLargeError` (a batch over `max_batch_bytes`) and
    `InvalidRecordError` (no batch at all). Positions are relative to `data`.
    """
    end = len(data)
    if end == 0:
        raise InvalidRecordError("the record set is empty: a produce request must carry at least one batch")
    batches: list[BatchInfo] = []
    position = 0
    while position < end:
        info = _check_one(data, position, end, max_batch_bytes=max_batch_bytes, verify_crc=verify_crc)
        batches.append(info)
        position += info.size
    return batches


@dataclass(slots=True)
class ScanResult:
    """What `scan_valid_prefix` found: the valid batches, where they end, and why it stopped."""

    batches: list[BatchInfo]
    valid_end: int
    error: str | None  # None: stopped at the end of the data
    incomplete: bool = False  # stopped on a batch that runs past the data (may be completed by more bytes)
    needed: int = 0  # when incomplete: total size of the batch that did not fit (0 when unknown)


def scan_valid_prefix(
    data: bytes | bytearray | memoryview,
    *,
    start: int = 0,
    next_offset: int | None = None,
) -> ScanResult:
    """Longest prefix of `data` made of valid batches, for recovery (never raises on bad data).

    With `next_offset`, a batch whose base offset goes backwards is also invalid.
    """
    end = len(data)
    batches: list[BatchInfo] = []
    position = start
    while position < end:
        remaining = end - position
        if remaining < HEADER_SIZE:
            needed = 0
            if remaining >= LOG_OVERHEAD:
                needed = _I32.unpack_from(data, position + LENGTH_AT)[0] + LOG_OVERHEAD
            return ScanResult(batches, position, f"torn batch header ({remaining} bytes)", True, needed)
        length = _I32.unpack_from(data, position + LENGTH_AT)[0]
        if length + LOG_OVERHEAD > remaining and length >= MIN_BATCH_LENGTH and data[position + MAGIC_AT] == 2:
            return ScanResult(
                batches, position,
                f"torn batch (declares {length + LOG_OVERHEAD} bytes, {remaining} present)",
                True, length + LOG_OVERHEAD,
            )
        try:
            info = _check_one(data, position, end, max_batch_bytes=None, verify_crc=True)
        except (CorruptRecordError, UnsupportedForMessageFormatError) as exc:
            return ScanResult(batches, position, str(exc))
        if next_offset is not None and info.base_offset < next_offset:
            return ScanResult(
                batches, position,
                f"batch base offset {info.base_offset} goes backwards (expected >= {next_offset})",
            )
        next_offset = info.next_offset
        batches.append(info)
        position += info.size
    return ScanResult(batches, position, None)


def iter_headers(data: bytes | bytearray | memoryview, start: int = 0) -> Iterator[BatchInfo]:
    """Headers of the complete batches in `data` (no CRC check): for bytes the log already validated."""
    end = len(data)
    position = start
    while end - position >= HEADER_SIZE:
        size = _I32.unpack_from(data, position + LENGTH_AT)[0] + LOG_OVERHEAD
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
        _I64.pack_into(buf, info.position + BASE_OFFSET_AT, offset)
        _I32.pack_into(buf, info.position + LEADER_EPOCH_AT, leader_epoch)
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
    if attributes is not None:
        _I16.pack_into(buf, position + ATTRIBUTES_AT, attributes)
    if base_timestamp is not None:
        _I64.pack_into(buf, position + BASE_TIMESTAMP_AT, base_timestamp)
    if last_offset_delta is not None:
        _I32.pack_into(buf, position + LAST_OFFSET_DELTA_AT, last_offset_delta)
    if max_timestamp is not None:
        _I64.pack_into(buf, position + MAX_TIMESTAMP_AT, max_timestamp)
    if base_offset is not None:
        _I64.pack_into(buf, position + BASE_OFFSET_AT, base_offset)
    if leader_epoch is not None:
        _I32.pack_into(buf, position + LEADER_EPOCH_AT, leader_epoch)
    size = _I32.unpack_from(buf, position + LENGTH_AT)[0] + LOG_OVERHEAD
    crc = crc32c(memoryview(buf)[position + ATTRIBUTES_AT : position + size])
    _U32.pack_into(buf, position + CRC_AT, crc)


def _codec(compression: str | int) -> int:
    from kafka import codec as codecs

    code = COMPRESSION_CODECS.get(compression) if isinstance(compression, str) else compression
    if code is None or code not in COMPRESSION_NAMES:
        raise InvalidRecordError(
            f"unknown compression {compression!r}; use one of {', '.join(COMPRESSION_CODECS)}"
        )
    available = {0: True, 1: True, 2: codecs.has_snappy(), 3: codecs.has_lz4(), 4: codecs.has_zstd()}
    if not available[code]:
        name = COMPRESSION_NAMES[code]
        raise UnsupportedCompressionTypeError(
            f"compression {name} is not available in this installation: "
            f"its library {COMPRESSION_LIBRARIES[name]} is not installed"
        )
    return code


def available_compressions() -> list[str]:
    """Codec names this installation can both build and read."""
    names = []
    for name in COMPRESSION_CODECS:
        try:
            _codec(name)
        except UnsupportedCompressionTypeError:
            continue
        names.append(name)
    return names


def _as_record(item: Record | tuple) -> Record:
    if isinstance(item, Record):
        return item
    return Record(*item)


def build_batch(
    records: Iterable[Record | tuple],
    *,
    compression: str | int = "none",
    base_offset: int = 0,
    keep_offsets: bool = False,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    partition_leader_epoch: int = -1,
    now_ms: int | None = None,
) -> bytes:
    """One RecordBatch v2 from `records` (`Record`s or `(key, value[, headers[, timestamp]])` tuples).

    Records without a timestamp get `now_ms` (default: the wall clock). With
    `keep_offsets`, each record's `offset` is kept (offset delta = offset - base_offset),
    which is how the cleaner rewrites a batch without renumbering it.
    """
    from kafka.record.default_records import DefaultRecordBatchBuilder

    items = [_as_record(r) for r in records]
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=_codec(compression),
        is_transactional=is_transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=2**31 - 1,
    )
    default_ts = int(time.time() * 1000) if now_ms is None else now_ms
    for index, rec in enumerate(items):
        delta = rec.offset - base_offset if keep_offsets else index
        if delta < 0:
            raise InvalidRecordError(f"record offset {rec.offset} is below the batch base offset {base_offset}")
        builder.append(
            delta,
            default_ts if rec.timestamp is None else int(rec.timestamp),
            None if rec.key is None else bytes(rec.key),
            None if rec.value is None else bytes(rec.value),
            [(k, None if v is None else bytes(v)) for k, v in rec.headers],
        )
    buf = builder.build()
    if base_offset or partition_leader_epoch != 0:
        _I64.pack_into(buf, BASE_OFFSET_AT, base_offset)
        _I32.pack_into(buf, LEADER_EPOCH_AT, partition_leader_epoch)
    return bytes(buf)


def iter_records(data: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Every record of every (complete) batch in `data`, with absolute offsets and ms timestamps.

    Control batches (transaction markers) are skipped. Raises `CorruptRecordError`
    on a malformed batch; bytes after the last complete batch are ignored, as a
    consumer ignores a partial batch at the end of a fetch.
    """
    view = memoryview(data)
    for info in iter_headers(view):
        if view[info.position + MAGIC_AT] != 2:
            raise UnsupportedForMessageFormatError(f"batch at byte {info.position} is not RecordBatch v2")
        if info.is_control:
            continue
        yield from batch_records(view, info)


def batch_records(data: bytes | bytearray | memoryview, info: BatchInfo) -> list[Record]:
    """The records of the one batch `info` describes in `data` (control batches included). A batch whose records
    do not decompress or decode raises `CorruptRecordError` naming the codec (the codecs' own errors are many:
    gzip's BadGzipFile, snappy's UncompressError, lz4's RuntimeError, zstandard's ZstdError)."""
    from kafka.record.default_records import DefaultRecordBatch

    batch = DefaultRecordBatch(memoryview(data)[info.position : info.end])
    try:
        return [
            Record(key=r.key, value=r.value, headers=tuple(r.headers), timestamp=r.timestamp, offset=r.offset)
            for r in batch
        ]
    except Exception as exc:  # the boundary with the decompressors and kafka-python's record decoder
        raise CorruptRecordError(
            f"the records of the {info.compression_name} batch at byte {info.position} (base offset "
            f"{info.base_offset}) do not {'decompress or ' if info.compression_name != 'none' else ''}decode: "
            f"{type(exc).__name__}: {exc}") from exc


def records_have_keys(data: bytes | bytearray | memoryview, batch: BatchInfo) -> bool:
    """True when every record of `batch` has a key: compacted topics refuse keyless records.

    Per-record work: only for topics with cleanup.policy containing "compact".
    """
    if batch.is_control:
        return True
    return all(rec.key is not None for rec in batch_records(data, batch))


def rebuild_batch(info: BatchInfo, records: Sequence[Record], *, compression: str | int,
                  max_timestamp: int | None, now_ms: int | None = None) -> bytearray:
    """`records` (a subset of `info`'s batch, or all of it) as a new batch that keeps the old one's identity.

    Kept: record offsets, producer id, epoch and base sequence, partition leader
    epoch, flags (timestamp type, transactional) and the last offset delta (so a
    producer's last sequence survives compaction); `max_timestamp` when given.
    The codec is what the builder used; the CRC is recomputed. The cleaner
    (dropping records) and compression.type (changing the codec) both rebuild
    batches this way.
    """
    built = bytearray(build_batch(
        records, compression=compression, base_offset=info.base_offset, keep_offsets=True,
        producer_id=info.producer_id, producer_epoch=info.producer_epoch, base_sequence=info.base_sequence,
        is_transactional=info.is_transactional, partition_leader_epoch=info.partition_leader_epoch, now_ms=now_ms,
    ))
    codec = read_header(built).attributes & COMPRESSION_MASK
    rewrite_header(built, attributes=(info.attributes & ~COMPRESSION_MASK) | codec,
                   last_offset_delta=info.last_offset_delta, max_timestamp=max_timestamp)
    return built


def needs_recompression(data: bytes | bytearray | memoryview, compression: str) -> bool:
    """True when a batch of `data` (control batches aside) is not in codec `compression` — headers only."""
    code = _codec("none" if compression == "uncompressed" else compression)
    return any(b.compression != code and not b.is_control for b in iter_headers(data))


def recompress(
    data: bytes | bytearray | memoryview, batches: Sequence[BatchInfo], compression: str
) -> tuple[bytearray, list[BatchInfo]] | None:
    """Rewrite every batch of `data` not already in codec `compression`; None when none needs it.

    Kafka's LogValidator does this on the leader when a topic's `compression.type`
    is a codec (not `producer`): each such batch is decompressed and built again,
    once per batch, keeping its record offsets and timestamps, producer id, epoch
    and base sequence, partition leader epoch and its flags (timestamp type,
    transactional); only the codec bits and the CRC change. Control batches are
    kept as they are. Raises `UnsupportedCompressionTypeError` naming the missing
    library when a codec cannot be read or written here.
    """
    code = _codec("none" if compression == "uncompressed" else compression)
    if all(b.compression == code or b.is_control for b in batches):
        return None
    view = memoryview(data)
    out = bytearray()
    for info in batches:
        if info.compression == code or info.is_control:
            out += view[info.position : info.end]
            continue
        _codec(info.compression)  # the producer's codec must be readable here
        built = rebuild_batch(info, batch_records(view, info), compression=code, max_timestamp=info.max_timestamp)
        out += built
    return out, parse_batches(out)
