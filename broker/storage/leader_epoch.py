"""The leader-epoch cache: which leader epoch started at which offset.

Why it exists: after a leader change a follower asks the new leader for the
end offset of its last epoch (OffsetsForLeaderEpoch) and truncates to it, so
logs that diverged under different leaders converge. Stored as Kafka's
`leader-epoch-checkpoint` text format (version, count, then "epoch offset"
lines), replaced atomically. It must never hold entries that go backwards.

Memory first, file second: every change (`assign`, the truncations) happens
in memory at once, so a leader answers OffsetsForLeaderEpoch for the epoch it
just took even before any file landed (KIP-101 case 1), and the event loop
never waits for a disk. `flush()` writes the file (fsync) when something
changed; the log calls it from worker threads — before its recovery point
moves past the offsets an entry covers, and after truncations. What a crash
loses from memory is rebuilt at the next open from the batches recovery
rescans (each batch carries its leader epoch), as Kafka's segment recovery
does.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from pathlib import Path

from .checkpoint import write_atomically

log = logging.getLogger("kelp.broker.storage")

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1


class LeaderEpochCache:
    """(epoch, start offset) pairs, strictly increasing in both."""

    def __init__(self, directory: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self._path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)  # a str, not a Path (issue 38)
        self._entries: list[tuple[int, int]] = list(entries or [])
        self._dirty = False
        self._write_lock = threading.Lock()  # one writer at a time: an older copy never lands after a newer one

    @classmethod
    def load(cls, directory: Path) -> "LeaderEpochCache":
        path = directory / LEADER_EPOCH_CHECKPOINT
        try:
            lines = [line for line in path.read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            return cls(directory)
        try:
            if lines[0].strip() != "0":
                raise ValueError(f"unknown version {lines[0]!r}")
            count = int(lines[1])
            entries = [(int(e), int(o)) for e, o in (line.split() for line in lines[2 : 2 + count])]
            if len(entries) != count:
                raise ValueError(f"declares {count} entries, holds {len(entries)}")
        except (ValueError, IndexError) as exc:
            log.warning("ignoring unreadable %s (%s); leader epochs start empty", path, exc)
            return cls(directory)
        return cls(directory, entries)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    @property
    def dirty(self) -> bool:
        """True while memory holds a change the file does not."""
        return self._dirty

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (in memory; no-op unless it is a newer epoch). True if it
        changed."""
        if epoch < 0:
            return False
        if self._entries and epoch <= self._entries[-1][0]:
            return False
        # A new epoch cannot start before an older one's start: drop those (they were never written).
        kept = list(self._entries)
        while kept and kept[-1][1] >= start_offset:
            kept.pop()
        kept.append((epoch, start_offset))
        self._replace(kept)
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """What OffsetsForLeaderEpoch answers for `epoch`, exactly as Kafka's `LeaderEpochFileCache.endOffsetFor`.

        - undefined (-1) requested, or an epoch above the latest: (-1, -1);
        - the latest epoch: (latest, log end offset);
        - below the first epoch: (requested, start offset of the first epoch);
        - otherwise: (largest epoch <= requested, start offset of the next higher epoch).
        """
        entries = self._entries
        if epoch == UNDEFINED_EPOCH or not entries:
            return (UNDEFINED_EPOCH, -1)
        if epoch == entries[-1][0]:
            return (epoch, log_end_offset)
        epochs = [e for e, _ in entries]
        higher = bisect.bisect_right(epochs, epoch)
        if higher >= len(entries):
            return (UNDEFINED_EPOCH, -1)
        if higher == 0:
            return (epoch, entries[0][1])
        return (entries[higher - 1][0], entries[higher][1])

    def rebuild_from(self, offset: int, epoch_starts: list[tuple[int, int]]) -> None:
        """Replace the entries starting at or after `offset` with `epoch_starts` (what recovery read from the
        batches there); changes nothing (and writes nothing later) when they already agree."""
        kept = [(e, o) for e, o in self._entries if o < offset]
        for epoch, start in epoch_starts:
            if epoch < 0 or (kept and epoch <= kept[-1][0]):
                continue
            while kept and kept[-1][1] >= start:
                kept.pop()
            kept.append((epoch, start))
        if kept != self._entries:
            self._replace(kept)

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after `end_offset` (the log was truncated there)."""
        kept = [(e, o) for e, o in self._entries if o < end_offset]
        if kept != self._entries:
            self._replace(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop epochs wholly below it, clamp the one spanning it."""
        i = bisect.bisect_right([o for _, o in self._entries], start_offset) - 1
        if i <= 0 and (not self._entries or self._entries[0][1] >= start_offset):
            return
        kept = self._entries[i:]
        kept[0] = (kept[0][0], start_offset)
        if kept != self._entries:
            self._replace(kept)

    def clear(self) -> None:
        if self._entries:
            self._replace([])

    def _replace(self, entries: list[tuple[int, int]]) -> None:
        self._entries = entries  # one assignment: a reader (or `flush`) sees the old list or the new one
        self._dirty = True

    def moving(self) -> threading.Lock:
        """Held while the partition directory is renamed: no write can run in between."""
        return self._write_lock

    def move_to(self, directory: Path) -> None:
        """The directory was renamed (the caller holds `moving()`)."""
        self._path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)

    def flush(self) -> bool:
        """Write the checkpoint file (fsync) if memory changed since the last write; True if it wrote.

        File work: worker threads only. A failed write leaves the cache dirty and raises OSError.
        """
        with self._write_lock:
            if not self._dirty:
                return False
            self._dirty = False  # before the copy: a change racing with the write marks it dirty again
            entries = self._entries
            lines = ["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]
            try:
                write_atomically(Path(self._path), ("\n".join(lines) + "\n").encode())
            except OSError:
                self._dirty = True
                raise
            return True
