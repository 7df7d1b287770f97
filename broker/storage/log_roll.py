"""Segment rolls of a partition log: when the active segment is closed and a new one starts at the log end.

Why it exists: creating a segment's files (`.log`, `.index`, `.timeindex`) is file-system work — inode
allocation, directory updates, the journal — that can stall for milliseconds on a busy disk, and a roll
made inside an event loop's append stalled every connection of the broker with it (issue 23). So an
append on the loop defers a roll that can wait (`defer_roll`: size, age, a full index) and the replica
layer runs `roll_when_due` in a worker thread, appends to that replica held back meanwhile; the files
are made outside the log lock (reads and other threads' appends go on) and the finished segment is
installed under it in one step, so no append or read ever sees a half-made segment. Synchronous
callers (recovery, tests, a roll that cannot wait: relative offsets or positions past u32) still roll
under the lock at once (`roll_now`). `Log` composes it; the appends ask it whether and how to roll.

Crash safety: a new segment is empty until installed; killed between its files and the install, the
directory holds an empty segment at the log end (recovery opens it as the active segment) or, when
appends moved the end meanwhile, below it (recovery removes it: `loader`). Nothing appended is touched.

It must never make files while holding the log lock on the deferred path, never install a segment whose
base offset is not the log end, nor import networking.
"""

from __future__ import annotations

import logging

from kelp.errors import KafkaStorageError

from .log_state import LogState
from .segment import LogSegment

__all__ = ["MAX_SEGMENT_POSITION", "ROLL_ATTEMPTS", "SegmentRoller"]

log = logging.getLogger("kelp.broker.storage")

# A segment takes appends past segment.bytes (a deferred roll) only while its positions fit the indexes' u32.
MAX_SEGMENT_POSITION = 2**32 - 1
ROLL_ATTEMPTS = 3  # `roll_when_due` against appends that keep moving the log end


class SegmentRoller:
    """Segment rolls of one `Log`."""

    __slots__ = ("_state",)

    def __init__(self, state: LogState) -> None:
        self._state = state

    def roll_reason(self, segment: LogSegment, size: int, last_offset: int, now_ms: int) -> str | None:
        """Why `segment` must be rolled before `size` more bytes up to `last_offset` go in, or None."""
        if segment.is_empty:
            return None
        config = self._state.config
        if segment.size + size > config.segment_bytes:
            return f"size {segment.size} + {size} > segment.bytes {config.segment_bytes}"
        if segment.rolling_timestamp_ms is not None and now_ms - segment.rolling_timestamp_ms >= config.segment_ms:
            return f"age >= segment.ms {config.segment_ms}"
        if segment.index.is_full:
            return "offset index full"
        if not segment.can_hold(last_offset):
            return "relative offset overflow"
        return None

    @staticmethod
    def roll_can_wait(segment: LogSegment, size: int, last_offset: int) -> bool:
        """True if `segment` can still take the append (positions and relative offsets fit u32): then a roll
        that is due may wait for a worker thread (`defer_roll`); past that it is made at once."""
        return segment.size + size <= MAX_SEGMENT_POSITION and segment.can_hold(last_offset)

    def roll_now(self, now_ms: int) -> LogSegment:
        """Roll under the lock, files and all (synchronous callers; `roll_when_due` keeps file work outside it).
        Caller holds the lock."""
        return self._install(self._new_segment(self._state.log_end_offset, now_ms))

    def _new_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        config = self._state.config
        return LogSegment.create(
            self._state.directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_entries=config.max_index_entries,
            now_ms=now_ms,
        )

    def _install(self, segment: LogSegment) -> LogSegment:
        """Make `segment` (files made, starting at the log end) the active one. Caller holds the lock."""
        old = self._state.segments[-1]
        # fsynced by the periodic task's flush_rolled() (or the next flush), off the append path
        old.on_roll(sync=False)
        self._state.segments.append(segment)
        self._state.bases.append(segment.base_offset)
        return segment

    def roll_when_due(self, *, force: bool = False) -> LogSegment | None:
        """Roll the active segment if a roll is due (any segment that is not empty with `force`); worker threads.

        The new segment's files are made without the log lock, so appends, reads and the event loop
        never wait for the file system; only the finished segment is installed under it, and only if
        the log end is still its base offset. When appends moved it meanwhile (a caller that does not
        hold them back, as the periodic task) the files are removed and the roll is tried again, up to
        ROLL_ATTEMPTS times. A crash between making the files and installing them leaves an empty
        segment at or below the log end, which recovery keeps (at the end) or removes (below it).
        Returns the new active segment, or None when nothing was rolled.
        """
        state = self._state
        for _ in range(ROLL_ATTEMPTS):
            with self._state.lock:
                if state.closed:
                    return None
                old = self._state.segments[-1]
                now_ms = state.clock_ms()
                if old.is_empty or (not force and self.roll_reason(old, 0, old.next_offset - 1, now_ms) is None
                                    and old.size < state.config.segment_bytes):
                    return None
                base = old.next_offset
            try:
                segment = self._new_segment(base, now_ms)
            except OSError as exc:
                if state.closed:  # retired or deleted meanwhile: its directory moved or went
                    return None
                raise KafkaStorageError(f"{state.name}: creating the segment at offset {base} failed: {exc}") from exc
            with self._state.lock:
                if not state.closed and self._state.segments[-1] is old and old.next_offset == base:
                    log.debug("rolled %s at offset %d", state.name, base)
                    return self._install(segment)
            segment.delete()  # the files name an offset that is no longer the log end
        return None

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (no-op if the active one is empty)."""
        with self._state.lock:
            self._state.check_open()
            if self._state.segments[-1].is_empty:
                return self._state.segments[-1]
            return self.roll_now(self._state.clock_ms())

    def maybe_roll_by_time(self) -> bool:
        """Roll the active segment if segment.ms has passed (the periodic task calls this in a worker thread)."""
        state = self._state
        with self._state.lock:
            if state.closed:
                return False
            segment = self._state.segments[-1]
            if (segment.is_empty or segment.rolling_timestamp_ms is None
                    or state.clock_ms() - segment.rolling_timestamp_ms < state.config.segment_ms):
                return False
        return self.roll_when_due() is not None
