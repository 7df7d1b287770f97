"""Checking a buffer of RecordBatch v2 batches: the produce path's walk and recovery's.

Why it exists: every byte a producer sends is checked here once (sizes, magic, CRC32C) before the
log stores it and serves it unchanged. `parse_batches` is that check: one walk over the headers,
each read once into the `BatchInfo` the later stages of the append use, raising the Kafka error
that names what is wrong; `scan_valid_prefix` is recovery's walk over a segment file, which
never raises and says where the valid prefix ends and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

# The extension itself: the package's __init__ reads its version with importlib.metadata (kelp.lazy_packages).
from crc32c._crc32c import crc32c

from kelp.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
)

from .header import (
    ATTRIBUTES_AT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_AT,
    MIN_BATCH_LENGTH,
    BatchInfo,
    length_at,
    read_header,
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
    length = length_at(data, position)
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
        raise _too_large(position, size, max_batch_bytes)
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


def _too_large(position: int, size: int, max_batch_bytes: int) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"batch at byte {position} is {size} bytes, over the limit of {max_batch_bytes} bytes "
        "(max.message.bytes of the topic / message.max.bytes of the broker)"
    )


def check_sizes(batches: Sequence[BatchInfo], max_batch_bytes: int) -> None:
    """`parse_batches`' size check over headers already read: for batches rebuilt since (another codec
    changes their size) or a limit that changed since. Raises `RecordTooLargeError` as it does."""
    for info in batches:
        if info.size > max_batch_bytes:
            raise _too_large(info.position, info.size, max_batch_bytes)


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
                needed = length_at(data, position) + LOG_OVERHEAD
            return ScanResult(batches, position, f"torn batch header ({remaining} bytes)", True, needed)
        length = length_at(data, position)
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
