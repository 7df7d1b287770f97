"""One segment of a partition log: a `.log` file of batches, its two indexes and its aborted transactions.

Why it exists: the log is a list of segments so that old data can be deleted
or compacted a whole file at a time and lookups stay local. A segment appends
already-validated batches (one write per append, straight to the OS page
cache, so a killed process loses nothing it acknowledged), serves byte
ranges, and finds the batch holding an offset through its sparse index.
It must never validate or rewrite batch contents (the log and the cleaner
do), nor import networking.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from kelp.records.header import HEADER_SIZE, LENGTH_AT, LOG_OVERHEAD, BatchInfo, iter_headers, read_header

from .indexes.offset_index import OffsetIndex
from .indexes.time_index import NO_TIMESTAMP, TimeIndex
from .indexes.txn_index import TXNINDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
MAX_RELATIVE_OFFSET = 2**32 - 1
HEADERS_CHUNK = 64 * 1024  # `headers()` walks small batches in memory over reads of this size


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def txn_index_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    """The `.txnindex` path of the segment at `base_offset` (it exists once a transaction was aborted in it)."""
    return directory / f"{segment_name(base_offset)}{TXNINDEX_SUFFIX}{suffix}"


def segment_files(directory: Path, base_offset: int, suffix: str = "") -> tuple[Path, ...]:
    """Every file of the segment at `base_offset`: .log, .index, .timeindex, .txnindex (with `suffix`)."""
    return segment_paths(directory, base_offset, suffix) + (txn_index_path(directory, base_offset, suffix),)


def segment_paths(directory: Path, base_offset: int, suffix: str = "") -> tuple[Path, Path, Path]:
    """(.log, .index, .timeindex) paths of the segment at `base_offset`, each with `suffix` appended."""
    name = segment_name(base_offset)
    return (
        directory / f"{name}{LOG_SUFFIX}{suffix}",
        directory / f"{name}{INDEX_SUFFIX}{suffix}",
        directory / f"{name}{TIMEINDEX_SUFFIX}{suffix}",
    )


class LogSegment:
    """A `.log` file with its offset index, time index and aborted-transaction index; offsets in
    [base_offset, next_offset)."""

    def __init__(
        self,
        *,
        log_path: Path,
        base_offset: int,
        index: OffsetIndex,
        time_index: TimeIndex,
        index_interval_bytes: int,
        size: int = 0,
        next_offset: int | None = None,
        max_timestamp: int = NO_TIMESTAMP,
        offset_of_max_timestamp: int | None = None,
        rolling_timestamp_ms: int | None = None,
        last_modified_ms: int = 0,
        txn_index: TransactionIndex | None = None,
    ) -> None:
        self.log_path = log_path
        self.base_offset = base_offset
        self.index = index
        self.time_index = time_index
        self.index_interval_bytes = index_interval_bytes
        self.size = size
        self.next_offset = base_offset if next_offset is None else next_offset
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = base_offset if offset_of_max_timestamp is None else offset_of_max_timestamp
        # segment.ms counts from here: the broker clock at the first append; after a restart the
        # first batch's timestamp (Kafka's rule), never later than the file's mtime.
        self.rolling_timestamp_ms = rolling_timestamp_ms
        self.last_modified_ms = last_modified_ms
        self._bytes_since_index = 0
        if txn_index is None:  # a new segment (no file yet: aborts create it); recovery passes the loaded one
            name = log_path.name.replace(LOG_SUFFIX, TXNINDEX_SUFFIX, 1)
            txn_index = TransactionIndex(log_path.with_name(name), base_offset)
        self.txn_index = txn_index
        self._fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int, max_index_entries: int,
        now_ms: int, suffix: str = "",
    ) -> "LogSegment":
        log_path, index_path, time_path = segment_paths(directory, base_offset, suffix)
        return cls(
            log_path=log_path,
            base_offset=base_offset,
            index=OffsetIndex.create(index_path, base_offset, max_entries=max_index_entries),
            time_index=TimeIndex.create(time_path, base_offset),
            index_interval_bytes=index_interval_bytes,
            last_modified_ms=now_ms,
        )

    def __repr__(self) -> str:
        return (f"LogSegment({self.log_path.name}, offsets {self.base_offset}..{self.next_offset - 1}, "
                f"{self.size} bytes)")

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    def can_hold(self, last_offset: int) -> bool:
        """True if `last_offset` still fits the u32 relative offsets of the indexes."""
        return last_offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def append(self, data: bytes | bytearray | memoryview, batches: list[BatchInfo], *, now_ms: int) -> None:
        """Write `data` (whole batches, positions relative to `data`) at the end of the file.

        One write() into the page cache; the index entries follow per batch.
        """
        start = self.size
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            # A partial write (disk full) must not leave half a batch for the next append to follow.
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass
            raise
        if self.rolling_timestamp_ms is None:
            self.rolling_timestamp_ms = now_ms
        for info in batches:
            self._track(info, start + info.position)
        self.size = start + len(data)
        self.last_modified_ms = now_ms

    def _track(self, info: BatchInfo, position: int) -> None:
        """Advance next offset, max timestamp and the sparse indexes past one batch at `position`."""
        if info.max_timestamp > self.max_timestamp:
            self.max_timestamp = info.max_timestamp
            self.offset_of_max_timestamp = info.last_offset
        if self._bytes_since_index >= self.index_interval_bytes and position > 0:
            # Position 0 needs no entry: a lookup below the first entry starts there.
            self.index.append(info.base_offset, position)
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += info.size
        self.next_offset = info.next_offset

    def rebuild_state(self, batches: list[BatchInfo]) -> None:
        """Reset indexes and counters from `batches` (positions absolute in the file); used by recovery."""
        self.index.truncate_to(self.base_offset)
        self.time_index.truncate_to(self.base_offset)
        self.size = 0
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self._bytes_since_index = 0
        for info in batches:
            self._track(info, info.position)
            self.size = info.end
        self._restore_rolling_timestamp()

    def restore_state(self) -> None:
        """Derive next offset and max timestamp from indexes plus the headers after the last index entry."""
        offset, position = self.index.lookup(2**63 - 1)
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        self.next_offset = self.base_offset
        self._bytes_since_index = 0
        for info in self.headers(position):
            self.next_offset = info.next_offset
            if info.max_timestamp > self.max_timestamp:
                self.max_timestamp = info.max_timestamp
                self.offset_of_max_timestamp = info.last_offset
            self._bytes_since_index += info.size
        self._restore_rolling_timestamp()

    def _restore_rolling_timestamp(self) -> None:
        first = self.header_at(0)
        if first is None:
            self.rolling_timestamp_ms = None
        elif 0 <= first.max_timestamp <= self.last_modified_ms:
            self.rolling_timestamp_ms = first.max_timestamp
        else:  # a client clock ahead of ours, or no timestamp: count from the last write
            self.rolling_timestamp_ms = self.last_modified_ms

    def read(self, position: int, size: int) -> bytes:
        """Up to `size` bytes from `position` (fewer at the end of the file)."""
        size = min(size, self.size - position)
        if size <= 0:
            return b""
        return os.pread(self._fd, size, position)

    def header_at(self, position: int) -> BatchInfo | None:
        """The header of the batch at `position`, or None at (or torn past) the end of the file."""
        if position + HEADER_SIZE > self.size:
            return None
        data = os.pread(self._fd, HEADER_SIZE, position)
        if len(data) < HEADER_SIZE:
            return None
        info = read_header(data)
        if info.size < HEADER_SIZE or position + info.size > self.size:
            return None
        info.position = position
        return info

    def headers(self, position: int = 0) -> Iterator[BatchInfo]:
        """Batch headers from `position` to the end of the file (see `iter_file_headers`)."""
        return iter_file_headers(self._fd, position, self.size)

    def find(self, offset: int) -> BatchInfo | None:
        """The first batch whose last offset is >= `offset`, or None if the segment ends before it.

        From the index entry below `offset`, headers are walked in memory over
        chunks of about two index intervals (one read instead of one per batch).
        """
        _, position = self.index.lookup(offset)
        chunk = max(2 * self.index_interval_bytes, 8192)
        while position + HEADER_SIZE <= self.size:
            data = os.pread(self._fd, min(chunk, self.size - position), position)
            walked = 0
            for info in iter_headers(data):
                if info.last_offset >= offset:
                    info.position += position
                    return info
                walked = info.end
            if walked == 0:  # a batch larger than the chunk: take its header alone
                large = self.header_at(position)
                if large is None:
                    return None
                if large.last_offset >= offset:
                    return large
                walked = large.size
            position += walked
        return None

    def find_by_timestamp(self, timestamp: int) -> BatchInfo | None:
        """The first batch whose max timestamp is >= `timestamp`, or None."""
        start = self.time_index.lookup(timestamp)
        found = self.find(start)
        if found is None:
            return None
        for info in self.headers(found.position):
            if info.max_timestamp >= timestamp:
                return info
        return None

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= `offset`; return the bytes removed."""
        found = self.find(offset)
        if found is None:
            return 0
        removed = self.size - found.position
        os.ftruncate(self._fd, found.position)
        self.index.truncate_to(found.base_offset)
        self.time_index.truncate_to(found.base_offset)
        self.txn_index.truncate_to(found.base_offset)
        self.size = found.position
        self.restore_state()
        return removed

    def on_roll(self, *, sync: bool = True) -> None:
        """The segment stops taking appends: index its max timestamp, stamp its mtime, fsync unless `sync=False`.

        The log rolls with `sync=False` on the append path and leaves the fsync to its next flush.
        """
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        if sync:
            self.flush()
        self.set_mtime(self.last_modified_ms)
        self.release_index_files()

    def release_index_files(self) -> None:
        """Close the index descriptors of a closed segment (lookups use memory; reopened if truncated)."""
        self.index.close()
        self.time_index.close()

    def set_mtime(self, ms: int) -> None:
        try:
            os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))
        except OSError:
            pass

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def flush(self) -> None:
        os.fsync(self._fd)
        self.index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.index.close()
        self.time_index.close()

    def rename_suffix(self, old: str, new: str) -> None:
        """Rename the files from suffix `old` to `new` (e.g. ".cleaned" -> "")."""
        log_path, index_path, time_path = segment_paths(self.log_path.parent, self.base_offset, new)
        os.rename(self.log_path, log_path)
        self.log_path = log_path
        self.index.rename(index_path)
        self.time_index.rename(time_path)
        self.txn_index.rename(txn_index_path(self.log_path.parent, self.base_offset, new))

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index.path, self.time_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.txn_index.delete()


def iter_file_headers(fd: int, position: int, end: int) -> Iterator[BatchInfo]:
    """Headers of the whole batches of file `fd` from byte `position` up to byte `end`.

    A large batch costs one header read; runs of small ones are walked in
    memory over one read of HEADERS_CHUNK bytes (a fetch range over
    thousands of tiny batches was one pread per batch).
    """
    while position + HEADER_SIZE <= end:
        head = os.pread(fd, HEADER_SIZE, position)
        if len(head) < HEADER_SIZE:
            return
        info = read_header(head)
        if info.size < HEADER_SIZE or position + info.size > end:
            return
        if info.size * 2 > HEADERS_CHUNK:
            info.position = position
            yield info
            position += info.size
            continue
        data = os.pread(fd, min(HEADERS_CHUNK, end - position), position)
        base = position
        for found in iter_headers(data):
            found.position += base
            yield found
            position = found.position + found.size
        if position == base:  # cannot happen (info fits the chunk); never loop forever
            position += info.size


def read_length(data: bytes, position: int) -> int:
    """Total size of the batch at `position` (helper for callers walking raw bytes)."""
    return int.from_bytes(data[position + LENGTH_AT : position + LENGTH_AT + 4], "big", signed=True) + LOG_OVERHEAD
