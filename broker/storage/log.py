"""The log of one partition replica: an ordered list of segments with one active tail.

Why it exists: it is the only writer of a partition's directory. As leader it
validates a produce request's batches (per batch: sizes, CRC, offsets), gives
them offsets and the leader epoch in place and appends them; as follower it
appends batches keeping their offsets. It serves whole batches by offset,
rolls segments by size/time/index space, enforces retention, truncates for
replication, and keeps the partition checkpoint and leader-epoch cache.

Time: `clock` returns *seconds* as a float (like `time.time`); every `*_ms`
value in this module is milliseconds derived from it.

Thread-safety: one `threading.RLock` per log guards appends, reads, rolls,
retention and the cleaner's final swap; the cleaner does its heavy work
outside it. It must never import networking, decode records on the
append/read path (except where the topic asks for it: a compacted topic's key
check, a `compression.type` codec's recompression — both per batch), or serve
bytes recovery has not validated.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from kelp.errors import InvalidRecordError, KafkaStorageError, KelpError, OffsetOutOfRangeError
from kelp.records import (
    COMPRESSION_NAMES,
    BatchInfo,
    assign_offsets,
    parse_batches,
    recompress,
    records_have_keys,
    set_log_append_time,
    whole_batches_end,
)

from .checkpoint import PARTITION_CHECKPOINT, PartitionCheckpoint, fsync_dir
from .config import LogConfig
from .leader_epoch import LeaderEpochCache
from .loader import load_segments
from .producer_snapshot import (
    ProducerEntry,
    delete_snapshots,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot_file,
)
from .segment import LogSegment, iter_file_headers

log = logging.getLogger("kelp.broker.storage")

Clock = Callable[[], float]


@dataclass(slots=True)
class AppendResult:
    """What an append did: the offsets it assigned and the timestamps it stored."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    record_count: int
    batches: list[BatchInfo] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file, for zero-copy sends (`os.sendfile`).

    `file` was opened while the log lock was held, so it reads the very bytes
    the range was computed on even if the cleaner swaps a new file in under
    the same `path` right after: prefer it to reopening `path`, and close it.
    """

    path: Path
    position: int
    size: int
    file: BinaryIO | None = None
    records: int = 0  # records in the range's batches (summed from the headers the range was cut on)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class Log:
    """One partition replica's log. Create with `Log.open`."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        clock: Clock,
        segments: list[LogSegment],
        checkpoint: PartitionCheckpoint,
        epochs: LeaderEpochCache,
    ) -> None:
        self.directory = directory
        self.config = config
        self._clock = clock
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
        self._close_snapshot: tuple[int, list[ProducerEntry], int] | None = None
        # The checkpoint values last written (or found on disk): unchanged ones are not rewritten.
        self._last_checkpoint: tuple[int, int, int, int] | None = None

    # ----------------------------------------------------------------- opening

    @classmethod
    def open(cls, directory: Path | str, config: LogConfig | None = None, *, clock: Clock = time.time) -> "Log":
        """Open (or create) the log in `directory`, running recovery on whatever is there."""
        directory = Path(directory)
        config = config or LogConfig()
        directory.mkdir(parents=True, exist_ok=True)
        now_ms = int(clock() * 1000)
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
        instance = cls(directory, config, clock=clock, segments=segments, checkpoint=checkpoint, epochs=epochs)
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
        return int(self._clock() * 1000)

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

    def latest_epoch(self) -> int:
        return self.leader_epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch; (-1, -1) when unknown."""
        with self._lock:
            return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    # ----------------------------------------------------------------- appends

    def append_as_leader(
        self, data: bytes | bytearray | memoryview, *, leader_epoch: int, origin: str = "client"
    ) -> AppendResult:
        """Validate `data`'s batches, assign offsets and `leader_epoch`, append. Per batch only.

        A writable `data` (bytearray, writable memoryview) is rewritten in place
        and so handed over to the log; read-only bytes are copied first.

        `origin="coordinator"` (the broker's own writers, e.g. transaction
        markers) may append control batches; clients may not. Raises
        `CorruptRecordError`, `RecordTooLargeError`, `InvalidRecordError`,
        `UnsupportedForMessageFormatError` naming the partition and the limit.
        """
        batches = self._parse(data)
        for info in batches:
            if info.record_count <= 0:
                raise InvalidRecordError(f"{self.name}: batch at byte {info.position} holds no records")
            if info.last_offset_delta != info.record_count - 1:
                raise InvalidRecordError(
                    f"{self.name}: batch at byte {info.position} has {info.record_count} records "
                    f"but last offset delta {info.last_offset_delta}"
                )
            if info.compression not in COMPRESSION_NAMES:
                raise InvalidRecordError(f"{self.name}: batch at byte {info.position} uses unknown compression "
                                         f"{info.compression}")
            if info.is_control and origin != "coordinator":
                raise InvalidRecordError(f"{self.name}: clients may not produce control batches")
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
        if self.config.compact:
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
            flush_due = self._append(buf, batches, now_ms)
            result = AppendResult(
                first_offset=first,
                last_offset=next_offset - 1,
                log_append_time_ms=append_time,
                max_timestamp=max(b.max_timestamp for b in batches),
                record_count=sum(b.record_count for b in batches),
                batches=batches,
            )
        if flush_due:
            self.flush()  # flush.messages reached: the caller asked for this fsync, but never under the lock
        return result

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> AppendResult | None:
        """Append batches fetched from the leader, keeping their offsets and leader epochs.

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
            flush_due = self._append(data, batches, self._now_ms())
            result = AppendResult(
                first_offset=batches[0].base_offset,
                last_offset=batches[-1].last_offset,
                log_append_time_ms=-1,
                max_timestamp=max(b.max_timestamp for b in batches),
                record_count=sum(b.record_count for b in batches),
                batches=batches,
            )
        if flush_due:
            self.flush()
        return result

    def _parse(self, data: bytes | bytearray | memoryview) -> list[BatchInfo]:
        try:
            return parse_batches(data, max_batch_bytes=self.config.max_message_bytes)
        except KelpError as exc:
            raise type(exc)(f"{self.name}: {exc}") from None

    def _append(self, data: bytes | bytearray | memoryview, batches: list[BatchInfo], now_ms: int) -> bool:
        """Roll if needed, write; True when the flush policy wants an fsync now. Caller holds the lock.

        The fsync itself is the caller's, after it released the lock (`flush()`); `flush.ms` is
        the periodic task's (`maybe_flush()` in a worker thread), never the append path's.
        """
        segment = self._maybe_roll(len(data), batches[-1].last_offset, now_ms)
        try:
            segment.append(data, batches, now_ms=now_ms)
        except OSError as exc:
            raise KafkaStorageError(f"{self.name}: write to {segment.log_path} failed: {exc}") from exc
        self._unflushed_records += sum(b.record_count for b in batches)
        return self.config.flush_messages > 0 and self._unflushed_records >= self.config.flush_messages

    def _maybe_roll(self, size: int, last_offset: int, now_ms: int) -> LogSegment:
        segment = self._segments[-1]
        if segment.is_empty:
            return segment
        reason = None
        if segment.size + size > self.config.segment_bytes:
            reason = f"size {segment.size} + {size} > segment.bytes {self.config.segment_bytes}"
        elif (segment.rolling_timestamp_ms is not None
              and now_ms - segment.rolling_timestamp_ms >= self.config.segment_ms):
            reason = f"age >= segment.ms {self.config.segment_ms}"
        elif segment.index.is_full:
            reason = "offset index full"
        elif not segment.can_hold(last_offset):
            reason = "relative offset overflow"
        if reason is None:
            return segment
        log.debug("rolling %s at offset %d: %s", self.name, self.log_end_offset, reason)
        return self._roll(now_ms)

    def _roll(self, now_ms: int) -> LogSegment:
        old = self._segments[-1]
        # fsynced by the periodic task's flush_rolled() (or the next flush), off the append path
        old.on_roll(sync=False)
        segment = LogSegment.create(
            self.directory,
            self.log_end_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_entries=self.config.max_index_entries,
            now_ms=now_ms,
        )
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (no-op if the active one is empty)."""
        with self._lock:
            self._check_open()
            if self._segments[-1].is_empty:
                return self._segments[-1]
            return self._roll(self._now_ms())

    def maybe_roll_by_time(self) -> bool:
        """Roll the active segment if segment.ms has passed (the periodic task calls this)."""
        with self._lock:
            if self._closed:
                return False
            segment = self._segments[-1]
            now_ms = self._now_ms()
            if (
                not segment.is_empty
                and segment.rolling_timestamp_ms is not None
                and now_ms - segment.rolling_timestamp_ms >= self.config.segment_ms
            ):
                self._roll(now_ms)
                return True
            return False

    # ------------------------------------------------------------------- reads

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def _check_range(self, offset: int) -> None:
        if offset < self._log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self.name}: offset {offset} is out of range; the log holds "
                f"[{self._log_start_offset}, {self.log_end_offset})"
            )

    def _locate(self, offset: int) -> tuple[LogSegment, BatchInfo] | None:
        """The segment and first batch whose last offset is >= `offset` (skipping compacted gaps)."""
        for i in range(self._segment_index_for(offset), len(self._segments)):
            segment = self._segments[i]
            found = segment.find(offset)
            if found is not None:
                return segment, found
        return None

    def _read_range(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[LogSegment, int, int, int] | None:
        """(segment, position, size, record count) of the whole batches a read returns; None when there are none."""
        self._check_open()
        self._check_range(offset)
        located = self._locate(offset)
        if located is None:
            return None
        segment, first = located
        end = first.position
        limit = first.position + max_bytes
        records = 0
        for info in segment.headers(first.position):
            if max_offset is not None and info.base_offset >= max_offset:
                break
            if info.end > limit:
                if end == first.position and min_one_batch:
                    end = info.end
                    records += info.record_count
                break
            end = info.end
            records += info.record_count
        if end == first.position:
            return None
        return segment, first.position, end - first.position, records

    def read(
        self, offset: int, *, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True
    ) -> bytes:
        """Whole batches starting with the one holding `offset`, at most `max_bytes` of them.

        `max_offset` (exclusive, e.g. the high watermark) stops before batches
        starting at or after it. With `min_one_batch` the first batch is
        returned even if larger than `max_bytes` (Fetch v3+ semantics).
        Returns b"" at the log end; raises `OffsetOutOfRangeError` below the
        log start or above the log end. One read stays within one segment.
        """
        with self._lock:
            self._check_open()
            self._check_range(offset)
            located = self._locate(offset)
            if located is None:
                return b""
            segment, first = located
            # One read of up to max_bytes, then cut at the last whole batch in memory
            # (cheaper than a read per header when batches are small).
            data = segment.read(first.position, max(max_bytes, 0))
            end = whole_batches_end(data, max_offset=max_offset)
            if end == 0:
                if not min_one_batch or (max_offset is not None and first.base_offset >= max_offset):
                    return b""
                return segment.read(first.position, first.size)
            return data if end == len(data) else data[:end]

    def read_slice(
        self, offset: int, *, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FileSlice | None:
        """Like `read` but the file range instead of the bytes, for `os.sendfile`; None if empty.

        The range stays valid until retention or the cleaner replaces the
        segment: open the path promptly and tolerate FileNotFoundError.
        """
        with self._lock:
            found = self._read_range(offset, max_bytes, max_offset, min_one_batch)
            if found is None:
                return None
            segment, position, size, records = found
            try:
                opened: BinaryIO | None = open(segment.log_path, "rb", buffering=0)
            except OSError:
                opened = None
            return FileSlice(segment.log_path, position, size, opened, records)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp_ms`, or None.

        Uses the time index to find the batch, then decodes that one batch to
        find the record (ListOffsets is not the hot path).
        """
        from kelp.records import batch_records

        with self._lock:
            self._check_open()
            for segment in self._segments:
                if segment.max_timestamp < timestamp_ms:
                    continue
                info = segment.find_by_timestamp(timestamp_ms)
                if info is None:
                    continue
                if info.last_offset < self._log_start_offset:
                    continue
                data = segment.read(info.position, info.size)
                info = dataclasses.replace(info, position=0)
                if info.timestamp_type == 1:  # LogAppendTime: every record carries the batch's max timestamp
                    return max(info.base_offset, self._log_start_offset), info.max_timestamp
                for record in batch_records(data, info):
                    if (record.offset >= self._log_start_offset and record.timestamp is not None
                            and record.timestamp >= timestamp_ms):
                        return record.offset, record.timestamp
            return None

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

    def max_timestamp_and_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the log's largest timestamp (ListOffsets -3, KIP-734).

        Per segment the largest timestamp is known; only the one batch holding it is decoded.
        """
        with self._lock:
            self._check_open()
            stamped = [s for s in self._segments if not s.is_empty and s.max_timestamp >= 0]
            if not stamped:
                return None
            ts = max(s.max_timestamp for s in stamped)
        return self.offset_for_timestamp(ts)

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

    def advance_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: raise the log start (never above the high watermark); whole segments go at retention."""
        with self._lock:
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"{self.name}: cannot move the log start to {offset}, above the high watermark "
                    f"{self._high_watermark}"
                )
            self._set_log_start(offset)

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

    def _write_checkpoint_files(self, values: tuple[int, int, int, int]) -> None:
        """The leader-epoch checkpoint (if changed), then the partition checkpoint; without the log lock."""
        self.flush_leader_epochs()
        try:
            self._write_checkpoint_values(values)
        except OSError as exc:
            raise KafkaStorageError(
                f"{self.name}: writing {self.directory / PARTITION_CHECKPOINT} failed: {exc}") from exc

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

    def batch_headers(self, start_offset: int, end_offset: int | None = None) -> Iterator[BatchInfo]:
        """Headers of the batches holding offsets from `start_offset` up to `end_offset` (default: the log end).

        For replays in worker threads (producer state): the segment files are opened under the lock and
        read without it, so appends go on and a segment retention deletes meanwhile is still read whole.
        """
        with self._lock:
            self._check_open()
            end = self.log_end_offset if end_offset is None else min(end_offset, self.log_end_offset)
            start = max(start_offset, self._log_start_offset)
            plan: list[tuple[int, int, int]] = []
            first = self._segment_index_for(start)
            try:
                for i in range(first, len(self._segments)):
                    segment = self._segments[i]
                    if segment.base_offset >= end:
                        break
                    position = 0
                    if i == first:
                        found = segment.find(start)
                        if found is None:
                            continue
                        position = found.position
                    plan.append((os.open(segment.log_path, os.O_RDONLY), position, segment.size))
            except BaseException:
                for fd, _, _ in plan:
                    os.close(fd)
                raise
        try:
            for fd, position, size in plan:
                for info in iter_file_headers(fd, position, size):
                    if info.base_offset >= end:
                        return
                    if info.last_offset >= start:
                        yield info
        finally:
            for fd, _, _ in plan:
                os.close(fd)

    # ------------------------------------------------------------- durability

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

    def _fsync_segments(self, segments: list) -> None:
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

    def maybe_flush(self) -> bool:
        """fsync if flush.ms has passed since the last fsync (the periodic task calls this)."""
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

    def set_close_snapshot(self, offset: int, entries: list[ProducerEntry], *, generation: int) -> None:
        """Producer state to snapshot at `offset` when the log closes (see `write_producer_snapshot`)."""
        self._close_snapshot = (offset, entries, generation)

    def close(self) -> None:
        """Flush and close; the next open skips recovery (the recovery point is the log end) and, with a
        producer snapshot handed over by `set_close_snapshot`, the producer-state replay too."""
        pending, self._close_snapshot = self._close_snapshot, None
        if pending is not None and not self._closed:
            offset, entries, generation = pending
            try:
                self.write_producer_snapshot(offset, entries, generation=generation)
            except OSError as exc:
                log.warning("%s: producer snapshot at close not written: %s", self.name, exc)
        with self._lock:
            if self._closed:
                return
            self.flush()
            active = self._segments[-1]
            active.set_mtime(active.last_modified_ms)
            for segment in self._segments:
                segment.close()
            self._closed = True

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

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"{self.name}: the log is "
                                    f"{'offline (' + self._offline_reason + ')' if self._offline_reason else 'closed'}")

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
        """True when compaction applies and the dirty ratio reaches min.cleanable.dirty.ratio."""
        if not self.config.compact or len(self._segments) < 2 or self._closed:
            return False
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

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed config (new segment.bytes, retention...) to future decisions."""
        with self._lock:
            self.config = config

