"""Log compaction (`cleanup.policy=compact`): keep the newest record per key in closed segments.

Why it exists: `__consumer_offsets` and other keyed topics only need the last
value of each key. `LogCleaner.clean(log, now_ms)` first maps key -> newest
offset over the dirty part of the log (closed segments at or after the
cleaner offset), then rewrites the closed segments in groups (small segments
merged up to segment.bytes), dropping superseded records, keyless records and
tombstones older than delete.retention.ms past their segment's last
modification. Offsets never change: a rewritten batch keeps its base offset,
last offset delta, producer id/epoch/base sequence, attributes and
timestamps; a batch left empty is kept (header only) when it carries a
producer id, so idempotent producers keep their sequence state.

Memory: the key map is bounded by `log.cleaner.dedupe.buffer.size` (Kafka's
default 128 MiB), each key charged its length plus `ENTRY_OVERHEAD` (what a
Python dict entry, the bytes object and the offset cost). When it is full
the pass stops at a batch boundary and cleans only up to there — segments
starting below that offset, batches from it on copied as they are — and the
next pass goes on from there, as Kafka's cleaner does when its `OffsetMap`
is full. The new cleaner offset is checkpointed before the first swap, so
every hole compaction leaves between segments lies below the stored cleaner
offset: that is how recovery tells it from a missing segment.

Crash safety: a group is written as `.cleaned` files and fsynced; then, with
the log lock held, a marker (`cleaner-swap.json`, atomically written) commits
the swap, old files are removed and the new ones renamed into place; the
loader finishes or discards an interrupted swap. Heavy work runs outside the
log lock; the lock is held only for the final swap. It must never touch the
active segment or renumber an offset.

Transactions (issue 21), as Kafka's cleaner: nothing at or past the log's
first unstable offset is cleaned (an open transaction may still abort, so
its records can neither supersede nor be superseded yet); batches of an
aborted transaction (known from the segments' aborted-transaction indexes)
are removed and never enter the key map, so an aborted value never hides a
committed one; control batches (markers) are kept, with the rewritten
segment's `.txnindex` carrying the entries of the aborted transactions that still have data there. A
marker stays while a batch of its transaction is in the log; in the first pass that finds none, its batch
gets a delete horizon (KIP-534: now + delete.retention.ms in the base timestamp, the attributes' bit 6 set)
and a pass after the horizon removes it — never the producer's last batch, which keeps its epoch. The
earliest horizon still to come is kept on the log (`delete_horizon_due_ms`, in memory): once it passed the log
is cleanable even with nothing dirty, and that pass rewrites the clean part with no new keys (KIP-534).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from typing import Callable, Iterator

from kelp.clock import WallClockMs, wall_clock_ms
from kelp.records.build import rebuild_batch
from kelp.records.header import (
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchInfo,
    read_header,
    rewrite_header,
)
from kelp.records.record import Record, batch_records

from .checkpoint import fsync_dir, write_atomically
from .indexes.txn_index import AbortedTxn
from .loader import CLEANED_SUFFIX, SWAP_MARKER
from .log import Log
from .segment import MAX_RELATIVE_OFFSET, LogSegment, segment_files

log = logging.getLogger("kelp.broker.storage")


@dataclass(slots=True)
class CleanerStats:
    """What one `clean` call did."""

    segments_read: int = 0
    segments_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    batches_rewritten: int = 0
    cleaned_up_to: int = 0  # the log's new cleaner offset
    map_full: bool = False  # the key map filled up: this pass stopped short of the dirty end
    aborted_batches_removed: int = 0  # batches of aborted transactions dropped
    markers_removed: int = 0  # transaction markers whose transaction had no data left and delete horizon passed
    marker_horizons_set: int = 0  # markers found without data: their delete horizon written (KIP-534)
    next_delete_horizon_ms: int | None = None  # the earliest horizon of a marker left waiting for it


def _headers(segment: LogSegment, *, with_data: bool) -> Iterator[tuple[BatchInfo, bytes]]:
    """(header, bytes) of each batch of a closed segment, one read per batch (bytes empty unless `with_data`:
    headers only, one small read each).

    Reads through its own descriptor: retention may delete the segment while
    the cleaner works outside the log lock, and an unlinked file stays readable
    (the swap then notices the segment is gone and drops the rewrite).
    """
    fd = os.open(segment.log_path, os.O_RDONLY)
    try:
        size = min(segment.size, os.fstat(fd).st_size)
        position = 0
        while position + HEADER_SIZE <= size:
            info = read_header(os.pread(fd, HEADER_SIZE, position))
            if info.size < HEADER_SIZE or position + info.size > size:
                return
            yield dataclasses.replace(info, position=0), os.pread(fd, info.size, position) if with_data else b""
            position += info.size
    finally:
        os.close(fd)


def _batches(segment: LogSegment) -> Iterator[tuple[BatchInfo, bytes]]:
    """(header, bytes) of each batch of a closed segment (`_headers` with the data)."""
    return _headers(segment, with_data=True)


def _last_batch_per_producer(segments: list[LogSegment]) -> dict[int, int]:
    """producer id -> base offset of its last batch in `segments` (headers only, one small read per batch)."""
    last: dict[int, int] = {}
    for segment in segments:
        for info, _ in _headers(segment, with_data=False):
            if info.has_producer_id:
                last[info.producer_id] = info.base_offset
    return last


class _AbortedBatches:
    """Tells, walking batches in offset order, which belong to an aborted transaction (per batch)."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._open: dict[int, int] = {}  # producer id -> offset of the marker that aborts its open transaction

    def __call__(self, info: BatchInfo) -> bool:
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= info.base_offset:
            txn = pending[self._next]
            self._open[txn.producer_id] = txn.last_offset
            self._next += 1
        if not self._open or not info.is_transactional:
            return False
        marker = self._open.get(info.producer_id)
        if marker is None:
            return False
        if info.is_control:
            if info.base_offset >= marker:
                del self._open[info.producer_id]
            return False
        return info.base_offset < marker


