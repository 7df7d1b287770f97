"""Durability of a partition log: fsyncs, the recovery point and the partition checkpoint file.

Why it exists: an append lands in the page cache (a SIGKILL loses nothing acknowledged); this part
decides when it reaches the disk (`flush.messages`, `flush.ms`, rolled segments) and records how far
that is — the recovery point, the partition checkpoint (log start, high watermark, recovery point,
cleaner offset) and the leader-epoch file — so that recovery after a crash rescans only the tail.
`Log` mixes it in.

It must never fsync while holding the log lock (`flush` and `flush_rolled` take their values under
it, fsync without it, serialised by `_flush_lock`; checkpoint files are written under
`_checkpoint_lock` only), never take the flush lock while holding the log lock (the order is
flush lock, log lock, checkpoint lock — everywhere, `close` and `maybe_flush` included), never move
the recovery point past what was fsynced, and never rewrite a checkpoint file whose values did not
change. The event loop never calls it: appends there defer the fsync (`defer_flush`) to a worker.
"""

from __future__ import annotations

from typing import Callable

from kelp.errors import KafkaStorageError

from .checkpoint import PARTITION_CHECKPOINT, PartitionCheckpoint
from .log_state import LogState
from .segment import LogSegment


class LogDurability(LogState):
    """fsyncs and checkpoints of `Log` (mixed in; the state they share is `LogState`'s)."""

    flush_leader_epochs: Callable[[], bool]

    def flush(self) -> None:
        """fsync every segment up to the log end and advance the recovery point.

        The fsyncs run without the log lock (appends go on meanwhile); only
        what was appended before the call counts as flushed. Nothing new since
        the last fsync: no fsync, and the checkpoint is rewritten only if its
        values changed.
        """
        with self._flush_lock:
            with self._lock:
                self._check_open()
                end = self.log_end_offset
                pending = (self._segments[self._segment_index_for(self._recovery_point):]
                           if self._recovery_point < end else [])
                flushed_records = self._unflushed_records
            self._fsync_segments(pending)
            # The epochs of what is now durable must be too: recovery rebuilds epochs only past the recovery point.
            self.flush_leader_epochs()
            with self._lock:
                if self._closed:
                    return
                self._recovery_point = min(max(self._recovery_point, end), self.log_end_offset)
                self._unflushed_records = max(0, self._unflushed_records - flushed_records)
                self._last_flush_ms = self._now_ms()
                values = self._checkpoint_values()
            self._write_checkpoint_values(values)

    def _fsync_segments(self, segments: list[LogSegment]) -> None:
        """fsync each segment, without the log lock; one deleted or swapped meanwhile is skipped."""
        for segment in segments:
            try:
                segment.flush()
            except OSError as exc:
                if segment.closed:  # deleted by retention or swapped by the cleaner meanwhile
                    continue
                raise KafkaStorageError(f"{self.name}: fsync of {segment.log_path} failed: {exc}") from exc

    def flush_rolled(self) -> bool:
        """fsync the segments rolled since the recovery point and move it to the active segment's base.

        Kafka flushes a rolled segment in the background for the same reason:
        after a crash, recovery rescans only what lies past the recovery point,
        so without this a log with no flush.ms/flush.messages would be rescanned
        whole (5 GB: 9 s from a cold disk). The periodic task calls it in a
        worker thread; appends go on meanwhile (the fsyncs hold no log lock).
        """
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return False
                target = self._segments[-1].base_offset
                if self._recovery_point >= target:
                    return False
                pending = self._segments[self._segment_index_for(self._recovery_point):-1]
            self._fsync_segments(pending)
            self.flush_leader_epochs()
            with self._lock:
                if self._closed:
                    return False
                self._recovery_point = min(max(self._recovery_point, target), self.log_end_offset)
                values = self._checkpoint_values()
            self._write_checkpoint_values(values)
            return True

    def timed_work_due(self) -> bool:
        """Whether `maybe_roll_by_time`, `flush_rolled` or `maybe_flush` may have something to do now: a few
        reads without a lock (a stale answer only moves the work to the next tick).

        The periodic task asks every log each second; with 10,000 idle partitions taking three locks per
        log in each of those calls cost 5% of a core, for logs with nothing to do.
        """
        segment = self._segments[-1]
        if self._closed:
            return False
        if self._recovery_point < segment.base_offset:
            return True  # a rolled segment is not fsynced yet
        config = self.config
        now_ms = self._now_ms()
        if (not segment.is_empty and segment.rolling_timestamp_ms is not None
                and now_ms - segment.rolling_timestamp_ms >= config.segment_ms):
            return True
        return (config.flush_ms > 0 and self._recovery_point < segment.next_offset
                and now_ms - self._last_flush_ms >= config.flush_ms)

    def maybe_flush(self) -> bool:
        """fsync if flush.ms has passed since the last fsync (the periodic task calls this).

        Decided under the log lock, flushed after it is released: `flush` takes the flush lock first, and
        holding the log lock while waiting for it (an append's flush.messages fsync holds it) deadlocked.
        """
        with self._lock:
            if self._closed or self.config.flush_ms <= 0 or self._recovery_point >= self.log_end_offset:
                return False
            if self._now_ms() - self._last_flush_ms < self.config.flush_ms:
                return False
        self.flush()
        return True

    def write_checkpoint(self) -> None:
        """Persist log start, high watermark, recovery point (and a changed leader-epoch cache): values taken
        under the lock, files written without it.

        Nothing for a closed or offline log (its files stay as they are); a failed write raises
        KafkaStorageError naming the file.
        """
        with self._lock:
            if self._closed:
                return
            values = self._checkpoint_values()
        self._write_checkpoint_files(values)

    def _write_checkpoint_files(self, values: tuple[int, int, int, int]) -> None:
        """The leader-epoch checkpoint (if changed), then the partition checkpoint; without the log lock."""
        self.flush_leader_epochs()
        try:
            self._write_checkpoint_values(values)
        except OSError as exc:
            raise KafkaStorageError(
                f"{self.name}: writing {self.directory / PARTITION_CHECKPOINT} failed: {exc}") from exc

    def _checkpoint_values(self) -> tuple[int, int, int, int]:
        return (self._log_start_offset, self._high_watermark, self._recovery_point, self.cleaner_offset)

    def _write_checkpoint(self, *, durable: bool = True) -> None:
        """Atomically replace `partition.checkpoint` (fsync'd) unless it already holds these values."""
        self._write_checkpoint_values(self._checkpoint_values(), durable=durable)

    def _write_checkpoint_values(self, values: tuple[int, int, int, int], *, durable: bool = True) -> None:
        with self._checkpoint_lock:
            if values == self._last_checkpoint:
                return
            PartitionCheckpoint(
                log_start_offset=values[0],
                high_watermark=values[1],
                recovery_point=values[2],
                cleaner_offset=values[3],
            ).write(self.directory, durable=durable)
            self._last_checkpoint = values
