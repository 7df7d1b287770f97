"""The leader-epoch cache: which leader epoch started at which offset.

Why it exists: after a leader change a follower asks the new leader for the
end offset of its last epoch (OffsetsForLeaderEpoch) and truncates to it, so
logs that diverged under different leaders converge. Stored as Kafka's
`leader-epoch-checkpoint` text format (version, count, then "epoch offset"
lines), replaced atomically. It must never hold entries that go backwards.
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path

from .checkpoint import write_atomically

log = logging.getLogger("kelp.broker.storage")

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1


class LeaderEpochCache:
    """(epoch, start offset) pairs, strictly increasing in both."""

    def __init__(self, directory: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self._path = directory / LEADER_EPOCH_CHECKPOINT
        self._entries: list[tuple[int, int]] = list(entries or [])

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

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (no-op unless it is a newer epoch)."""
        if epoch < 0:
            return
        if self._entries and epoch <= self._entries[-1][0]:
            return
        # A new epoch cannot start before an older one's start: drop those (they were never written).
        while self._entries and self._entries[-1][1] >= start_offset:
            self._entries.pop()
        self._entries.append((epoch, start_offset))
        self._write()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """What OffsetsForLeaderEpoch answers for `epoch`, exactly as Kafka's `LeaderEpochFileCache.endOffsetFor`.

        - undefined (-1) requested, or an epoch above the latest: (-1, -1);
        - the latest epoch: (latest, log end offset);
        - below the first epoch: (requested, start offset of the first epoch);
        - otherwise: (largest epoch <= requested, start offset of the next higher epoch).
        """
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return (UNDEFINED_EPOCH, -1)
        if epoch == self._entries[-1][0]:
            return (epoch, log_end_offset)
        epochs = [e for e, _ in self._entries]
        higher = bisect.bisect_right(epochs, epoch)
        if higher >= len(self._entries):
            return (UNDEFINED_EPOCH, -1)
        if higher == 0:
            return (epoch, self._entries[0][1])
        return (self._entries[higher - 1][0], self._entries[higher][1])

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after `end_offset` (the log was truncated there)."""
        kept = [(e, o) for e, o in self._entries if o < end_offset]
        if kept != self._entries:
            self._entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop epochs wholly below it, clamp the one spanning it."""
        i = bisect.bisect_right([o for _, o in self._entries], start_offset) - 1
        if i <= 0 and (not self._entries or self._entries[0][1] >= start_offset):
            return
        kept = self._entries[i:]
        kept[0] = (kept[0][0], start_offset)
        if kept != self._entries:
            self._entries = kept
            self._write()

    def clear(self) -> None:
        self._entries = []
        self._write()

    def _write(self) -> None:
        lines = ["0", str(len(self._entries))] + [f"{e} {o}" for e, o in self._entries]
        write_atomically(self._path, ("\n".join(lines) + "\n").encode())
