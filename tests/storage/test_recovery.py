"""Recovery on open: torn or corrupt tails are cut off (and logged), indexes are rebuilt,
nothing acknowledged is lost after a crash, nothing corrupt is served.

A crash is simulated by opening a second `Log` on the directory without
closing the first: what a killed process leaves behind (bytes in the page
cache, a stale recovery point)."""

from __future__ import annotations

import logging
import os

import pytest

from kelp.broker.storage import Log
from kelp.broker.storage.cleaner import LogCleaner
from kelp.config.log_config import LogConfig
from kelp.errors import KafkaStorageError
from kelp.records.validation import parse_batches

from .helpers import batch, keyed, log_files, read_all

T0 = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)


def _crashed_log(tmp_path, clock, count: int = 30) -> tuple[Log, list[bytes]]:
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=clock)
    values = [b"value-%03d" % i for i in range(count)]
    for value in values:
        log.append_as_leader(batch(value, timestamp=T0 + int(value[-3:]) * 10), leader_epoch=0)
    return log, values


def _reopen(tmp_path, clock) -> Log:
    return Log.open(tmp_path / "t-0", CONFIG, clock_ms=clock)


def test_a_crash_loses_nothing_that_was_appended(tmp_path, clock) -> None:
    log, values = _crashed_log(tmp_path, clock)
    assert log.recovery_point < log.log_end_offset  # nothing fsynced the tail
    again = _reopen(tmp_path, clock)
    assert again.log_end_offset == 30
    assert [r.value for r in read_all(again)] == values


def test_torn_tail_is_truncated_at_the_last_whole_batch(tmp_path, clock, caplog) -> None:
    log, values = _crashed_log(tmp_path, clock)
    active = log.active_segment.log_path
    size = active.stat().st_size
    os.truncate(active, size - 7)  # the last batch loses its end
    with caplog.at_level(logging.WARNING, logger="kelp.broker.storage"):
        again = _reopen(tmp_path, clock)
    assert again.log_end_offset == 29
    assert [r.value for r in read_all(again)] == values[:29]
    (warning,) = [r for r in caplog.records if "truncated" in r.getMessage()]
    message = warning.getMessage()
    assert str(active) in message and "(offset 29)" in message and "torn batch" in message
    assert f"truncated {size - 7 - active.stat().st_size} bytes at position {active.stat().st_size}" in message
    # The log goes on from there.
    again.append_as_leader(batch(b"after"), leader_epoch=0)
    assert read_all(again)[-1].offset == 29


def test_corrupted_crc_in_the_last_batch_is_cut_off(tmp_path, clock, caplog) -> None:
    log, values = _crashed_log(tmp_path, clock)
    active = log.active_segment.log_path
    data = bytearray(active.read_bytes())
    last = parse_batches(data)[-1]
    data[last.position + 70] ^= 0xFF  # a byte inside the records, covered by the CRC
    active.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="kelp.broker.storage"):
        again = _reopen(tmp_path, clock)
    assert again.log_end_offset == 29
    assert active.stat().st_size == last.position
    assert any("CRC mismatch" in r.getMessage() and f"position {last.position}" in r.getMessage()
               for r in caplog.records)
    for segment in again.segments:  # every byte left passes validation
        parse_batches(segment.read(0, segment.size)) if segment.size else None


def test_garbage_after_the_last_batch_is_removed(tmp_path, clock, caplog) -> None:
    log, values = _crashed_log(tmp_path, clock)
    active = log.active_segment.log_path
    size = active.stat().st_size
    with open(active, "ab") as f:
        f.write(os.urandom(333))
    with caplog.at_level(logging.WARNING, logger="kelp.broker.storage"):
        again = _reopen(tmp_path, clock)
    assert active.stat().st_size == size
    assert again.log_end_offset == 30
    assert [r.value for r in read_all(again)] == values
    assert any(f"truncated 333 bytes at position {size}" in r.getMessage() for r in caplog.records)


def test_zeroed_tail_after_power_loss_is_removed(tmp_path, clock) -> None:
    log, values = _crashed_log(tmp_path, clock)
    active = log.active_segment.log_path
    with open(active, "ab") as f:
        f.write(bytes(4096))  # a filesystem may expose zeroed blocks after a crash
    again = _reopen(tmp_path, clock)
    assert again.log_end_offset == 30 and [r.value for r in read_all(again)] == values


def test_corruption_in_an_unflushed_middle_segment_drops_everything_after_it(tmp_path, clock, caplog) -> None:
    log, values = _crashed_log(tmp_path, clock, count=40)
    segments = log.segments
    assert len(segments) >= 4
    victim = segments[1]
    data = bytearray(victim.log_path.read_bytes())
    data[100] ^= 0xFF
    victim.log_path.write_bytes(bytes(data))
    # Pretend nothing was flushed: recovery scans from the first segment.
    (tmp_path / "t-0" / "partition.checkpoint").unlink()
    with caplog.at_level(logging.WARNING, logger="kelp.broker.storage"):
        again = _reopen(tmp_path, clock)
    assert len(again.segments) == 2
    assert again.log_end_offset < segments[2].base_offset
    assert [r.value for r in read_all(again)] == values[: again.log_end_offset]
    assert not segments[3].log_path.exists()
    assert any("deleted" in r.getMessage() and segments[3].log_path.name in r.getMessage() for r in caplog.records)


