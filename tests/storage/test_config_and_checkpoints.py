"""LogConfig from Kafka property names, flush policies, and the small checkpoint files."""

from __future__ import annotations

import pytest

from kelp.broker.storage import Log
from kelp.broker.storage.checkpoint import PartitionCheckpoint
from kelp.broker.storage.leader_epoch import LeaderEpochCache
from kelp.config.log_config import LogConfig
from kelp.errors import ConfigError

from .helpers import batch


def test_from_kafka_maps_property_names_and_types() -> None:
    config = LogConfig.from_kafka(
        {"segment.bytes": "1048576", "retention.ms": -1, "cleanup.policy": "compact,delete",
         "min.cleanable.dirty.ratio": "0.3", "message.timestamp.type": "LogAppendTime",
         "min.insync.replicas": "2"}
    )
    assert config.segment_bytes == 1048576 and config.retention_ms == -1
    assert config.compact and config.delete and config.min_cleanable_dirty_ratio == 0.3
    assert config.log_append_time
    assert LogConfig.from_kafka({}, base=config) == config
    assert LogConfig.from_kafka(config.to_kafka()) == config


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"segment.bytez": "1"}, "unknown topic config 'segment.bytez'"),
        ({"segment.bytes": "big"}, "invalid value 'big' for topic config 'segment.bytes'"),
        ({"segment.bytes": "0"}, "segment.bytes=0 is invalid"),
        ({"retention.ms": "-5"}, "retention.ms=-5 is invalid"),
        ({"cleanup.policy": "shred"}, "cleanup.policy='shred' is invalid"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio=1.5 is invalid"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type='Now' is invalid"),
    ],
)
def test_bad_config_is_refused_naming_the_key(props, message) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        LogConfig.from_kafka(props)


def test_flush_messages_fsyncs_and_advances_the_recovery_point(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=3), clock_ms=clock)
    log.append_as_leader(batch(b"a", b"b"), leader_epoch=0)
    assert log.recovery_point == 0
    log.append_as_leader(batch(b"c"), leader_epoch=0)
    assert log.recovery_point == 3
    assert PartitionCheckpoint.read(tmp_path / "t-0").recovery_point == 3


def test_flush_ms_fsyncs_on_the_periodic_tick_never_on_the_append_path(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(flush_ms=1000), clock_ms=clock)
    log.append_as_leader(batch(b"a"), leader_epoch=0)
    assert log.recovery_point == 0 and log.maybe_flush() is False
    clock.advance(1000)
    assert log.maybe_flush() is True and log.recovery_point == 1
    log.append_as_leader(batch(b"b"), leader_epoch=0)
    clock.advance(1000)
    log.append_as_leader(batch(b"c"), leader_epoch=0)
    assert log.recovery_point == 1  # the append does not fsync (it runs on the event loop)
    assert log.maybe_flush() is True and log.recovery_point == 3


def test_flush_messages_fsyncs_after_the_append_outside_the_lock(tmp_path, clock, monkeypatch) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=1, segment_bytes=200), clock_ms=clock)
    log.assign_leader_epoch(0)  # as the replica layer does (in a worker thread) when it becomes leader
    import threading

    import kelp.broker.storage.segment as segment_mod

    held_during_fsync: list[bool] = []

    real_fsync = segment_mod.os.fsync

    def another_thread_could_append() -> bool:
        got: list[bool] = []

        def probe() -> None:
            ok = log.lock.acquire(blocking=False)
            got.append(ok)
            if ok:
                log.lock.release()

        prober = threading.Thread(target=probe)
        prober.start()
        prober.join(5)
        return got == [True]

    def watching_fsync(fd):
        held_during_fsync.append(not another_thread_could_append())
        return real_fsync(fd)

    monkeypatch.setattr(segment_mod.os, "fsync", watching_fsync)

    t = threading.Thread(target=lambda: [log.append_as_leader(batch(b"v%d" % i), leader_epoch=0) for i in range(20)])
    t.start()
    t.join(30)
    assert log.recovery_point == log.log_end_offset == 20 and len(log.segments) > 1
    assert held_during_fsync and not any(held_during_fsync)


def test_partition_checkpoint_round_trips_and_ignores_damage(tmp_path) -> None:
    PartitionCheckpoint(log_start_offset=5, high_watermark=9, recovery_point=7, cleaner_offset=6).write(tmp_path)
    assert PartitionCheckpoint.read(tmp_path) == PartitionCheckpoint(5, 9, 7, 6)
    assert not list(tmp_path.glob("*.tmp"))
    (tmp_path / "partition.checkpoint").write_text("garbage\n")
    assert PartitionCheckpoint.read(tmp_path) is None


def test_leader_epoch_cache_persists_and_truncates(tmp_path) -> None:
    """Changes are in memory at once (answered at once), on disk after `flush()` (a worker thread's job)."""
    cache = LeaderEpochCache(tmp_path)
    cache.assign(1, 0)
    cache.assign(1, 5)  # same epoch: no new entry
    cache.assign(3, 10)
    cache.assign(4, 20)
    assert cache.entries == [(1, 0), (3, 10), (4, 20)] and cache.dirty
    assert not (tmp_path / "leader-epoch-checkpoint").exists()  # no file work on the caller's thread
    assert cache.flush() and not cache.dirty and not cache.flush()
    assert LeaderEpochCache.load(tmp_path).entries == [(1, 0), (3, 10), (4, 20)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 10\n4 20\n"
    cache.truncate_from_start(12)
    assert cache.entries == [(3, 12), (4, 20)]
    cache.truncate_from_end(20)
    assert cache.entries == [(3, 12)]
    assert cache.end_offset_for(3, 30) == (3, 30) and cache.end_offset_for(2, 30) == (2, 12)
    cache.flush()
    assert LeaderEpochCache.load(tmp_path).entries == [(3, 12)]


def test_epoch_end_offsets_answer_as_kafka_does(tmp_path) -> None:
    """Kafka's LeaderEpochFileCache.endOffsetFor, case by case (followers truncate by these answers)."""
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset_for(0, 0) == (-1, -1)  # empty
    for epoch, start in ((2, 0), (4, 10), (7, 25)):
        cache.assign(epoch, start)
    assert cache.end_offset_for(-1, 40) == (-1, -1)  # undefined epoch requested
    assert cache.end_offset_for(7, 40) == (7, 40)  # the latest: the log end
    assert cache.end_offset_for(9, 40) == (-1, -1)  # above the latest
    assert cache.end_offset_for(1, 40) == (1, 0)  # below the first: the first epoch's start
    assert cache.end_offset_for(2, 40) == (2, 10)
    assert cache.end_offset_for(5, 40) == (4, 25)  # between: floor epoch, next epoch's start
