"""Durability of a partition log: fsyncs, the recovery point and the partition checkpoint file.

Why it exists: an append lands in the page cache (a SIGKILL loses nothing acknowledged); this part
decides when it reaches the disk (`flush.messages`, `flush.ms`, rolled segments) and records how far
that is — the recovery point, the partition checkpoint (log start, high watermark, recovery point,
cleaner offset) and the leader-epoch file — so that recovery after a crash rescans only the tail.
`Log` composes it; retention, truncation and the appends hand it their checkpoint writes and fsyncs.

It must never fsync while holding the log lock (`flush` and `flush_rolled` take their values under
it, fsync without it, serialised by the flush lock; checkpoint files are written under
the checkpoint lock only), never take the flush lock while holding the log lock (the order is
flush lock, log lock, checkpoint lock — everywhere, `close` and `maybe_flush` included), never move
the recovery point past what was fsynced, never rewrite a checkpoint file whose values did not
change, and never replace one with values taken before it (each snapshot is numbered under the
lock). The event loop never calls it: appends there defer the fsync (`defer_flush`) to a worker.
"""

from __future__ import annotations

from kelp.errors import KafkaStorageError

from .checkpoint import PARTITION_CHECKPOINT, PartitionCheckpoint
from .log_state import LogState
from .segment import LogSegment

__all__ = ["CheckpointValues", "LogDurability"]

# (log start offset, high watermark, recovery point, cleaner offset): what `partition.checkpoint` holds; then the
# number of the snapshot (`checkpoint_values`), which the file does not hold: values are taken under the log lock
# and written after it is released, so two writers may arrive in either order, and the one with the older snapshot
# must not replace the newer (a log start moved back on disk, a recovery point ahead of a truncation).
CheckpointValues = tuple[int, int, int, int, int]



