"""What the replica manager hands in and out: produce and fetch results, zero-copy slices.

Why: the Kafka handlers, the HTTP API, the replica fetcher and the group
coordinator all build or read these; they live apart from the manager so
its module stays about one concern (partition state and its doors).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO, Sequence

from kelp.errors import KelpError

if TYPE_CHECKING:
    from .partition import Partition

__all__ = ["ProduceResult", "FetchPartition", "SegmentSlice", "close_results", "FetchPartitionResult", "PartitionInfo"]


@dataclass(slots=True)
class ProduceResult:
    """Outcome of one partition's append (also for acknowledged duplicates)."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_count: int = 0
    duplicate: bool = False
    # The leader epoch it was appended (or found a duplicate) under: acks=all waits only under it.
    leader_epoch: int = -1
    # The replica it was appended to (a re-created topic restarts epochs): acks=all waits only on that one.
    appended_to: object = field(default=None, repr=False, compare=False)
    # flush.messages was reached: the log must be fsynced (in a worker thread) before this is acknowledged.
    flush_due: bool = False


@dataclass(slots=True)
class FetchPartition:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1


class SegmentSlice:
    """A byte range of an open segment file, sent with `sendfile` (zero copy).

    The file is opened in the same synchronous step that computed the range,
    so the range is consistent with that file even if the segment is later
    deleted or replaced. `len()` is the byte count. Close it when done.
    """

    __slots__ = ("file", "position", "size", "records", "next_offset")

    def __init__(self, file: BinaryIO, position: int, size: int, records: int = 0, next_offset: int = -1) -> None:
        self.file = file
        self.position = position
        self.size = size
        self.records = records  # record count of the range's batches (from their headers)
        self.next_offset = next_offset  # the offset after the range's last batch (-1: unknown)

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def read(self) -> bytes:
        return os.pread(self.file.fileno(), self.size, self.position)

    def close(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass


def close_results(results: Sequence["FetchPartitionResult"]) -> None:
    for r in results:
        if isinstance(r.records, SegmentSlice):
            r.records.close()


@dataclass(slots=True)
class FetchPartitionResult:
    topic: str
    partition: int
    error: KelpError | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview | SegmentSlice = b""
    # read_committed: (producer id, first offset) of the aborted transactions overlapping `records`
    # (Kafka's FetchResponse AbortedTransactions); None for read_uncommitted and followers.
    aborted_transactions: list[tuple[int, int]] | None = None
    # The replica read (None when none was: an error before it), and whether the read left nothing to tell: no
    # records because the fetch position is the end of what may be read (an incremental fetch session's
    # partition then waits for that replica's next change, `fetch_sessions`).
    replica: Partition | None = None
    caught_up: bool = False


@dataclass(slots=True)
class PartitionInfo:
    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
