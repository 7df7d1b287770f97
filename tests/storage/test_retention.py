"""Retention deletes whole closed segments by age and by size, never the active one."""

from __future__ import annotations

import pytest

from kelp.broker.storage import Log
from kelp.config.log_config import LogConfig
from kelp.errors import OffsetOutOfRangeError

from .helpers import batch, read_all

HOUR = 3_600_000


def _fill(log: Log, clock, count: int, *, step_ms: int = 0) -> None:
    for i in range(count):
        log.append_as_leader(batch(b"v%03d" % i, timestamp=clock.ms), leader_epoch=0)
        clock.advance(step_ms)
    log.high_watermark = log.log_end_offset  # committed (the replica layer's job): retention may take it


def test_retention_by_time_uses_each_segments_newest_timestamp(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_ms=HOUR), clock_ms=clock)
    _fill(log, clock, 20, step_ms=60_000)  # one record a minute
    segments = log.segments
    assert len(segments) > 3
    assert log.enforce_retention() == 0
    # Move time so the first two closed segments' newest records are older than an hour.
    clock.ms = segments[1].max_timestamp + HOUR + 1
    assert log.enforce_retention() == 2
    assert log.log_start_offset == segments[2].base_offset
    assert [s.base_offset for s in log.segments] == [s.base_offset for s in segments[2:]]
    assert not segments[0].log_path.exists() and not segments[0].index.path.exists()
    with pytest.raises(OffsetOutOfRangeError, match="out of range"):
        log.read(0, max_bytes=100)
    assert read_all(log)[0].offset == log.log_start_offset


def test_retention_never_deletes_the_active_segment(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_ms=HOUR), clock_ms=clock)
    _fill(log, clock, 20)
    clock.advance(10 * HOUR)
    deleted = log.enforce_retention()
    assert deleted > 0 and len(log.segments) == 1
    assert log.log_start_offset == log.active_segment.base_offset
    assert log.log_end_offset == 20


def test_retention_by_bytes_keeps_the_newest_data_within_the_limit(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_ms=-1, retention_bytes=700), clock_ms=clock)
    _fill(log, clock, 40)
    before = log.size_bytes
    assert before > 700
    deleted = log.enforce_retention()
    assert deleted > 0
    # Kafka's rule: delete the oldest segments only while what is left still holds retention.bytes.
    assert log.size_bytes >= 700
    assert log.size_bytes - log.segments[0].size < 700
    assert log.log_start_offset == log.segments[0].base_offset


def test_compact_only_policy_does_not_delete_by_retention(tmp_path, clock) -> None:
    config = LogConfig(segment_bytes=300, retention_ms=1, cleanup_policy="compact")
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    _fill(log, clock, 20)
    clock.advance(HOUR)
    assert log.enforce_retention() == 0


def test_log_start_survives_reopen(tmp_path, clock) -> None:
    config = LogConfig(segment_bytes=300, retention_ms=HOUR)
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    _fill(log, clock, 20)
    clock.advance(2 * HOUR)
    log.enforce_retention()
    start, end = log.log_start_offset, log.log_end_offset
    log.close()
    again = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    assert (again.log_start_offset, again.log_end_offset) == (start, end)


def test_advance_log_start_offset_hides_older_records_and_frees_segments(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_ms=-1), clock_ms=clock)
    _fill(log, clock, 20)
    log.high_watermark = 20
    log.advance_log_start_offset(12)
    assert log.log_start_offset == 12
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11, max_bytes=100)
    assert read_all(log)[0].offset == 12
    log.enforce_retention()
    assert log.segments[0].base_offset <= 12 < log.segments[0].next_offset or log.segments[0].base_offset == 12
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        log.advance_log_start_offset(25)


def test_retention_never_deletes_above_the_high_watermark(tmp_path, clock) -> None:
    """A follower may still need records the ISR has not all got: they stay whatever their age."""
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_ms=HOUR), clock_ms=clock)
    for i in range(20):
        log.append_as_leader(batch(b"v%03d" % i, timestamp=clock.ms), leader_epoch=0)
    segments = log.segments
    log.high_watermark = segments[2].base_offset  # only the first two segments are fully committed
    clock.advance(2 * HOUR)
    assert log.enforce_retention() == 2
    assert log.log_start_offset == segments[2].base_offset <= log.high_watermark
    log.high_watermark = log.log_end_offset
    assert log.enforce_retention() == len(segments) - 3  # all closed ones now; never the active one
