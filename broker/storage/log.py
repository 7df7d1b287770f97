"""The log of one partition replica: an ordered list of segments with one active tail.

Why it exists: it is the only writer of a partition's directory. As leader it
validates a produce request's batches (per batch: sizes, CRC, offsets — one walk over
their headers, `validate`, whose `BatchInfo`s the replica layer hands back), gives
them offsets and the leader epoch in place and appends them; as follower it
appends batches keeping their offsets. It rolls segments by size/time/index
space, and owns the segment list, its state (offsets, checkpoint values) and
its lock from `open` (recovery, `loader.py`) to `close`/`retire`/`delete`.

`Log` is the one class other code uses; its other roles are mixed in, one
concept per module: reads (`log_read`), segment rolls (`log_roll`), retention, DeleteRecords and the
cleaner's swap (`log_retention`), truncation with the leader epochs and
producer snapshots that follow the log end (`log_truncation`), fsyncs and
checkpoint files (`log_durability`), the aborted-transaction indexes
(`log_txn`). Their state lives here.

Time: `clock_ms` returns wall-clock milliseconds since the epoch (`kelp.clock`:
what is stored is wall-clock ms); every `*_ms` value in these modules is one.

Thread-safety: one `threading.RLock` per log guards appends, reads, rolls,
retention and the cleaner's final swap; the cleaner does its heavy work
outside it, and so does a roll made in a worker thread (`defer_roll`,
`log_roll.roll_when_due`): the new segment's files are made before it
takes the lock to install them. It must never import networking, decode records on the
append/read path (except where the topic asks for it: a compacted topic's key
check, a `compression.type` codec's recompression — both per batch), or serve
bytes recovery has not validated.
"""

from __future__ import annotations

import bisect
import logging
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kelp.clock import WallClockMs, wall_clock_ms
from kelp.config.log_config import LogConfig
from kelp.errors import InvalidRecordError, KafkaStorageError, KelpError, UnsupportedCompressionTypeError
from kelp.records.build import recompress
from kelp.records.compression import COMPRESSION_NAMES
from kelp.records.header import BatchInfo, assign_offsets, set_log_append_time
from kelp.records.record import records_have_keys
from kelp.records.validation import check_sizes, parse_batches

from .checkpoint import PartitionCheckpoint
from .leader_epoch import LeaderEpochCache
from .loader import load_segments
from .log_durability import LogDurability
from .log_read import FileSlice, LogReads
from .log_retention import LogRetention
from .log_roll import LogRolls
from .log_truncation import LogTruncation
from .log_txn import LogTransactions
from .producer_snapshot import ProducerEntry, delete_snapshots, list_snapshots
from .segment import LogSegment

__all__ = ["AppendResult", "FileSlice", "Log"]

log = logging.getLogger("kelp.broker.storage")


