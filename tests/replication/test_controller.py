"""The controller's decisions, driven directly with an in-memory store and a recording push.

Leader election from the ISR when a broker goes (epoch + 1, the dead broker
leaves every ISR, offline when no in-sync replica lives and unclean election
is off), AlterPartition fencing by leader and partition epoch, controlled
shutdown, producer-id blocks persisted before they are handed out,
reassignment in its phases, preferred-leader election, and a controller
with a stale lease writing nothing.
"""

from __future__ import annotations

import pytest

from kelp.broker.cluster.controller import Controller, ControllerSettings
from kelp.broker.metadata.model import BrokerEndpoint
from kelp.config.broker import BrokerConfig
from kelp.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidTopicError,
    InvalidUpdateVersionError,
    NotControllerError,
)
from tests.support.memory_metadata_log import MemoryMetadataLog


def ep(i: int, rack: str | None = None, incarnation: str = "") -> BrokerEndpoint:
    return BrokerEndpoint(i, "127.0.0.1", 9092 + i, "127.0.0.1", 8080 + i, rack, incarnation)


class Harness:
    def __init__(self, n: int = 3, **cfg) -> None:
        self.store = MemoryMetadataLog()
        self.alive = {i: ep(i) for i in range(n)}
        self.pushed: list[tuple[int, dict]] = []
        self.fresh = True
        self.config = BrokerConfig.load(env={}, overrides={"log.dirs": "/tmp/unused", **cfg})
        self.controller = self.make()

    def make(self) -> Controller:
        async def live():
            return dict(self.alive)

        async def send(broker, payload):
            self.pushed.append((broker.id, payload))
            return payload["end_offset"]

        return Controller(broker_id=0, settings=ControllerSettings(self.config), log=self.store,
                          live_brokers=live, send=send, lease_fresh=lambda: self.fresh)

    async def start(self) -> Controller:
        await self.controller.start()
        self.controller._task.cancel()  # the watch loop is driven by hand below
        return self.controller

    def state(self, topic: str, p: int = 0):
        return self.store.topic(topic).partition(p)


async def test_topic_creation_is_stored_and_spread() -> None:
    h = Harness()
    c = await h.start()
    doc = await c.topic_admin.create_topic(name="t", partitions=6, replication_factor=3)
    assert sorted(p["leader"] for p in doc["partitions"]) == [0, 0, 1, 1, 2, 2]
    assert h.store.topic("t").to_json() == {k: v for k, v in doc.items() if k != "metadata_offset"}
    offsets = await c.topic_admin.ensure_internal_topic(name="__consumer_offsets", partitions=3, configs={},
                                                        replication_factor=3)
    assert len(offsets["partitions"][0]["replicas"]) == 3
    with pytest.raises(InvalidTopicError, match="internal"):
        await c.topic_admin.delete_topic(name="__consumer_offsets")
    assert h.store.topic("__consumer_offsets") is not None


async def test_dead_leader_is_replaced_from_the_isr_and_leaves_every_isr() -> None:
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", partitions=1, replication_factor=3)
    before = h.state("t")
    dead = before.leader
    del h.alive[dead]
    await c._on_liveness(dict(h.alive))
    after = h.state("t")
    assert after.leader != dead and after.leader in before.isr
    assert after.leader_epoch == before.leader_epoch + 1
    assert dead not in after.isr and after.partition_epoch > before.partition_epoch


async def test_last_in_sync_replica_gone_means_offline_unless_unclean_allowed() -> None:
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [1, 2]})
    s = h.state("t")
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=1, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[1])
    del h.alive[1]
    await c._on_liveness(dict(h.alive))
    off = h.state("t")
    assert off.leader == -1 and off.isr == (1,)  # 2 was out of sync: not elected, and 1 stays eligible
    h.alive[1] = ep(1)
    await c._on_liveness(dict(h.alive))
    assert h.state("t").leader == 1
    await c.topic_admin.alter_configs(name="t", configs={"unclean.leader.election.enable": "true"})
    del h.alive[1]
    await c._on_liveness(dict(h.alive))
    assert h.state("t").leader == 2 and h.state("t").isr == (2,)


