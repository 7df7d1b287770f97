"""A log's fsyncs never hold the log lock and never take its locks out of order; closing flushes the epochs too.

What a user relies on: with `flush.ms` and `flush.messages` set on a topic,
the periodic flush (a worker thread) and an append's flush (the append path)
must not deadlock — one held the log lock while waiting for the flush lock,
the other the flush lock while waiting for the log lock, and every append of
that partition, on the event loop, then waited forever. Nor may an fsync
hold the log lock (appends wait on the disk). And a clean close must leave
the leader epochs of what it fsynced on disk: the next open skips recovery,
so nothing would rebuild them. Interleavings are driven by events and
instrumented locks, every wait bounded.
"""

from __future__ import annotations

import threading

import pytest

from kelp.broker.storage import Log
from kelp.broker.storage.log_durability import LogDurability
from kelp.config.log_config import LogConfig

from .helpers import batch

BOUND_S = 5.0


class WatchedLock:
    """`threading.Lock` that says when a second thread starts waiting for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.contended = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if not blocking:
            return False
        self.contended.set()
        return self._lock.acquire(timeout=timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> "WatchedLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def log_lock_free(log: Log) -> bool:
    """True when another thread can take the log lock now (nobody holds it across a wait or an fsync)."""
    got: list[bool] = []

    def probe_lock() -> None:
        acquired = log.lock.acquire(timeout=0.5)
        got.append(acquired)
        if acquired:
            log.lock.release()  # an RLock: released by the thread that took it
    probe = threading.Thread(target=probe_lock)
    probe.start()
    probe.join(BOUND_S)
    return bool(got and got[0])


def stalled_flush(log: Log, monkeypatch) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """A flush (as the append path's) stopped inside its fsync, holding the flush lock: (in_fsync, go, thread)."""
    in_fsync, go = threading.Event(), threading.Event()
    real = LogDurability.fsync_segments

    def slow_fsync(self: LogDurability, segments: list) -> None:
        if threading.current_thread().name == "stalled-flush":  # this test's thread only
            in_fsync.set()
            go.wait(BOUND_S)
        real(self, segments)
    monkeypatch.setattr(LogDurability, "fsync_segments", slow_fsync)
    thread = threading.Thread(target=log.flush, name="stalled-flush", daemon=True)
    return in_fsync, go, thread


@pytest.mark.parametrize("second", ["maybe_flush", "close"])
def test_a_second_flush_waits_for_the_first_without_holding_the_log_lock(tmp_path, clock, monkeypatch,
                                                                         second: str) -> None:
    log = Log.open(tmp_path / "t-0", config=LogConfig(flush_ms=1000), clock_ms=clock)
    log.append_as_leader(batch(b"a"), leader_epoch=0)
    log._state.flush_lock = watched = WatchedLock()  # type: ignore[assignment]
    in_fsync, go, first = stalled_flush(log, monkeypatch)
    first.start()
    assert in_fsync.wait(BOUND_S)
    log.append_as_leader(batch(b"b"), leader_epoch=0)  # more to flush: the second one has work
    clock.advance(5000)  # flush.ms has passed
    other = threading.Thread(target=getattr(log, second), daemon=True)
    other.start()
    try:
        assert watched.contended.wait(BOUND_S), f"{second} did not wait for the flush in progress"
        assert log_lock_free(log), f"{second} holds the log lock while it waits for the flush lock: appends stop, " \
                                   "and the first flush can never take the log lock back (deadlock)"
    finally:
        go.set()
        first.join(BOUND_S)
        other.join(BOUND_S)
    assert not first.is_alive() and not other.is_alive(), "deadlock: the two flushes wait for each other"
    assert log.recovery_point == 2


def test_the_periodic_flush_does_not_hold_the_log_lock_while_it_fsyncs(tmp_path, clock, monkeypatch) -> None:
    log = Log.open(tmp_path / "t-0", config=LogConfig(flush_ms=1000), clock_ms=clock)
    log.append_as_leader(batch(b"a"), leader_epoch=0)
    clock.advance(5000)
    free: list[bool] = []
    real = LogDurability.fsync_segments

    def checking_fsync(self: LogDurability, segments: list) -> None:
        free.append(log_lock_free(log))
        real(self, segments)
    monkeypatch.setattr(LogDurability, "fsync_segments", checking_fsync)
    assert log.maybe_flush()
    assert free == [True], "maybe_flush fsynced holding the log lock: every append of the partition waited on the disk"


def test_a_clean_close_leaves_the_leader_epochs_it_fsynced_on_disk(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    log.append_as_leader(batch(b"a"), leader_epoch=3)
    log.flush()
    log.append_as_leader(batch(b"b"), leader_epoch=7)  # a new epoch since the last flush
    log.close()
    again = Log.open(tmp_path / "t-0", clock_ms=clock)
    try:
        assert again.recovery_point == again.log_end_offset == 2, "a clean close: the next open skips recovery"
        assert again.leader_epochs.entries == [(3, 0), (7, 1)]
    finally:
        again.close()


def test_an_append_past_flush_messages_can_leave_the_fsync_to_its_caller(tmp_path, clock) -> None:
    log = Log.open(tmp_path / "t-0", config=LogConfig(flush_messages=2), clock_ms=clock)
    first = log.append_as_leader(batch(b"a"), leader_epoch=0, defer_flush=True)
    second = log.append_as_leader(batch(b"b"), leader_epoch=0, defer_flush=True)
    assert (first.flush_due, second.flush_due) == (False, True)
    assert log.recovery_point == 0, "deferred: the append did not fsync"
    log.flush()
    assert log.recovery_point == 2
    inline = log.append_as_leader(batch(b"c") + batch(b"d"), leader_epoch=0)
    assert not inline.flush_due and log.recovery_point == 4, "without defer_flush the append fsyncs itself"
