"""A follower fetching in an incremental fetch session (KIP-227) never misses records, a high watermark or a
log start: whatever an adversary interleaves — appends, the leader's log start moving, partitions removed
from and added back to the fetcher (the session forgets and re-adds them), the leader evicting the session
mid-stream, answers lost after the leader computed them — once the appends stop every follower log is its
leader's byte for byte, with the leader's high watermark and log start.

The follower's real ReplicaFetcher is driven by hand against `PeerStub`, whose fetches go through the leader's
real Fetch handler and session cache. The truncation and leader-change cases of test_follower_truncation.py
run through the same sessions.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from kelp.broker.metadata.image import MetadataDelta
from kelp.broker.metadata.model import PartitionState, TopicState
from tests.replication.replica_harness import TOPIC, TOPIC_ID, Node, PeerStub, batch

N = 4  # partitions
EPOCH = 1


def push(node: Node, *, leader: int = 0, isr: tuple[int, ...] = (0, 1)) -> None:
    """Every partition of the topic: replicas (0, 1), `leader` at EPOCH."""
    states = tuple(PartitionState((0, 1), leader, EPOCH, isr, 0) for _ in range(N))
    node.topics.apply_delta(MetadataDelta(changed={TOPIC: TopicState(TOPIC, states, topic_id=TOPIC_ID)}))
    if node.fetchers is not None:
        for f in node.fetchers._fetchers.values():
            f._task.cancel()  # the test drives the fetcher


class LosingStub(PeerStub):
    """A stub that can lose the next fetch's answer after the leader computed it (a connection dropped)."""

    def __init__(self, leader: Node, follower_id: int) -> None:
        super().__init__(leader, follower_id)
        self.lose_next = False

    async def request(self, req: Any, version: int, *, timeout_s: float | None = None, decoder: Any = None) -> Any:
        resp = await super().request(req, version, timeout_s=timeout_s, decoder=decoder)
        if self.lose_next and decoder is not None:
            self.lose_next = False
            raise ConnectionResetError("the answer was lost")
        return resp


async def settle(*nodes: Node) -> None:
    for node in nodes:
        await asyncio.gather(*list(node.rm._tasks), return_exceptions=True)


async def step(fetcher: Any, stub: PeerStub) -> None:
    """One round of the fetcher's loop: truncation first while any partition needs it, then a fetch."""
    try:
        if any(st.truncating for st in fetcher.state.values()):
            await fetcher._truncate(stub)
        await fetcher._fetch(stub)
    except ConnectionResetError:
        pass  # the run loop backs off and fetches again


def caught_up(leader: Node, follower: Node) -> bool:
    for p in range(N):
        lp, fp = leader.rm.get_partition(TOPIC, p), follower.rm.get_partition(TOPIC, p)
        if (fp.log.log_end_offset, fp.high_watermark, fp.log.log_start_offset) != (
                lp.log.log_end_offset, lp.high_watermark, lp.log.log_start_offset):
            return False
    return True


def log_bytes(node: Node, p: int) -> bytes:
    lg = node.rm.get_partition(TOPIC, p).log
    return bytes(lg.read(lg.log_start_offset, max_bytes=1 << 30)) if lg.log_end_offset > lg.log_start_offset else b""


@pytest.mark.parametrize("seed", range(12))
async def test_a_follower_in_a_session_misses_nothing_whatever_the_interleaving(tmp_path: Any, seed: int) -> None:
    rng = random.Random(seed)
    fast = {"replica.fetch.backoff.ms": 1}
    leader, follower = Node(tmp_path, 0, settings=fast), Node(tmp_path, 1, settings=fast, fetching=True)
    push(leader)
    push(follower)
    await settle(leader, follower)
    assert follower.fetchers is not None
    fetcher = follower.fetchers._fetchers[0]
    stub = LosingStub(leader, 1)
    removed: set[int] = set()
    for _ in range(80):
        action = rng.choice(["append", "append", "fetch", "fetch", "fetch", "evict", "remove", "add", "start",
                             "lose"])
        p = rng.randrange(N)
        if action == "append":
            leader.rm.append_sync(TOPIC, p, bytearray(batch(rng.randint(1, 3))), acks=1)
        elif action == "fetch":
            await step(fetcher, stub)
        elif action == "evict":
            for sid in list(leader.rm.fetch_sessions.sessions):
                leader.rm.fetch_sessions.remove(sid)
        elif action == "remove" and p not in removed:
            follower.fetchers.remove(TOPIC, p)
            removed.add(p)
        elif action == "add" and p in removed:
            follower.fetchers.add(TOPIC, p, leader=0, leader_epoch=EPOCH)
            removed.discard(p)
        elif action == "start":
            part = leader.rm.get_partition(TOPIC, p)
            if part.high_watermark > part.log.log_start_offset:
                target = rng.randint(part.log.log_start_offset + 1, part.high_watermark)
                await asyncio.to_thread(part.log.advance_log_start_offset, target)
        elif action == "lose":
            stub.lose_next = True
            await step(fetcher, stub)
        await settle(leader, follower)
    for p in removed:
        follower.fetchers.add(TOPIC, p, leader=0, leader_epoch=EPOCH)
    for _ in range(12):  # bounded: each round brings every partition at least one step closer
        if caught_up(leader, follower):
            break
        await step(fetcher, stub)
        await settle(leader, follower)
    sessions = [r for r in stub.sessions if r.session_epoch > 0]
    assert sessions, "the follower never fetched incrementally"
    for p in range(N):
        lp, fp = leader.rm.get_partition(TOPIC, p), follower.rm.get_partition(TOPIC, p)
        assert (fp.log.log_end_offset, fp.high_watermark, fp.log.log_start_offset) == (
            lp.log.log_end_offset, lp.high_watermark, lp.log.log_start_offset), f"partition {p}"
        assert log_bytes(follower, p) == log_bytes(leader, p)
    leader.close(), follower.close()


