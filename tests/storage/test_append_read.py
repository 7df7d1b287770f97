"""Appends get consecutive offsets and come back byte-identical, batch by batch."""

from __future__ import annotations

import pytest

from kelp.broker.storage import Log
from kelp.config.log_config import LogConfig
from kelp.errors import CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError, RecordTooLargeError
from kelp.records.build import build_batch
from kelp.records.header import iter_headers
from kelp.records.record import iter_records
from kelp.records.validation import parse_batches

from .helpers import batch, read_all


def test_offsets_are_assigned_and_records_round_trip(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "orders-0", clock_ms=clock)
    first = log.append_as_leader(batch(b"a", b"b", b"c"), leader_epoch=0)
    second = log.append_as_leader(batch(b"d") + batch(b"e", b"f"), leader_epoch=0)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset, second.record_count) == (3, 5, 3)
    assert [b.base_offset for b in second.batches] == [3, 4]
    assert log.log_end_offset == 6
    assert [(r.offset, r.value) for r in read_all(log)] == list(enumerate([b"a", b"b", b"c", b"d", b"e", b"f"]))
    # The stored batches carry the assigned offsets and leader epoch and still pass the CRC check.
    stored = parse_batches(log.read(0, max_bytes=1 << 20))
    assert [(b.base_offset, b.partition_leader_epoch) for b in stored] == [(0, 0), (3, 0), (4, 0)]


