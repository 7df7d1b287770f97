"""Writing records into RecordBatch v2 batches, and rebuilding batches in another codec.

Why it exists: the broker's own writers (group coordinator, transaction coordinator, Schema
Registry, HTTP produce), the CLI and the tests build batches from `Record`s here, through
kafka-python's `kafka.record` builder; the cleaner rebuilds a batch with fewer records, and a
topic's `compression.type` rebuilds a batch in its codec, both keeping the batch's identity
(offsets, producer, epoch, sequence, flags) with `rebuild_batch`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Iterable, Sequence

from kelp.errors import InvalidRecordError

from .compression import codec_id
from .header import (
    ATTRIBUTES_AT,
    COMPRESSION_MASK,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchInfo,
    read_header,
    rewrite_header,
    stamp_offset_and_epoch,
)
from .record import Record, batch_records

# `build_batch`'s shorthand for a Record: `(key, value[, headers[, timestamp]])`.
_Headers = tuple[tuple[str, bytes | None], ...]
RecordTuple = (tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, _Headers]
               | tuple[bytes | None, bytes | None, _Headers, int | None])


def _as_record(item: Record | RecordTuple) -> Record:
    if isinstance(item, Record):
        return item
    return Record(*item)


def build_batch(
    records: Iterable[Record | RecordTuple],
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
        compression_type=codec_id(compression),
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
        stamp_offset_and_epoch(buf, 0, base_offset, partition_leader_epoch)
    return bytes(buf)


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
    codec = built[ATTRIBUTES_AT + 1] & COMPRESSION_MASK  # the attributes' low byte: what the builder used
    rewrite_header(built, attributes=(info.attributes & ~COMPRESSION_MASK) | codec,
                   last_offset_delta=info.last_offset_delta, max_timestamp=max_timestamp)
    return built


def needs_recompression(batches: Sequence[BatchInfo], compression: str) -> bool:
    """True when one of `batches` (control batches aside) is not in codec `compression` — headers only."""
    code = codec_id("none" if compression == "uncompressed" else compression)
    return any(b.compression != code and not b.is_control for b in batches)


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

    The `BatchInfo`s returned describe the new bytes without walking them again: a
    kept batch's is `batches`' own at its new position, a rebuilt batch's header is
    read once from the bytes just built (their CRC is the builder's, not checked).
    """
    code = codec_id("none" if compression == "uncompressed" else compression)
    if all(b.compression == code or b.is_control for b in batches):
        return None
    view = memoryview(data)
    out = bytearray()
    infos: list[BatchInfo] = []
    for info in batches:
        if info.compression == code or info.is_control:
            infos.append(replace(info, position=len(out)))
            out += view[info.position : info.end]
            continue
        codec_id(info.compression)  # the producer's codec must be readable here
        built = rebuild_batch(info, batch_records(view, info), compression=code, max_timestamp=info.max_timestamp)
        infos.append(read_header(built))
        infos[-1].position = len(out)
        out += built
    return out, infos
