"""Rolling segments, sparse index lookups across many segments, and lookups by timestamp."""

from __future__ import annotations

from kelp.broker.storage import Log
from kelp.config.log_config import LogConfig
from kelp.records.header import iter_headers

from .helpers import batch, log_files, read_all


def test_segments_roll_by_size_and_are_named_by_base_offset(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500), clock_ms=clock)
    for i in range(30):
        log.append_as_leader(batch(b"v%03d" % i), leader_epoch=0)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3 and bases[0] == 0
    assert all(s.size <= 500 for s in log.segments)
    names = [p.name for p in log_files(tmp_path / "t-0", ".log")]
    assert names == [f"{b:020d}.log" for b in bases]
    assert len(log_files(tmp_path / "t-0", ".index")) == len(bases)
    assert len(log_files(tmp_path / "t-0", ".timeindex")) == len(bases)
    # Segments chain: each starts where the previous ends.
    for older, newer in zip(log.segments, log.segments[1:], strict=False):
        assert older.next_offset == newer.base_offset


def test_a_batch_larger_than_a_segment_still_goes_in(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=100), clock_ms=clock)
    log.append_as_leader(batch(b"x" * 300), leader_epoch=0)
    log.append_as_leader(batch(b"y" * 300), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 1]
    assert [r.value for r in read_all(log)] == [b"x" * 300, b"y" * 300]


def test_segments_roll_by_time(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_ms=60_000), clock_ms=clock)
    log.append_as_leader(batch(b"a", timestamp=clock.ms), leader_epoch=0)
    clock.advance(30_000)
    log.append_as_leader(batch(b"b", timestamp=clock.ms), leader_epoch=0)
    assert len(log.segments) == 1
    clock.advance(30_000)
    log.append_as_leader(batch(b"c", timestamp=clock.ms), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    clock.advance(60_000)
    assert log.maybe_roll_by_time() is True
    assert [s.base_offset for s in log.segments] == [0, 2, 3]
    assert log.maybe_roll_by_time() is False  # the new active segment is empty


def test_segments_roll_when_the_index_is_full(tmp_path, clock) -> None:
    config = LogConfig(index_interval_bytes=0, segment_index_bytes=8 * 4)
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    for i in range(20):
        log.append_as_leader(batch(b"v%d" % i), leader_epoch=0)
    assert len(log.segments) >= 4
    assert all(len(s.index) <= 4 for s in log.segments)


def test_index_lookups_find_every_offset_across_many_segments(tmp_path, clock) -> None:
    config = LogConfig(segment_bytes=1500, index_interval_bytes=150)
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    for i in range(200):
        values = [b"r%d-%d" % (i, j) for j in range(1 + i % 3)]
        log.append_as_leader(batch(*values), leader_epoch=0)
    assert len(log.segments) > 10
    assert any(len(s.index) > 3 for s in log.segments)
    everything = read_all(log)
    assert [r.offset for r in everything] == list(range(log.log_end_offset))
    for offset in range(0, log.log_end_offset, 7):
        (first, *_) = iter_headers(log.read(offset, max_bytes=1))
        assert first.base_offset <= offset <= first.last_offset


def test_offset_for_timestamp(tmp_path, clock) -> None:
    config = LogConfig(segment_bytes=400, index_interval_bytes=100)
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    base = 1_000_000
    for i in range(40):
        # Two records per batch, 10 ms apart; batches 100 ms apart.
        log.append_as_leader(
            __import__("kelp.records.build", fromlist=["build_batch"]).build_batch(
                [(b"k", b"a%d" % i, (), base + 100 * i), (b"k", b"b%d" % i, (), base + 100 * i + 10)]
            ),
            leader_epoch=0,
        )
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(0) == (0, base)
    assert log.offset_for_timestamp(base + 100 * 17) == (34, base + 1700)
    assert log.offset_for_timestamp(base + 100 * 17 + 5) == (35, base + 1710)  # inside a batch
    assert log.offset_for_timestamp(base + 100 * 17 + 11) == (36, base + 1800)
    assert log.offset_for_timestamp(base + 100 * 39 + 10) == (79, base + 3910)
    assert log.offset_for_timestamp(base + 100 * 40) is None


def test_offset_for_timestamp_survives_reopen(tmp_path, clock) -> None:
    config = LogConfig(segment_bytes=300, index_interval_bytes=50)
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    for i in range(20):
        log.append_as_leader(batch(b"v%d" % i, timestamp=5000 + i * 10), leader_epoch=0)
    expected = [log.offset_for_timestamp(t) for t in range(4990, 5200, 3)]
    log.close()
    again = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    assert [again.offset_for_timestamp(t) for t in range(4990, 5200, 3)] == expected