async def test_the_follower_names_only_the_partitions_whose_position_changed(tmp_path: Any) -> None:
    leader, follower = Node(tmp_path, 0), Node(tmp_path, 1, fetching=True)
    push(leader)
    push(follower)
    await settle(leader, follower)
    assert follower.fetchers is not None
    fetcher = follower.fetchers._fetchers[0]
    stub = PeerStub(leader, 1)
    await step(fetcher, stub)  # truncation (nothing to cut), then the full fetch that opens the session
    full = stub.sessions[-1]
    assert (full.session_id, full.session_epoch, sum(len(t.partitions) for t in full.topics)) == (0, 0, N)
    sid = fetcher.session.session_id
    assert sid > 0
    leader.rm.append_sync(TOPIC, 2, bytearray(batch(1)), acks=1)
    await fetcher._fetch(stub)  # nothing moved on the follower: names nothing, gets partition 2's record
    quiet = stub.sessions[-1]
    assert (quiet.session_id, quiet.session_epoch, quiet.topics) == (sid, 1, [])
    assert follower.rm.get_partition(TOPIC, 2).log.log_end_offset == 1
    await fetcher._fetch(stub)  # partition 2 moved: named alone; the leader's high watermark follows
    moved = stub.sessions[-1]
    assert [(t.topic, [p.partition for p in t.partitions]) for t in moved.topics] == [(TOPIC, [2])]
    await fetcher._fetch(stub)
    assert follower.rm.get_partition(TOPIC, 2).high_watermark == 1
    follower.fetchers.remove(TOPIC, 0)
    await fetcher._fetch(stub)
    assert [(t.topic, list(t.partitions)) for t in stub.sessions[-1].forgotten_topics_data] == [(TOPIC, [0])]
    leader.close(), follower.close()


async def test_an_incremental_fetch_looks_again_only_at_the_partitions_answered(tmp_path: Any,
                                                                                 monkeypatch: Any) -> None:
    """Issue 38: at 1,000s of partitions per leader, building every partition's part of each fetch was most of a
    follower's work per acks=all record. Between full builds (every REBUILD_S, here never) a fetch looks again
    only at the partitions the last answers touched."""
    from kelp.broker.cluster import replica_fetcher
    monkeypatch.setattr(replica_fetcher, "REBUILD_S", 1e9, raising=False)
    leader, follower = Node(tmp_path, 0), Node(tmp_path, 1, fetching=True)
    push(leader)
    push(follower)
    await settle(leader, follower)
    assert follower.fetchers is not None
    fetcher = follower.fetchers._fetchers[0]
    stub = PeerStub(leader, 1)
    await step(fetcher, stub)  # the full fetch that opens the session
    await fetcher._fetch(stub)  # the first incremental one (its parts built from the full one's)
    looked: list[int] = []
    real = follower.rm.get_partition

    def spy(topic: str, p: int) -> Any:
        looked.append(p)
        return real(topic, p)

    follower.rm.get_partition = spy  # type: ignore[method-assign]
    leader.rm.append_sync(TOPIC, 2, bytearray(batch(1)), acks=1)
    await fetcher._fetch(stub)  # gets partition 2's record
    await fetcher._fetch(stub)  # names partition 2 alone
    assert [(t.topic, [p.partition for p in t.partitions]) for t in stub.sessions[-1].topics] == [(TOPIC, [2])]
    assert set(looked) == {2}  # partitions 0, 1 and 3 were not built again (were: every fetch)
    await fetcher._fetch(stub)
    assert follower.rm.get_partition(TOPIC, 2).high_watermark == 1
    leader.close(), follower.close()


async def test_a_partition_removed_and_added_back_learns_the_high_watermark_it_was_told_meanwhile(
        tmp_path: Any) -> None:
    """The leader told the session a high watermark in an answer the follower dropped (the partition had left
    its fetcher); once added back, the partition is unchanged at the leader — so it must be answered anew, by
    the session forgetting and re-adding it, or by the follower's next fetch being full."""
    leader, follower = Node(tmp_path, 0), Node(tmp_path, 1, fetching=True)
    push(leader)
    push(follower)
    await settle(leader, follower)
    assert follower.fetchers is not None
    fetcher = follower.fetchers._fetchers[0]
    stub = PeerStub(leader, 1)
    await step(fetcher, stub)  # the full fetch: the session opens
    leader.rm.append_sync(TOPIC, 0, bytearray(batch(1)), acks=1)
    await fetcher._fetch(stub)  # the record arrives (the follower's high watermark is still 0)
    await fetcher._fetch(stub)  # names partition 0 at offset 1: the leader's high watermark moves to 1
    assert leader.rm.get_partition(TOPIC, 0).high_watermark == 1
    assert follower.rm.get_partition(TOPIC, 0).high_watermark == 0
    follower.fetchers.remove(TOPIC, 0)
    await fetcher._fetch(stub)  # any answer for partition 0 now is dropped by the follower
    follower.fetchers.add(TOPIC, 0, leader=0, leader_epoch=EPOCH)
    await settle(follower)
    for _ in range(4):
        await step(fetcher, stub)
    assert follower.rm.get_partition(TOPIC, 0).high_watermark == 1
    leader.close(), follower.close()
