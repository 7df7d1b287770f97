"""The state every part of a partition's `Log` shares: the segment list, the offsets, the locks.

Why it exists: `Log` is composed of one object per role (appends, reads, rolls, retention,
truncation, durability, the aborted-transaction indexes), and they all work on the same segment
list under the same lock and move the same offsets. This object is that shared state, handed to
each part when `Log` builds them; what only one part uses stays in that part.

The segment list and its base offsets are mutated in place, never replaced, so a part may hold
them (and the locks, which never change) directly and read them without a hop through here on its
hot path. Lock order, everywhere: `flush_lock`, then `lock`, then `checkpoint_lock`
(`log_durability`).

It must hold no policy: the few helpers here answer from the state alone.
"""

from __future__ import annotations

import bisect
import threading
from pathlib import Path

from kelp.clock import WallClockMs
from kelp.config.log_config import LogConfig
from kelp.errors import KafkaStorageError

from .leader_epoch import LeaderEpochCache
from .segment import LogSegment

__all__ = ["LogState"]


class LogState:
    """One partition log's shared state. Fields change only under `lock` (the locks themselves never)."""

    __slots__ = (
        "directory", "config", "clock_ms", "lock", "flush_lock", "checkpoint_lock", "segments", "bases",
        "leader_epochs", "log_start_offset", "high_watermark", "recovery_point", "cleaner_offset",
        "unflushed_records", "last_flush_ms", "closed", "offline_reason", "truncations", "delete_horizon_due_ms",
    )

    def __init__(self, directory: Path, config: LogConfig, clock_ms: WallClockMs, segments: list[LogSegment],
                 leader_epochs: LeaderEpochCache) -> None:
        self.directory = directory  # moves with `Log.retire`
        self.config = config  # replaced by `Log.update_config`
        self.clock_ms = clock_ms  # wall-clock ms since the epoch (what is stored is wall-clock ms)
        self.lock = threading.RLock()  # the segment list and offsets; every append takes it
        # fsyncs and checkpoint files happen outside `lock`: these serialise them among themselves instead.
        self.flush_lock = threading.Lock()
        self.checkpoint_lock = threading.Lock()
        self.segments = segments  # oldest first; the last is the active one
        self.bases = [s.base_offset for s in segments]  # their base offsets, for `segment_index_for`
        self.leader_epochs = leader_epochs
        self.log_start_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        self.cleaner_offset = 0
        self.unflushed_records = 0
        self.last_flush_ms = 0
        self.closed = False  # closed, retired or offline: no appends, nothing left to flush
        self.offline_reason = ""
        # Bumped by every truncation: a producer snapshot captured before one is not installed after it.
        self.truncations = 0
        # Set by the cleaner (in memory): the earliest delete horizon of a marker it left waiting for it (KIP-534);
        # once it passed, the log is worth a pass even with nothing dirty. None: none known (after a restart the
        # next pass finds them again).
        self.delete_horizon_due_ms: int | None = None

    @property
    def name(self) -> str:
        """`<topic>-<partition>`, the directory name (used in error messages)."""
        return self.directory.name

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign."""
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        """The bytes of every segment (read without the lock: from a copy of the list, as it was)."""
        return sum(s.size for s in tuple(self.segments))

    def check_open(self) -> None:
        """Raise `KafkaStorageError` unless the log takes appends and serves reads."""
        if self.closed:
            raise KafkaStorageError(f"{self.name}: the log is "
                                    f"{'offline (' + self.offline_reason + ')' if self.offline_reason else 'closed'}")

    def segment_index_for(self, offset: int) -> int:
        """The index of the segment that holds `offset` (the first for one below the log start)."""
        return max(0, bisect.bisect_right(self.bases, offset) - 1)

    def set_segments(self, segments: list[LogSegment]) -> None:
        """Replace the whole segment list, in place (parts hold the lists). Caller holds `lock`."""
        self.segments[:] = segments
        self.bases[:] = [s.base_offset for s in segments]
