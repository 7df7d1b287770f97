"""The sparse offset index of one segment: relative offset -> file position.

Why it exists: a fetch at offset N must find the batch holding N without
reading the segment from the start. One 8-byte entry (offset - base as u32,
position as u32, big-endian) is added per `index.interval.bytes` of log; a
lookup is a binary search for the last entry at or below N, then a short scan
of batch headers. The file is append-only and mirrored in memory; the log is
the truth: when the file is missing or inconsistent it is rebuilt from the
log (see loader.py). It must never point past the end of its log file.
"""

from __future__ import annotations

import bisect
import os
import sys
from array import array
from collections.abc import Sequence
from pathlib import Path

ENTRY_SIZE = 8
# An index with no entry holds this (immutable: an append that forgot to make its arrays fails, never shares one)
# in place of its two empty arrays: the active segment of most partitions has none (issue 38: 4 empty arrays,
# 256 B, per idle partition). Its arrays are made by its first entry.
NO_ENTRIES: tuple[int, ...] = ()


def _to_disk(values: array[int]) -> bytes:
    if sys.byteorder == "little":
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _from_disk(typecode: str, data: bytes) -> array[int]:
    values = array(typecode)
    values.frombytes(data)
    if sys.byteorder == "little":
        values.byteswap()
    return values


class IndexFile:
    """An append-only file of fixed-size entries (shared by the offset and time indexes).

    Its descriptor is opened by the first append and kept while appends come; a fresh or rewritten file
    is closed at once, and an fsync of a closed one opens it only for the fsync: an index gets an entry
    per `index.interval.bytes` of log, so 10,000 idle partitions held 20,000 descriptors for indexes
    that never got one (and the process limit was 20,000).
    """

    # Its path is kept as a str (a `Path` is about 0.2 KB more, twice per segment: issue 38).
    __slots__ = ("_path", "_fd")

    def __init__(self, path: Path) -> None:
        self._path = os.fspath(path)
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return Path(self._path)

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def append(self, data: bytes) -> None:
        fd = self._open()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def rewrite(self, data: bytes) -> None:
        was_open = self._fd is not None
        fd = self._open()
        os.ftruncate(fd, 0)
        self.append(data)
        if not was_open:
            self.close()

    def truncate(self, size: int) -> None:
        os.ftruncate(self._open(), size)

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            return
        fd = os.open(self._path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename(self, path: Path) -> None:
        os.rename(self._path, path)
        self._path = os.fspath(path)

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self._path)
        except FileNotFoundError:
            pass


class FileBackedIndex:
    """What the offset and time indexes share: one `IndexFile` and its file operations."""

    _file: IndexFile

    @property
    def path(self) -> Path:
        return self._file.path

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def rename(self, path: Path) -> None:
        self._file.rename(path)

    def delete(self) -> None:
        self._file.delete()


class OffsetIndex(FileBackedIndex):
    """Sorted (relative offset, position) pairs of one segment."""

    def __init__(self, path: Path, base_offset: int, *, max_entries: int) -> None:
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._file = IndexFile(path)
        self._offsets: array[int] | tuple[int, ...] = NO_ENTRIES
        self._positions: array[int] | tuple[int, ...] = NO_ENTRIES

    @classmethod
    def create(
        cls, path: Path, base_offset: int, *, max_entries: int, entries: Sequence[tuple[int, int]] = ()
    ) -> "OffsetIndex":
        """A fresh index file holding `entries` ((absolute offset, position) pairs)."""
        index = cls(path, base_offset, max_entries=max_entries)
        if entries:
            index._offsets = array("I", [offset - base_offset for offset, _ in entries])
            index._positions = array("I", [position for _, position in entries])
        index._file.rewrite(index._encode(0))
        return index

    @classmethod
    def load(
        cls, path: Path, base_offset: int, *, max_entries: int, log_size: int
    ) -> tuple["OffsetIndex | None", str]:
        """The index in `path`, or (None, reason) when missing or inconsistent with a log of `log_size` bytes."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None, "missing"
        if len(data) % ENTRY_SIZE:
            return None, f"size {len(data)} is not a multiple of {ENTRY_SIZE}"
        pairs = _from_disk("I", data)
        offsets, positions = pairs[0::2], pairs[1::2]
        for i in range(1, len(offsets)):
            if offsets[i] <= offsets[i - 1] or positions[i] <= positions[i - 1]:
                return None, f"entry {i} does not increase"
        if positions and positions[-1] >= log_size:
            return None, f"last entry points at byte {positions[-1]}, past the log's {log_size} bytes"
        index = cls(path, base_offset, max_entries=max_entries)
        if offsets:
            index._offsets, index._positions = offsets, positions
        return index, ""

    def _encode(self, start: int) -> bytes:
        offsets, positions = self._offsets, self._positions
        if start >= len(offsets):
            return b""
        assert isinstance(offsets, array) and isinstance(positions, array), "an index with entries has arrays"
        pairs = array("I", bytes(8 * (len(offsets) - start)))
        pairs[0::2] = offsets[start:]
        pairs[1::2] = positions[start:]
        return _to_disk(pairs)

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """(absolute offset, position) of the last entry, or (base offset, 0)."""
        if not self._offsets:
            return self.base_offset, 0
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        offsets, positions = self._offsets, self._positions
        if offsets and (relative <= offsets[-1] or position <= positions[-1]):
            return  # entries only move forward; a duplicate would break the binary search
        if not isinstance(offsets, array) or not isinstance(positions, array):  # the first entry
            offsets = self._offsets = array("I")
            positions = self._positions = array("I")
        offsets.append(relative)
        positions.append(position)
        self._file.append(self._encode(len(offsets) - 1))

    def lookup(self, offset: int) -> tuple[int, int]:
        """(absolute offset, position) of the last entry at or below `offset`, or (base offset, 0)."""
        i = bisect.bisect_right(self._offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def floor_by_position(self, position: int, below_offset: int | None = None) -> tuple[int, int] | None:
        """(absolute offset, position) of the last entry at or before byte `position` whose offset is below
        `below_offset` (when given), or None. An entry names a batch's first offset and start: every batch before
        that position ends at or before it, whole."""
        i = bisect.bisect_right(self._positions, position) - 1
        if below_offset is not None:
            i = min(i, bisect.bisect_left(self._offsets, below_offset - self.base_offset) - 1)
        if i < 0:
            return None
        return self.base_offset + self._offsets[i], self._positions[i]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        offsets, positions = self._offsets, self._positions
        i = bisect.bisect_left(offsets, offset - self.base_offset)
        if i < len(offsets):
            assert isinstance(offsets, array) and isinstance(positions, array), "an index with entries has arrays"
            del offsets[i:]
            del positions[i:]
            self._file.truncate(i * ENTRY_SIZE)
