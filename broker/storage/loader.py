"""Recovery: turn a partition directory into a list of trustworthy segments.

Why it exists: after a crash the tail of the log may be torn or corrupt and
the indexes may be stale. On open this module finishes or discards an
interrupted cleaner swap, removes temp files, scans every segment from the
recovery point on batch by batch (header + CRC), truncates at the first bad
batch (dropping every later segment) and rebuilds indexes that are missing or
inconsistent. Each repair is logged as a WARNING naming the file, the byte
position, the offset and the reason. Where a rescanned batch's leader epoch
rises it reports (epoch, offset), so the log rebuilds its leader-epoch cache
for that tail from the data (as Kafka's segment recovery does). It must never let a corrupt byte
survive into a segment that will be served.

It also refuses to serve a hole: offsets missing between two segments (a
segment file deleted by hand, a restore that missed one) are reported in
`LoadResult.gaps` with an ERROR naming the range, and the log stays offline
(`Log.open`) with every file left as it is. Holes below the cleaner offset are
compaction's and normal. An index without its `.log` is deleted with a WARNING; an empty segment
below the end of the one before it (a roll interrupted before it was installed) with an INFO.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from kelp.config.log_config import LogConfig
from kelp.records.header import HEADER_SIZE, BatchInfo
from kelp.records.validation import scan_valid_prefix

from .indexes.offset_index import OffsetIndex
from .indexes.time_index import TimeIndex
from .indexes.txn_index import TXNINDEX_SUFFIX, TransactionIndex
from .segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    LogSegment,
    segment_files,
    segment_paths,
    txn_index_path,
)

log = logging.getLogger("kelp.broker.storage")

CLEANED_SUFFIX = ".cleaned"  # a rewrite in progress, not yet committed
DELETED_SUFFIX = ".deleted"  # replaced by a committed rewrite, to be unlinked
SWAP_MARKER = "cleaner-swap.json"  # the commit point of a cleaner rewrite
_SCAN_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class OffsetGap:
    """Offsets [first, next) that no segment holds, between `before` and `after` (the .log files)."""

    first: int
    next: int
    before: Path
    after: Path

    def __str__(self) -> str:
        return (f"offsets {self.first}..{self.next - 1} ({self.next - self.first}) are missing between "
                f"{self.before.name} and {self.after.name}")


@dataclass(slots=True)
class LoadResult:
    segments: list[LogSegment]
    truncated_bytes: int  # bytes cut off torn/corrupt tails (0 after a clean shutdown)
    gaps: list[OffsetGap] = field(default_factory=list)  # holes between segments: the log must not be served
    # The tail rescanned batch by batch (from the segment holding the recovery point): where it starts, and
    # (leader epoch, first offset) wherever a batch's epoch rises in it — the leader-epoch cache of that
    # range is rebuilt from these (Kafka's LogSegment.recover does the same).
    rescanned_from: int | None = None
    epoch_starts: list[tuple[int, int]] = field(default_factory=list)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def complete_interrupted_swap(directory: Path) -> None:
    """Finish a committed cleaner rewrite (marker present) or discard an uncommitted one.

    The marker lists the replaced segments' base offsets and the new segments'
    base offsets; the new files were fsynced as `.cleaned` before the marker
    was written, so with a marker present the rewrite can always be finished.
    """
    marker = directory / SWAP_MARKER
    if marker.exists():
        try:
            plan = json.loads(marker.read_text())
            replaced = [int(b) for b in plan["replaced"]]
            created = [int(b) for b in plan["created"]]
        except (ValueError, KeyError, TypeError) as exc:
            # The marker is written atomically, so this is outside damage: the old segments are still there
            # unless renamed; keep whatever .log exists and drop the unfinished rewrite.
            log.warning("unreadable cleaner marker %s (%s); discarding the unfinished rewrite", marker, exc)
            replaced, created = [], []
        else:
            for base in replaced:
                for path in segment_files(directory, base):
                    if (path.parent / (path.name + CLEANED_SUFFIX)).exists() or base not in created:
                        _unlink(path)  # an old file whose replacement is pending, or a merged-away segment
            for base in created:
                for path in segment_files(directory, base):
                    cleaned = path.parent / (path.name + CLEANED_SUFFIX)
                    if cleaned.exists():
                        os.replace(cleaned, path)
            log.warning("completed an interrupted log cleaner swap in %s (segments %s)", directory, created)
        _unlink(marker)
    for path in directory.iterdir():
        if path.name.endswith((CLEANED_SUFFIX, DELETED_SUFFIX, ".tmp", ".swap")):
            _unlink(path)


def _scan(path: Path, start_offset: int) -> tuple[list[BatchInfo], int, str | None, int]:
    """Valid batches of the file, where they end, why the scan stopped (None: end of file), file size."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        batches: list[BatchInfo] = []
        position = 0
        want = _SCAN_CHUNK
        next_offset = start_offset
        while position < size:
            data = os.pread(fd, min(max(want, _SCAN_CHUNK), size - position), position)
            result = scan_valid_prefix(data, next_offset=next_offset)
            for info in result.batches:
                info.position += position
            batches.extend(result.batches)
            if result.batches:
                next_offset = result.batches[-1].next_offset
            chunk_end = position + len(data)
            position += result.valid_end
            if result.error is None:
                continue
            if result.incomplete and chunk_end < size:
                want = max(result.needed, HEADER_SIZE)
                continue
            return batches, position, result.error, size
        return batches, position, None, size
    finally:
        os.close(fd)


def _next_offset_after(batches: list[BatchInfo], default: int) -> int:
    return batches[-1].next_offset if batches else default