async def test_alter_partition_is_fenced_by_epochs_and_liveness() -> None:
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 1, 2]})
    s = h.state("t")
    with pytest.raises(InvalidUpdateVersionError):
        await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s.leader_epoch,
                                partition_epoch=s.partition_epoch + 5, isr=[0, 1])
    with pytest.raises(FencedLeaderEpochError):
        await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s.leader_epoch - 1,
                                partition_epoch=s.partition_epoch, isr=[0, 1])
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[0, 1])
    s2 = h.state("t")
    assert s2.isr == (0, 1)
    del h.alive[2]
    await c._on_liveness(dict(h.alive))
    s3 = h.state("t")
    with pytest.raises(IneligibleReplicaError):
        await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s3.leader_epoch,
                                partition_epoch=s3.partition_epoch, isr=[0, 1, 2])


async def test_controlled_shutdown_moves_leadership_and_isr_membership() -> None:
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", partitions=3, replication_factor=3)
    await c.topic_admin.create_topic(name="solo", assignments={0: [1]})
    result = await c.broker_requests.controlled_shutdown(broker_id=1)
    states = h.store.topic("t").partition_states
    assert all(s.leader != 1 and 1 not in s.isr for s in states)
    assert result["remaining_leaderships"] == ["solo-0"]  # nobody else can lead it


async def test_producer_id_blocks_never_overlap_and_are_persisted_first() -> None:
    h = Harness(**{"producer.id.block.size": 10})
    c = await h.start()
    a = await c.broker_requests.allocate_producer_ids(broker_id=1)
    b = await c.broker_requests.allocate_producer_ids(broker_id=2)
    assert (a["first"], b["first"]) == (0, 10)
    assert c.state.image.next_producer_id == 20
    h2 = Harness(**{"producer.id.block.size": 10})
    h2.store = h.store  # a new controller after failover reads the log
    h2.controller = h2.make()
    c2 = await h2.start()
    assert c2.state.epoch == c.state.epoch + 1
    assert (await c2.broker_requests.allocate_producer_ids(broker_id=0))["first"] == 20


async def test_producer_id_block_write_of_unknown_outcome_is_skipped_not_repeated() -> None:
    from kelp.errors import CoordinatorLoadInProgressError

    h = Harness(**{"producer.id.block.size": 10})
    c = await h.start()
    assert (await c.broker_requests.allocate_producer_ids(broker_id=1))["first"] == 0
    # the write lands, then fsync of the directory fails: the outcome is unknown to the controller
    h.store.fail_next_append(OSError(28, "No space left on device"), landed=True)
    with pytest.raises(CoordinatorLoadInProgressError, match="retry"):
        await c.broker_requests.allocate_producer_ids(broker_id=1)
    assert (await c.broker_requests.allocate_producer_ids(broker_id=1))["first"] == 20  # 10..19 are in the log: skipped
    assert c.state.active and c.state.image.next_producer_id == 30
    h.store.fail_next_append(OSError(5, "Input/output error"), landed=False)
    with pytest.raises(CoordinatorLoadInProgressError):
        await c.broker_requests.allocate_producer_ids(broker_id=1)
    # Nothing landed: 30.. handed out once.
    assert (await c.broker_requests.allocate_producer_ids(broker_id=1))["first"] == 30


async def test_reassignment_adds_waits_for_isr_moves_leadership_and_drops_old_replicas() -> None:
    h = Harness(4)
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 1, 2]})
    await c.moves.reassign(topic="t", partition=0, replicas=[3, 1, 2])
    s = h.state("t")
    assert s.adding == (3,) and s.removing == (0,) and set(s.replicas) == {0, 1, 2, 3} and s.leader == 0
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[0, 1, 2, 3])
    done = h.state("t")
    assert done.replicas == (3, 1, 2) and not done.reassigning
    assert done.leader == 3 and done.leader_epoch == s.leader_epoch + 1 and 0 not in done.isr


async def test_preferred_leader_election() -> None:
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 1, 2]})
    del h.alive[0]
    await c._on_liveness(dict(h.alive))
    assert h.state("t").leader == 1
    h.alive[0] = ep(0)
    await c._on_liveness(dict(h.alive))
    s = h.state("t")
    res = await c.moves.elect_preferred_leaders(topic="t")
    assert res["results"]["t-0"] == 80  # 0 is not back in the ISR yet
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=1, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[1, 2, 0])
    res = await c.moves.elect_preferred_leaders(topic="t")
    assert res["results"]["t-0"] == 0 and h.state("t").leader == 0


async def test_a_controller_whose_lease_is_stale_writes_nothing() -> None:
    h = Harness()
    c = await h.start()
    h.fresh = False
    with pytest.raises(NotControllerError):
        await c.topic_admin.create_topic(name="late", partitions=1, replication_factor=1)
    assert h.store.topic("late") is None