class LogDurability:
    """fsyncs, the recovery point and the checkpoint files of one `Log`."""

    __slots__ = ("_state", "_segments", "_lock", "_checkpoint_lock", "_last_checkpoint", "_taken")

    def __init__(self, state: LogState, *, on_disk: tuple[int, int, int, int] | None) -> None:
        self._state = state
        self._segments = state.segments
        self._lock = state.lock
        self._checkpoint_lock = state.checkpoint_lock
        # The checkpoint values last written (or found on disk, `on_disk`): unchanged ones are not rewritten, and
        # older snapshots never replace them. `_taken` numbers the snapshots (under the log lock).
        self._last_checkpoint: CheckpointValues | None = (*on_disk, 0) if on_disk is not None else None
        self._taken = 0

    def flush(self) -> None:
        """fsync every segment up to the log end and advance the recovery point.

        The fsyncs run without the log lock (appends go on meanwhile); only
        what was appended before the call counts as flushed. Nothing new since
        the last fsync: no fsync, and the checkpoint is rewritten only if its
        values changed.
        """
        state = self._state
        with state.flush_lock:
            with self._lock:
                state.check_open()
                end = state.log_end_offset
                pending = (self._segments[state.segment_index_for(state.recovery_point):]
                           if state.recovery_point < end else [])
                flushed_records = state.unflushed_records
            self.fsync_segments(pending)
            # The epochs of what is now durable must be too: recovery rebuilds epochs only past the recovery point.
            self.flush_leader_epochs()
            with self._lock:
                if state.closed:
                    return
                state.recovery_point = min(max(state.recovery_point, end), state.log_end_offset)
                state.unflushed_records = max(0, state.unflushed_records - flushed_records)
                state.last_flush_ms = state.clock_ms()
                values = self.checkpoint_values()
            self.write_checkpoint_values(values)

    def fsync_segments(self, segments: list[LogSegment]) -> None:
        """fsync each segment, without the log lock; one deleted or swapped meanwhile is skipped."""
        for segment in segments:
            try:
                segment.flush()
            except OSError as exc:
                if segment.closed:  # deleted by retention or swapped by the cleaner meanwhile
                    continue
                raise KafkaStorageError(f"{self._state.name}: fsync of {segment.log_path} failed: {exc}") from exc

    def flush_rolled(self) -> bool:
        """fsync the segments rolled since the recovery point and move it to the active segment's base.

        Kafka flushes a rolled segment in the background for the same reason:
        after a crash, recovery rescans only what lies past the recovery point,
        so without this a log with no flush.ms/flush.messages would be rescanned
        whole (5 GB: 9 s from a cold disk). The periodic task calls it in a
        worker thread; appends go on meanwhile (the fsyncs hold no log lock).
        """
        state = self._state
        with state.flush_lock:
            with self._lock:
                if state.closed:
                    return False
                target = self._segments[-1].base_offset
                if state.recovery_point >= target:
                    return False
                pending = self._segments[state.segment_index_for(state.recovery_point):-1]
            self.fsync_segments(pending)
            self.flush_leader_epochs()
            with self._lock:
                if state.closed:
                    return False
                state.recovery_point = min(max(state.recovery_point, target), state.log_end_offset)
                values = self.checkpoint_values()
            self.write_checkpoint_values(values)
            return True

    def timed_work_due(self) -> bool:
        """Whether `maybe_roll_by_time`, `flush_rolled` or `maybe_flush` may have something to do now: a few
        reads without a lock (a stale answer only moves the work to the next tick).

        The periodic task asks every log each second; with 10,000 idle partitions taking three locks per
        log in each of those calls cost 5% of a core, for logs with nothing to do.
        """
        state = self._state
        segment = self._segments[-1]
        if state.closed:
            return False
        if state.recovery_point < segment.base_offset:
            return True  # a rolled segment is not fsynced yet
        config = state.config
        now_ms = state.clock_ms()
        if (not segment.is_empty and segment.rolling_timestamp_ms is not None
                and now_ms - segment.rolling_timestamp_ms >= config.segment_ms):
            return True
        return (config.flush_ms > 0 and state.recovery_point < segment.next_offset
                and now_ms - state.last_flush_ms >= config.flush_ms)

    def maybe_flush(self) -> bool:
        """fsync if flush.ms has passed since the last fsync (the periodic task calls this).

        Decided under the log lock, flushed after it is released: `flush` takes the flush lock first, and
        holding the log lock while waiting for it (an append's flush.messages fsync holds it) deadlocked.
        """
        state = self._state
        with self._lock:
            if state.closed or state.config.flush_ms <= 0 or state.recovery_point >= state.log_end_offset:
                return False
            if state.clock_ms() - state.last_flush_ms < state.config.flush_ms:
                return False
        self.flush()
        return True

    def close(self) -> None:
        """The last flush: stop the appends, fsync what is not durable yet, move the recovery point to the log
        end (the next open skips recovery) and close the segments. Once only."""
        state = self._state
        # Lock order everywhere: the flush lock, then the log lock (a flush in a worker thread holds the first and
        # waits for the second). The log stops taking appends first, so what is fsynced below is all of it.
        with state.flush_lock:
            with self._lock:
                if state.closed:
                    return
                state.closed = True
                end = state.log_end_offset
                pending = (self._segments[state.segment_index_for(state.recovery_point):]
                           if state.recovery_point < end else [])
            self.fsync_segments(pending)
            # the epochs of what is durable must be too (flush_leader_epochs skips a closed log)
            self._flush_epochs()
            with self._lock:
                state.recovery_point = end
                state.unflushed_records = 0
                values = self.checkpoint_values()
            self.write_checkpoint_values(values)
            with self._lock:
                active = self._segments[-1]
                active.set_mtime(active.last_modified_ms)
                for segment in self._segments:
                    segment.close()

    def flush_leader_epochs(self) -> bool:
        """Write the leader-epoch checkpoint if it changed (fsync: worker threads only). False for a closed log."""
        if self._state.closed:
            return False
        return self._flush_epochs()

    def _flush_epochs(self) -> bool:
        try:
            return self._state.leader_epochs.flush()
        except OSError as exc:
            raise KafkaStorageError(
                f"{self._state.name}: writing its leader-epoch checkpoint failed: {exc}") from exc

    def write_checkpoint(self) -> None:
        """Persist log start, high watermark, recovery point (and a changed leader-epoch cache): values taken
        under the lock, files written without it.

        Nothing for a closed or offline log (its files stay as they are); a failed write raises
        KafkaStorageError naming the file.
        """
        with self._lock:
            if self._state.closed:
                return
            values = self.checkpoint_values()
        self.write_checkpoint_files(values)

    def write_checkpoint_files(self, values: CheckpointValues) -> None:
        """The leader-epoch checkpoint (if changed), then the partition checkpoint; without the log lock."""
        self.flush_leader_epochs()
        try:
            self.write_checkpoint_values(values)
        except OSError as exc:
            raise KafkaStorageError(
                f"{self._state.name}: writing {self._state.directory / PARTITION_CHECKPOINT} failed: {exc}") from exc

    def checkpoint_values(self) -> CheckpointValues:
        """The values `partition.checkpoint` holds, as they are now, numbered. Caller holds the log lock."""
        state = self._state
        self._taken += 1
        return (state.log_start_offset, state.high_watermark, state.recovery_point, state.cleaner_offset,
                self._taken)

    def write_checkpoint_now(self, *, durable: bool = True) -> None:
        """Atomically replace `partition.checkpoint` (fsync'd) unless it already holds these values."""
        self.write_checkpoint_values(self.checkpoint_values(), durable=durable)

    def write_checkpoint_values(self, values: CheckpointValues, *, durable: bool = True) -> None:
        """Write `values` to `partition.checkpoint` (under the checkpoint lock) unless it holds them already or a
        newer snapshot is written already."""
        with self._checkpoint_lock:
            last = self._last_checkpoint
            if last is not None and values[4] < last[4]:
                return  # taken before what is on disk: stale
            if last is not None and values[:4] == last[:4]:
                self._last_checkpoint = values  # the same values, now as of this newer snapshot
                return
            PartitionCheckpoint(
                log_start_offset=values[0],
                high_watermark=values[1],
                recovery_point=values[2],
                cleaner_offset=values[3],
            ).write(self._state.directory, durable=durable)
            self._last_checkpoint = values