def test_clean_shutdown_skips_the_scan_and_keeps_everything(tmp_path, clock) -> None:
    log, values = _crashed_log(tmp_path, clock)
    log.close()
    again = _reopen(tmp_path, clock)
    assert again.recovery_point == again.log_end_offset == 30
    assert again.log_start_offset == 0
    assert [r.value for r in read_all(again)] == values


@pytest.mark.parametrize("damage", ["missing", "garbage", "truncated", "points-past-end"])
def test_missing_or_corrupted_index_files_are_rebuilt(tmp_path, clock, caplog, damage) -> None:
    log, values = _crashed_log(tmp_path, clock, count=60)
    probes = [0, T0, T0 + 5, T0 + 155, T0 + 590, T0 + 600]
    expected = [log.offset_for_timestamp(t) for t in probes]
    assert expected[3] == (16, T0 + 160) and expected[-1] is None
    log.close()
    closed = log.segments[1]
    assert len(closed.index) > 0
    index_path, time_path = closed.index.path, closed.time_index.path
    if damage == "missing":
        index_path.unlink()
        time_path.unlink()
    elif damage == "garbage":
        index_path.write_bytes(os.urandom(37))
        time_path.write_bytes(os.urandom(50))
    elif damage == "truncated":
        index_path.write_bytes(index_path.read_bytes()[:-3])
    else:
        index_path.write_bytes((1).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    with caplog.at_level(logging.WARNING, logger="kelp.broker.storage"):
        again = _reopen(tmp_path, clock)
    assert any("rebuilding" in r.getMessage() for r in caplog.records)
    assert index_path.exists() and index_path.stat().st_size % 8 == 0 and len(again.segments[1].index) > 0
    assert [r.value for r in read_all(again)] == values
    for offset in range(60):
        assert parse_batches(again.read(offset, max_bytes=1))[0].base_offset == offset
    assert [again.offset_for_timestamp(t) for t in probes] == expected


def test_leftover_temp_files_are_removed(tmp_path, clock) -> None:
    log, _ = _crashed_log(tmp_path, clock)
    log.close()
    directory = tmp_path / "t-0"
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"partial rewrite")
    (directory / "partition.checkpoint.tmp").write_bytes(b"torn")
    (directory / "00000000000000999999.index").write_bytes(b"")  # index without a log
    _reopen(tmp_path, clock)
    names = {p.name for p in directory.iterdir()}
    assert "00000000000000000000.log.cleaned" not in names
    assert "partition.checkpoint.tmp" not in names
    assert "00000000000000999999.index" not in names
    assert len(log_files(directory, ".log")) == len(log.segments)


def test_rolled_segments_are_fsynced_in_the_background_so_a_crash_rescans_only_the_active_one(
        tmp_path, clock, monkeypatch) -> None:
    """Without flush.ms/flush.messages the recovery point must still follow rolled segments (Kafka
    flushes a segment when it rolls, off the append path): otherwise every crash rescans the whole log."""
    from kelp.broker.storage.log_manager import LogManager

    log, values = _crashed_log(tmp_path, clock, count=40)
    active = log.segments[-1].base_offset
    assert len(log.segments) >= 4 and log.recovery_point < active
    flushed: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (flushed.append(fd), real(fd))[1])
    assert log.flush_rolled() is True
    assert log.recovery_point == active < log.log_end_offset  # the active segment is flush.ms's business
    assert flushed
    assert log.flush_rolled() is False  # nothing rolled since: no fsync
    scanned: list[int] = []
    from kelp.broker.storage import loader

    real_scan = loader._scan
    monkeypatch.setattr(loader, "_scan", lambda path, start: (scanned.append(int(path.name.split(".")[0])),
                                                               real_scan(path, start))[1])
    again = _reopen(tmp_path, clock)  # the crash: the first Log was never closed
    assert scanned == [active]
    assert [r.value for r in read_all(again)] == values
    # the broker's periodic task reaches it through the log manager, with flush.ms off (the default)
    manager = LogManager([tmp_path / "managed"], CONFIG, clock_ms=clock)
    managed = manager.get_or_create("m", 0)
    for value in values:
        managed.append_as_leader(batch(value), leader_epoch=0)
    assert manager.flush_by_time() == 1
    assert managed.recovery_point == managed.segments[-1].base_offset > 0


def _log_with_segments(tmp_path, clock, count: int = 40) -> tuple[Log, list[bytes]]:
    log, values = _crashed_log(tmp_path, clock, count=count)
    log.close()
    assert len(log.segments) >= 4
    return log, values


