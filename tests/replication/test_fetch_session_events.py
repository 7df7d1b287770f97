"""Every change a follower's fetch session must tell is told by the session's dirty marks alone (issue 38).

Why: an incremental fetch on the leader reads only the partitions it names and those its session marked dirty
(each session partition watches its replica; `Partition.wake` marks it), and a parked fetch waits on its
session. The sweep of the whole session comes at most once a second; a change that marked nothing would reach
the follower only then, and a parked fetch would sit out its whole wait. So each case here opens follower 1's
session on leader 0 with the sweep switched off, lets the session go quiet (the follower caught up, a fetch
reading nothing), makes one change to one partition and checks what the follower is told:

- a fetch parked for 60 s is answered at once by what ends Kafka's delayed fetch: records appended, the
  leadership moving away, the leader epoch moving on, the replica leaving this broker;
- the next fetch carries a high watermark moved by an ISR shrink and a log start moved in a worker thread
  (DeleteRecords, retention), neither of which ends a parked fetch in Kafka either.

The race the lead asked about (a stall of acks=all while leaderships and ISRs move) needs each of these: a mark
missed after a leadership or ISR change would leave the follower's view stale for up to the sweep interval.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from kelp.broker.metadata.image import MetadataDelta
from kelp.broker.metadata.model import PartitionState
from kelp.broker.replica.fetch_sessions import FetchSession
from kelp.records.build import build_batch
from tests.authorization.harness import InProcessBroker
from tests.broker.test_fetch_sessions import V, answered, fetch

N = 12
P = 5  # the partition every case changes
EPOCH = 1
FOLLOWER = 1


def push(b: InProcessBroker, states: dict[int, PartitionState]) -> None:
    """Apply partition states to topic `a` as the controller's push would."""
    info = b.parts.topics.get("a")
    assert info is not None
    for p, state in states.items():
        info = info.with_partition(p, state)
    b.parts.topics.apply_delta(MetadataDelta(changed={"a": info}))


def rf3(*, leader: int = 0, epoch: int = EPOCH, isr: tuple[int, ...] = (0, 1, 2), replicas: tuple[int, ...] = (0, 1, 2),
        partition_epoch: int = 1) -> PartitionState:
    return PartitionState(replicas, leader, epoch, isr, partition_epoch)


def append(b: InProcessBroker, p: int) -> None:
    b.parts.replicas.append_sync("a", p, bytearray(build_batch([(b"k", b"v")])), acks=1)


class Follower:
    """Broker 1's fetches in one incremental session on the in-process leader (broker 0), by hand."""

    def __init__(self, b: InProcessBroker) -> None:
        self.b = b
        self.sid = 0
        self.epoch = 0

    async def open(self) -> None:
        full = await self.b.call(fetch({"a": [(p, 0) for p in range(N)]}, replica_id=FOLLOWER, leader_epoch=EPOCH), V)
        assert full.error_code == 0 and full.session_id > 0
        self.sid, self.epoch = int(full.session_id), 1

    def request(self, named: dict[int, int] | None = None, *, wait_ms: int = 0) -> Any:
        req = fetch({"a": sorted((named or {}).items())} if named else {}, session=self.sid, epoch=self.epoch,
                    replica_id=FOLLOWER, leader_epoch=EPOCH)
        req.max_wait_ms, req.min_bytes = wait_ms, 1
        self.epoch += 1
        return req

    async def call(self, named: dict[int, int] | None = None) -> dict[tuple[Any, int], tuple[int, int, int, bool]]:
        resp = await self.b.call(self.request(named), V)
        assert resp.error_code == 0
        return answered(resp)

    @property
    def session(self) -> FetchSession:
        session = self.b.parts.replicas.fetch_sessions.get(self.sid)
        assert session is not None
        return session


async def quiet_session(b: InProcessBroker, monkeypatch: Any) -> tuple[Follower, asyncio.Event]:
    """Topic `a` at RF 3 led here at EPOCH, partition P holding one record that follower 1 has and follower 2
    does not (its high watermark 0); follower 1's session open and quiet; the sweep off."""
    parking = asyncio.Event()
    real = FetchSession.wait_dirty

    async def wait_dirty(self: FetchSession, timeout: float) -> None:
        parking.set()
        await real(self, timeout)

    monkeypatch.setattr(FetchSession, "wait_dirty", wait_dirty)
    await b.parts.topics.create_topic("a", N, 1)
    push(b, {p: rf3() for p in range(N)})
    b.parts.replicas.fetch_sessions.sweep_ms = 1 << 40  # only the dirty marks tell anything
    follower = Follower(b)
    await follower.open()
    append(b, P)
    assert answered_records(await follower.call()) == {P}
    assert await follower.call({P: 1}) == {}  # caught up at 1; high watermark 0 (follower 2 is at 0)
    assert await follower.call() == {}  # quiet: nothing dirty
    part = b.parts.replicas.get_partition("a", P)
    assert part is not None and part.high_watermark == 0
    return follower, parking


