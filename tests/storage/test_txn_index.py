"""The aborted-transaction index (`.txnindex`, Kafka's format) follows its segment everywhere: appends,
recovery of a torn tail, truncation, retention and compaction — and the cleaner removes an aborted
transaction's records (never letting them hide a committed value) while keeping its marker."""

from __future__ import annotations

import struct

from kelp.broker.storage import Log, LogCleaner, LogConfig
from kelp.broker.storage.txn_index import ENTRY_SIZE, TXNINDEX_SUFFIX, AbortedTxn, TransactionIndex
from kelp.control_records import build_marker_batch
from kelp.records import Record, build_batch, iter_headers

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
