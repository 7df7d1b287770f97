"""The LogManager spreads partitions over log.dirs, reopens them at start, deletes safely."""

from __future__ import annotations

from kelp.broker.storage import LogManager
from kelp.broker.storage.log_manager import parse_partition_dir
from kelp.config.log_config import LogConfig

from .helpers import batch, read_all


def test_partition_dir_names_split_at_the_last_dash() -> None:
    assert parse_partition_dir("orders-0") == ("orders", 0)
    assert parse_partition_dir("my-topic.v2-17") == ("my-topic.v2", 17)
    assert parse_partition_dir("__consumer_offsets-49") == ("__consumer_offsets", 49)
    assert parse_partition_dir("no_partition") is None
    assert parse_partition_dir("x-abc") is None
    assert parse_partition_dir("x-1.0123abcd-delete") is None


def test_new_partitions_go_to_the_least_loaded_dir(tmp_path, clock) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    manager = LogManager(dirs, clock_ms=clock)
    for p in range(6):
        manager.get_or_create("t", p)
    placed = [manager.get("t", p).directory.parent for p in range(6)]
    assert sorted(placed.count(d) for d in dirs) == [2, 2, 2]
    assert manager.get_or_create("t", 0) is manager.get("t", 0)
    assert manager.get("t", 99) is None


def test_existing_partitions_are_opened_at_start(tmp_path, clock) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, LogConfig(segment_bytes=400), clock_ms=clock)
    for topic in ("orders", "my-topic.v2"):
        for p in range(2):
            manager.get_or_create(topic, p).append_as_leader(batch(b"%s-%d" % (topic.encode(), p)), leader_epoch=0)
    manager.close_all()
    (tmp_path / "a" / "__cluster_metadata.json").write_text("{}")  # a file, not a partition
    again = LogManager(dirs, LogConfig(segment_bytes=400), clock_ms=clock)
    assert again.partitions() == [("my-topic.v2", 0), ("my-topic.v2", 1), ("orders", 0), ("orders", 1)]
    assert [r.value for r in read_all(again.get("my-topic.v2", 1))] == [b"my-topic.v2-1"]
    assert again.get("orders", 0).config.segment_bytes == 400


def test_config_for_supplies_topic_overrides(tmp_path, clock) -> None:
    compacted = LogConfig(cleanup_policy="compact")
    manager = LogManager([tmp_path], clock_ms=clock, config_for=lambda t: compacted if t == "offsets" else None)
    assert manager.get_or_create("offsets", 0).config.compact
    assert not manager.get_or_create("plain", 0).config.compact


def test_delete_renames_then_removes(tmp_path, clock) -> None:
    manager = LogManager([tmp_path], clock_ms=clock)
    manager.get_or_create("gone", 0).append_as_leader(batch(b"x"), leader_epoch=0)
    assert manager.delete("gone", 0) is True
    assert manager.get("gone", 0) is None
    assert list(tmp_path.iterdir()) == []
    assert manager.delete("gone", 0) is False


def test_a_half_deleted_partition_is_not_resurrected(tmp_path, clock) -> None:
    manager = LogManager([tmp_path], clock_ms=clock)
    manager.get_or_create("gone", 0).append_as_leader(batch(b"x"), leader_epoch=0)
    manager.close_all()
    (tmp_path / "gone-0").rename(tmp_path / "gone-0.0123456789abcdef-delete")
    again = LogManager([tmp_path], clock_ms=clock)
    assert again.partitions() == []
    assert list(tmp_path.iterdir()) == []


def test_periodic_work_runs_over_every_log(tmp_path, clock) -> None:
    config = LogConfig(segment_bytes=300, retention_ms=1000, segment_ms=10_000, flush_ms=500)
    manager = LogManager([tmp_path], config, clock_ms=clock)
    for p in range(2):
        log = manager.get_or_create("t", p)
        for i in range(10):
            log.append_as_leader(batch(b"v%d" % i, timestamp=clock.ms), leader_epoch=0)
        log.high_watermark = log.log_end_offset  # committed (the replica layer's job)
    clock.advance(20_000)
    assert manager.flush_by_time() == 2
    assert all(log.recovery_point == log.log_end_offset for log in manager.all_logs())
    assert manager.roll_by_time() == 2
    assert manager.run_retention() > 0
    assert all(log.log_start_offset == 10 for log in manager.all_logs())


def test_the_periodic_pass_looks_closer_only_at_logs_with_timed_work(tmp_path, clock) -> None:
    """10,000 idle partitions: the per-second pass took three locks per log for nothing (5% of a core)."""
    config = LogConfig(segment_bytes=300, segment_ms=10_000, flush_ms=500)
    manager = LogManager([tmp_path], config, clock_ms=clock)
    idle = manager.get_or_create("t", 0)
    busy = manager.get_or_create("t", 1)
    assert manager.roll_and_flush_by_time() == 0  # empty logs: nothing to roll or fsync
    for i in range(10):
        busy.append_as_leader(batch(b"v%d" % i, timestamp=clock.ms), leader_epoch=0)  # rolls past 300 bytes
    assert not idle.timed_work_due() and busy.timed_work_due()  # rolled segments wait for their fsync
    assert manager.roll_and_flush_by_time() == 1
    assert busy.recovery_point == busy.active_segment.base_offset
    clock.advance(500)  # flush.ms
    assert busy.timed_work_due() and manager.roll_and_flush_by_time() == 1
    assert busy.recovery_point == busy.log_end_offset and not busy.timed_work_due()
    clock.advance(10_000)  # segment.ms
    assert busy.timed_work_due() and not idle.timed_work_due()
    segments = len(busy.segments)
    manager.roll_and_flush_by_time()
    assert len(busy.segments) == segments + 1


def test_an_idle_partition_holds_one_file_descriptor(tmp_path, clock) -> None:
    """Its .log; the indexes open with their first entry (10,000 partitions held 30,000 descriptors). Only the
    descriptors of files under this test's directory are counted: a client thread an earlier test of the same
    worker left behind may open and close sockets meanwhile."""
    import os

    def held() -> int:
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path))
            except OSError:  # closed since the listing
                pass
        return count

    manager = LogManager([tmp_path], LogConfig(index_interval_bytes=100), clock_ms=clock)
    before = held()
    logs = [manager.get_or_create("t", p) for p in range(20)]
    assert held() - before == 20
    for _ in range(3):
        logs[0].append_as_leader(batch(b"x" * 100, timestamp=clock.ms), leader_epoch=0)  # index entries now
    assert held() - before == 22
    logs[1].append_as_leader(batch(b"y", timestamp=clock.ms), leader_epoch=0)  # at position 0: no index entry
    logs[1].flush()  # the fsync of an index never opened leaves it closed
    assert logs[1].recovery_point == 1
    assert held() - before == 22
    manager.close_all()
