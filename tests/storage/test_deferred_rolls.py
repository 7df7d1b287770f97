"""Rolls an event loop's append defers: the new segment's files are made in a worker thread, outside the log lock.

A roll inside an append made the new segment's files on the event loop under the log lock (issue 23). With
`defer_roll` the append goes to the active segment and says `roll_due`; `roll_when_due` makes the files
without the lock and installs the finished segment only while its base is still the log end. A fake file
system that blocks in `open` shows the lock free meanwhile; synchronised on events, never on sleeps.
"""

from __future__ import annotations

import threading

from kelp.broker.storage import Log
from kelp.broker.storage.segment import LogSegment, segment_name
from kelp.config.log_config import LogConfig

from .helpers import WAIT_S, BlockingOpen, batch, read_all


def small_log(path, clock, segment_bytes: int = 200) -> Log:
    return Log.open(path, LogConfig(segment_bytes=segment_bytes), clock_ms=clock)


def fill(lg: Log, n: int, **kwargs) -> list:
    return [lg.append_as_leader(batch(b"x" * 100), leader_epoch=0, **kwargs) for _ in range(n)]


def test_a_deferred_roll_appends_to_the_active_segment_and_says_so(tmp_path, clock) -> None:
    lg = small_log(tmp_path / "t-0", clock)
    first, second = fill(lg, 2, defer_roll=True)
    assert not first.roll_due and second.roll_due
    assert len(lg.segments) == 1 and lg.active_segment.size > lg.config.segment_bytes  # one append past it
    rolled = lg.roll_when_due()
    assert rolled is lg.active_segment and rolled.base_offset == lg.log_end_offset == 2 and rolled.is_empty
    assert lg.roll_when_due() is None  # the new segment is not due
    assert not fill(lg, 1, defer_roll=True)[0].roll_due
    assert [s.base_offset for s in lg.segments] == [0, 2]
    assert [r.offset for r in read_all(lg)] == [0, 1, 2]


def test_roll_when_due_rolls_by_age_and_not_before(tmp_path, clock) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_ms=1000), clock_ms=clock)
    fill(lg, 1)
    assert lg.roll_when_due() is None and not lg.maybe_roll_by_time()
    clock.advance(1000)
    assert fill(lg, 1, defer_roll=True)[0].roll_due  # the age rule waits for a worker as well
    assert lg.maybe_roll_by_time() and lg.active_segment.base_offset == 2


def test_a_roll_that_cannot_wait_is_made_at_once(tmp_path, clock, monkeypatch) -> None:
    import kelp.broker.storage.log_roll as log_roll

    lg = small_log(tmp_path / "t-0", clock)
    monkeypatch.setattr(log_roll, "MAX_SEGMENT_POSITION", 150)  # positions past it would not fit the index
    results = fill(lg, 2, defer_roll=True)
    assert not results[1].roll_due and [s.base_offset for s in lg.segments] == [0, 1]


def test_the_files_are_made_outside_the_log_lock(tmp_path, clock, monkeypatch) -> None:
    lg = small_log(tmp_path / "t-0", clock)
    fill(lg, 2, defer_roll=True)
    fs = BlockingOpen(monkeypatch, f"{segment_name(2)}.log")
    out: list[LogSegment | None] = []
    worker = threading.Thread(target=lambda: out.append(lg.roll_when_due()))
    worker.start()
    try:
        assert fs.entered.wait(WAIT_S)
        # The roll is inside `open`: the lock is free, reads go on, and no half-made segment is visible.
        assert lg.lock.acquire(timeout=WAIT_S)
        lg.lock.release()
        assert [r.offset for r in read_all(lg)] == [0, 1] and len(lg.segments) == 1
    finally:
        fs.release.set()
        worker.join(WAIT_S)
    assert out and out[0] is lg.active_segment and out[0].base_offset == 2
    assert fs.threads == [worker.ident]


def test_appends_during_the_roll_move_its_base_to_the_new_end(tmp_path, clock, monkeypatch) -> None:
    """A caller that does not hold appends back (the periodic segment.ms task): the files made for an old log
    end are removed and the roll is made again at the new end."""
    lg = small_log(tmp_path / "t-0", clock)
    fill(lg, 2, defer_roll=True)
    fs = BlockingOpen(monkeypatch, f"{segment_name(2)}.log")
    out: list[LogSegment | None] = []
    worker = threading.Thread(target=lambda: out.append(lg.roll_when_due()))
    worker.start()
    try:
        assert fs.entered.wait(WAIT_S)
        assert fill(lg, 1, defer_roll=True)[0].roll_due  # offset 2 goes to the old segment
    finally:
        fs.release.set()
        worker.join(WAIT_S)
    assert out and out[0] is not None and out[0].base_offset == 3 == lg.log_end_offset
    assert sorted(p.name for p in lg.directory.glob("*.log")) == [f"{segment_name(0)}.log", f"{segment_name(3)}.log"]
    assert [r.offset for r in read_all(lg)] == [0, 1, 2]


def test_recovery_keeps_a_new_segment_at_the_end_and_removes_one_below_it(tmp_path, clock) -> None:
    """kill -9 between a roll's files and its install: the empty segment is at the log end (kept, it is the
    active one) or, if appends moved the end meanwhile, below it (removed); nothing appended is lost."""
    lg = small_log(tmp_path / "t-0", clock, segment_bytes=10_000)
    fill(lg, 3)
    directory = lg.directory
    for base in (1, 3):  # a stale one below the end, and one at the end
        LogSegment.create(directory, base, index_interval_bytes=4096, max_index_entries=100, now_ms=clock()).close()
    # No close: the log is abandoned as a killed process leaves it (page cache only, no checkpoint update).
    again = small_log(directory, clock, segment_bytes=10_000)
    assert [s.base_offset for s in again.segments] == [0, 3]
    assert again.log_end_offset == 3 and [r.offset for r in read_all(again)] == [0, 1, 2]
    assert not list(directory.glob(f"{segment_name(1)}.*"))
    again.append_as_leader(batch(b"y"), leader_epoch=0)
    assert again.active_segment.base_offset == 3 and again.log_end_offset == 4