def load_segments(
    directory: Path, config: LogConfig, *, recovery_point: int, log_start_offset: int, now_ms: int,
    compacted_below: int = 0,
) -> LoadResult:
    """Open (and repair) every segment in `directory`; creates one at `log_start_offset` if none exist.

    `compacted_below`: the cleaner offset; a hole between segments that ends at or below it was
    left by compaction, any other is reported in `gaps`.
    """
    complete_interrupted_swap(directory)
    bases = sorted(int(p.name[: -len(LOG_SUFFIX)]) for p in directory.glob(f"*{LOG_SUFFIX}") if p.name[:-4].isdigit())
    for path in [p for sfx in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX) for p in directory.glob(f"*{sfx}")]:
        stem = path.name.split(".")[0]
        if stem.isdigit() and int(stem) not in bases:
            log.warning("deleting %s: an index without its log segment %s%s", path, stem, LOG_SUFFIX)
            _unlink(path)

    # Everything from the segment holding the recovery point on may hold unflushed bytes.
    recover_from = 0
    for i, base in enumerate(bases):
        if base <= recovery_point:
            recover_from = i

    segments: list[LogSegment] = []
    gaps: list[OffsetGap] = []
    truncated = 0
    rescanned_from: int | None = None
    epoch_starts: list[tuple[int, int]] = []
    expected_next = bases[0] if bases else log_start_offset
    for i, base in enumerate(bases):
        log_path, index_path, time_path = segment_paths(directory, base)
        if segments and base < expected_next and _is_empty(log_path):
            # A roll made its files, then appends moved the log end past its base before it was installed
            # (`log_roll.roll_when_due`), and the process died before it removed them: never served.
            log.info("deleting %s: an empty segment below the end (%d) of the one before it, left by an "
                     "interrupted roll", log_path, expected_next)
            for path in segment_files(directory, base):
                _unlink(path)
            continue
        if segments and base > expected_next and base > compacted_below:
            gap = OffsetGap(expected_next, base, segments[-1].log_path, log_path)
            log.error("%s: %s; a segment file was removed or not restored — the log is not served until "
                      "the missing segment is put back (see docs/internals.md, 'Holes between segments')",
                      directory, gap)
            gaps.append(gap)
        segment: LogSegment | None = None
        if i < recover_from:
            segment = _open_trusted(log_path, base, config, now_ms)
        if segment is None:
            batches, valid_end, error, size = _scan(log_path, max(base, expected_next))
            if error is not None:
                offset = _next_offset_after(batches, max(base, expected_next))
                log.warning(
                    "truncated %d bytes at position %d of %s (offset %d): %s",
                    size - valid_end, valid_end, log_path, offset, error,
                )
                truncated += size - valid_end
                os.truncate(log_path, valid_end)
            segment = LogSegment(
                log_path=log_path,
                base_offset=base,
                index=OffsetIndex.create(index_path, base, max_entries=config.max_index_entries),
                time_index=TimeIndex.create(time_path, base),
                index_interval_bytes=config.index_interval_bytes,
                last_modified_ms=_mtime_ms(log_path, now_ms),
            )
            segment.rebuild_state(batches)
            if i >= recover_from:
                if rescanned_from is None:
                    rescanned_from = base
                for info in batches:  # per batch: headers the scan already holds
                    epoch = info.partition_leader_epoch
                    if epoch >= 0 and (not epoch_starts or epoch > epoch_starts[-1][0]):
                        epoch_starts.append((epoch, info.base_offset))
            if error is not None:
                segment.txn_index = TransactionIndex.load(txn_index_path(directory, base), base,
                                                          next_offset=segment.next_offset)
                segments.append(segment)
                for later in bases[i + 1 :]:
                    for path in segment_files(directory, later):
                        if path.suffix == LOG_SUFFIX and path.exists():
                            size = path.stat().st_size
                            truncated += size
                            log.warning("deleted %s (%d bytes) after the corrupt batch in %s", path, size, log_path)
                        _unlink(path)
                break
        segment.txn_index = TransactionIndex.load(txn_index_path(directory, base), base,
                                                  next_offset=segment.next_offset)
        segments.append(segment)
        expected_next = segment.next_offset
    return LoadResult(segments=segments, truncated_bytes=truncated, gaps=gaps, rescanned_from=rescanned_from,
                      epoch_starts=epoch_starts)


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def _mtime_ms(path: Path, default: int) -> int:
    try:
        return int(path.stat().st_mtime * 1000)
    except OSError:
        return default


def _open_trusted(log_path: Path, base: int, config: LogConfig, now_ms: int) -> LogSegment | None:
    """A segment below the recovery point, with its indexes if they are consistent; None to rescan it."""
    _, index_path, time_path = segment_paths(log_path.parent, base)
    size = log_path.stat().st_size
    index, reason = OffsetIndex.load(index_path, base, max_entries=config.max_index_entries, log_size=size)
    if index is None:
        log.warning("rebuilding %s: %s", index_path, reason)
        return None
    segment = LogSegment(
        log_path=log_path,
        base_offset=base,
        index=index,
        time_index=TimeIndex(time_path, base),
        index_interval_bytes=config.index_interval_bytes,
        size=size,
        last_modified_ms=_mtime_ms(log_path, now_ms),
    )
    segment.restore_state()
    last = segment.find(segment.next_offset - 1) if segment.next_offset > base else None
    if size and (last is None or last.end != size):
        log.warning("rebuilding indexes of %s: its batches do not end at the file end (%d bytes)", log_path, size)
        segment.close()
        return None
    time_index, reason = TimeIndex.load(time_path, base, next_offset=segment.next_offset)
    if time_index is None:
        log.warning("rebuilding %s: %s", time_path, reason)
        segment.close()
        return None
    segment.time_index = time_index
    segment.restore_state()
    return segment
