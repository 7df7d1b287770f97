"""Compaction keeps the newest record per key in closed segments, never renumbers an
offset, expires tombstones after delete.retention.ms and survives a crash mid-swap."""

from __future__ import annotations

import os

import pytest

from kelp.broker.storage import Log, LogCleaner, LogManager
from kelp.broker.storage import cleaner as cleaner_module
from kelp.config.log_config import LogConfig
from kelp.errors import KafkaStorageError
from kelp.records.build import build_batch
from kelp.records.header import iter_headers
from kelp.records.record import Record, iter_records
from kelp.records.validation import parse_batches

from .helpers import keyed, read_all

DAY = 86_400_000
COMPACT = LogConfig(segment_bytes=400, cleanup_policy="compact", delete_retention_ms=DAY, min_cleanable_dirty_ratio=0.1)


def _write(log: Log, rounds: int, keys: int = 5) -> dict[bytes, tuple[int, bytes]]:
    """Each round writes every key once; returns key -> (offset, value) of the newest write."""
    newest = {}
    for r in range(rounds):
        for k in range(keys):
            key, value = b"key-%d" % k, b"value-%d-%d" % (k, r)
            result = log.append_as_leader(keyed([(key, value)]), leader_epoch=0)
            newest[key] = (result.first_offset, value)
    return newest


def _view(log: Log) -> dict[bytes, tuple[int, bytes | None]]:
    found = {}
    for record in read_all(log):
        found[record.key] = (record.offset, record.value)
    return found


