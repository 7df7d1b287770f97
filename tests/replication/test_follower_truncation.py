"""A follower's log ends up byte for byte its leader's, whatever the history of failovers.

Driven by hand: the follower's real ReplicaFetcher runs one truncation round or one fetch at a time
against a stub that answers from the leader's real ReplicaManager, and the test moves leadership
(pushes) at chosen points, e.g. while an answer is in flight.

- KIP-279: when the leader answers an older epoch than the one asked, truncation takes another round.
- A follower with no leader epochs truncates to its high watermark (Kafka's truncateToHighWatermark).
- A new leader answers OffsetForLeaderEpoch for its own epoch at once (KIP-101 case 1).
- A fetch offset past the leader's log end is OFFSET_OUT_OF_RANGE and is no progress.
- Answers to requests sent for a fetch state that was since replaced are dropped.
- Leadership taken while a truncation runs starts its epoch where the truncation lands.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from kelp.broker.storage import Log
from kelp.errors import NotLeaderOrFollowerError, OffsetOutOfRangeError
from tests.replication.replica_harness import TOPIC, Node, PeerStub, batch, until

REPLICAS = (0, 1)


def write(node: Node, history: list[tuple[int, int, bytes]]) -> None:
    """Give `node` a log written under the given leader epochs: (epoch, records, value) runs, one record a batch."""
    lg = node.topics.logs.get_or_create(TOPIC, 0)
    for epoch, count, value in history:
        for i in range(count):
            lg.append_as_leader(bytearray(batch(1, value=value + b"%d" % i)), leader_epoch=epoch)


async def follow(leader: Node, follower: Node, *, epoch: int, hw: int | None = None) -> PeerStub:
    leader.push(replicas=REPLICAS, leader=leader.broker_id, leader_epoch=epoch, isr=(leader.broker_id,))
    # Let whatever the leader does in the background for its new epoch land first (isolates each case here
    # from the one of test_a_new_leader_answers_for_its_epoch_at_once).
    await asyncio.gather(*list(leader.rm._tasks), return_exceptions=True)
    if hw is not None:
        follower.topics.logs.get_or_create(TOPIC, 0).high_watermark = hw
    follower.push(replicas=REPLICAS, leader=leader.broker_id, leader_epoch=epoch, isr=(leader.broker_id,))
    await leader.settle()
    await follower.settle()
    return PeerStub(leader, follower.broker_id)


async def truncate_until_done(follower: Node, stub: PeerStub, leader_id: int = 0, *, most: int = 10) -> int:
    fetcher, rounds = follower.fetcher(leader_id), 0
    while follower.fetch_state(leader_id).truncating and rounds < most:
        await fetcher._truncate(stub)
        rounds += 1
    return rounds


async def test_truncation_takes_as_many_rounds_as_the_epochs_disagree(tmp_path) -> None:
    """KIP-279's case: the follower led epochs 2 and 4 that the leader never had; the leader wrote epoch 3."""
    leader, follower = Node(tmp_path, 0), Node(tmp_path, 1, fetching=True)
    write(leader, [(1, 10, b"a"), (3, 30, b"L")])
    write(follower, [(1, 10, b"a"), (2, 10, b"F"), (4, 10, b"G")])
    stub = await follow(leader, follower, epoch=5)

    rounds = await truncate_until_done(follower, stub)
    # Asked 4 -> leader answers (3, 40): we never had 3, cut where ours below it ends (20) and ask 2 ->
    # leader answers (1, 10): we have epoch 1, cut at 10. Everything from 10 on was never the leader's.
    assert follower.log.log_end_offset == 10
    assert follower.log.leader_epochs.entries == [(1, 0)]
    assert rounds == 2
    await follower.fetcher(0)._fetch(stub)
    assert follower.log.log_end_offset == 40
    assert follower.all_bytes() == leader.all_bytes()
    leader.close(), follower.close()


async def test_a_follower_without_leader_epochs_truncates_to_its_high_watermark(tmp_path) -> None:
    leader, follower = Node(tmp_path, 0), Node(tmp_path, 1, fetching=True)
    write(leader, [(1, 6, b"a"), (3, 4, b"L")])
    write(follower, [(1, 6, b"a"), (2, 4, b"F")])
    follower.log.leader_epochs.clear()  # e.g. its leader-epoch checkpoint was lost
    stub = await follow(leader, follower, epoch=5, hw=6)

    await truncate_until_done(follower, stub)
    assert follower.log.log_end_offset == 6
    assert stub.requests == []  # nothing to ask with: Kafka's truncateToHighWatermark
    await follower.fetcher(0)._fetch(stub)
    assert follower.all_bytes() == leader.all_bytes()
    leader.close(), follower.close()


