"""auto.leader.rebalance.enable: leadership goes back to each partition's preferred replica once it is in sync.

After a broker's failure its partitions are led by others; when it returns and rejoins their ISRs, Kafka's
controller moves each back (KRaft's `maybeBalancePartitionLeaders`, every
`leader.imbalance.check.interval.seconds`). Without it one broker kept every leadership it took over — in
perf-rf3's run, broker 0 led all 3,000 partitions for the rest of the bench. Driven with the controller
harness: a preferred replica that is not in sync, not alive, decommissioned, or under a reassignment is never
elected; a pass elects at most its limit and says more are left; the watch loop runs it on its interval.
"""

from __future__ import annotations

import asyncio

from kelp.broker.cluster.controller import ControllerSettings
from kelp.config.broker import BrokerConfig
from tests.replication.test_controller import Harness, ep


async def _fail_and_return(h: Harness, c, broker: int, topic: str, partitions: int) -> None:
    """`broker` dies (its leaderships move), comes back, and rejoins every ISR it left."""
    del h.alive[broker]
    await c._on_liveness(dict(h.alive))
    h.alive[broker] = ep(broker)
    await c._on_liveness(dict(h.alive))
    for p in range(partitions):
        s = h.state(topic, p)
        if broker in s.replicas and broker not in s.isr:
            await c.broker_requests.alter_partition(topic=topic, partition=p, leader=s.leader,
                                                    leader_epoch=s.leader_epoch, partition_epoch=s.partition_epoch,
                                                    isr=[*s.isr, broker])


async def test_a_returned_broker_gets_back_the_leaderships_it_prefers_once_in_sync() -> None:
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={p: [p % 3, (p + 1) % 3, (p + 2) % 3] for p in range(6)})
    before = [h.state("t", p) for p in range(6)]
    del h.alive[0]
    await c._on_liveness(dict(h.alive))
    h.alive[0] = ep(0)
    await c._on_liveness(dict(h.alive))
    moved = [h.state("t", p) for p in range(6)]
    assert [s.leader for s in moved] == [1, 1, 2, 1, 1, 2]  # 0's leaderships went to the next in sync
    assert not await c.moves.balance_leaders()
    assert [h.state("t", p) for p in range(6)] == moved  # 0 is alive but not in sync yet: nothing elected
    for p in (0, 3):
        s = h.state("t", p)
        await c.broker_requests.alter_partition(topic="t", partition=p, leader=s.leader, leader_epoch=s.leader_epoch,
                                                partition_epoch=s.partition_epoch, isr=[*s.isr, 0])
    rejoined = [h.state("t", p) for p in range(6)]
    assert not await c.moves.balance_leaders()
    after = [h.state("t", p) for p in range(6)]
    assert [s.leader for s in after] == [0, 1, 2, 0, 1, 2] == [s.leader for s in before]
    for p in (0, 3):
        assert after[p].leader_epoch == rejoined[p].leader_epoch + 1 and after[p].isr == rejoined[p].isr
    for p in (1, 2, 4, 5):
        assert after[p] == rejoined[p]  # led by their preferred replica all along: untouched


async def test_a_pass_elects_at_most_its_limit_and_says_more_are_left() -> None:
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={p: [0, 1, 2] for p in range(5)})
    await _fail_and_return(h, c, 0, "t", 5)
    assert [h.state("t", p).leader for p in range(5)] == [1] * 5
    assert await c.moves.balance_leaders(limit=2)
    assert sorted(h.state("t", p).leader for p in range(5)) == [0, 0, 1, 1, 1]
    assert await c.moves.balance_leaders(limit=2)
    assert not await c.moves.balance_leaders(limit=2)
    assert [h.state("t", p).leader for p in range(5)] == [0] * 5


async def test_no_election_for_a_decommissioned_preferred_replica_nor_a_partition_being_moved() -> None:
    h = Harness(4)
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 1, 2], 1: [0, 1, 2], 2: [1, 2, 3]})
    await _fail_and_return(h, c, 0, "t", 2)
    await _fail_and_return(h, c, 1, "t", 3)
    await c.moves.reassign(topic="t", partition=1, replicas=[0, 1, 3])  # 3 added: a reassignment runs
    await c.decommissions.decommission_broker(broker_id=1, decommissioned=True)  # 1 is leaving: leads nothing back
    before = [h.state("t", p) for p in range(3)]
    assert before[1].reassigning and before[2].leader != 1
    assert not await c.moves.balance_leaders()
    after = [h.state("t", p) for p in range(3)]
    assert after[0].leader == 0  # nothing stops this one
    assert after[1:] == before[1:]


async def test_the_watch_loop_balances_on_its_interval_and_the_switch_turns_it_off() -> None:
    h = Harness(**{"leader.imbalance.check.interval.seconds": 1, "controller.liveness.check.interval.ms": 50})
    c = h.controller
    await c.start()  # the watch loop runs
    try:
        await c.topic_admin.create_topic(name="t", assignments={0: [0, 1, 2]})
        await _fail_and_return(h, c, 0, "t", 1)
        assert h.state("t").leader == 1

        async def back() -> None:
            while h.state("t").leader != 0:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(back(), 10)
    finally:
        await c.stop()
    off = BrokerConfig.load(env={}, overrides={"log.dirs": "/tmp/unused", "auto.leader.rebalance.enable": "false"})
    assert ControllerSettings(off).leader_balance_s is None
    on = BrokerConfig.load(env={}, overrides={"log.dirs": "/tmp/unused"})
    assert ControllerSettings(on).leader_balance_s == 300.0  # Kafka's default interval
