"""Idempotent-producer snapshots: `<offset:020d>.snapshot` files beside a partition's segments.

Why it exists: after a restart or a follower truncation the broker must know,
for every producer with batches in the log, the last batches it wrote, or a
retried batch is stored twice. Replaying every batch header of a large log
takes seconds, so — as Kafka's `ProducerStateManager` — the state is written
to a snapshot file when a segment rolls (named by the offset it describes:
"every batch below this offset is in it"), and a rebuild loads the newest
snapshot at or below the log end and replays only the batches after it.
Truncation removes the snapshots above the new log end; retention those below
the log start.

What the state *is* belongs to the replica layer (`kelp.broker.replica.producer_state`):
this module encodes, checks (CRC) and stores plain tuples, and must never
decide sequence rules or touch the event loop (file work: worker threads).

Format (Kelp's own; Kafka's snapshot keeps one batch per producer, this one
up to five, so a retry of any of the last five batches is still recognised
after a restart): int16 version, uint32 CRC-32 of the body, then the body:
int32 producer count, and per producer int64 id, int16 epoch, (version 2:
int32 coordinator epoch, int64 first offset of its ongoing transaction or
-1, int64 timestamp of its last write,) uint8 batch count, and per batch
int32 first sequence, int32 last sequence, int64 first offset, int64 last
offset, int64 max timestamp. Big-endian. Version 2 is written (issue 21: an
ongoing transaction survives a restart and a leader change, as in Kafka's
snapshot); version 1 files, written before transactions, still load (no
transaction, unknown coordinator epoch).
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

from .checkpoint import fsync_dir

log = logging.getLogger("kelp.broker.storage")

__all__ = [
    "SNAPSHOT_SUFFIX", "CorruptSnapshotError", "ProducerEntry", "encode", "decode", "snapshot_path",
    "list_snapshots", "read_snapshot", "write_snapshot_file", "delete_snapshots",
]

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 2
_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_PRODUCER_V1 = struct.Struct(">qhB")
_PRODUCER = struct.Struct(">qhiqqB")
_BATCH = struct.Struct(">iiqqq")

CachedBatch = tuple[int, int, int, int, int]  # (first seq, last seq, first offset, last offset, max timestamp)


class ProducerEntry(NamedTuple):
    """One producer's state as a snapshot stores it."""

    producer_id: int
    epoch: int
    batches: tuple[CachedBatch, ...]  # oldest first
    coordinator_epoch: int = -1
    txn_first_offset: int = -1  # first offset of its ongoing transaction, -1 when none
    last_timestamp: int = -1  # of its last batch or marker: producer.id.expiration.ms counts from it


class CorruptSnapshotError(ValueError):
    """A snapshot file that cannot be trusted (torn, wrong CRC, unknown version)."""


def encode(entries: Sequence[ProducerEntry]) -> bytes:
    parts = [_COUNT.pack(len(entries))]
    for entry in entries:
        e = ProducerEntry(*entry)  # a plain (id, epoch, batches) tuple too: the fields after default
        parts.append(_PRODUCER.pack(e.producer_id, e.epoch, e.coordinator_epoch, e.txn_first_offset,
                                    e.last_timestamp, len(e.batches)))
        parts.extend(_BATCH.pack(*b) for b in e.batches)
    body = b"".join(parts)
    return _HEAD.pack(VERSION, zlib.crc32(body)) + body


def decode(data: bytes) -> list[ProducerEntry]:
    if len(data) < _HEAD.size + _COUNT.size:
        raise CorruptSnapshotError(f"{len(data)} bytes, shorter than a header")
    version, crc = _HEAD.unpack_from(data, 0)
    if version not in (1, VERSION):
        raise CorruptSnapshotError(f"unknown version {version}")
    body = memoryview(data)[_HEAD.size:]
    if zlib.crc32(body) != crc:
        raise CorruptSnapshotError("CRC mismatch")
    try:
        (count,) = _COUNT.unpack_from(body, 0)
        pos = _COUNT.size
        out: list[ProducerEntry] = []
        for _ in range(count):
            if version == 1:
                producer_id, epoch, n = _PRODUCER_V1.unpack_from(body, pos)
                coordinator_epoch, txn_first, last_ts = -1, -1, -1
                pos += _PRODUCER_V1.size
            else:
                producer_id, epoch, coordinator_epoch, txn_first, last_ts, n = _PRODUCER.unpack_from(body, pos)
                pos += _PRODUCER.size
            batches: tuple[CachedBatch, ...] = tuple(
                _BATCH.unpack_from(body, pos + i * _BATCH.size) for i in range(n))
            pos += n * _BATCH.size
            if version == 1 and batches:
                last_ts = batches[-1][4]
            out.append(ProducerEntry(producer_id, epoch, batches, coordinator_epoch, txn_first, last_ts))
    except struct.error as exc:
        raise CorruptSnapshotError(f"truncated body: {exc}") from None
    if pos != len(body):
        raise CorruptSnapshotError(f"{len(body) - pos} trailing bytes")
    return out


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in `directory`, ascending."""
    found = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def read_snapshot(directory: Path, offset: int) -> list[ProducerEntry]:
    """The entries of the snapshot at `offset`; CorruptSnapshotError if it cannot be trusted."""
    with open(snapshot_path(directory, offset), "rb") as f:
        return decode(f.read())


def write_snapshot_file(directory: Path, offset: int, entries: Sequence[ProducerEntry]) -> Path:
    """Write the snapshot to a fsynced temp file and return its path; the caller renames it into place.

    Left-over temp files (`*.tmp`) are removed by recovery at the next open.
    """
    tmp = snapshot_path(directory, offset).with_suffix(SNAPSHOT_SUFFIX + ".tmp")
    data = encode(entries)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def delete_snapshots(directory: Path, offsets: Iterable[int], *, durable: bool = False) -> int:
    """Unlink the snapshots at `offsets`; returns how many existed."""
    removed = 0
    for offset in offsets:
        try:
            os.unlink(snapshot_path(directory, offset))
            removed += 1
        except FileNotFoundError:
            pass
    if removed and durable:
        fsync_dir(directory)
    return removed