async def test_a_new_leader_answers_for_its_epoch_at_once(tmp_path) -> None:
    """KIP-101 case 1: "unknown" would send a follower back to its high watermark, losing committed records."""
    node = Node(tmp_path, 0)
    write(node, [(3, 10, b"a")])
    node.push(replicas=REPLICAS, leader=1, leader_epoch=4, isr=REPLICAS)  # following first
    await node.settle()
    node.push(replicas=REPLICAS, leader=0, leader_epoch=5, isr=REPLICAS)
    # No await in between: whatever runs next on the loop (an OffsetForLeaderEpoch) sees epoch 5.
    assert node.rm.end_offset_for_epoch(TOPIC, 0, 5) == (5, 10)
    assert node.rm.end_offset_for_epoch(TOPIC, 0, 4) == (3, 10)  # a follower that saw epoch 4 keeps 0..9
    await asyncio.gather(*list(node.rm._tasks))  # the checkpoint file follows, off the loop
    from kelp.broker.storage.leader_epoch import LeaderEpochCache

    assert LeaderEpochCache.load(node.log.directory).entries == [(3, 0), (5, 10)]
    node.close()


async def test_a_fetch_offset_past_the_leaders_end_is_out_of_range_and_no_progress(tmp_path) -> None:
    node = Node(tmp_path, 0)
    node.push(replicas=(0, 1, 2), leader=0, leader_epoch=3, isr=(0, 1))
    asked: list[dict] = []

    async def alter_partition(*args, **kwargs):
        asked.append(kwargs)

    node.rm.alter_partition = alter_partition
    for _ in range(10):
        node.rm.append_sync(TOPIC, 0, bytearray(batch(1)), acks=1)
    await node.follower_fetch(1, 10)
    assert node.part.high_watermark == 10

    res = await node.follower_fetch(2, 15)  # broker 2 kept records a deposed leader wrote
    assert isinstance(res.error, OffsetOutOfRangeError)
    assert res.log_start_offset == 0 and res.high_watermark == 10
    assert node.part.pending_isr is None and asked == []  # it does not join the ISR on that
    assert node.part.progress[2].log_end_offset == -1
    node.close()


async def test_a_fetch_answer_for_a_replaced_fetch_state_is_dropped(tmp_path) -> None:
    """A fetch from offset 10 is in flight; the partition moves to broker 2 (whose fetcher truncates it to
    7) and back to broker 0 at a newer epoch. The old answer must not be appended at 10: a gap."""
    leader, follower = Node(tmp_path, 0), Node(tmp_path, 1, fetching=True)
    write(leader, [(1, 15, b"a")])
    write(follower, [(1, 10, b"a")])
    stub = await follow(leader, follower, epoch=5)
    await truncate_until_done(follower, stub)
    assert follower.log.log_end_offset == 10

    stub.hold()
    in_flight = asyncio.create_task(follower.fetcher(0)._fetch(stub))
    await asyncio.wait_for(stub.arrived.wait(), 5)
    follower.push(replicas=(0, 1, 2), leader=2, leader_epoch=6, isr=(2,))
    follower.log.truncate_to(7)  # broker 2's fetcher did this
    follower.push(replicas=(0, 1, 2), leader=0, leader_epoch=7, isr=(0,))
    stub.release()
    await asyncio.wait_for(in_flight, 5)
    assert follower.log.log_end_offset == 7
    assert follower.fetch_state(0).truncating  # the new state still does its own truncation first
    leader.close(), follower.close()


async def test_a_fetch_answer_for_a_log_that_moved_under_the_same_fetch_state_is_dropped(tmp_path) -> None:
    """The fetch state is still current, but the log it fetched for no longer ends where the request said
    (truncated meanwhile): the answer for offset 10 must not be appended to a log ending at 7."""
    leader, follower = Node(tmp_path, 0), Node(tmp_path, 1, fetching=True)
    write(leader, [(1, 15, b"a")])
    write(follower, [(1, 10, b"a")])
    stub = await follow(leader, follower, epoch=5)
    await truncate_until_done(follower, stub)
    state = follower.fetch_state(0)

    stub.hold()
    in_flight = asyncio.create_task(follower.fetcher(0)._fetch(stub))
    await asyncio.wait_for(stub.arrived.wait(), 5)
    follower.log.truncate_to(7)
    stub.release()
    await asyncio.wait_for(in_flight, 5)
    assert follower.fetch_state(0) is state
    assert follower.log.log_end_offset == 7  # nothing appended past the hole; the next fetch asks for 7
    await follower.fetcher(0)._fetch(stub)
    assert follower.log.log_end_offset == 15 and follower.all_bytes() == leader.all_bytes()
    leader.close(), follower.close()