def test_read_starts_at_the_batch_holding_the_offset(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    log.append_as_leader(batch(b"a", b"b", b"c"), leader_epoch=0)
    log.append_as_leader(batch(b"d", b"e"), leader_epoch=0)
    data = log.read(4, max_bytes=1 << 20)
    assert [b.base_offset for b in iter_headers(data)] == [3]
    data = log.read(1, max_bytes=1 << 20)
    assert [b.base_offset for b in iter_headers(data)] == [0, 3]


def test_max_bytes_returns_whole_batches_only(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    sizes = [log.append_as_leader(batch(b"x" * 100), leader_epoch=0).batches[0].size for _ in range(5)]
    data = log.read(0, max_bytes=sizes[0] * 2 + 10)
    assert len(data) == sizes[0] * 2
    # Smaller than one batch: min_one_batch returns the first anyway, otherwise nothing.
    assert len(log.read(0, max_bytes=10)) == sizes[0]
    assert log.read(0, max_bytes=10, min_one_batch=False) == b""


def test_max_offset_stops_before_the_high_watermark(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    for value in (b"a", b"b", b"c"):
        log.append_as_leader(batch(value), leader_epoch=0)
    data = log.read(0, max_bytes=1 << 20, max_offset=2)
    assert [b.base_offset for b in iter_headers(data)] == [0, 1]
    assert log.read(2, max_bytes=1 << 20, max_offset=2) == b""


def test_read_at_log_end_is_empty_and_outside_raises(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    log.append_as_leader(batch(b"a"), leader_epoch=0)
    assert log.read(1, max_bytes=100) == b""
    with pytest.raises(OffsetOutOfRangeError, match=r"t-0: offset 2 is out of range.*\[0, 1\)"):
        log.read(2, max_bytes=100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, max_bytes=100)


def test_invalid_batches_are_rejected_with_the_partition_named(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-3", LogConfig(max_message_bytes=200), clock_ms=clock)
    with pytest.raises(RecordTooLargeError, match="t-3: .*over the limit of 200 bytes"):
        log.append_as_leader(batch(b"x" * 500), leader_epoch=0)
    damaged = bytearray(batch(b"a"))
    damaged[-1] ^= 0x55
    with pytest.raises(CorruptRecordError, match="t-3: CRC mismatch"):
        log.append_as_leader(bytes(damaged), leader_epoch=0)
    assert log.log_end_offset == 0 and log.size_bytes == 0  # nothing partial was written


def test_log_append_time_stamps_the_broker_clock(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"), clock_ms=clock)
    result = log.append_as_leader(batch(b"a", b"b", timestamp=5), leader_epoch=0)
    assert result.log_append_time_ms == clock.ms
    assert [r.timestamp for r in iter_records(log.read(0, max_bytes=1 << 20))] == [clock.ms, clock.ms]


def test_compacted_topics_refuse_keyless_records(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(cleanup_policy="compact"), clock_ms=clock)
    with pytest.raises(InvalidRecordError, match="without a key"):
        log.append_as_leader(batch(b"a", key=None), leader_epoch=0)


def test_producer_fields_survive_the_append(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    data = build_batch([(b"k", b"v"), (b"k", b"w")], producer_id=42, producer_epoch=3, base_sequence=10)
    (info,) = log.append_as_leader(data, leader_epoch=0).batches
    assert (info.producer_id, info.producer_epoch, info.base_sequence, info.last_sequence) == (42, 3, 10, 11)


def test_follower_append_keeps_offsets_and_epochs(tmp_path, clock) -> None:
    leader = Log.open(tmp_path / "leader" / "t-0", clock_ms=clock)
    leader.append_as_leader(batch(b"a", b"b"), leader_epoch=1)
    leader.append_as_leader(batch(b"c"), leader_epoch=4)
    follower = Log.open(tmp_path / "follower" / "t-0", clock_ms=clock)
    follower.append_as_follower(leader.read(0, max_bytes=1 << 20))
    assert follower.log_end_offset == 3
    assert follower.leader_epochs.entries == [(1, 0), (4, 2)]
    assert follower.read(0, max_bytes=1 << 20) == leader.read(0, max_bytes=1 << 20)
    with pytest.raises(InvalidRecordError, match="below the log end"):
        follower.append_as_follower(leader.read(2, max_bytes=1 << 20))


def test_leader_epochs_and_end_offset_for_epoch(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    log.append_as_leader(batch(b"a", b"b"), leader_epoch=1)
    log.append_as_leader(batch(b"c"), leader_epoch=3)
    assert log.leader_epochs.entries == [(1, 0), (3, 2)]
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(3) == (3, 3)
    assert log.end_offset_for_epoch(0) == (0, 0)  # below the first epoch: as Kafka, the first epoch's start
    assert log.end_offset_for_epoch(4) == (-1, -1)  # above the latest


def test_truncate_to_removes_the_tail(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300), clock_ms=clock)
    for i in range(10):
        log.append_as_leader(batch(b"v%d" % i), leader_epoch=i // 5)
    assert len(log.segments) > 2
    log.truncate_to(4)
    assert log.log_end_offset == 4
    assert [r.value for r in read_all(log)] == [b"v0", b"v1", b"v2", b"v3"]
    assert log.leader_epochs.entries == [(0, 0)]
    log.append_as_leader(batch(b"new"), leader_epoch=2)
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3, 4]
    log.close()
    again = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300), clock_ms=clock)
    assert again.log_end_offset == 5 and read_all(again)[-1].value == b"new"


def test_high_watermark_is_clamped_and_persisted(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    log.append_as_leader(batch(b"a", b"b"), leader_epoch=0)
    log.high_watermark = 10
    assert log.high_watermark == 2
    log.high_watermark = 1
    log.close()
    assert Log.open(tmp_path / "t-0", clock_ms=clock).high_watermark == 1


def test_max_timestamp_offset_is_the_first_record_carrying_it(tmp_path, clock) -> None:
    """ListOffsets -3 (KIP-734): the offset of the record with the largest timestamp, across segments."""
    from kelp.records.build import build_batch
    from kelp.records.record import Record

    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200), clock_ms=clock)
    assert log.max_timestamp_and_offset() is None
    stamps = [100, 900, 300, 900, 50, 700]
    for i, ts in enumerate(stamps):
        log.append_as_leader(build_batch([Record(b"k", b"x%d" % i, timestamp=ts - 1),
                                          Record(b"k", b"y", timestamp=ts)]),
                             leader_epoch=0)
    assert len(log.segments) > 1
    assert log.max_timestamp_and_offset() == (3, 900)  # batch 1's second record, offset 3; batch 3 ties later