class _CleanedTxns:
    """Walking the rewritten batches in offset order (Kafka's CleanedTransactionMetadata): which data batches
    belong to an aborted transaction (removed), and whether a marker's transaction still has a batch here (the
    marker stays) or none (it may go once its delete horizon passed)."""

    def __init__(self, aborted: list[AbortedTxn], last_batches: dict[int, int]) -> None:
        self._aborted = _AbortedBatches(aborted)
        self._with_data: set[int] = set()  # producers whose current transaction has a batch read in this pass
        self.last_batches = last_batches  # producer id -> its last batch in the closed segments (kept always)

    def discard_data(self, info: BatchInfo) -> bool:
        """A data batch: True when it is an aborted transaction's (removed; its marker then stays this pass)."""
        if self._aborted(info):
            self._with_data.add(info.producer_id)
            return True
        if info.is_transactional:
            self._with_data.add(info.producer_id)
        return False

    def marker_alone(self, info: BatchInfo) -> bool:
        """A control batch: True when no batch of its transaction was read in this pass."""
        self._aborted(info)
        if info.producer_id in self._with_data:
            self._with_data.discard(info.producer_id)
            return False
        return True


DEFAULT_DEDUPE_BUFFER_BYTES = 128 << 20  # log.cleaner.dedupe.buffer.size
ENTRY_OVERHEAD = 120  # bytes one key costs in the map besides its own length (dict slot, bytes header, int)