def answered_records(got: dict[tuple[Any, int], tuple[int, int, int, bool]]) -> set[int]:
    return {p for (_, p), (_, _, _, records) in got.items() if records}


async def parked_answer(b: InProcessBroker, follower: Follower, parking: asyncio.Event,
                        change: Callable[[], Awaitable[None]]) -> dict[tuple[Any, int], tuple[int, int, int, bool]]:
    """A fetch parked for 60 s on the quiet session, `change` made while it waits: its answer (bounded far below
    its wait: only the session's dirty mark can end it this early)."""
    parking.clear()
    task = asyncio.ensure_future(b.call(follower.request(wait_ms=60_000), V))
    await asyncio.wait_for(parking.wait(), 30)
    assert not task.done()
    await change()
    resp = await asyncio.wait_for(task, 10)
    return answered(resp)


async def _append(b: InProcessBroker) -> None:
    append(b, P)


async def _leader_moves(b: InProcessBroker) -> None:
    push(b, {P: rf3(leader=2, epoch=EPOCH + 1, partition_epoch=2)})


async def _epoch_moves(b: InProcessBroker) -> None:
    push(b, {P: rf3(leader=0, epoch=EPOCH + 1, partition_epoch=2)})


async def _replica_leaves(b: InProcessBroker) -> None:
    push(b, {P: rf3(leader=1, epoch=EPOCH + 1, replicas=(1, 2, 3), isr=(1, 2), partition_epoch=2)})


@pytest.mark.parametrize("change, records", [(_append, True), (_leader_moves, False), (_epoch_moves, False),
                                             (_replica_leaves, False)],
                         ids=["append", "leadership-moves-away", "leader-epoch-moves", "replica-leaves-the-broker"])
async def test_a_parked_session_fetch_is_answered_at_once_by_what_ends_a_delayed_fetch(
        tmp_path: Path, monkeypatch: Any, change: Callable[[InProcessBroker], Awaitable[None]], records: bool) -> None:
    async with InProcessBroker(tmp_path) as b:
        follower, parking = await quiet_session(b, monkeypatch)
        got = await parked_answer(b, follower, parking, lambda: change(b))
        (error, _, _, has_records), = [v for (_, p), v in got.items() if p == P]
        assert (error == 0 and has_records) if records else error != 0, got


async def test_a_high_watermark_moved_by_an_isr_shrink_is_told_by_the_next_fetch(tmp_path: Path,
                                                                                  monkeypatch: Any) -> None:
    async with InProcessBroker(tmp_path) as b:
        follower, _ = await quiet_session(b, monkeypatch)
        push(b, {P: rf3(isr=(0, 1), partition_epoch=2)})  # follower 2 leaves the ISR: the high watermark is 1
        part = b.parts.replicas.get_partition("a", P)
        assert part is not None and part.high_watermark == 1
        assert (await follower.call())[("a", P)][1] == 1


@pytest.mark.parametrize("thread", [True, False], ids=["worker-thread", "loop"])
async def test_a_moved_log_start_is_told_by_the_next_fetch(tmp_path: Path, monkeypatch: Any, thread: bool) -> None:
    async with InProcessBroker(tmp_path) as b:
        follower, _ = await quiet_session(b, monkeypatch)
        push(b, {P: rf3(isr=(0, 1), partition_epoch=2)})
        assert (await follower.call())[("a", P)][1] == 1
        part = b.parts.replicas.get_partition("a", P)
        assert part is not None
        if thread:  # DeleteRecords' and retention's way: the log start moves in a worker thread
            await asyncio.to_thread(part.log.advance_log_start_offset, 1)
            key = ("a", P)
            for _ in range(200):  # the wake is handed to the loop (call_soon_threadsafe): bounded yields
                if key in follower.session.dirty:
                    break
                await asyncio.sleep(0)
        else:
            part.log.advance_log_start_offset(1)
        assert (await follower.call())[("a", P)][2] == 1