async def test_an_epoch_answer_for_a_replaced_fetch_state_is_dropped(tmp_path) -> None:
    """The answer "epoch 2 ends at 15" was computed while broker 0 led at epoch 5; before it arrives broker 0
    followed another leader (its offsets 12.. replaced by epoch-6 records) and leads again at epoch 7, where
    epoch 2 ends at 12. Applying the old answer would keep the follower's 12..14, which the leader lacks."""
    leader, follower = Node(tmp_path, 0), Node(tmp_path, 1, fetching=True)
    write(leader, [(1, 10, b"a"), (2, 5, b"b")])
    write(follower, [(1, 10, b"a"), (2, 5, b"b"), (4, 5, b"F")])
    stub = await follow(leader, follower, epoch=5)

    stub.hold()
    in_flight = asyncio.create_task(follower.fetcher(0)._truncate(stub))
    await asyncio.wait_for(stub.arrived.wait(), 5)
    # Broker 0 follows broker 2 at epoch 6: offsets 12.. become broker 2's, then it leads again at epoch 7.
    leader.push(replicas=(0, 1, 2), leader=2, leader_epoch=6, isr=(2, 0))
    await leader.settle()
    leader.log.truncate_to(12)
    for i in range(8):
        leader.log.append_as_leader(bytearray(batch(1, value=b"M%d" % i)), leader_epoch=6)
    leader.push(replicas=(0, 1, 2), leader=0, leader_epoch=7, isr=(0,))
    follower.push(replicas=(0, 1, 2), leader=0, leader_epoch=7, isr=(0,))
    stub.release()
    await asyncio.wait_for(in_flight, 5)

    await truncate_until_done(follower, stub)
    await follower.fetcher(0)._fetch(stub)
    assert follower.all_bytes() == leader.all_bytes()
    leader.close(), follower.close()


async def test_leadership_taken_during_a_truncation_starts_where_the_truncation_lands(tmp_path, monkeypatch) -> None:
    leader, follower = Node(tmp_path, 0), Node(tmp_path, 1, fetching=True)
    write(leader, [(1, 10, b"a")])
    write(follower, [(1, 10, b"a"), (2, 5, b"F")])
    stub = await follow(leader, follower, epoch=5)

    entered, proceed = threading.Event(), threading.Event()
    lg = follower.log
    real_truncate = Log.truncate_to

    def slow_truncate(self: Log, offset: int) -> None:
        if self is lg:  # the follower's log only
            entered.set()
            proceed.wait(10)
        real_truncate(self, offset)

    monkeypatch.setattr(Log, "truncate_to", slow_truncate)
    truncating = asyncio.create_task(follower.fetcher(0)._truncate(stub))
    assert await asyncio.to_thread(entered.wait, 10)
    follower.push(replicas=REPLICAS, leader=1, leader_epoch=6, isr=(1,))  # elected while truncating
    with pytest.raises(NotLeaderOrFollowerError, match="truncation"):
        follower.rm.end_offset_for_epoch(TOPIC, 0, 2)  # the log end is not final yet: nothing is answered
    proceed.set()
    await asyncio.wait_for(truncating, 10)
    await follower.settle()

    part = follower.part
    assert lg.log_end_offset == 10
    assert part.epoch_start_offset == 10
    assert lg.leader_epochs.entries[-1] == (6, 10)
    assert follower.rm.end_offset_for_epoch(TOPIC, 0, 2) == (1, 10)
    appended = await follower.rm.append(TOPIC, 0, bytearray(batch(1)), acks=1)
    assert appended.base_offset == 10
    leader.close(), follower.close()


async def test_a_leader_that_moved_address_gets_a_new_connection_and_the_old_one_is_closed(tmp_path) -> None:
    """A leader's endpoint changed (a pod rescheduled with a new IP): the fetcher dials the new address and
    closes its connection to the old one instead of leaving it open until the process ends."""
    from kelp.broker.cluster.replica_fetcher import ReplicaFetcherManager
    from kelp.broker.metadata.model import BrokerEndpoint

    closed: list[int] = []
    accepted: list[int] = []

    def server(n: int):
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(n)
            await reader.read()  # until the peer closes
            closed.append(n)
            writer.close()
        return serve

    old, new = [await asyncio.start_server(server(n), "127.0.0.1", 0) for n in (0, 1)]
    ports = [s.sockets[0].getsockname()[1] for s in (old, new)]
    where = {"port": ports[0]}
    node = Node(tmp_path, 1)
    manager = ReplicaFetcherManager(replicas=node.rm, broker_id=1, config=node.config,
                                    endpoint_of=lambda b: BrokerEndpoint(b, "127.0.0.1", where["port"], "", 0))
    manager.add(TOPIC, 0, leader=0, leader_epoch=1)
    fetcher = manager._fetchers[0]
    fetcher._task.cancel()  # driven by hand
    first = await fetcher._connection()
    await first._connected()
    assert await until(lambda: accepted == [0])
    where["port"] = ports[1]
    second = await fetcher._connection()
    assert second is not first and (second.host, second.port) == ("127.0.0.1", ports[1])
    for _ in range(100):
        if closed:
            break
        await asyncio.sleep(0.01)
    assert closed == [0], "the connection to the leader's old address was left open"
    await manager.stop()
    for s in (old, new):
        s.close()
    node.close()