@dataclass(slots=True)
class AppendResult:
    """What an append did: the offsets it assigned and the timestamps it stored."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    record_count: int
    batches: list[BatchInfo] = field(default_factory=list)
    # flush.messages is reached and the caller asked to fsync itself (`defer_flush`): `flush()` before it acknowledges.
    flush_due: bool = False
    # The active segment is due a roll that the caller asked to make itself (`defer_roll`): `roll_when_due()` in a
    # worker thread, with no append to this log meanwhile.
    roll_due: bool = False


class Log(LogReads, LogRolls, LogRetention, LogTruncation, LogDurability, LogTransactions):
    """One partition replica's log. Create with `Log.open`."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        clock_ms: WallClockMs,
        segments: list[LogSegment],
        checkpoint: PartitionCheckpoint,
        epochs: LeaderEpochCache,
    ) -> None:
        self.directory = directory
        self.config = config
        self._clock_ms = clock_ms
        self._lock = threading.RLock()
        # fsyncs and checkpoint files happen outside `_lock` (every append takes it): these
        # serialise them among themselves instead.
        self._flush_lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        for segment in segments[:-1]:
            segment.release_index_files()
        self._log_start_offset = max(checkpoint.log_start_offset, segments[0].base_offset)
        self._recovery_point = min(checkpoint.recovery_point, self.log_end_offset)
        self._high_watermark = min(max(checkpoint.high_watermark, self._log_start_offset), self.log_end_offset)
        self.cleaner_offset = max(checkpoint.cleaner_offset, self._log_start_offset)
        self.leader_epochs = epochs
        self._unflushed_records = 0
        self._last_flush_ms = self._now_ms()
        self._closed = False
        self._offline_reason = ""
        # Bumped by every truncation: a producer snapshot captured before one is not installed after it.
        self._truncations = 0
        self._retired = False  # renamed for deletion (`retire`)
        # Told (from whatever thread moved it, under the lock) when the log start moves, with `owner`: the replica
        # manager wakes the replica's fetch sessions (one callable per broker, not one per log).
        self.on_start_moved: Callable[[object], None] | None = None
        self.owner: object = None
        # The topic this log belongs to (hex id), as its `partition.metadata` says: set by the LogManager; None for
        # a log written before ids were stored (adopted by the first metadata that places it).
        self.topic_id: str | None = None
        self._close_snapshot: tuple[int, list[ProducerEntry], int] | None = None
        # The checkpoint values last written (or found on disk): unchanged ones are not rewritten.
        self._last_checkpoint: tuple[int, int, int, int] | None = None
        # Set by the replica layer (it owns producer state): the first offset of a transaction not decided
        # and replicated yet, None when there is none. The cleaner stops below it.
        self.first_unstable_offset: int | None = None
        # Set by the cleaner (in memory): the earliest delete horizon of a marker it left waiting for it (KIP-534);
        # once it passed, the log is worth a pass even with nothing dirty. None: none known (after a restart the
        # next pass finds them again).
        self.delete_horizon_due_ms: int | None = None
        # Markers from here on may lack their aborted-transaction entry (an unclean shutdown): `log_txn`.
        self._txn_recovery_from: int | None = (
            self._recovery_point if self._recovery_point < self.log_end_offset else None)

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
        instance = cls(directory, config, clock_ms=clock_ms, segments=segments, checkpoint=checkpoint, epochs=epochs)
        if result.gaps:
            # Serve nothing rather than a silent hole, and change nothing on disk (no checkpoint, no epoch
            # truncation): the operator puts the missing segment back and restarts.
            instance.mark_offline("; ".join(str(g) for g in result.gaps))
            return instance
        if result.rescanned_from is not None:
            # The epochs of what recovery rescanned come from the batches themselves (as Kafka's segment
            # recovery): an entry the checkpoint lost in a crash is found again, a stale one is replaced.
            epochs.rebuild_from(result.rescanned_from, result.epoch_starts)
        epochs.truncate_from_end(instance.log_end_offset)
        if instance._log_start_offset > segments[0].base_offset:
            epochs.truncate_from_start(instance._log_start_offset)
        epochs.flush()
        stale = [o for o in list_snapshots(directory)
                 if o > instance.log_end_offset or o < instance._log_start_offset]
        if stale:
            delete_snapshots(directory, stale)
        if stored is not None:
            instance._last_checkpoint = (
                stored.log_start_offset, stored.high_watermark, stored.recovery_point, stored.cleaner_offset
            )
        if stored is None and instance.log_end_offset == instance._log_start_offset == 0:
            # A new, empty log: losing this file in a crash only means "scan everything",
            # which is nothing, so no fsync (50 fsync'd writes for __consumer_offsets stalled ~1 s).
            instance._write_checkpoint(durable=False)
        else:
            instance._write_checkpoint()
        return instance

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"segments={len(self._segments)})"
        )

    @property
    def name(self) -> str:
        """`<topic>-<partition>`, the directory name (used in error messages)."""
        return self.directory.name

    def _now_ms(self) -> int:
        return self._clock_ms()

    # -------------------------------------------------------------- properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign."""
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._high_watermark = min(max(value, self._log_start_offset), self.log_end_offset)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        """A snapshot of the segments, oldest first; the last is the active one."""
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    # ----------------------------------------------------------------- appends

    def validate(self, data: bytes | bytearray | memoryview, *, origin: str = "client",
                 limit_size: bool = True) -> list[BatchInfo]:
        """The one walk over `data`'s batch headers an append as leader makes: sizes (with `limit_size`, each
        batch against `max.message.bytes`), magic, CRC (`parse_batches`), then the log's own rules per batch (a
        record count its last offset delta agrees with, a known codec, control batches only from the
        coordinator). Raises `CorruptRecordError`, `RecordTooLargeError`, `InvalidRecordError`,
        `UnsupportedForMessageFormatError` naming the partition. The `BatchInfo`s it returns are what
        `append_as_leader(batches=...)` takes, so the leader's checks before the append read no header again.
        """
        batches = self._parse(data, limit_size=limit_size)
        for info in batches:
            if info.record_count <= 0:
                raise InvalidRecordError(f"{self.name}: batch at byte {info.position} holds no records")
            if info.last_offset_delta != info.record_count - 1:
                raise InvalidRecordError(
                    f"{self.name}: batch at byte {info.position} has {info.record_count} records "
                    f"but last offset delta {info.last_offset_delta}"
                )
            if info.compression not in COMPRESSION_NAMES:
                raise UnsupportedCompressionTypeError(
                    f"{self.name}: batch at byte {info.position} uses unknown compression codec id "
                    f"{info.compression} (Kafka's are 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)")
            if info.is_control and origin != "coordinator":
                raise InvalidRecordError(f"{self.name}: clients may not produce control batches")
        return batches

    def append_as_leader(
        self, data: bytes | bytearray | memoryview, *, leader_epoch: int, origin: str = "client",
        defer_flush: bool = False, defer_roll: bool = False, batches: list[BatchInfo] | None = None,
        keys_checked: bool = False,
    ) -> AppendResult:
        """Validate `data`'s batches, assign offsets and `leader_epoch`, append. Per batch only.

        `batches`: what `validate(data, origin=origin)` returned for these very bytes, when the caller
        validated them first (the leader's path does, before its producer-state checks): no header is read
        again; only `max.message.bytes` is checked again on them (a rebuild in another codec changes sizes).

        When `flush.messages` is reached the append fsyncs (outside the lock) before it returns — unless
        `defer_flush`: then the result says `flush_due` and the caller runs `flush()` itself, in a worker
        thread (an event loop must never fsync), before it acknowledges.

        `defer_roll` (an event loop's append: creating a segment's files is file-system work that can
        block): a roll that `segment.bytes`, `segment.ms` or a full index calls for does not happen here;
        the batches go to the active segment (one append past `segment.bytes` at most) and the result
        says `roll_due`; the caller runs `roll_when_due()` in a worker thread before it appends again.

        A writable `data` (bytearray, writable memoryview) is rewritten in place
        and so handed over to the log; read-only bytes are copied first.

        `keys_checked`: the caller walked every record of `batches` and found each keyed (the leader's
        `check_batch_records`, off the loop): a compacted topic's key check is not made again here.

        `origin="coordinator"` (the broker's own writers, e.g. transaction
        markers) may append control batches; clients may not. Raises
        `CorruptRecordError`, `RecordTooLargeError`, `InvalidRecordError`,
        `UnsupportedForMessageFormatError` naming the partition and the limit.
        """
        if batches is None:
            batches = self.validate(data, origin=origin)
        else:
            try:
                check_sizes(batches, self.config.max_message_bytes)
            except KelpError as exc:
                raise self._named(exc) from None
        # A writable buffer (the produce request's own frame) is rewritten in place: no copy.
        if isinstance(data, bytearray) or (isinstance(data, memoryview) and not data.readonly):
            buf = data
        else:
            buf = bytearray(data)
        if self.config.compression_type != "producer":
            # compression.type names a codec: batches in another one are rebuilt once each (Kafka's LogValidator).
            rebuilt = recompress(buf, batches, self.config.compression_type)
            if rebuilt is not None:
                buf, batches = rebuilt
        if self.config.compact and not keys_checked:
            for info in batches:
                if not records_have_keys(buf, info):
                    raise InvalidRecordError(
                        f"{self.name}: compacted topic (cleanup.policy={self.config.cleanup_policy}) "
                        "refuses records without a key"
                    )
        with self._lock:
            self._check_open()
            now_ms = self._now_ms()
            first = self.log_end_offset
            next_offset = assign_offsets(buf, batches, base_offset=first, leader_epoch=leader_epoch)
            append_time = -1
            if self.config.log_append_time:
                append_time = now_ms
                for info in batches:
                    set_log_append_time(buf, info, now_ms)
            self.leader_epochs.assign(leader_epoch, first)
            flush_due, roll_due = self._append(buf, batches, now_ms, defer_roll=defer_roll)
            result = AppendResult(
                first_offset=first,
                last_offset=next_offset - 1,
                log_append_time_ms=append_time,
                max_timestamp=max(b.max_timestamp for b in batches),
                record_count=sum(b.record_count for b in batches),
                batches=batches,
                roll_due=roll_due,
            )
        if flush_due:
            if defer_flush:
                result.flush_due = True
            else:
                self.flush()  # flush.messages reached: the caller asked for this fsync, but never under the lock
        return result

    def append_as_follower(self, data: bytes | bytearray | memoryview, *,
                           defer_flush: bool = False, defer_roll: bool = False) -> AppendResult | None:
        """Append batches fetched from the leader, keeping their offsets and leader epochs (`defer_flush` and
        `defer_roll` as for `append_as_leader`).

        Returns None for empty `data`. Raises `InvalidRecordError` if the
        batches do not continue this log (the replica layer truncates first).
        """
        if not data:
            return None
        batches = parse_batches(data)
        with self._lock:
            self._check_open()
            expected = self.log_end_offset
            for info in batches:
                if info.base_offset < expected:
                    raise InvalidRecordError(
                        f"{self.name}: follower append at offset {info.base_offset} is below the log end {expected}"
                    )
                expected = info.next_offset
            for info in batches:
                self.leader_epochs.assign(info.partition_leader_epoch, info.base_offset)
            flush_due, roll_due = self._append(data, batches, self._now_ms(), defer_roll=defer_roll)
            result = AppendResult(
                first_offset=batches[0].base_offset,
                last_offset=batches[-1].last_offset,
                log_append_time_ms=-1,
                max_timestamp=max(b.max_timestamp for b in batches),
                record_count=sum(b.record_count for b in batches),
                batches=batches,
                roll_due=roll_due,
            )
        if flush_due:
            if defer_flush:
                result.flush_due = True
            else:
                self.flush()
        return result

    def _parse(self, data: bytes | bytearray | memoryview, *, limit_size: bool = True) -> list[BatchInfo]:
        try:
            return parse_batches(data, max_batch_bytes=self.config.max_message_bytes if limit_size else None)
        except KelpError as exc:
            raise self._named(exc) from None

    def _named(self, exc: KelpError) -> KelpError:
        """A check's error, naming this log."""
        return type(exc)(f"{self.name}: {exc}")

    def _append(self, data: bytes | bytearray | memoryview, batches: list[BatchInfo], now_ms: int, *,
                defer_roll: bool = False) -> tuple[bool, bool]:
        """Roll if needed (unless `defer_roll` and the roll can wait), write. Caller holds the lock.

        Returns (flush due, roll due): the flush policy wants an fsync now — the caller's, after it
        released the lock (`flush()`); `flush.ms` is the periodic task's (`maybe_flush()` in a worker
        thread), never the append path's — and a deferred roll is due (`roll_when_due()`).
        """
        segment = self._segments[-1]
        reason = self._roll_reason(segment, len(data), batches[-1].last_offset, now_ms)
        roll_due = False
        if reason is not None:
            if defer_roll and self._roll_can_wait(segment, len(data), batches[-1].last_offset):
                roll_due = True
            else:
                log.debug("rolling %s at offset %d: %s", self.name, self.log_end_offset, reason)
                segment = self._roll(now_ms)
        try:
            segment.append(data, batches, now_ms=now_ms)
        except OSError as exc:
            raise KafkaStorageError(f"{self.name}: write to {segment.log_path} failed: {exc}") from exc
        self._unflushed_records += sum(b.record_count for b in batches)
        flush_due = self.config.flush_messages > 0 and self._unflushed_records >= self.config.flush_messages
        return flush_due, roll_due

    # ---------------------------------------------------------- segment lookup

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    # --------------------------------------------------------------- lifecycle

    def set_close_snapshot(self, offset: int, entries: list[ProducerEntry], *, generation: int) -> None:
        """Producer state to snapshot at `offset` when the log closes (see `write_producer_snapshot`)."""
        self._close_snapshot = (offset, entries, generation)

    def close(self) -> None:
        """Flush and close; the next open skips recovery (the recovery point is the log end) and, with a
        producer snapshot handed over by `set_close_snapshot`, the producer-state replay too."""
        snapshot, self._close_snapshot = self._close_snapshot, None
        if snapshot is not None and not self._closed:
            offset, entries, generation = snapshot
            try:
                self.write_producer_snapshot(offset, entries, generation=generation)
            except OSError as exc:
                log.warning("%s: producer snapshot at close not written: %s", self.name, exc)
        # Lock order everywhere: the flush lock, then the log lock (a flush in a worker thread holds the first and
        # waits for the second). The log stops taking appends first, so what is fsynced below is all of it.
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
                end = self.log_end_offset
                pending = (self._segments[self._segment_index_for(self._recovery_point):]
                           if self._recovery_point < end else [])
            self._fsync_segments(pending)
            try:  # the epochs of what is durable must be too (flush_leader_epochs skips a closed log)
                self.leader_epochs.flush()
            except OSError as exc:
                raise KafkaStorageError(f"{self.name}: writing its leader-epoch checkpoint failed: {exc}") from exc
            with self._lock:
                self._recovery_point = end
                self._unflushed_records = 0
                values = self._checkpoint_values()
            self._write_checkpoint_values(values)
            with self._lock:
                active = self._segments[-1]
                active.set_mtime(active.last_modified_ms)
                for segment in self._segments:
                    segment.close()

    def retire(self, suffix: str) -> None:
        """Stop every file write and rename the directory to `<name><suffix>` (first call only).

        Taken with the log's locks, so a checkpoint, epoch or snapshot write in another thread lands
        either before the rename (and moves with it) or not at all.
        """
        with self._lock, self._checkpoint_lock:
            if self._retired:
                return
            self._retired = True
            self._closed = True
            target = self.directory.with_name(self.directory.name + suffix)
            with self.leader_epochs.moving():
                self.directory.rename(target)
                self.directory = target
                self.leader_epochs.move_to(target)

    def delete(self) -> None:
        """Close and remove the whole directory (the LogManager retires it first)."""
        with self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = True
            shutil.rmtree(self.directory, ignore_errors=True)

    def mark_offline(self, reason: str) -> None:
        """An I/O failure left the in-memory view unreliable: close; the next open repairs from disk."""
        with self._lock:
            log.error("%s: taking the log offline: %s", self.name, reason)
            self._offline_reason = reason
            for segment in self._segments:
                segment.close()
            self._closed = True

    @property
    def offline_reason(self) -> str:
        """Why the log is offline (a hole between segments, a failed swap), or "" while it serves."""
        return self._offline_reason

    @property
    def closed(self) -> bool:
        """Closed, retired (moved or deleted) or offline: it takes no appends and has nothing left to flush."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"{self.name}: the log is "
                                    f"{'offline (' + self._offline_reason + ')' if self._offline_reason else 'closed'}")

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed config (new segment.bytes, retention...) to future decisions."""
        with self._lock:
            self.config = config

