"""An incremental fetch reads only what changed, and a parked one wakes on the change (issue 38).

Why: at 3,000 partitions RF 3 every follower fetch walked its whole session (1,000-2,000 partitions) on the leader,
and every append woke each parked follower fetch, which walked them all again: an acks=all record waited for
four such walks. These count the partitions each fetch reads (not time): a session of many partitions, one of
them written to, must cost one partition's read; a partition nobody wrote to is read again only by the periodic
sweep (which keeps a caught-up follower in the ISR and tells what no wake reports); and a fetch parked on its
session answers the append that wakes it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kelp.broker.replica.fetch_sessions import FetchSession
from kelp.records.build import build_batch
from tests.authorization.harness import InProcessBroker
from tests.broker.test_fetch_sessions import V, answered, fetch

N = 200


def count_reads(b: InProcessBroker) -> list[int]:
    """The partitions each read of the fetch path was handed, in order (the leader's per-partition work)."""
    path = b.parts.replicas.fetch_path
    reads: list[int] = []
    real = path._read

    def spy(requests: Any, **kw: Any) -> Any:
        reads.append(len(requests))
        return real(requests, **kw)

    path._read = spy  # type: ignore[method-assign]
    return reads


def append(b: InProcessBroker, p: int) -> None:
    b.parts.replicas.append_sync("a", p, bytearray(build_batch([(b"k", b"v")])), acks=1)


def parked_event(monkeypatch: Any) -> asyncio.Event:
    """Set when a fetch parks on its session (`FetchSession.wait_dirty` called): the order of events, not time."""
    event = asyncio.Event()
    real = FetchSession.wait_dirty

    async def wait_dirty(self: FetchSession, timeout: float) -> None:
        event.set()
        await real(self, timeout)

    monkeypatch.setattr(FetchSession, "wait_dirty", wait_dirty)
    return event


async def open_session(b: InProcessBroker) -> int:
    await b.parts.topics.create_topic("a", N, 1)
    full = await b.call(fetch({"a": [(p, 0) for p in range(N)]}), V)
    assert full.error_code == 0 and full.session_id > 0
    return int(full.session_id)


async def test_an_incremental_fetch_reads_only_the_partitions_that_changed(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path) as b:
        sid = await open_session(b)
        cache = b.parts.replicas.fetch_sessions
        cache.sweep_ms = 1 << 40  # no sweep in this test (the next one has it)
        reads = count_reads(b)
        quiet = await b.call(fetch({}, session=sid, epoch=1), V)
        assert (answered(quiet), reads) == ({}, [])  # nothing changed: no partition read (was 200)
        append(b, 7)
        news = await b.call(fetch({}, session=sid, epoch=2), V)
        assert answered(news) == {("a", 7): (0, 1, 0, True)}
        assert reads == [1]  # the one written to (was 200)
        # It was answered with records: read again until the fetcher says it has them (Kafka's rule).
        again = await b.call(fetch({}, session=sid, epoch=3), V)
        assert answered(again) == {("a", 7): (0, 1, 0, True)} and reads == [1, 1]
        moved = await b.call(fetch({"a": [(7, 1)]}, session=sid, epoch=4), V)
        assert answered(moved) == {} and reads == [1, 1, 1]
        assert answered(await b.call(fetch({}, session=sid, epoch=5), V)) == {} and reads == [1, 1, 1]


async def test_the_sweep_reads_every_partition_once_per_sweep_interval(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path) as b:
        now = [0]
        b.parts.replicas._lag_clock_ms = lambda: now[0]
        sid = await open_session(b)
        cache = b.parts.replicas.fetch_sessions
        reads = count_reads(b)
        path = b.parts.replicas.fetch_path
        views: list[object] = []
        real_view = path._view
        path._view = lambda req, isolation: views.append(req) or real_view(req, isolation)  # type: ignore
        await b.call(fetch({}, session=sid, epoch=1), V)
        now[0] += cache.sweep_ms  # a caught-up follower's partitions must count as fetched again by now
        await b.call(fetch({}, session=sid, epoch=2), V)
        await b.call(fetch({}, session=sid, epoch=3), V)
        assert reads == [N]  # the quiet fetches read nothing, the one after the interval every partition
        assert views == []  # a session's reads do not wait in the fetch path: nothing to compare after a wake
        assert cache.sweep_ms <= 1000


async def test_a_parked_incremental_fetch_answers_the_append_that_wakes_it(tmp_path: Path, monkeypatch: Any) -> None:
    parking = parked_event(monkeypatch)
    async with InProcessBroker(tmp_path) as b:
        sid = await open_session(b)
        b.parts.replicas.fetch_sessions.sweep_ms = 1 << 40
        session = b.parts.replicas.fetch_sessions.get(sid)
        assert session is not None
        reads = count_reads(b)
        parked = fetch({}, session=sid, epoch=1)
        parked.max_wait_ms, parked.min_bytes = 60_000, 1
        task = asyncio.ensure_future(b.call(parked, V))
        await asyncio.wait_for(parking.wait(), 30)  # bounded: the handler reached its session's wait
        assert session.waiter is not None and not task.done()
        assert reads == []  # parked without reading (nor registering on) each of the N partitions
        append(b, 3)
        resp = await asyncio.wait_for(task, 30)  # far below the fetch's 60 s wait: the append woke it
        assert answered(resp) == {("a", 3): (0, 1, 0, True)}
        assert reads == [1]  # the wake read the one partition that changed


async def test_a_session_closed_under_a_parked_fetch_leaves_no_watcher_behind(tmp_path: Path,
                                                                             monkeypatch: Any) -> None:
    """A follower that gave up on a parked fetch opens a new session, closing the old one; the old fetch, answered
    later, must not register the dead session on replicas again (each would keep it and be told every append)."""
    parking = parked_event(monkeypatch)
    async with InProcessBroker(tmp_path) as b:
        sid = await open_session(b)
        cache = b.parts.replicas.fetch_sessions
        cache.sweep_ms = 1 << 40
        session = cache.get(sid)
        assert session is not None
        parked = fetch({"a": [(5, 0)]}, session=sid, epoch=1)  # names partition 5: read, then watched
        parked.max_wait_ms, parked.min_bytes = 60_000, 1
        task = asyncio.ensure_future(b.call(parked, V))
        await asyncio.wait_for(parking.wait(), 30)  # bounded: the handler reached its session's wait
        assert session.waiter is not None
        cache.remove(sid)
        append(b, 7)  # its replica no longer tells the closed session: the fetch is ended by hand below
        session.mark(("a", 7))
        resp = await asyncio.wait_for(task, 30)
        assert ("a", 7) in answered(resp)
        for p in (5, 7):
            part = b.parts.replicas.get_partition("a", p)
            assert part is not None and not part._watchers, p
