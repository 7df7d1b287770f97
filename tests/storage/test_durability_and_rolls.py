"""Review fixes in the log: no needless fsyncs, time rolls with old client timestamps, stable slices."""

from __future__ import annotations

import os

import pytest

from kelp.broker.storage import Log
from kelp.config.log_config import LogConfig

from .helpers import batch, count_preads, read_all


@pytest.fixture
def fsyncs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_creating_a_new_log_does_not_fsync(tmp_path, clock, fsyncs) -> None:
    # 50 __consumer_offsets partitions are created on the event loop at start.
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    assert fsyncs == []
    assert (tmp_path / "t-0" / "partition.checkpoint").exists()
    log.append_as_leader(batch(b"a"), leader_epoch=0)
    log.close()
    assert fsyncs, "data appended since the last flush must be fsynced at close"
    again = Log.open(tmp_path / "t-0", clock_ms=clock)
    assert again.recovery_point == again.log_end_offset == 1
    assert [r.value for r in read_all(again)] == [b"a"]


def test_closing_an_unchanged_log_skips_fsync_and_checkpoint(tmp_path, clock, fsyncs) -> None:
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    log.append_as_leader(batch(b"a", b"b"), leader_epoch=0)
    log.flush()
    fsyncs.clear()
    checkpoint = tmp_path / "t-0" / "partition.checkpoint"
    before = checkpoint.stat().st_mtime_ns
    log.close()
    assert fsyncs == []
    assert checkpoint.stat().st_mtime_ns == before
    again = Log.open(tmp_path / "t-0", clock_ms=clock)
    again.close()
    assert fsyncs == []
    third = Log.open(tmp_path / "t-0", clock_ms=clock)
    assert third.recovery_point == third.log_end_offset == 2
    assert [r.value for r in read_all(third)] == [b"a", b"b"]


def test_old_client_timestamps_do_not_roll_on_every_append(tmp_path, clock) -> None:
    config = LogConfig(segment_ms=60_000)
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    old = clock.ms - 30 * 86_400_000  # a month-old client clock (or replayed data)
    for i in range(10):
        log.append_as_leader(batch(b"v%d" % i, timestamp=old + i), leader_epoch=0)
        clock.advance(1_000)
    assert len(log.segments) == 1
    log.close()
    # After a restart the segment's age comes from its first batch, guarded by the broker clock:
    again = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    for i in range(10):
        again.append_as_leader(batch(b"w%d" % i, timestamp=old + 100 + i), leader_epoch=0)
        clock.advance(1_000)
    assert len(again.segments) <= 2, [s.base_offset for s in again.segments]
    clock.advance(61_000)  # broker time past segment.ms: the time roll happens
    again.append_as_leader(batch(b"x", timestamp=old + 200), leader_epoch=0)
    assert len(again.segments) in (2, 3)
    assert again.segments[-1].base_offset == 20
    assert [r.value for r in read_all(again)][-1] == b"x"


def test_read_slice_file_keeps_the_bytes_of_a_swapped_segment(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    log.append_as_leader(batch(b"a" * 100), leader_epoch=0)
    found = log.read_slice(0, max_bytes=1 << 20)
    assert found is not None and found.file is not None
    assert found.records == 1
    expected = log.read(0, max_bytes=1 << 20)
    # What a cleaner swap does: a new file renamed over the same name.
    replacement = found.path.with_name("swap.tmp")
    replacement.write_bytes(b"\x00" * 4096)
    os.replace(replacement, found.path)
    try:
        assert os.pread(found.file.fileno(), found.size, found.position) == expected
    finally:
        found.close()


def test_fetch_range_over_many_tiny_batches_reads_in_chunks(tmp_path, clock, monkeypatch) -> None:
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    for i in range(2000):
        log.append_as_leader(batch(b"v%d" % i), leader_epoch=0)
    reads = count_preads(monkeypatch)
    found = log.read_slice(0, max_bytes=1 << 20)
    assert found is not None and found.records == 2000
    assert found.size == log.active_segment.size
    found.close()
    assert len(reads) < 50, f"{len(reads)} reads for 2000 batch headers"
    monkeypatch.undo()
    assert [h.base_offset for h in log.active_segment.headers(0)] == list(range(2000))
