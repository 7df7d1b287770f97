"""Truncation, and what must follow the log end: the leader-epoch cache and the producer snapshots.

Why it exists: replication cuts a follower's log where it diverged from its leader (KIP-101/279), and
both the leader-epoch cache and the producer snapshots describe offsets: cut with the log, or an
epoch would answer OffsetsForLeaderEpoch for records that are gone and a snapshot would restore
producer state for batches no longer stored. As Kafka's `UnifiedLog.truncateTo` with its
`leaderEpochCache` and `producerStateManager`. `Log` composes it; it runs under the log lock and
has the durability part write the checkpoint files once the lock is released.

It must never choose the offset to truncate to (the replica layer does), never leave an epoch entry
or a producer snapshot above the new log end, and never install a snapshot across a truncation
(`truncation_generation`) or outside [log start, log end].
"""

from __future__ import annotations

import logging
import os

from .checkpoint import fsync_dir
from .log_durability import LogDurability
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

__all__ = ["LogTruncator"]

log = logging.getLogger("kelp.broker.storage")


class LogTruncator:
    """Truncation, leader epochs and producer snapshots of one `Log`."""

    __slots__ = ("_state", "_durability")

    def __init__(self, state: LogState, durability: LogDurability) -> None:
        self._state = state
        self._durability = durability

    # ----------------------------------------------------------- leader epochs

    def latest_epoch(self) -> int:
        return self._state.leader_epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch; (-1, -1) when unknown."""
        with self._state.lock:
            return self._state.leader_epochs.end_offset_for(epoch, self._state.log_end_offset)

    def assign_leader_epoch(self, epoch: int, start_offset: int | None = None) -> None:
        """Record that this replica leads from `epoch` at `start_offset` (default: the log end), in memory.

        No file work: the replica layer calls it on the event loop the moment it takes leadership, so an
        OffsetsForLeaderEpoch that arrives next is answered with this epoch (KIP-101 case 1); the checkpoint
        file follows with `flush_leader_epochs()` in a worker thread.
        """
        state = self._state
        with self._state.lock:
            state.check_open()
            state.leader_epochs.assign(epoch, state.log_end_offset if start_offset is None else start_offset)

    # -------------------------------------------------------------- truncation

    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= `offset` (a follower diverged from its leader). Worker threads only.

        As Kafka, the leader-epoch cache is cut at `offset` even when no record goes (an epoch this
        replica took as leader without writing a record must not outlive a truncation to its start), and
        producer snapshots above the new end go. The checkpoint files are written after the lock is released.
        """
        state = self._state
        segments = self._state.segments
        with self._state.lock:
            state.check_open()
            if offset >= state.log_end_offset:
                state.leader_epochs.truncate_from_end(state.log_end_offset)
            elif offset <= segments[0].base_offset or offset < state.log_start_offset:
                self._truncate_fully_locked(offset)
            else:
                while len(segments) > 1 and segments[-1].base_offset >= offset:
                    segment = segments.pop()
                    state.bases.pop()
                    segment.delete()
                removed = segments[-1].truncate_to(offset)
                log.info("truncated %s to offset %d (%d bytes removed)", state.name, offset, removed)
                self._after_truncation()
            values = self._durability.checkpoint_values()
        self._durability.write_checkpoint_files(values)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at `offset` (a follower far behind the leader's log start)."""
        with self._state.lock:
            self._state.check_open()
            self._truncate_fully_locked(offset)
            values = self._durability.checkpoint_values()
        self._durability.write_checkpoint_files(values)

    def _truncate_fully_locked(self, offset: int) -> None:
        state = self._state
        for segment in self._state.segments:
            segment.delete()
        segment = LogSegment.create(
            state.directory, offset, index_interval_bytes=state.config.index_interval_bytes,
            max_index_entries=state.config.max_index_entries, now_ms=state.clock_ms(),
        )
        state.set_segments([segment])
        state.log_start_offset = offset
        state.cleaner_offset = offset
        state.leader_epochs.clear()
        self._after_truncation(every_snapshot=True)

    def _after_truncation(self, *, every_snapshot: bool = False) -> None:
        """Caller holds the lock; files are written by `write_checkpoint_files` once it is released."""
        state = self._state
        end = state.log_end_offset
        state.truncations += 1
        state.recovery_point = min(state.recovery_point, end)
        state.high_watermark = min(state.high_watermark, end)
        state.cleaner_offset = min(state.cleaner_offset, end)
        state.leader_epochs.truncate_from_end(end)
        doomed = [o for o in list_snapshots(state.directory)
                  if every_snapshot or o > end or o < state.log_start_offset]
        if doomed:
            delete_snapshots(state.directory, doomed)

    # ------------------------------------------------------- producer snapshots

    @property
    def truncation_generation(self) -> int:
        """Changes with every truncation: capture it with a producer snapshot's state (see
        `write_producer_snapshot`)."""
        return self._state.truncations

    def producer_snapshot_offsets(self) -> list[int]:
        """Offsets of the producer snapshots on disk, ascending (file work: worker threads)."""
        return list_snapshots(self._state.directory)

    def read_producer_snapshot(self, offset: int) -> list[ProducerEntry]:
        """The snapshot at `offset`; `CorruptSnapshotError` (a ValueError) if it cannot be trusted, OSError if gone."""
        return read_snapshot(self._state.directory, offset)

    def delete_producer_snapshots(self, offsets: list[int]) -> int:
        return delete_snapshots(self._state.directory, offsets)

    def write_producer_snapshot(self, offset: int, entries: list[ProducerEntry], *, generation: int) -> bool:
        """Store the producer state as it was with every batch below `offset` applied (worker threads).

        `generation` is `truncation_generation` when the state was captured: if the log was truncated
        since, or `offset` is no longer within [log start, log end], nothing is installed (False) — a
        snapshot must never describe records the log does not hold. The file is written and fsynced
        without the lock; only the rename happens under it, so a truncation cannot slip in between.
        """
        state = self._state
        if state.closed:
            return False
        tmp = write_snapshot_file(state.directory, offset, entries)
        with self._state.lock:
            ok = (not state.closed and state.truncations == generation
                  and state.log_start_offset <= offset <= state.log_end_offset)
            if ok:
                os.replace(tmp, snapshot_path(state.directory, offset))
        if not ok:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            return False
        fsync_dir(state.directory)
        return True