class LogCleaner:
    """Compacts logs; stateless between calls apart from its settings."""

    def __init__(self, *, clock_ms: WallClockMs = wall_clock_ms,
                 dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES) -> None:
        self._clock_ms = clock_ms
        self.dedupe_buffer_bytes = dedupe_buffer_bytes

    def clean(self, partition_log: Log, now_ms: int | None = None) -> CleanerStats:
        """Compact the closed segments of `partition_log`; returns what was done."""
        now_ms = self._clock_ms() if now_ms is None else now_ms
        stats = CleanerStats()
        config = partition_log.config
        with partition_log.lock:
            closed = partition_log.segments[:-1]
            first_dirty = partition_log.cleaner_offset
            unstable = partition_log.first_unstable_offset
        if unstable is not None:  # an open transaction's records are not decided yet
            closed = list(_takewhile(closed, lambda s: s.next_offset <= unstable))
        if config.min_compaction_lag_ms > 0:
            horizon = now_ms - config.min_compaction_lag_ms
            closed = list(_takewhile(closed, lambda s: s.max_timestamp <= horizon))
        dirty = [s for s in closed if s.next_offset > first_dirty]
        due = partition_log.delete_horizon_due_ms
        if not dirty and (due is None or due > now_ms or not closed):
            stats.cleaned_up_to = first_dirty
            return stats

        aborted = partition_log.aborted_txns_between(closed[0].base_offset, partition_log.log_end_offset)
        try:
            if dirty:
                offset_map, last_producer_batch, end_offset = self._build_offset_map(dirty, first_dirty, aborted,
                                                                                     stats)
            else:  # only a marker's delete horizon passed (KIP-534): a pass over the clean part, no new keys
                offset_map, last_producer_batch, end_offset = {}, {}, first_dirty
            if stats.map_full:
                log.info("%s: the cleaner's key map is full (%d keys, log.cleaner.dedupe.buffer.size=%d) at offset "
                         "%d; this pass cleans up to there, the next one goes on", partition_log.name,
                         len(offset_map), self.dedupe_buffer_bytes, end_offset)
            # Durable before any swap (a swap may leave a hole between segments: see the module docstring).
            with partition_log.lock:
                partition_log.cleaner_offset = max(partition_log.cleaner_offset, end_offset)
            partition_log.write_checkpoint()
            to_clean = [s for s in closed if s.base_offset < end_offset]
            self._rewrite(partition_log, to_clean, offset_map, last_producer_batch, end_offset, now_ms, stats,
                          _CleanedTxns(aborted, _last_batch_per_producer(closed)))
        except FileNotFoundError as exc:
            # Retention or truncation removed a segment under us; the next pass starts afresh.
            log.info("%s changed while being cleaned (%s); cleaning again later", partition_log.name, exc)
            return stats

        stats.cleaned_up_to = end_offset
        partition_log.delete_horizon_due_ms = stats.next_delete_horizon_ms
        log.info(
            "cleaned %s up to offset %d: %d segments -> %d, %d -> %d bytes, %d records removed (%d tombstones)",
            partition_log.name, end_offset, stats.segments_read, stats.segments_written,
            stats.bytes_read, stats.bytes_written, stats.records_removed, stats.tombstones_removed,
        )
        return stats

    def _build_offset_map(
        self, dirty: list[LogSegment], first_dirty: int, aborted_txns: list[AbortedTxn], stats: CleanerStats
    ) -> tuple[dict[bytes, int], dict[int, int], int]:
        """key -> newest offset from `first_dirty` on, and the offset the map holds everything below.

        Stops before a batch once the map's charged size reaches `dedupe_buffer_bytes` (at least
        one batch always goes in, so every pass makes progress).
        """
        offset_map: dict[bytes, int] = {}
        last_producer_batch: dict[int, int] = {}
        used = 0
        added = False
        aborted = _AbortedBatches(aborted_txns)
        for segment in dirty:
            for info, data in _batches(segment):
                if aborted(info):
                    continue  # never in the key map: an aborted value must not hide a committed one
                if info.is_control or info.last_offset < first_dirty:
                    if info.has_producer_id:
                        last_producer_batch[info.producer_id] = info.base_offset
                    continue
                if added and used >= self.dedupe_buffer_bytes:
                    stats.map_full = True
                    return offset_map, last_producer_batch, info.base_offset
                if info.has_producer_id:
                    last_producer_batch[info.producer_id] = info.base_offset
                for record in batch_records(data, info):
                    if record.key is not None and record.offset >= first_dirty:
                        if record.key not in offset_map:
                            used += len(record.key) + ENTRY_OVERHEAD
                        offset_map[record.key] = record.offset
                added = True
        return offset_map, last_producer_batch, dirty[-1].next_offset

    def _rewrite(
        self,
        partition_log: Log,
        closed: list[LogSegment],
        offset_map: dict[bytes, int],
        last_producer_batch: dict[int, int],
        end_offset: int,
        now_ms: int,
        stats: CleanerStats,
        txns: _CleanedTxns,
    ) -> None:
        """Rewrite `closed` in groups: a group grows while its cleaned output plus the next
        segment's current size still fits segment.bytes (so small leftovers merge at once)."""
        config = partition_log.config
        group: list[LogSegment] = []
        cleaned: LogSegment | None = None
        try:
            for segment in closed:
                if cleaned is not None and (
                    cleaned.size + segment.size > config.segment_bytes
                    or segment.next_offset - 1 - cleaned.base_offset > MAX_RELATIVE_OFFSET
                    or len(cleaned.index) + len(segment.index) >= config.max_index_entries
                ):
                    pending, cleaned = cleaned, None
                    self._finish(partition_log, group, pending, stats)
                    group = []
                if cleaned is None:
                    cleaned = self._start(partition_log, segment.base_offset, now_ms)
                group.append(segment)
                self._copy_segment(segment, cleaned, offset_map, last_producer_batch, end_offset, now_ms,
                                   config.delete_retention_ms, stats, txns)
            if cleaned is not None:
                pending, cleaned = cleaned, None
                self._finish(partition_log, group, pending, stats)
        except BaseException:
            if cleaned is not None:
                cleaned.delete()
            raise

    @staticmethod
    def _start(partition_log: Log, base: int, now_ms: int) -> LogSegment:
        config = partition_log.config
        for path in segment_files(partition_log.directory, base, CLEANED_SUFFIX):
            if path.exists():
                os.unlink(path)
        return LogSegment.create(
            partition_log.directory, base, index_interval_bytes=config.index_interval_bytes,
            max_index_entries=config.max_index_entries, now_ms=now_ms, suffix=CLEANED_SUFFIX,
        )

    def _copy_segment(
        self,
        segment: LogSegment,
        cleaned: LogSegment,
        offset_map: dict[bytes, int],
        last_producer_batch: dict[int, int],
        end_offset: int,
        now_ms: int,
        delete_retention_ms: int,
        stats: CleanerStats,
        txns: _CleanedTxns,
    ) -> None:
        stats.segments_read += 1
        stats.bytes_read += segment.size
        drop_tombstones = now_ms - segment.last_modified_ms > delete_retention_ms
        with_data: set[int] = set()  # offsets of the markers whose transaction still has a batch here
        for info, data in _batches(segment):
            kept: bytes | None
            if info.is_control:
                alone = txns.marker_alone(info)
                if not alone:
                    with_data.add(info.base_offset)
                kept = self._filter_marker(info, data, alone, txns.last_batches, now_ms, delete_retention_ms, stats)
            elif txns.discard_data(info):  # an aborted transaction's batch: removed (its marker stays this pass)
                stats.records_removed += info.record_count
                stats.aborted_batches_removed += 1
                continue
            elif info.base_offset >= end_offset:  # beyond this pass's key map: dirty, copied as it is
                kept = data
            else:
                kept = self._filter_batch(info, data, offset_map, last_producer_batch, drop_tombstones, stats)
            if kept is not None:
                header = read_header(kept)
                header.position = 0
                cleaned.append(kept, [header], now_ms=now_ms)
        # An aborted transaction keeps its index entry while its data does (Kafka's cleaner appends the entry of
        # an abort marker only when it read a batch of that transaction): read_committed fetches need no more.
        cleaned.txn_index.extend([e for e in segment.txn_index.entries if e.last_offset in with_data])

    @staticmethod
    def _filter_marker(info: BatchInfo, data: bytes, alone: bool, last_batches: dict[int, int], now_ms: int,
                       delete_retention_ms: int, stats: CleanerStats) -> bytes | None:
        """A marker as it should be after cleaning (Kafka's rules, KIP-534): kept while its transaction has data
        here; once it has none, its batch gets a delete horizon (now + delete.retention.ms, in the base
        timestamp with the attributes' delete-horizon bit) and it is removed by the first pass after it — unless
        it is its producer's last batch, which stays so the producer's epoch survives a rebuild."""
        if not alone:
            return data
        horizon = info.delete_horizon_ms
        if horizon is None:
            rewritten = bytearray(data)
            horizon = now_ms + delete_retention_ms
            rewrite_header(rewritten, attributes=info.attributes | DELETE_HORIZON_MASK, base_timestamp=horizon)
            stats.marker_horizons_set += 1
            _wait_for(stats, horizon)
            return bytes(rewritten)
        if horizon > now_ms:
            _wait_for(stats, horizon)
            return data
        if last_batches.get(info.producer_id, info.base_offset) == info.base_offset:
            return data
        stats.markers_removed += 1
        return None

    def _finish(self, partition_log: Log, group: list[LogSegment], cleaned: LogSegment, stats: CleanerStats) -> None:
        """fsync the cleaned group and swap it in (or drop it if the log changed meanwhile)."""
        cleaned.last_modified_ms = max(s.last_modified_ms for s in group)
        try:
            cleaned.on_roll()
        except BaseException:
            cleaned.delete()
            raise
        stats.segments_written += 1
        stats.bytes_written += cleaned.size
        if not self._swap(partition_log, group, cleaned):  # the log changed meanwhile (retention, truncation)
            cleaned.delete()

    def _filter_batch(
        self,
        info: BatchInfo,
        data: bytes,
        offset_map: dict[bytes, int],
        last_producer_batch: dict[int, int],
        drop_tombstones: bool,
        stats: CleanerStats,
    ) -> bytes | None:
        """The batch as it should be after cleaning: the same bytes, a rebuilt batch, or None."""
        if info.is_control:
            return data
        records = batch_records(data, info)
        retained: list[Record] = []
        for record in records:
            if record.key is None:
                continue
            if offset_map.get(record.key, -1) > record.offset:
                continue
            if record.value is None and drop_tombstones:
                stats.tombstones_removed += 1
                continue
            retained.append(record)
        if len(retained) == len(records):
            return data
        stats.records_removed += len(records) - len(retained)
        if not retained and not (info.has_producer_id
                                 and last_producer_batch.get(info.producer_id, info.base_offset) == info.base_offset):
            return None
        stats.batches_rewritten += 1
        # The original's flags and last offset delta (the producer's last sequence) survive the rewrite.
        max_timestamp = info.max_timestamp if (info.attributes & TIMESTAMP_TYPE_MASK or not retained) else None
        built = rebuild_batch(info, retained, compression=info.compression, max_timestamp=max_timestamp,
                              now_ms=info.max_timestamp)
        return bytes(built)

    def _swap(self, partition_log: Log, group: list[LogSegment], cleaned: LogSegment) -> bool:
        """Commit `cleaned` in place of `group` under the log lock; False if the log changed meanwhile."""
        directory = partition_log.directory
        with partition_log.lock:
            current = partition_log.segments
            try:
                start = current.index(group[0])
            except ValueError:
                return False
            if current[start : start + len(group)] != group or start + len(group) >= len(current):
                return False
            marker = {"replaced": [s.base_offset for s in group], "created": [cleaned.base_offset]}
            try:
                write_atomically(directory / SWAP_MARKER, json.dumps(marker).encode())
            except BaseException:
                cleaned.delete()  # not committed: the old segments stay
                raise
            # Committed: from here a failure must not delete anything; the next open finishes the swap.
            try:
                for segment in group:
                    segment.delete()
                _rename_into_place(cleaned)
                partition_log.replace_segments(group, [cleaned])
                fsync_dir(directory)
                os.unlink(directory / SWAP_MARKER)
                fsync_dir(directory)
            except BaseException as exc:
                partition_log.mark_offline(f"log cleaner swap failed after its commit point: {exc}")
                raise
            return True


def _wait_for(stats: CleanerStats, horizon: int) -> None:
    """A marker waits for `horizon`: the log is worth a pass then (`Log.delete_horizon_due_ms`)."""
    if stats.next_delete_horizon_ms is None or horizon < stats.next_delete_horizon_ms:
        stats.next_delete_horizon_ms = horizon


def _rename_into_place(cleaned: LogSegment) -> None:
    """`.cleaned` -> final names (a separate function so tests can simulate a crash here)."""
    cleaned.rename_suffix(CLEANED_SUFFIX, "")


def _takewhile(items: list[LogSegment], predicate: Callable[[LogSegment], bool]) -> Iterator[LogSegment]:
    for item in items:
        if not predicate(item):
            return
        yield item
