"""What leaves the head of a partition log: retention, DeleteRecords, the cleaner's segment swap.

Why it exists: old data goes in whole closed segments — by `retention.ms` / `retention.bytes` (policy
"delete", Kafka's `UnifiedLog.deleteOldSegments`), below a log start that DeleteRecords raised, or
replaced by cleaned copies when the cleaner (`cleaner.py`) swaps them in; each of these moves the log
start and with it the epochs and producer snapshots below it. `Log` composes it; it runs under
the log lock and has the durability part write the checkpoint a new log start calls for once the
lock is released (an fsync under it would stall every append, the event loop's included).

It must never delete the active segment or a segment holding an offset at or above the high
watermark (a follower may still need it), never move the log start down or past the high watermark,
and never swap in cleaned segments when the ones the cleaner read are no longer in the log.
"""

from __future__ import annotations

import logging

from kelp.errors import OffsetOutOfRangeError

from .log_durability import LogDurability
from .log_state import LogState
from .producer_snapshot import delete_snapshots, list_snapshots
from .segment import LogSegment

__all__ = ["LogRetention"]

log = logging.getLogger("kelp.broker.storage")


class LogRetention:
    """Retention and the log start of one `Log`."""

    __slots__ = ("_state", "_durability")

    def __init__(self, state: LogState, durability: LogDurability) -> None:
        self._state = state
        self._durability = durability

    # --------------------------------------------------------------- retention

    def enforce_retention(self) -> int:
        """Delete closed segments past retention.ms / retention.bytes (policy "delete"). Returns how many.

        A new log start's checkpoint is written (fsynced) once the log lock is released."""
        state = self._state
        with state.lock:
            state.check_open()
            start = state.log_start_offset
            deleted = self._retain()
            values = self._durability.checkpoint_values() if state.log_start_offset != start else None
        if values is not None:
            self._durability.write_checkpoint_files(values)
        return deleted

    def _retain(self) -> int:
        """`enforce_retention`'s work; caller holds the log lock."""
        state = self._state
        config = state.config
        if not config.delete:
            return self._delete_below_start()
        now_ms = state.clock_ms()
        doomed = 0
        closed = self._state.segments[:-1]
        if config.retention_ms >= 0:
            for segment in closed:
                if segment.max_timestamp < 0 and not segment.is_empty:
                    break
                if now_ms - max(segment.max_timestamp, 0) > config.retention_ms:
                    doomed += 1
                else:
                    break
        if config.retention_bytes >= 0:
            excess = state.size_bytes - config.retention_bytes
            by_size = 0
            for segment in closed:
                if excess - segment.size < 0:
                    break
                excess -= segment.size
                by_size += 1
            doomed = max(doomed, by_size)
        # Never above the high watermark: a segment goes only once every record in it is committed
        # (replicated to the ISR), so retention can never delete what a follower still needs.
        committed = 0
        for i in range(len(closed)):
            if self._state.segments[i + 1].base_offset > state.high_watermark:
                break
            committed += 1
        deleted = self._delete_oldest(min(doomed, committed), reason="retention")
        return deleted + self._delete_below_start()

    def _delete_below_start(self) -> int:
        count = 0
        segments = self._state.segments
        while count + 1 < len(segments) and segments[count + 1].base_offset <= self._state.log_start_offset:
            count += 1
        return self._delete_oldest(count, reason="log start offset") if count else 0

    def _delete_oldest(self, count: int, *, reason: str) -> int:
        state = self._state
        count = min(count, len(self._state.segments) - 1)
        if count <= 0:
            return 0
        doomed = self._state.segments[:count]
        del self._state.segments[:count]
        del state.bases[:count]
        self._set_log_start(max(state.log_start_offset, self._state.segments[0].base_offset))
        for segment in doomed:
            log.info("deleting %s of %s (%s)", segment.log_path.name, state.name, reason)
            segment.delete()
        return count

    def _set_log_start(self, offset: int) -> None:
        state = self._state
        if offset > state.log_start_offset:
            state.log_start_offset = offset
            state.high_watermark = max(state.high_watermark, offset)
            state.cleaner_offset = max(state.cleaner_offset, offset)
            state.leader_epochs.truncate_from_start(offset)  # its file is written with the checkpoint
            doomed = [o for o in list_snapshots(state.directory) if o < offset]
            if doomed:
                delete_snapshots(state.directory, doomed)
            # The checkpoint is written by the caller once it released the log lock (never fsync under it).

    def advance_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: raise the log start (never above the high watermark); whole segments go at retention."""
        state = self._state
        with state.lock:
            if offset > state.high_watermark:
                raise OffsetOutOfRangeError(
                    f"{state.name}: cannot move the log start to {offset}, above the high watermark "
                    f"{state.high_watermark}"
                )
            start = state.log_start_offset
            self._set_log_start(offset)
            values = self._durability.checkpoint_values() if state.log_start_offset != start else None
        if values is not None:
            self._durability.write_checkpoint_files(values)

    # ----------------------------------------------------------------- cleaner

    def cleanable_ratio(self) -> float:
        """Dirty bytes (closed segments at or after the cleaner offset) over closed bytes."""
        with self._state.lock:
            closed = self._state.segments[:-1]
            total = sum(s.size for s in closed)
            if total == 0:
                return 0.0
            dirty = sum(s.size for s in closed if s.next_offset > self._state.cleaner_offset)
            return dirty / total

    def cleanable(self) -> bool:
        """True when compaction applies and the dirty ratio reaches min.cleanable.dirty.ratio, or a marker's
        delete horizon passed (KIP-534: Kafka's cleaner also picks a log for that)."""
        state = self._state
        if not state.config.compact or len(self._state.segments) < 2 or state.closed:
            return False
        due = state.delete_horizon_due_ms
        if due is not None and due <= state.clock_ms():
            return True
        ratio = self.cleanable_ratio()
        return ratio > 0 and ratio >= state.config.min_cleanable_dirty_ratio

    def replace_segments(self, old: list[LogSegment], new: list[LogSegment]) -> bool:
        """Swap cleaned segments in (called by the cleaner with the lock held). False if `old` changed."""
        with self._state.lock:
            segments = self._state.segments
            try:
                start = segments.index(old[0])
            except ValueError:
                return False
            if segments[start : start + len(old)] != old or start + len(old) >= len(segments):
                return False
            segments[start : start + len(old)] = new
            self._state.bases[:] = [s.base_offset for s in segments]
            return True
