"""`Record`, one record as built or read back, and reading the records out of batches.

Why it exists: the hot paths never decode records, but the HTTP API, the CLI, the group
coordinator's replay, the log cleaner, compacted-topic validation and recompression do; they read
them here, through kafka-python's `kafka.record` decoder, and any failure of a decompressor or of
the decoder is one `CorruptRecordError` naming the batch and its codec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from kelp.errors import CorruptRecordError, UnsupportedForMessageFormatError

from .header import MAGIC_AT, BatchInfo, iter_headers


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
