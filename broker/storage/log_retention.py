"""What leaves the head of a partition log: retention, DeleteRecords, the cleaner's segment swap.

Why it exists: old data goes in whole closed segments — by `retention.ms` / `retention.bytes` (policy
"delete", Kafka's `UnifiedLog.deleteOldSegments`), below a log start that DeleteRecords raised, or
replaced by cleaned copies when the cleaner (`cleaner.py`) swaps them in; each of these moves the log
start and with it the epochs and producer snapshots below it. `Log` mixes it in; it runs under
`Log`'s lock.

It must never delete the active segment or a segment holding an offset at or above the high
watermark (a follower may still need it), never move the log start down or past the high watermark,
and never swap in cleaned segments when the ones the cleaner read are no longer in the log.
"""

from __future__ import annotations

import logging
from typing import Callable

from kelp.errors import OffsetOutOfRangeError

from .log_state import LogState
from .producer_snapshot import delete_snapshots, list_snapshots
from .segment import LogSegment

log = logging.getLogger("kelp.broker.storage")


class LogRetention(LogState):
    """Retention and the log start of `Log` (mixed in; the state they share is `LogState`'s)."""

    _write_checkpoint: Callable[..., None]

    # --------------------------------------------------------------- retention

    def enforce_retention(self) -> int:
        """Delete closed segments past retention.ms / retention.bytes (policy "delete"). Returns how many."""
        with self._lock:
            self._check_open()
            if not self.config.delete:
                return self._delete_below_start()
            now_ms = self._now_ms()
            doomed = 0
            closed = self._segments[:-1]
            if self.config.retention_ms >= 0:
                for segment in closed:
                    if segment.max_timestamp < 0 and not segment.is_empty:
                        break
                    if now_ms - max(segment.max_timestamp, 0) > self.config.retention_ms:
                        doomed += 1
                    else:
                        break
            if self.config.retention_bytes >= 0:
                excess = self.size_bytes - self.config.retention_bytes
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
                if self._segments[i + 1].base_offset > self._high_watermark:
                    break
                committed += 1
            deleted = self._delete_oldest(min(doomed, committed), reason="retention")
            return deleted + self._delete_below_start()

    def _delete_below_start(self) -> int:
        count = 0
        while count + 1 < len(self._segments) and self._segments[count + 1].base_offset <= self._log_start_offset:
            count += 1
        return self._delete_oldest(count, reason="log start offset") if count else 0

    def _delete_oldest(self, count: int, *, reason: str) -> int:
        count = min(count, len(self._segments) - 1)
        if count <= 0:
            return 0
        doomed, self._segments = self._segments[:count], self._segments[count:]
        self._bases = self._bases[count:]
        new_start = max(self._log_start_offset, self._segments[0].base_offset)
        self._set_log_start(new_start)
        for segment in doomed:
            log.info("deleting %s of %s (%s)", segment.log_path.name, self.name, reason)
            segment.delete()
        return count

    def _set_log_start(self, offset: int) -> None:
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._high_watermark = max(self._high_watermark, offset)
            self.cleaner_offset = max(self.cleaner_offset, offset)
            self.leader_epochs.truncate_from_start(offset)  # its file follows with the next checkpoint
            doomed = [o for o in list_snapshots(self.directory) if o < offset]
            if doomed:
                delete_snapshots(self.directory, doomed)
            self._write_checkpoint()
            if self.on_start_moved is not None:
                self.on_start_moved(self.owner)

    def advance_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: raise the log start (never above the high watermark); whole segments go at retention."""
        with self._lock:
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"{self.name}: cannot move the log start to {offset}, above the high watermark "
                    f"{self._high_watermark}"
                )
            self._set_log_start(offset)

    # ----------------------------------------------------------------- cleaner

    def cleanable_ratio(self) -> float:
        """Dirty bytes (closed segments at or after the cleaner offset) over closed bytes."""
        with self._lock:
            closed = self._segments[:-1]
            total = sum(s.size for s in closed)
            if total == 0:
                return 0.0
            dirty = sum(s.size for s in closed if s.next_offset > self.cleaner_offset)
            return dirty / total

    def cleanable(self) -> bool:
        """True when compaction applies and the dirty ratio reaches min.cleanable.dirty.ratio, or a marker's
        delete horizon passed (KIP-534: Kafka's cleaner also picks a log for that)."""
        if not self.config.compact or len(self._segments) < 2 or self._closed:
            return False
        due = self.delete_horizon_due_ms
        if due is not None and due <= self._now_ms():
            return True
        ratio = self.cleanable_ratio()
        return ratio > 0 and ratio >= self.config.min_cleanable_dirty_ratio

    def replace_segments(self, old: list[LogSegment], new: list[LogSegment]) -> bool:
        """Swap cleaned segments in (called by the cleaner with the lock held). False if `old` changed."""
        with self._lock:
            try:
                start = self._segments.index(old[0])
            except ValueError:
                return False
            if self._segments[start : start + len(old)] != old or start + len(old) >= len(self._segments):
                return False
            self._segments[start : start + len(old)] = new
            self._bases = [s.base_offset for s in self._segments]
            return True