@pytest.mark.parametrize("crashed", [False, True])
def test_a_segment_missing_from_the_middle_keeps_the_log_offline_and_every_file(
        tmp_path, clock, caplog, crashed) -> None:
    log, values = _log_with_segments(tmp_path, clock)
    victim, after = log.segments[1], log.segments[2]
    directory = tmp_path / "t-0"
    victim.log_path.unlink()  # removed by hand under a running broker; its indexes stay behind
    if crashed:
        (directory / "partition.checkpoint").unlink()  # and no checkpoint: recovery scans everything
    before = {p.name: p.stat().st_size for p in directory.iterdir() if p.suffix == ".log"}
    with caplog.at_level(logging.WARNING, logger="kelp.broker.storage"):
        again = _reopen(tmp_path, clock)
    missing = f"offsets {victim.base_offset}..{after.base_offset - 1}"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(missing in m and victim.log_path.name not in m and after.log_path.name in m for m in errors), errors
    with pytest.raises(KafkaStorageError, match=missing):
        again.read(0, max_bytes=1 << 20)
    with pytest.raises(KafkaStorageError, match="offline"):
        again.append_as_leader(batch(b"into-the-hole"), leader_epoch=0)
    # Nothing on disk changed: every remaining segment is there, whole.
    assert {p.name: p.stat().st_size for p in directory.iterdir() if p.suffix == ".log"} == before
    # The orphan indexes of the removed segment are deleted, with a warning naming them.
    assert not victim.index.path.exists() and not victim.time_index.path.exists()
    assert any("without its log" in r.getMessage() and victim.index.path.name in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)
    # Putting the segment back brings the whole log back.
    again.close()
    log2 = Log.open(tmp_path / "restored", CONFIG, clock_ms=clock)
    for value in values:
        log2.append_as_leader(batch(value, timestamp=T0 + int(value[-3:]) * 10), leader_epoch=0)
    log2.close()
    (tmp_path / "restored" / victim.log_path.name).rename(victim.log_path)
    restored = _reopen(tmp_path, clock)
    assert [r.value for r in read_all(restored)] == values


def test_holes_left_by_compaction_are_not_gaps(tmp_path, clock, caplog) -> None:
    config = LogConfig(segment_bytes=600, index_interval_bytes=100, cleanup_policy="compact",
                       min_cleanable_dirty_ratio=0.01, delete_retention_ms=0)
    log = Log.open(tmp_path / "c-0", config, clock_ms=clock)
    for i in range(60):
        log.append_as_leader(keyed([(b"k%d" % (i % 3), b"v%03d" % i)]), leader_epoch=0)
    log.append_as_leader(keyed([(b"gone", None)]), leader_epoch=0)  # a tombstone ends the closed part
    log.roll()
    log.append_as_leader(keyed([(b"k0", b"last")]), leader_epoch=0)
    clock.advance(10)
    LogCleaner(clock_ms=clock).clean(log)
    ends = [(s.next_offset, n.base_offset) for s, n in zip(log.segments, log.segments[1:], strict=False)]
    assert any(end < nxt for end, nxt in ends)  # compaction left holes between segments
    expected = [(r.offset, r.value) for r in read_all(log)]
    log.close()
    for crashed in (False, True):
        if crashed:
            (tmp_path / "c-0" / "partition.checkpoint").unlink()
        with caplog.at_level(logging.ERROR, logger="kelp.broker.storage"):
            again = Log.open(tmp_path / "c-0", config, clock_ms=clock)
        assert [(r.offset, r.value) for r in read_all(again)] == expected
        again.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_crash_inside_the_cleaner_swap_leaves_no_false_gap(tmp_path, clock, caplog, monkeypatch) -> None:
    from kelp.broker.storage import cleaner as cleaner_module

    config = LogConfig(segment_bytes=600, index_interval_bytes=100, cleanup_policy="compact",
                       min_cleanable_dirty_ratio=0.01, delete_retention_ms=0)
    log = Log.open(tmp_path / "c-0", config, clock_ms=clock)
    for i in range(60):
        log.append_as_leader(keyed([(b"k%d" % (i % 3), b"v%03d" % i)]), leader_epoch=0)
    log.append_as_leader(keyed([(b"gone", None)]), leader_epoch=0)
    log.roll()
    log.append_as_leader(keyed([(b"k0", b"last")]), leader_epoch=0)
    clock.advance(10)

    def crash(_cleaned) -> None:
        raise OSError(5, "Input/output error")  # after the swap's commit point: the next open finishes it

    monkeypatch.setattr(cleaner_module, "_rename_into_place", crash)
    with pytest.raises(OSError):
        LogCleaner(clock_ms=clock).clean(log)
    monkeypatch.undo()
    with caplog.at_level(logging.ERROR, logger="kelp.broker.storage"):
        caplog.clear()
        again = Log.open(tmp_path / "c-0", config, clock_ms=clock)
    assert [(r.offset, r.key, r.value) for r in read_all(again)] == [
        (57, b"k0", b"v057"), (58, b"k1", b"v058"), (59, b"k2", b"v059"), (61, b"k0", b"last")]
    assert not [r for r in caplog.records if "missing" in r.getMessage()]
    again.append_as_leader(keyed([(b"k1", b"served")]), leader_epoch=0)  # online
