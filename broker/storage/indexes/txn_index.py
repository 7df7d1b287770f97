"""A segment's aborted-transaction index: Kafka's `.txnindex` file.

Why it exists: a read_committed consumer must be told, with each fetch, which producers' data in the
fetched range belongs to aborted transactions (the Fetch response's `aborted_transactions`: producer id
and first offset); it then drops their batches up to the abort marker. Scanning the log for markers on
every fetch would touch every batch, so — as Kafka — each segment keeps an index of the transactions
aborted by a marker in it: producer id, the transaction's first offset, its last offset (the marker's)
and the last stable offset when it was aborted (a fetch's search over later segments stops at the first
entry whose LSO is at or past the fetched range's end: no transaction aborted later can start inside it).

Format (Kafka's `AbortedTxn`, byte for byte): 34-byte entries, int16 version (0), int64 producer id,
int64 first offset, int64 last offset, int64 last stable offset, big-endian; last offsets strictly
increase. The file exists only once an entry was written. Entries are also held in memory (a list of
tuples, one per aborted transaction of the segment): a fetch reads no file.

The replica layer decides what was aborted (it owns producer state); this module only stores, loads
(dropping a torn tail), truncates and deletes entries, and must never decide transaction semantics,
import networking, or be written from the event loop except for the append of one entry (page cache,
no fsync: `flush` is the log's flush, in a worker thread).
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AbortedTxn", "TransactionIndex", "TXNINDEX_SUFFIX", "ENTRY_SIZE"]

log = logging.getLogger("kelp.broker.storage")

TXNINDEX_SUFFIX = ".txnindex"
VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: `first_offset`..`last_offset` (the abort marker), and the partition's last
    stable offset right after it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """The aborted transactions whose marker lies in one segment, in marker order."""

    def __init__(self, path: Path, base_offset: int, entries: list[AbortedTxn] | None = None) -> None:
        self._path = os.fspath(path)  # a str: a `Path` per segment is about 0.2 KB more (issue 38)
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = entries if entries is not None else []

    @property
    def path(self) -> Path:
        return Path(self._path)

    @classmethod
    def load(cls, path: Path, base_offset: int, *, next_offset: int | None = None) -> "TransactionIndex":
        """Read the file if there is one (worker threads: recovery). A torn last entry, an entry of an
        unknown version, one out of order or one at or past `next_offset` (the segment's end: its marker
        is gone) and everything after it are cut off, with a WARNING."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls(path, base_offset)
        entries: list[AbortedTxn] = []
        valid = 0
        reason = None
        for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != VERSION:
                reason = f"unknown version {version}"
            elif last < base_offset or (entries and last <= entries[-1].last_offset) or first > last:
                reason = f"entry for offsets {first}..{last} out of order"
            elif next_offset is not None and last >= next_offset:
                reason = f"its marker at offset {last} is past the segment end {next_offset}"
            if reason is not None:
                break
            entries.append(AbortedTxn(pid, first, last, lso))
            valid = pos + ENTRY_SIZE
        if reason is None and valid != len(data):
            reason = f"{len(data) - valid} trailing bytes"
        if reason is not None:
            log.warning("truncating %s at byte %d (%d entries kept): %s", path, valid, len(entries), reason)
            os.truncate(path, valid)
        return cls(path, base_offset, entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def last_offset(self) -> int:
        """The last offset of the newest entry (-1 without entries)."""
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry (its marker is after every indexed one): one write to the page cache."""
        self.extend([txn])

    def collect(self, fetch_offset: int, upper_bound: int, into: list[AbortedTxn]) -> bool:
        """Add to `into` the entries overlapping [fetch_offset, upper_bound); True when the search is
        complete (an entry's LSO reached `upper_bound`: nothing indexed later can overlap), as Kafka's
        `collectAbortedTxns`."""
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                into.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return True
        return False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset` (the segment is cut there)."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        try:
            if keep:
                os.truncate(self._path, keep * ENTRY_SIZE)
            else:
                os.unlink(self._path)  # as if no transaction had been aborted in the segment
        except FileNotFoundError:
            pass

    def copy_to(self, path: Path) -> "TransactionIndex":
        """A new index at `path` holding these entries (the cleaner's rewritten segment keeps its markers)."""
        other = TransactionIndex(path, self.base_offset)
        other.extend(self.entries)
        return other

    def extend(self, entries: list[AbortedTxn]) -> None:
        """Append several entries at once (one write)."""
        if not entries:
            return
        if entries[0].last_offset <= self.last_offset:
            raise ValueError(f"{self.path}: entries ending at {entries[0].last_offset} are not after the last "
                             f"indexed one ({self.last_offset})")
        data = b"".join(_ENTRY.pack(VERSION, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
                        for t in entries)
        fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        self.entries.extend(entries)

    def flush(self) -> None:
        """fsync the file if there is one (worker threads)."""
        if not self.entries:
            return
        try:
            fd = os.open(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, path: Path) -> None:
        try:
            os.rename(self._path, path)
        except FileNotFoundError:
            pass
        self._path = os.fspath(path)

    def delete(self) -> None:
        try:
            os.unlink(self._path)
        except FileNotFoundError:
            pass
        self.entries = []
