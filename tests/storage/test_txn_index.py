"""The aborted-transaction index (`.txnindex`, Kafka's format) follows its segment everywhere: appends,
recovery of a torn tail, truncation, retention and compaction — and the cleaner removes an aborted
transaction's records (never letting them hide a committed value) while keeping its marker."""

from __future__ import annotations

import struct

from kelp.broker.storage import Log, LogCleaner
from kelp.broker.storage.indexes.txn_index import ENTRY_SIZE, TXNINDEX_SUFFIX, AbortedTxn, TransactionIndex
from kelp.config.log_config import LogConfig
from kelp.control_records import build_marker_batch
from kelp.records.build import build_batch
from kelp.records.header import iter_headers
from kelp.records.record import Record

from .helpers import keyed, log_files, read_all

DAY = 86_400_000


def test_entries_are_kafkas_34_bytes_and_a_torn_tail_is_cut(tmp_path) -> None:
    path = tmp_path / f"{0:020d}{TXNINDEX_SUFFIX}"
    index = TransactionIndex(path, 0)
    index.append(AbortedTxn(7, 0, 4, 1))
    index.extend([AbortedTxn(9, 5, 8, 9), AbortedTxn(3, 9, 12, 13)])
    assert ENTRY_SIZE == 34 and path.stat().st_size == 3 * 34
    assert struct.unpack_from(">hqqqq", path.read_bytes(), 34) == (0, 9, 5, 8, 9)  # version 0, pid, first, last, LSO
    with open(path, "ab") as f:
        f.write(b"\x00" * 10)  # a torn fourth entry
    loaded = TransactionIndex.load(path, 0)
    assert [t.producer_id for t in loaded.entries] == [7, 9, 3] and path.stat().st_size == 3 * 34
    # an entry whose marker lies past the segment end (its log tail was cut in recovery) goes too
    loaded = TransactionIndex.load(path, 0, next_offset=10)
    assert [t.last_offset for t in loaded.entries] == [4, 8] and path.stat().st_size == 2 * 34
    # the search stops at the first entry whose LSO reached the fetch's upper bound (Kafka's isComplete)
    found: list[AbortedTxn] = []
    assert loaded.collect(5, 9, found) and found == [AbortedTxn(9, 5, 8, 9)]


def _marker(log: Log, pid: int) -> int:
    return log.append_as_leader(build_marker_batch(pid, 0, commit=False, coordinator_epoch=0, timestamp_ms=1),
                                leader_epoch=0, origin="coordinator").first_offset


def test_the_index_follows_truncation_retention_and_a_reopen(tmp_path, clock) -> None:
    config = LogConfig(segment_bytes=300, retention_ms=DAY)
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    first = log.append_as_leader(keyed([(b"k", b"v" * 100)]), leader_epoch=0).first_offset
    log.append_aborted_txn(AbortedTxn(7, first, _marker(log, 7), 2))
    for _ in range(4):
        log.append_as_leader(keyed([(b"k", b"v" * 100)]), leader_epoch=0)
    first = log.log_end_offset
    log.append_as_leader(keyed([(b"k", b"v" * 100)]), leader_epoch=0)
    cut = _marker(log, 8)
    log.append_aborted_txn(AbortedTxn(8, first, cut, cut + 1))
    assert [t.producer_id for t in log.collect_aborted_txns(0, log.log_end_offset)] == [7, 8]
    assert len(log_files(log.directory, TXNINDEX_SUFFIX)) == 2
    # truncation below producer 8's marker removes its entry with the records
    log.truncate_to(cut)
    assert [t.producer_id for t in log.collect_aborted_txns(0, log.log_end_offset)] == [7]
    log.close()
    again = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    assert [t.producer_id for t in again.collect_aborted_txns(0, again.log_end_offset)] == [7]
    # retention deletes the first segment and its .txnindex
    again.high_watermark = again.log_end_offset
    clock.advance(2 * DAY)
    assert again.enforce_retention() >= 1
    assert log_files(again.directory, TXNINDEX_SUFFIX) == []
    assert again.collect_aborted_txns(again.log_start_offset, again.log_end_offset) == []
    again.close()


def _txn(pid: int, key: bytes, value: bytes) -> bytes:
    return build_batch([Record(key, value)], producer_id=pid, producer_epoch=0, base_sequence=0,
                       is_transactional=True)


