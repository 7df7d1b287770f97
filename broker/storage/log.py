"""The log of one partition replica: an ordered list of segments with one active tail.

Why it exists: it is the only writer of a partition's directory, and the one class other code uses
for it. It opens the log (recovery, `loader.py`), composes the parts that do the work — one object
per role, one module each — and owns the log's life from `open` to `close`/`retire`/`delete`:

- `log_state.LogState`: what the parts share (the segment list, the offsets, the locks);
- `log_append.LogAppender`: appends as leader (validated, numbered) and as follower;
- `log_read.LogReader`: reads, file ranges for sendfile, ListOffsets lookups, header walks;
- `log_roll.SegmentRoller`: segment rolls by size, time and index space;
- `log_retention.LogRetention`: retention, DeleteRecords' log start, the cleaner's swap;
- `log_truncation.LogTruncator`: truncation and what follows the log end (leader epochs, producer
  snapshots);
- `log_durability.LogDurability`: fsyncs, the recovery point, the checkpoint files;
- `log_txn.AbortedTxnIndexes`: the segments' aborted-transaction indexes.

Beyond opening, its properties and its lifecycle, each method of `Log` is its part's, forwarded in
one line and documented at the part: one call more than a method of `Log`'s own, below what a
produce or a fetch can measure; bound onto each instance instead, the hot ones would cost 8 objects
per partition (tests/replication/test_partition_memory.py).

Time: `clock_ms` returns wall-clock milliseconds since the epoch (`kelp.clock`: what is stored is
wall-clock ms); every `*_ms` value in these modules is one.

Thread-safety: one `threading.RLock` per log guards appends, reads, rolls, retention and the
cleaner's final swap; the cleaner does its heavy work outside it, and so does a roll made in a
worker thread (`defer_roll`, `roll_when_due`): the new segment's files are made before it takes
the lock to install them. It must never import networking, decode records on the append/read path
(except where the topic asks for it: a compacted topic's key check, a `compression.type` codec's
recompression — both per batch), or serve bytes recovery has not validated.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Callable, Iterator

from kelp.clock import WallClockMs, wall_clock_ms
from kelp.config.log_config import LogConfig
from kelp.control_records import ControlMarker
from kelp.records.header import BatchInfo

from .checkpoint import PartitionCheckpoint
from .indexes.txn_index import AbortedTxn
from .leader_epoch import LeaderEpochCache
from .loader import load_segments
from .log_append import AppendResult, LogAppender
from .log_durability import LogDurability
from .log_read import FileSlice, LogReader
from .log_retention import LogRetention
from .log_roll import SegmentRoller
from .log_state import LogState
from .log_truncation import LogTruncator
from .log_txn import AbortedTxnIndexes
from .producer_snapshot import ProducerEntry, delete_snapshots, list_snapshots
from .segment import LogSegment

__all__ = ["Log"]

log = logging.getLogger("kelp.broker.storage")


class Log:
    """One partition replica's log. Create with `Log.open`."""

    __slots__ = ("_state", "_segments", "leader_epochs", "_retired", "topic_id", "_close_snapshot",
                 "first_unstable_offset", "_durability", "_rolls", "_appender", "_reader", "_retention", "_truncator",
                 "_txns")

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        clock_ms: WallClockMs,
        segments: list[LogSegment],
        checkpoint: PartitionCheckpoint,
        epochs: LeaderEpochCache,
        checkpoint_on_disk: bool = False,
    ) -> None:
        for segment in segments[:-1]:
            segment.release_index_files()
        state = self._state = LogState(directory, config, clock_ms, segments, epochs)
        self._segments = state.segments
        end = state.log_end_offset
        state.log_start_offset = max(checkpoint.log_start_offset, segments[0].base_offset)
        state.recovery_point = min(checkpoint.recovery_point, end)
        state.high_watermark = min(max(checkpoint.high_watermark, state.log_start_offset), end)
        state.cleaner_offset = max(checkpoint.cleaner_offset, state.log_start_offset)
        state.last_flush_ms = clock_ms()
        self.leader_epochs = epochs
        self._retired = False  # renamed for deletion (`retire`)
        # The topic this log belongs to (hex id), as its `partition.metadata` says: set by the LogManager; None for
        # a log written before ids were stored (adopted by the first metadata that places it).
        self.topic_id: str | None = None
        self._close_snapshot: tuple[int, list[ProducerEntry], int] | None = None
        # Set by the replica layer (it owns producer state): the first offset of a transaction not decided
        # and replicated yet, None when there is none. The cleaner stops below it.
        self.first_unstable_offset: int | None = None
        # The parts (see the module docstring).
        durability = self._durability = LogDurability(state, on_disk=(
            (checkpoint.log_start_offset, checkpoint.high_watermark, checkpoint.recovery_point,
             checkpoint.cleaner_offset) if checkpoint_on_disk else None))
        rolls = self._rolls = SegmentRoller(state)
        self._appender = LogAppender(state, rolls, durability)
        self._reader = LogReader(state)
        self._retention = LogRetention(state, durability)
        self._truncator = LogTruncator(state, durability)
        # Markers from the recovery point on may lack their aborted-transaction entry (an unclean shutdown).
        self._txns = AbortedTxnIndexes(state, recovery_from=(
            state.recovery_point if state.recovery_point < end else None))

    # ----------------------------------------------------------------- opening

    @classmethod
    def open(cls, directory: Path | str, config: LogConfig | None = None, *,
             clock_ms: WallClockMs = wall_clock_ms) -> "Log":
        """Open (or create) the log in `directory`, running recovery on whatever is there."""
        directory = Path(directory)
        config = config or LogConfig()
        directory.mkdir(parents=True, exist_ok=True)
        now_ms = clock_ms()
        stored = PartitionCheckpoint.read(directory)
        checkpoint = stored or PartitionCheckpoint()
        result = load_segments(
            directory,
            config,
            recovery_point=checkpoint.recovery_point if stored else -1,
            log_start_offset=checkpoint.log_start_offset,
            now_ms=now_ms,
            # Without a checkpoint a compacted log's holes cannot be told from lost segments: trust them.
            compacted_below=checkpoint.cleaner_offset if stored else (2**63 if config.compact else 0),
        )
        segments = result.segments
        if not segments:
            base = checkpoint.log_start_offset
            segments = [
                LogSegment.create(
                    directory, base, index_interval_bytes=config.index_interval_bytes,
                    max_index_entries=config.max_index_entries, now_ms=now_ms,
                )
            ]
        epochs = LeaderEpochCache.load(directory)
        instance = cls(directory, config, clock_ms=clock_ms, segments=segments, checkpoint=checkpoint, epochs=epochs,
                       checkpoint_on_disk=stored is not None)
        if result.gaps:
            # Serve nothing rather than a silent hole, and change nothing on disk (no checkpoint, no epoch
            # truncation): the operator puts the missing segment back and restarts.
            instance.mark_offline("; ".join(str(g) for g in result.gaps))
            return instance
        if result.rescanned_from is not None:
            # The epochs of what recovery rescanned come from the batches themselves (as Kafka's segment
            # recovery): an entry the checkpoint lost in a crash is found again, a stale one is replaced.
            epochs.rebuild_from(result.rescanned_from, result.epoch_starts)
        end, start = instance.log_end_offset, instance.log_start_offset
        epochs.truncate_from_end(end)
        if start > segments[0].base_offset:
            epochs.truncate_from_start(start)
        epochs.flush()
        stale = [o for o in list_snapshots(directory) if o > end or o < start]
        if stale:
            delete_snapshots(directory, stale)
        # A new, empty log: losing this file in a crash only means "scan everything",
        # which is nothing, so no fsync (50 fsync'd writes for __consumer_offsets stalled ~1 s).
        instance._durability.write_checkpoint_now(durable=not (stored is None and end == start == 0))
        return instance

    def __repr__(self) -> str:
        return (
            f"Log({self.name}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"segments={len(self._segments)})"
        )

    # -------------------------------------------------------------- properties

    @property
    def name(self) -> str:
        """`<topic>-<partition>`, the directory name (used in error messages)."""
        return self._state.name

    @property
    def directory(self) -> Path:
        """The partition's directory (`retire` renames it)."""
        return self._state.directory

    @property
    def config(self) -> LogConfig:
        """The topic's log settings as they are now (`update_config`)."""
        return self._state.config

    @property
    def log_start_offset(self) -> int:
        return self._state.log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign."""
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._state.high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        state = self._state
        state.high_watermark = min(max(value, state.log_start_offset), self._segments[-1].next_offset)

    @property
    def recovery_point(self) -> int:
        return self._state.recovery_point

    @property
    def cleaner_offset(self) -> int:
        """Where the cleaner's next pass starts (what lies below it is clean); the cleaner moves it."""
        return self._state.cleaner_offset

    @cleaner_offset.setter
    def cleaner_offset(self, value: int) -> None:
        self._state.cleaner_offset = value

    @property
    def delete_horizon_due_ms(self) -> int | None:
        """The cleaner's, in memory: the earliest delete horizon of a marker it left waiting (KIP-534)."""
        return self._state.delete_horizon_due_ms

    @delete_horizon_due_ms.setter
    def delete_horizon_due_ms(self, value: int | None) -> None:
        self._state.delete_horizon_due_ms = value

    @property
    def size_bytes(self) -> int:
        return self._state.size_bytes

    @property
    def segments(self) -> list[LogSegment]:
        """A snapshot of the segments, oldest first; the last is the active one."""
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def lock(self) -> threading.RLock:
        return self._state.lock

    @property
    def offline_reason(self) -> str:
        """Why the log is offline (a hole between segments, a failed swap), or "" while it serves."""
        return self._state.offline_reason

    @property
    def closed(self) -> bool:
        """Closed, retired (moved or deleted) or offline: it takes no appends and has nothing left to flush."""
        return self._state.closed

    # ------------------------------------------------------- the parts' doors (each documented at its part)

    def validate(self, data: bytes | bytearray | memoryview, *, origin: str = "client",
                 limit_size: bool = True) -> list[BatchInfo]:
        return self._appender.validate(data, origin=origin, limit_size=limit_size)

    def append_as_leader(
        self, data: bytes | bytearray | memoryview, *, leader_epoch: int, origin: str = "client",
        defer_flush: bool = False, defer_roll: bool = False, batches: list[BatchInfo] | None = None,
        keys_checked: bool = False,
    ) -> AppendResult:
        return self._appender.append_as_leader(
            data, leader_epoch=leader_epoch, origin=origin, defer_flush=defer_flush, defer_roll=defer_roll,
            batches=batches, keys_checked=keys_checked)

    def append_as_follower(self, data: bytes | bytearray | memoryview, *,
                           defer_flush: bool = False, defer_roll: bool = False) -> AppendResult | None:
        return self._appender.append_as_follower(data, defer_flush=defer_flush, defer_roll=defer_roll)

    def read(self, offset: int, *, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> bytes:
        return self._reader.read(offset, max_bytes=max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)

    def read_slice(self, offset: int, *, max_bytes: int, max_offset: int | None = None,
                   min_one_batch: bool = True) -> FileSlice | None:
        return self._reader.read_slice(offset, max_bytes=max_bytes, max_offset=max_offset,
                                       min_one_batch=min_one_batch)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        return self._reader.offset_for_timestamp(timestamp_ms)

    def max_timestamp_and_offset(self) -> tuple[int, int] | None:
        return self._reader.max_timestamp_and_offset()

    def batch_headers(self, start_offset: int, end_offset: int | None = None) -> Iterator[BatchInfo]:
        return self._reader.batch_headers(start_offset, end_offset)

    def replay_batches(self, start_offset: int,
                       end_offset: int | None = None) -> Iterator[tuple[BatchInfo, ControlMarker | None]]:
        return self._reader.replay_batches(start_offset, end_offset)

    def roll(self) -> LogSegment:
        return self._rolls.roll()

    def roll_when_due(self, *, force: bool = False) -> LogSegment | None:
        return self._rolls.roll_when_due(force=force)

    def maybe_roll_by_time(self) -> bool:
        return self._rolls.maybe_roll_by_time()

    def enforce_retention(self) -> int:
        return self._retention.enforce_retention()

    def advance_log_start_offset(self, offset: int) -> None:
        self._retention.advance_log_start_offset(offset)

    def cleanable_ratio(self) -> float:
        return self._retention.cleanable_ratio()

    def cleanable(self) -> bool:
        return self._retention.cleanable()

    def replace_segments(self, old: list[LogSegment], new: list[LogSegment]) -> bool:
        return self._retention.replace_segments(old, new)

    def latest_epoch(self) -> int:
        return self._truncator.latest_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._truncator.end_offset_for_epoch(epoch)

    def assign_leader_epoch(self, epoch: int, start_offset: int | None = None) -> None:
        self._truncator.assign_leader_epoch(epoch, start_offset)

    def truncate_to(self, offset: int) -> None:
        self._truncator.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._truncator.truncate_fully_and_start_at(offset)

    @property
    def truncation_generation(self) -> int:
        return self._truncator.truncation_generation

    def producer_snapshot_offsets(self) -> list[int]:
        return self._truncator.producer_snapshot_offsets()

    def read_producer_snapshot(self, offset: int) -> list[ProducerEntry]:
        return self._truncator.read_producer_snapshot(offset)

    def delete_producer_snapshots(self, offsets: list[int]) -> int:
        return self._truncator.delete_producer_snapshots(offsets)

    def write_producer_snapshot(self, offset: int, entries: list[ProducerEntry], *, generation: int) -> bool:
        return self._truncator.write_producer_snapshot(offset, entries, generation=generation)

    def timed_work_due(self) -> bool:
        return self._durability.timed_work_due()

    def flush(self) -> None:
        self._durability.flush()

    def flush_rolled(self) -> bool:
        return self._durability.flush_rolled()

    def maybe_flush(self) -> bool:
        return self._durability.maybe_flush()

    def flush_leader_epochs(self) -> bool:
        return self._durability.flush_leader_epochs()

    def write_checkpoint(self) -> None:
        self._durability.write_checkpoint()

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        return self._txns.collect_aborted_txns(fetch_offset, upper_bound)

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        self._txns.append_aborted_txn(txn)

    def ensure_aborted_txn(self, txn: AbortedTxn) -> bool:
        return self._txns.ensure_aborted_txn(txn)

    def aborted_txns_between(self, start: int, end: int) -> list[AbortedTxn]:
        return self._txns.aborted_txns_between(start, end)

    @property
    def txn_recovery_from(self) -> int | None:
        return self._txns.txn_recovery_from

    def txn_indexes_recovered(self) -> None:
        self._txns.txn_indexes_recovered()

    # --------------------------------------------------------------- lifecycle

    def set_close_snapshot(self, offset: int, entries: list[ProducerEntry], *, generation: int) -> None:
        """Producer state to snapshot at `offset` when the log closes (see `write_producer_snapshot`)."""
        self._close_snapshot = (offset, entries, generation)

    def close(self) -> None:
        """Flush and close; the next open skips recovery (the recovery point is the log end) and, with a
        producer snapshot handed over by `set_close_snapshot`, the producer-state replay too."""
        snapshot, self._close_snapshot = self._close_snapshot, None
        if snapshot is not None and not self._state.closed:
            offset, entries, generation = snapshot
            try:
                self._truncator.write_producer_snapshot(offset, entries, generation=generation)
            except OSError as exc:
                log.warning("%s: producer snapshot at close not written: %s", self.name, exc)
        self._durability.close()

    def retire(self, suffix: str) -> None:
        """Stop every file write and rename the directory to `<name><suffix>` (first call only).

        Taken with the log's locks, so a checkpoint, epoch or snapshot write in another thread lands
        either before the rename (and moves with it) or not at all.
        """
        state = self._state
        with state.lock, state.checkpoint_lock:
            if self._retired:
                return
            self._retired = True
            state.closed = True
            target = state.directory.with_name(state.directory.name + suffix)
            with self.leader_epochs.moving():
                state.directory.rename(target)
                state.directory = target
                self.leader_epochs.move_to(target)

    def delete(self) -> None:
        """Close and remove the whole directory (the LogManager retires it first)."""
        state = self._state
        with state.lock:
            for segment in self._segments:
                segment.close()
            state.closed = True
            shutil.rmtree(state.directory, ignore_errors=True)

    def mark_offline(self, reason: str) -> None:
        """An I/O failure left the in-memory view unreliable: close; the next open repairs from disk."""
        state = self._state
        with state.lock:
            log.error("%s: taking the log offline: %s", self.name, reason)
            state.offline_reason = reason
            for segment in self._segments:
                segment.close()
            state.closed = True

    def on_log_start_moved(self, callback: Callable[[object], None] | None, owner: object) -> None:
        """`callback(owner)` each time the log start moves (retention, DeleteRecords), from the thread that moved
        it, under the log's lock: it must only hand the news on (the replica manager wakes the replica)."""
        self._state.on_start_moved, self._state.owner = callback, owner

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed config (new segment.bytes, retention...) to future decisions."""
        with self._state.lock:
            self._state.config = config
