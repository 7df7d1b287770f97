"""Truncation, and what must follow the log end: the leader-epoch cache and the producer snapshots.

Why it exists: replication cuts a follower's log where it diverged from its leader (KIP-101/279), and
both the leader-epoch cache and the producer snapshots describe offsets: cut with the log, or an
epoch would answer OffsetsForLeaderEpoch for records that are gone and a snapshot would restore
producer state for batches no longer stored. As Kafka's `UnifiedLog.truncateTo` with its
`leaderEpochCache` and `producerStateManager`. `Log` mixes it in; it runs under `Log`'s lock and
writes the checkpoint files once the lock is released.

It must never choose the offset to truncate to (the replica layer does), never leave an epoch entry
or a producer snapshot above the new log end, and never install a snapshot across a truncation
(`truncation_generation`) or outside [log start, log end].
"""

from __future__ import annotations

import logging
import os
from typing import Callable

from kelp.errors import KafkaStorageError

from .checkpoint import fsync_dir
from .log_state import LogState
from .producer_snapshot import (
    ProducerEntry,
    delete_snapshots,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot_file,
)
from .segment import LogSegment

log = logging.getLogger("kelp.broker.storage")


class LogTruncation(LogState):
    """Truncation, leader epochs and producer snapshots of `Log` (mixed in; the state they share is `LogState`'s)."""

    _checkpoint_values: Callable[[], tuple[int, int, int, int]]
    _write_checkpoint_files: Callable[[tuple[int, int, int, int]], None]

    # ----------------------------------------------------------- leader epochs

    def latest_epoch(self) -> int:
        return self.leader_epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch; (-1, -1) when unknown."""
        with self._lock:
            return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    def assign_leader_epoch(self, epoch: int, start_offset: int | None = None) -> None:
        """Record that this replica leads from `epoch` at `start_offset` (default: the log end), in memory.

        No file work: the replica layer calls it on the event loop the moment it takes leadership, so an
        OffsetsForLeaderEpoch that arrives next is answered with this epoch (KIP-101 case 1); the checkpoint
        file follows with `flush_leader_epochs()` in a worker thread.
        """
        with self._lock:
            self._check_open()
            self.leader_epochs.assign(epoch, self.log_end_offset if start_offset is None else start_offset)

    def flush_leader_epochs(self) -> bool:
        """Write the leader-epoch checkpoint if it changed (fsync: worker threads only). False for a closed log."""
        if self._closed:
            return False
        try:
            return self.leader_epochs.flush()
        except OSError as exc:
            raise KafkaStorageError(f"{self.name}: writing its leader-epoch checkpoint failed: {exc}") from exc

    # -------------------------------------------------------------- truncation

    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= `offset` (a follower diverged from its leader). Worker threads only.

        As Kafka, the leader-epoch cache is cut at `offset` even when no record goes (an epoch this
        replica took as leader without writing a record must not outlive a truncation to its start), and
        producer snapshots above the new end go. The checkpoint files are written after the lock is released.
        """
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                self.leader_epochs.truncate_from_end(self.log_end_offset)
            elif offset <= self._segments[0].base_offset or offset < self._log_start_offset:
                self._truncate_fully_locked(offset)
            else:
                while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                    segment = self._segments.pop()
                    self._bases.pop()
                    segment.delete()
                removed = self._segments[-1].truncate_to(offset)
                log.info("truncated %s to offset %d (%d bytes removed)", self.name, offset, removed)
                self._after_truncation()
            values = self._checkpoint_values()
        self._write_checkpoint_files(values)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at `offset` (a follower far behind the leader's log start)."""
        with self._lock:
            self._check_open()
            self._truncate_fully_locked(offset)
            values = self._checkpoint_values()
        self._write_checkpoint_files(values)

    def _truncate_fully_locked(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        now_ms = self._now_ms()
        segment = LogSegment.create(
            self.directory, offset, index_interval_bytes=self.config.index_interval_bytes,
            max_index_entries=self.config.max_index_entries, now_ms=now_ms,
        )
        self._segments, self._bases = [segment], [offset]
        self._log_start_offset = offset
        self.cleaner_offset = offset
        self.leader_epochs.clear()
        self._after_truncation(every_snapshot=True)

    def _after_truncation(self, *, every_snapshot: bool = False) -> None:
        """Caller holds the lock; files are written by `_write_checkpoint_files` once it is released."""
        end = self.log_end_offset
        self._truncations += 1
        self._recovery_point = min(self._recovery_point, end)
        self._high_watermark = min(self._high_watermark, end)
        self.cleaner_offset = min(self.cleaner_offset, end)
        self.leader_epochs.truncate_from_end(end)
        doomed = [o for o in list_snapshots(self.directory)
                  if every_snapshot or o > end or o < self._log_start_offset]
        if doomed:
            delete_snapshots(self.directory, doomed)

    # ------------------------------------------------------- producer snapshots

    @property
    def truncation_generation(self) -> int:
        """Changes with every truncation: capture it with a producer snapshot's state (see
        `write_producer_snapshot`)."""
        return self._truncations

    def producer_snapshot_offsets(self) -> list[int]:
        """Offsets of the producer snapshots on disk, ascending (file work: worker threads)."""
        return list_snapshots(self.directory)

    def read_producer_snapshot(self, offset: int) -> list[ProducerEntry]:
        """The snapshot at `offset`; `CorruptSnapshotError` (a ValueError) if it cannot be trusted, OSError if gone."""
        return read_snapshot(self.directory, offset)

    def delete_producer_snapshots(self, offsets: list[int]) -> int:
        return delete_snapshots(self.directory, offsets)

    def write_producer_snapshot(self, offset: int, entries: list[ProducerEntry], *, generation: int) -> bool:
        """Store the producer state as it was with every batch below `offset` applied (worker threads).

        `generation` is `truncation_generation` when the state was captured: if the log was truncated
        since, or `offset` is no longer within [log start, log end], nothing is installed (False) — a
        snapshot must never describe records the log does not hold. The file is written and fsynced
        without the lock; only the rename happens under it, so a truncation cannot slip in between.
        """
        if self._closed:
            return False
        tmp = write_snapshot_file(self.directory, offset, entries)
        with self._lock:
            ok = (not self._closed and self._truncations == generation
                  and self._log_start_offset <= offset <= self.log_end_offset)
            if ok:
                os.replace(tmp, snapshot_path(self.directory, offset))
        if not ok:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            return False
        fsync_dir(self.directory)
        return True
