"""The read side of a partition log: whole batches by offset, file ranges for sendfile, lookups by time.

Why it exists: fetches (consumers and followers), ListOffsets and the producer-state replays only read
the log, and they are most of its callers; kept apart from the appends (`log.py`) so each half can be
read alone, as Kafka's `LocalLog.read`. `Log` composes it; the segment list, its base offsets and the
lock are the log's shared state (`log_state`).

It must never write (no file, no change to the segment list, the offsets or a checkpoint), never
decode records on the fetch path (`read` and `read_slice` cut at batch headers; only the ListOffsets
lookups decode the one batch they land on), and never serve part of a batch or an offset outside
[log start, log end].
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from kelp.control_records import ControlMarker, read_marker
from kelp.errors import OffsetOutOfRangeError
from kelp.records.header import BatchInfo, whole_batches_end

from .log_state import LogState
from .segment import LogSegment, iter_file_headers

__all__ = ["FileSlice", "LogReader"]


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file, for zero-copy sends (`os.sendfile`).

    `file` was opened while the log lock was held, so it reads the very bytes
    the range was computed on even if the cleaner swaps a new file in under
    the same `path` right after: prefer it to reopening `path`, and close it.
    """

    path: Path
    position: int
    size: int
    file: BinaryIO | None = None
    records: int = 0  # records in the range's batches (from the headers walked; the offsets spanned where the
    # offset index skipped the walk, `_read_range`)
    next_offset: int = -1  # the offset after the range's last batch

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class LogReader:
    """Reads of one `Log`."""

    __slots__ = ("_state", "_segments", "_lock")

    def __init__(self, state: LogState) -> None:
        self._state = state
        self._segments = state.segments
        self._lock = state.lock

    def _check_range(self, offset: int) -> None:
        state = self._state
        if offset < state.log_start_offset or offset > self._segments[-1].next_offset:
            raise OffsetOutOfRangeError(
                f"{state.name}: offset {offset} is out of range; the log holds "
                f"[{state.log_start_offset}, {state.log_end_offset})"
            )

    def locate(self, offset: int) -> tuple[LogSegment, BatchInfo] | None:
        """The segment and first batch whose last offset is >= `offset` (skipping compacted gaps)."""
        segments = self._segments
        for i in range(self._state.segment_index_for(offset), len(segments)):
            segment = segments[i]
            found = segment.find(offset)
            if found is not None:
                return segment, found
        return None

    def _read_range(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[LogSegment, int, int, int, int] | None:
        """(segment, position, size, record count, next offset) of the whole batches a read returns; None when
        there are none."""
        self._state.check_open()
        self._check_range(offset)
        located = self.locate(offset)
        if located is None:
            return None
        segment, first = located
        end = first.position
        limit = first.position + max_bytes
        records = 0
        next_offset = -1
        # The whole batches before the last index entry within the limit (and below max_offset) are in the range
        # without reading them: the walk starts there, a batch or two before the cut, not at the first batch
        # (a 1 MiB range of 16 KiB batches was a 1 MiB read per partition per fetch, before its first byte went
        # out). Their records are counted as the offsets they span (more than they hold in a compacted range).
        skip = segment.index.floor_by_position(limit, max_offset)
        if skip is not None and first.position < skip[1] <= segment.size:
            end = skip[1]
            records = skip[0] - first.base_offset
            next_offset = skip[0]
        for info in segment.headers(end):
            if max_offset is not None and info.base_offset >= max_offset:
                break
            if info.end > limit:
                if end == first.position and min_one_batch:
                    end = info.end
                    records += info.record_count
                    next_offset = info.next_offset
                break
            end = info.end
            records += info.record_count
            next_offset = info.next_offset
        if end == first.position:
            return None
        return segment, first.position, end - first.position, records, next_offset

    def read(
        self, offset: int, *, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True
    ) -> bytes:
        """Whole batches starting with the one holding `offset`, at most `max_bytes` of them.

        `max_offset` (exclusive, e.g. the high watermark) stops before batches
        starting at or after it. With `min_one_batch` the first batch is
        returned even if larger than `max_bytes` (Fetch v3+ semantics).
        Returns b"" at the log end; raises `OffsetOutOfRangeError` below the
        log start or above the log end. One read stays within one segment.
        """
        with self._lock:
            self._state.check_open()
            self._check_range(offset)
            located = self.locate(offset)
            if located is None:
                return b""
            segment, first = located
            # One read of up to max_bytes, then cut at the last whole batch in memory
            # (cheaper than a read per header when batches are small).
            data = segment.read(first.position, max(max_bytes, 0))
            end = whole_batches_end(data, max_offset=max_offset)
            if end == 0:
                if not min_one_batch or (max_offset is not None and first.base_offset >= max_offset):
                    return b""
                return segment.read(first.position, first.size)
            return data if end == len(data) else data[:end]

    def read_slice(
        self, offset: int, *, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FileSlice | None:
        """Like `read` but the file range instead of the bytes, for `os.sendfile`; None if empty.

        The range stays valid until retention or the cleaner replaces the
        segment: open the path promptly and tolerate FileNotFoundError.
        """
        with self._lock:
            found = self._read_range(offset, max_bytes, max_offset, min_one_batch)
            if found is None:
                return None
            segment, position, size, records, next_offset = found
            try:
                opened: BinaryIO | None = open(segment.log_path, "rb", buffering=0)
            except OSError:
                opened = None
            return FileSlice(segment.log_path, position, size, opened, records, next_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp_ms`, or None.

        Uses the time index to find the batch, then decodes that one batch to
        find the record (ListOffsets is not the hot path).
        """
        from kelp.records.record import batch_records

        state = self._state
        with self._lock:
            state.check_open()
            for segment in self._segments:
                if segment.max_timestamp < timestamp_ms:
                    continue
                info = segment.find_by_timestamp(timestamp_ms)
                if info is None:
                    continue
                if info.last_offset < state.log_start_offset:
                    continue
                data = segment.read(info.position, info.size)
                info = dataclasses.replace(info, position=0)
                if info.timestamp_type == 1:  # LogAppendTime: every record carries the batch's max timestamp
                    return max(info.base_offset, state.log_start_offset), info.max_timestamp
                for record in batch_records(data, info):
                    if (record.offset >= state.log_start_offset and record.timestamp is not None
                            and record.timestamp >= timestamp_ms):
                        return record.offset, record.timestamp
            return None

    def max_timestamp_and_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the log's largest timestamp (ListOffsets -3, KIP-734).

        Per segment the largest timestamp is known; only the one batch holding it is decoded.
        """
        with self._lock:
            self._state.check_open()
            stamped = [s for s in self._segments if not s.is_empty and s.max_timestamp >= 0]
            if not stamped:
                return None
            ts = max(s.max_timestamp for s in stamped)
        return self.offset_for_timestamp(ts)

    def batch_headers(self, start_offset: int, end_offset: int | None = None) -> Iterator[BatchInfo]:
        """Headers of the batches holding offsets from `start_offset` up to `end_offset` (default: the log end).

        For replays in worker threads (producer state): the segment files are opened under the lock and
        read without it, so appends go on and a segment retention deletes meanwhile is still read whole.
        """
        for info, _marker in self._walk(start_offset, end_offset, markers=False):
            yield info

    def replay_batches(self, start_offset: int,
                       end_offset: int | None = None) -> Iterator[tuple[BatchInfo, ControlMarker | None]]:
        """As `batch_headers`, with what each end-transaction marker says (one small read per control batch,
        none per data batch): the producer-state rebuild replays transactions from these."""
        return self._walk(start_offset, end_offset, markers=True)

    def _walk(self, start_offset: int, end_offset: int | None,
              markers: bool) -> Iterator[tuple[BatchInfo, ControlMarker | None]]:
        state = self._state
        segments = self._segments
        with self._lock:
            state.check_open()
            end = state.log_end_offset if end_offset is None else min(end_offset, state.log_end_offset)
            start = max(start_offset, state.log_start_offset)
            plan: list[tuple[int, int, int]] = []
            first = state.segment_index_for(start)
            try:
                for i in range(first, len(segments)):
                    segment = segments[i]
                    if segment.base_offset >= end:
                        break
                    position = 0
                    if i == first:
                        found = segment.find(start)
                        if found is None:
                            continue
                        position = found.position
                    plan.append((os.open(segment.log_path, os.O_RDONLY), position, segment.size))
            except BaseException:
                for fd, _, _ in plan:
                    os.close(fd)
                raise
        try:
            for fd, position, size in plan:
                for info in iter_file_headers(fd, position, size):
                    if info.base_offset >= end:
                        return
                    if info.last_offset >= start:
                        marker = None
                        if markers and info.is_control and info.producer_id >= 0:
                            body = os.pread(fd, info.size, info.position)
                            marker = read_marker(body, dataclasses.replace(info, position=0))
                        yield info, marker
        finally:
            for fd, _, _ in plan:
                os.close(fd)