def test_the_cleaner_drops_aborted_records_and_keeps_markers(tmp_path, clock) -> None:
    config = LogConfig(segment_bytes=300, cleanup_policy="compact", delete_retention_ms=DAY,
                       min_cleanable_dirty_ratio=0.01)
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    log.append_as_leader(keyed([(b"a", b"committed")]), leader_epoch=0)  # 0
    aborted_at = log.append_as_leader(_txn(7, b"a", b"aborted"), leader_epoch=0).first_offset  # 1
    marker_at = _marker(log, 7)  # 2
    log.append_aborted_txn(AbortedTxn(7, aborted_at, marker_at, marker_at + 1))
    for i in range(12):
        log.append_as_leader(keyed([(b"b%d" % (i % 3), b"x" * 40)]), leader_epoch=0)
    assert len(log.segments) >= 3
    # an undecided transaction at offset 1 (the replica layer says so): nothing from there is cleaned
    log.first_unstable_offset = aborted_at
    LogCleaner(clock_ms=clock).clean(log, clock.ms)
    assert [r.offset for r in read_all(log)][:2] == [0, 1]
    log.first_unstable_offset = None
    stats = LogCleaner(clock_ms=clock).clean(log, clock.ms)
    assert stats.aborted_batches_removed == 1
    records = {r.key: (r.offset, r.value) for r in read_all(log)}
    assert records[b"a"] == (0, b"committed")  # the aborted value neither survived nor hid the committed one
    data = log.read(0, max_bytes=1 << 20)
    heads = list(iter_headers(data))
    assert [h.base_offset for h in heads if h.is_control] == [marker_at]  # the marker stays
    assert aborted_at not in [h.base_offset for h in heads]
    # the rewritten segment carries the entry; a reopen reads it back
    assert [t.producer_id for t in log.collect_aborted_txns(0, log.log_end_offset)] == [7]
    log.close()
    again = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    assert [t.last_offset for t in again.collect_aborted_txns(0, again.log_end_offset)] == [marker_at]
    again.close()


def _commit(log: Log, pid: int) -> int:
    return log.append_as_leader(build_marker_batch(pid, 0, commit=True, coordinator_epoch=0, timestamp_ms=1),
                                leader_epoch=0, origin="coordinator").first_offset


def _controls(log: Log) -> dict[int, int | None]:
    """base offset -> delete horizon of each marker in the log (one read stays within one segment)."""
    found: dict[int, int | None] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        heads = list(iter_headers(log.read(offset, max_bytes=1 << 20)))
        found.update((h.base_offset, h.delete_horizon_ms) for h in heads if h.is_control)
        offset = heads[-1].next_offset
    return found


def test_the_cleaner_removes_a_marker_once_its_data_is_gone_and_its_horizon_passed(tmp_path, clock) -> None:
    """Kafka's rule (KIP-534): a marker stays while its transaction has data; the first pass that finds none
    writes its delete horizon (now + delete.retention.ms), a pass after the horizon removes it — unless it is
    its producer's last batch."""
    config = LogConfig(segment_bytes=300, cleanup_policy="compact", delete_retention_ms=DAY,
                       min_cleanable_dirty_ratio=0.01)
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    cleaner = LogCleaner(clock_ms=clock)

    def more(tag: bytes) -> None:  # plain records that roll segments (something dirty for the next pass)
        for i in range(6):
            log.append_as_leader(keyed([(tag + b"%d" % i, b"x" * 40)]), leader_epoch=0)

    aborted_at = log.append_as_leader(_txn(7, b"a", b"aborted"), leader_epoch=0).first_offset
    abort = _marker(log, 7)
    log.append_aborted_txn(AbortedTxn(7, aborted_at, abort, abort + 1))
    log.append_as_leader(_txn(9, b"c", b"old"), leader_epoch=0)
    first_commit = _commit(log, 9)
    log.append_as_leader(keyed([(b"c", b"new")]), leader_epoch=0)  # supersedes the committed "c"
    log.append_as_leader(build_batch([Record(b"d", b"kept")], producer_id=9, producer_epoch=0, base_sequence=1,
                                     is_transactional=True), leader_epoch=0)
    second_commit = _commit(log, 9)
    more(b"p")
    # Pass 1: the aborted batch and the superseded committed one go; their markers stay (their data was here).
    stats = cleaner.clean(log, clock.ms)
    assert stats.aborted_batches_removed == 1 and stats.markers_removed == 0
    assert _controls(log) == {abort: None, first_commit: None, second_commit: None}
    assert [t.last_offset for t in log.collect_aborted_txns(0, log.log_end_offset)] == [abort]
    # Pass 2: both markers without data get their delete horizon; the index entry goes with the data.
    more(b"q")
    stats = cleaner.clean(log, clock.ms)
    horizon = clock.ms + DAY
    assert stats.marker_horizons_set == 2
    assert _controls(log) == {abort: horizon, first_commit: horizon, second_commit: None}
    assert log.collect_aborted_txns(0, log.log_end_offset) == []
    # Before the horizon nothing changes; after it the first commit marker goes, producer 7's abort marker (its
    # last batch) and the marker of the transaction whose data is still there stay.
    more(b"r")
    assert cleaner.clean(log, clock.ms).markers_removed == 0
    assert log.delete_horizon_due_ms == horizon and not log.cleanable()  # nothing dirty, the horizon ahead
    clock.advance(DAY + 1)
    assert log.cleanable()  # nothing dirty, but a marker's horizon passed: a pass for it (KIP-534)
    assert cleaner.clean(log, clock.ms).markers_removed == 1
    assert log.delete_horizon_due_ms is None  # producer 7's last batch stays, but brings no pass back for it
    assert _controls(log) == {abort: horizon, second_commit: None}
    values = {r.key: r.value for r in read_all(log)}
    assert values[b"c"] == b"new" and values[b"d"] == b"kept" and b"a" not in values
    log.close()
    again = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    assert _controls(again) == {abort: horizon, second_commit: None}
    again.close()
