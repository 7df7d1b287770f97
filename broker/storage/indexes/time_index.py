"""The time index of one segment: max timestamp so far -> relative offset.

Why it exists: ListOffsets by timestamp (and retention by time) must find the
first offset whose timestamp is >= T without decoding records. An entry (i64
timestamp, u32 offset - base) is added at the offset index's cadence whenever
the segment's max timestamp has grown, plus a final one when the segment is
rolled, so timestamps in the file never go backwards. It is rebuilt from the
log when missing or inconsistent; it must never claim a timestamp the log
does not hold.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Sequence
from pathlib import Path

from .offset_index import NO_ENTRIES, FileBackedIndex, IndexFile

ENTRY = struct.Struct(">qI")
ENTRY_SIZE = ENTRY.size  # 12
NO_TIMESTAMP = -1


class TimeIndex(FileBackedIndex):
    """Non-decreasing (timestamp ms, relative offset) pairs of one segment."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self._file = IndexFile(path)
        self._timestamps: array[int] | tuple[int, ...] = NO_ENTRIES  # made by the first entry (offset_index.py)
        self._offsets: array[int] | tuple[int, ...] = NO_ENTRIES

    @classmethod
    def create(cls, path: Path, base_offset: int, *, entries: Sequence[tuple[int, int]] = ()) -> "TimeIndex":
        index = cls(path, base_offset)
        if entries:
            index._timestamps = array("q", [timestamp for timestamp, _ in entries])
            index._offsets = array("I", [offset - base_offset for _, offset in entries])
        index._file.rewrite(b"".join(ENTRY.pack(t, o) for t, o in zip(index._timestamps, index._offsets, strict=True)))
        return index

    @classmethod
    def load(cls, path: Path, base_offset: int, *, next_offset: int) -> tuple["TimeIndex | None", str]:
        """The index in `path`, or (None, reason) when missing or inconsistent with offsets below `next_offset`."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None, "missing"
        if len(data) % ENTRY_SIZE:
            return None, f"size {len(data)} is not a multiple of {ENTRY_SIZE}"
        index = cls(path, base_offset)
        timestamps, offsets = array("q"), array("I")
        last_ts, last_off = NO_TIMESTAMP - 1, -1
        for timestamp, relative in ENTRY.iter_unpack(data):
            if timestamp < last_ts or relative < last_off:
                return None, "entries go backwards"
            if base_offset + relative >= next_offset:
                return None, f"entry for offset {base_offset + relative} is past the log end {next_offset}"
            timestamps.append(timestamp)
            offsets.append(relative)
            last_ts, last_off = timestamp, relative
        if offsets:
            index._timestamps, index._offsets = timestamps, offsets
        return index, ""

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, absolute offset) of the last entry, or (-1, base offset)."""
        if not self._timestamps:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if the timestamp is newer than the last entry's."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        relative = offset - self.base_offset
        if self._offsets and relative < self._offsets[-1]:
            return
        timestamps, offsets = self._timestamps, self._offsets
        if not isinstance(timestamps, array) or not isinstance(offsets, array):  # the first entry
            timestamps = self._timestamps = array("q")
            offsets = self._offsets = array("I")
        timestamps.append(timestamp)
        offsets.append(relative)
        self._file.append(ENTRY.pack(timestamp, relative))

    def lookup(self, timestamp: int) -> int:
        """An offset to start scanning from: every record before it has a timestamp < `timestamp`."""
        i = bisect.bisect_left(self._timestamps, timestamp) - 1
        if i < 0:
            return self.base_offset
        # Entry i's timestamp < target: all records up to its offset are older, start after it.
        return self.base_offset + self._offsets[i] + 1

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        timestamps, offsets = self._timestamps, self._offsets
        i = bisect.bisect_left(offsets, offset - self.base_offset)
        if i < len(offsets):
            assert isinstance(timestamps, array) and isinstance(offsets, array), "an index with entries has arrays"
            del timestamps[i:]
            del offsets[i:]
            self._file.truncate(i * ENTRY_SIZE)