def test_the_newest_value_per_key_survives_with_its_offset(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", COMPACT, clock_ms=clock)
    newest = _write(log, rounds=20)
    end, active_base = log.log_end_offset, log.active_segment.base_offset
    before = read_all(log)
    assert log.cleanable()
    stats = LogCleaner(clock_ms=clock).clean(log, clock.ms)
    assert stats.records_removed > 0 and stats.cleaned_up_to == active_base
    after = read_all(log)
    # Same key -> newest value as before cleaning; offsets are original ones and strictly increase.
    assert _view(log) == newest
    assert [r.offset for r in after] == sorted({r.offset for r in after})
    originals = {r.offset: (r.key, r.value) for r in before}
    assert all(originals[r.offset] == (r.key, r.value) for r in after)
    # Closed segments hold at most one record per key; the active segment is untouched.
    closed_keys = [r.key for r in after if r.offset < active_base]
    assert len(closed_keys) == len(set(closed_keys))
    assert [r.offset for r in after if r.offset >= active_base] == list(range(active_base, end))
    assert log.log_end_offset == end and log.log_start_offset == 0
    assert len(log.segments) < 10  # small cleaned segments were merged
    assert not log.cleanable()


def test_cleaning_survives_reopen_and_keeps_reads_by_offset_working(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", COMPACT, clock_ms=clock)
    newest = _write(log, rounds=15)
    LogCleaner(clock_ms=clock).clean(log, clock.ms)
    expected = read_all(log)
    log.close()
    again = Log.open(tmp_path / "t-0", COMPACT, clock_ms=clock)
    assert read_all(again) == expected and _view(again) == newest
    # Any offset, including compacted-away ones, reads from the next surviving batch.
    surviving = [r.offset for r in expected]
    for offset in range(again.log_end_offset):
        first = parse_batches(again.read(offset, max_bytes=1))[0]
        assert first.last_offset >= offset
        assert min(o for o in surviving if o >= offset) <= first.last_offset
    assert again.cleaner_offset > 0


def test_tombstones_are_removed_only_after_delete_retention(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", COMPACT, clock_ms=clock)
    _write(log, rounds=4)
    log.append_as_leader(keyed([(b"key-1", None)]), leader_epoch=0)  # delete key-1
    _write(log, rounds=6, keys=1)  # push the tombstone out of the active segment (key-0 only)
    for _ in range(10):
        log.append_as_leader(keyed([(b"filler", b"x" * 50)]), leader_epoch=0)
    cleaner = LogCleaner(clock_ms=clock)
    cleaner.clean(log, clock.ms)
    assert _view(log)[b"key-1"][1] is None  # the tombstone is still there for consumers to see
    assert b"key-2" in _view(log)
    clock.advance(DAY - 1000)
    cleaner.clean(log, clock.ms)
    assert _view(log)[b"key-1"][1] is None
    clock.advance(2000)
    log.cleaner_offset = 0  # force a full pass: nothing is dirty, but the tombstone is now old
    stats = cleaner.clean(log, clock.ms)
    assert stats.tombstones_removed == 1
    assert b"key-1" not in _view(log)
    assert b"key-2" in _view(log)


def test_producer_state_and_timestamps_are_preserved(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", COMPACT, clock_ms=clock)
    first = build_batch(
        [Record(b"a", b"old", timestamp=100), Record(b"b", b"keep", timestamp=200),
         Record(b"c", b"old", timestamp=300)],
        producer_id=77, producer_epoch=2, base_sequence=0,
    )
    only_old = build_batch([Record(b"a", b"old2", timestamp=400)], producer_id=77, producer_epoch=2, base_sequence=3)
    log.append_as_leader(first, leader_epoch=0)
    log.append_as_leader(only_old, leader_epoch=0)
    log.append_as_leader(keyed([(b"a", b"new"), (b"c", b"new")], timestamp=500), leader_epoch=0)
    log.roll()
    log.append_as_leader(keyed([(b"z", b"active")]), leader_epoch=0)
    LogCleaner(clock_ms=clock).clean(log, clock.ms)
    headers = list(iter_headers(log.read(0, max_bytes=1 << 20)))
    rewritten = headers[0]
    assert (rewritten.base_offset, rewritten.last_offset_delta, rewritten.record_count) == (0, 2, 1)
    assert (rewritten.producer_id, rewritten.producer_epoch, rewritten.base_sequence) == (77, 2, 0)
    assert rewritten.last_sequence == 2
    records = list(iter_records(log.read(0, max_bytes=1 << 20)))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (1, b"b", b"keep", 200), (4, b"a", b"new", 500), (5, b"c", b"new", 500)
    ]
    # The producer's last batch lost all its records but stays as an empty batch: its sequence survives.
    empty = headers[1]
    assert (empty.base_offset, empty.record_count, empty.producer_id, empty.base_sequence) == (3, 0, 77, 3)


def test_compressed_batches_stay_compressed(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", COMPACT, clock_ms=clock)
    for r in range(5):
        data = build_batch([Record(b"k%d" % k, b"v%d-%d" % (k, r) * 20, timestamp=r) for k in range(10)],
                           compression="gzip")
        log.append_as_leader(data, leader_epoch=0)
    log.roll()
    log.append_as_leader(keyed([(b"k0", b"final")]), leader_epoch=0)
    LogCleaner(clock_ms=clock).clean(log, clock.ms)
    kept = parse_batches(log.segments[0].read(0, log.segments[0].size))
    assert all(b.compression_name == "gzip" for b in kept)
    assert {r.key: r.value for r in read_all(log)}[b"k3"] == b"v3-4" * 20


def test_the_dirty_ratio_decides_whether_a_log_is_cleaned(tmp_path, clock) -> None:
    config = LogConfig(segment_bytes=400, cleanup_policy="compact", min_cleanable_dirty_ratio=0.9)
    manager = LogManager([tmp_path], config, clock_ms=clock)
    log = manager.get_or_create("t", 0)
    _write(log, rounds=10)
    assert log.cleanable_ratio() == 1.0 and manager.run_cleaner(clock.ms) == 1
    assert log.cleanable_ratio() == 0.0 and manager.run_cleaner(clock.ms) == 0
    plain = manager.get_or_create("plain", 0, LogConfig(segment_bytes=400))
    _write(plain, rounds=10)
    assert not plain.cleanable()


@pytest.mark.parametrize("crash_point", ["_rename_into_place", "fsync_dir"])
def test_a_crash_after_the_commit_point_finishes_the_swap_on_open(tmp_path, clock, monkeypatch, crash_point) -> None:
    log = Log.open(tmp_path / "t-0", COMPACT, clock_ms=clock)
    newest = _write(log, rounds=20)
    def crash(*_args) -> None:
        raise OSError("simulated crash after the commit point")
    monkeypatch.setattr(cleaner_module, crash_point, crash)
    with pytest.raises(OSError, match="simulated crash"):
        LogCleaner(clock_ms=clock).clean(log, clock.ms)
    directory = tmp_path / "t-0"
    assert (directory / "cleaner-swap.json").exists()
    # Before the renames the rewrite waits as .cleaned files; after them it is already in place.
    assert bool(list(directory.glob("*.cleaned"))) == (crash_point == "_rename_into_place")
    with pytest.raises(KafkaStorageError, match="offline"):
        log.read(0, max_bytes=100)  # the in-memory view is not trusted any more
    monkeypatch.undo()
    again = Log.open(directory, COMPACT, clock_ms=clock)
    assert not (directory / "cleaner-swap.json").exists() and not list(directory.glob("*.cleaned"))
    assert _view(again) == newest
    offsets = [r.offset for r in read_all(again)]
    assert offsets == sorted(set(offsets)) and again.log_end_offset == 100


def test_a_crash_before_the_commit_point_keeps_the_old_segments(tmp_path, clock, monkeypatch) -> None:
    log = Log.open(tmp_path / "t-0", COMPACT, clock_ms=clock)
    _write(log, rounds=20)
    before = read_all(log)
    def crash(*_args) -> None:
        raise OSError("simulated crash before the marker")
    monkeypatch.setattr(cleaner_module, "write_atomically", crash)
    with pytest.raises(OSError):
        LogCleaner(clock_ms=clock).clean(log, clock.ms)
    monkeypatch.undo()
    again = Log.open(tmp_path / "t-0", COMPACT, clock_ms=clock)
    assert read_all(again) == before
    assert not list((tmp_path / "t-0").glob("*.cleaned"))


def test_retention_during_cleaning_makes_the_swap_back_off(tmp_path, clock, monkeypatch) -> None:
    config = LogConfig(segment_bytes=400, cleanup_policy="compact,delete", retention_ms=DAY,
                       min_cleanable_dirty_ratio=0.1)
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    newest = _write(log, rounds=20)
    log.high_watermark = log.log_end_offset  # committed: retention may take it
    original_swap = LogCleaner._swap

    def swap_after_retention(self, partition_log, group, cleaned):
        clock.advance(2 * DAY)  # every closed segment expires while the group was being written
        partition_log.enforce_retention()
        return original_swap(self, partition_log, group, cleaned)

    monkeypatch.setattr(LogCleaner, "_swap", swap_after_retention)
    LogCleaner(clock_ms=clock).clean(log, clock.ms)
    assert len(log.segments) == 1 and log.log_start_offset == log.active_segment.base_offset
    assert not list((tmp_path / "t-0").glob("*.cleaned"))
    assert all(newest[r.key] == (r.offset, r.value) for r in read_all(log) if r.key in newest
               and r.offset >= newest[r.key][0])
    again = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    assert read_all(again) == read_all(log)


def test_a_file_slice_keeps_reading_the_bytes_it_was_cut_from(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", COMPACT, clock_ms=clock)
    _write(log, rounds=20)
    expected = log.read(0, max_bytes=300)
    found = log.read_slice(0, max_bytes=300)
    LogCleaner(clock_ms=clock).clean(log, clock.ms)  # replaces the file under the same name
    try:
        assert found.file is not None
        assert os.pread(found.file.fileno(), found.size, found.position) == expected
    finally:
        found.close()


def test_the_key_map_is_bounded_and_cleaning_goes_on_in_passes(tmp_path, clock, monkeypatch) -> None:
    config = LogConfig(segment_bytes=1200, cleanup_policy="compact", delete_retention_ms=DAY,
                       min_cleanable_dirty_ratio=0.01)
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    newest = _write(log, rounds=4, keys=30)  # 30 distinct keys, each written 4 times
    log.roll()
    unbounded = Log.open(tmp_path / "u-0", config, clock_ms=clock)
    _write(unbounded, rounds=4, keys=30)
    unbounded.roll()
    LogCleaner(clock_ms=clock).clean(unbounded, clock.ms)

    budget = 10 * (len(b"key-00") + cleaner_module.ENTRY_OVERHEAD)  # room for about 10 keys
    largest = []
    real_build = LogCleaner._build_offset_map

    def watched(self, *args):
        offset_map, last_producer_batch, end = real_build(self, *args)
        largest.append(len(offset_map))
        return offset_map, last_producer_batch, end

    monkeypatch.setattr(LogCleaner, "_build_offset_map", watched)
    cleaner = LogCleaner(clock_ms=clock, dedupe_buffer_bytes=budget)
    passes = []
    while True:
        stats = cleaner.clean(log, clock.ms)
        passes.append((stats.cleaned_up_to, stats.map_full))
        assert len(passes) < 100
        if not stats.map_full:
            break
    assert len(passes) > 3 and all(full for _, full in passes[:-1])
    assert [end for end, _ in passes] == sorted({end for end, _ in passes})  # each pass goes further
    assert max(largest) <= 11  # the budget, plus the one batch that filled it
    assert passes[-1][0] == log.active_segment.base_offset
    assert _view(log) == newest
    # Passes compact less tightly than one unbounded pass (Kafka's too), but every key keeps its newest value.
    assert _view(log) == _view(unbounded)


def test_a_log_the_cleaner_fails_on_is_marked_uncleanable_and_the_others_are_cleaned(
        tmp_path, clock, caplog) -> None:
    import logging

    manager = LogManager([tmp_path], COMPACT, clock_ms=clock)
    bad, good = manager.get_or_create("bad", 0), manager.get_or_create("good", 0)
    for lg in (bad, good):
        _write(lg, rounds=20)
    victim = bad.segments[0]
    data = bytearray(victim.log_path.read_bytes())
    data[61 + 10] ^= 0xFF  # inside the first batch's records: the header stays readable, the records do not
    victim.log_path.write_bytes(bytes(data))
    size_before = sum(s.size for s in good.segments)
    with caplog.at_level(logging.ERROR, logger="kelp.broker.storage"):
        assert manager.run_cleaner(clock.ms) == 1
    assert sum(s.size for s in good.segments) < size_before  # the good log was compacted
    assert list(manager.uncleanable) == [("bad", 0)]
    assert any("bad-0" in r.getMessage() and "uncleanable" in r.getMessage() for r in caplog.records)
    _write(good, rounds=20)
    assert manager.run_cleaner(clock.ms) == 1  # the bad log is skipped, the good one still cleaned
    assert len([r for r in caplog.records if "uncleanable" in r.getMessage()]) == 1
