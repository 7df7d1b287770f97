"""A log start moved by DeleteRecords or retention is checkpointed without the log lock, and a checkpoint
taken earlier never replaces one taken later.

log_durability's rules: never fsync while holding the log lock (an append on the event loop takes it: a
DeleteRecords or a retention pass in a worker thread held it across the checkpoint's fsync and stalled
every append of the partition for the disk's time), and never rewrite `partition.checkpoint` with values
older than what it holds (values are taken under the lock and written after it is released, so two writers
race: the older log start landing last would move it back on disk, and a restart would serve deleted
records' offsets as the log start).
"""

from __future__ import annotations

import os
import threading

from kelp.broker.storage import Log
from kelp.broker.storage.checkpoint import PartitionCheckpoint
from kelp.config.log_config import LogConfig

from .helpers import batch
from .test_flush_lock_order import log_lock_free

HOUR = 3_600_000


def _watch_fsyncs(log: Log, monkeypatch) -> list[bool]:
    """Record, for each fsync the calling thread makes, whether the log lock was free then."""
    free: list[bool] = []
    real = os.fsync
    caller = threading.current_thread()

    def watching_fsync(fd: int) -> None:
        if threading.current_thread() is caller:
            free.append(log_lock_free(log))
        real(fd)
    monkeypatch.setattr(os, "fsync", watching_fsync)
    return free


def test_delete_records_does_not_fsync_under_the_log_lock(tmp_path, clock, monkeypatch) -> None:
    log = Log.open(tmp_path / "t-0", config=LogConfig(), clock_ms=clock)
    for v in (b"a", b"b", b"c"):
        log.append_as_leader(batch(v), leader_epoch=0)
    log.high_watermark = log.log_end_offset
    free = _watch_fsyncs(log, monkeypatch)
    log.advance_log_start_offset(2)
    assert free and all(free), f"fsyncs with the log lock held: {free.count(False)} of {len(free)}"
    assert PartitionCheckpoint.read(tmp_path / "t-0").log_start_offset == 2  # and it is durable on return


def test_retention_does_not_fsync_under_the_log_lock(tmp_path, clock, monkeypatch) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_ms=HOUR), clock_ms=clock)
    for i in range(20):
        log.append_as_leader(batch(b"v%03d" % i, timestamp=clock.ms), leader_epoch=0)
        clock.advance(60_000)
    log.high_watermark = log.log_end_offset
    segments = log.segments
    clock.ms = segments[1].max_timestamp + HOUR + 1
    free = _watch_fsyncs(log, monkeypatch)
    assert log.enforce_retention() == 2
    assert free and all(free), f"fsyncs with the log lock held: {free.count(False)} of {len(free)}"
    assert PartitionCheckpoint.read(tmp_path / "t-0").log_start_offset == segments[2].base_offset


def test_an_older_snapshot_written_last_does_not_replace_a_newer_one(tmp_path, clock) -> None:
    """The interleaving of two writers: A takes its values, B moves the log start and takes its own, B writes,
    then A writes. The file keeps B's log start."""
    log = Log.open(tmp_path / "t-0", config=LogConfig(), clock_ms=clock)
    for v in (b"a", b"b", b"c", b"d"):
        log.append_as_leader(batch(v), leader_epoch=0)
    log.high_watermark = log.log_end_offset
    durability = log._durability
    with log.lock:
        older = durability.checkpoint_values()  # writer A's snapshot: log start 0
    log.advance_log_start_offset(3)  # writer B: takes and writes its snapshot
    durability.write_checkpoint_values(older)  # A arrives last
    assert PartitionCheckpoint.read(tmp_path / "t-0").log_start_offset == 3
    # An equal snapshot taken later still counts as the newest: an older, different one cannot follow it.
    with log.lock:
        middle = durability.checkpoint_values()
    log.high_watermark = log.log_end_offset  # unchanged values
    with log.lock:
        same = durability.checkpoint_values()
    durability.write_checkpoint_values(same)
    durability.write_checkpoint_values(middle[:1] + (1,) + middle[2:])  # an older snapshot, other values
    assert PartitionCheckpoint.read(tmp_path / "t-0").high_watermark == log.high_watermark
