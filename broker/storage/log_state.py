"""What every part of a partition's `Log` shares, declared once.

Why it exists: `Log` is split by role into mixins (`log_read`, `log_retention`,
`log_truncation`, `log_durability`); each part works on the same fields,
which `Log.__init__` sets. Declaring them here once gives every part, and a
type checker, one picture of that state instead of a copy per part.

It must never hold logic or set a value: it is a list of names and types.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from kelp.config.log_config import LogConfig

from .leader_epoch import LeaderEpochCache
from .segment import LogSegment

__all__ = ["LogState"]


class LogState:
    """The fields and helpers of `Log` its parts use (set by `Log.__init__`, defined by `Log`)."""

    directory: Path
    config: LogConfig
    leader_epochs: LeaderEpochCache
    cleaner_offset: int
    delete_horizon_due_ms: int | None  # the cleaner's: a marker's delete horizon to come back for (KIP-534)
    on_start_moved: Callable[[object], None] | None  # told when the log start moves (`Log.__init__`)
    owner: object
    # `_lock` guards the segment list and offsets (every append takes it); the order is always
    # `_flush_lock`, then `_lock`, then `_checkpoint_lock` (log_durability).
    _lock: threading.RLock
    _flush_lock: threading.Lock
    _checkpoint_lock: threading.Lock
    _segments: list[LogSegment]
    _bases: list[int]
    _log_start_offset: int
    _high_watermark: int
    _recovery_point: int
    _unflushed_records: int
    _last_flush_ms: int
    _last_checkpoint: tuple[int, int, int, int] | None
    _truncations: int
    _closed: bool
    _now_ms: Callable[[], int]
    _check_open: Callable[[], None]
    _segment_index_for: Callable[[int], int]

    if TYPE_CHECKING:  # read-only properties of `Log`; declared for the type checker alone, never defined here
        @property
        def name(self) -> str: ...

        @property
        def log_end_offset(self) -> int: ...

        @property
        def size_bytes(self) -> int: ...
