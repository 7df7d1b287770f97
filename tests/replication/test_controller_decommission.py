"""Decommissioned brokers (issue 32, item 1): the controller places nothing new on a broker that is leaving.

What the operator's scale-down relies on: once it has marked the brokers that go, no topic created or
grown afterwards — by an application auto-creating topics, a Topic resource — lands on them, no move
adds a replica there, no election hands them leadership another replica could take, and the controller
answers what they still hold. The mark outlives the broker's restart and a controller failover (it is
in the metadata log, and in its snapshots), and recommissioning lifts it.
"""

from __future__ import annotations

import pytest

from kelp.broker.metadata.image import (
    MetadataImage,
    apply_entry,
    broker_record,
    image_from_snapshot,
    snapshot_to_json,
)
from kelp.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError, InvalidRequestError
from tests.replication.test_controller import Harness, ep


def harness(n: int) -> Harness:
    """n live brokers, each with a process identity (an incarnation), as real registrations have."""
    h = Harness(n)
    h.alive = {i: ep(i, incarnation=f"first-{i}") for i in range(n)}
    return h


def holders(h: Harness, broker: int) -> list[str]:
    out = []
    for name in h.controller.state.topics:
        for p, s in enumerate(h.controller.state.topics[name].partition_states):
            if broker in s.replicas:
                out.append(f"{name}-{p}")
    return out


async def test_new_topics_and_partitions_avoid_a_decommissioned_broker() -> None:
    h = harness(5)
    c = await h.start()
    await c.topic_admin.create_topic(name="before", partitions=10, replication_factor=3)
    assert holders(h, 4), "an ordinary topic spreads over every broker"
    answer = await c.decommissions.decommission_broker(broker_id=4)
    assert answer["decommissioned"] and answer["alive"] and answer["replicas"] == len(holders(h, 4)) > 0
    held = set(holders(h, 4))
    # Topics auto-created or declared while the drain runs, and partitions added to any topic.
    await c.topic_admin.create_topic(name="during", partitions=20, replication_factor=3)
    await c.topic_admin.create_partitions(name="before", total=30)
    await c.topic_admin.ensure_internal_topic(name="__consumer_offsets", partitions=10, configs={},
                                              replication_factor=3)
    assert set(holders(h, 4)) == held, "nothing new may land on broker 4 (so it leads nothing new either)"
    assert len(c.state.topics["during"].partition_states) == 20 and len(c.state.topics["before"].partition_states) == 30
    # Manual placement and moves onto it are refused, naming it.
    with pytest.raises(InvalidReplicaAssignmentError, match=r"broker\(s\) \[4\] are decommissioned"):
        await c.topic_admin.create_topic(name="manual", assignments={0: [4, 0, 1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="decommissioned"):
        await c.topic_admin.create_partitions(name="during", total=21, assignments=[[0, 4, 1]])
    with pytest.raises(InvalidReplicaAssignmentError, match="decommissioned"):
        await c.moves.reassign(topic="during", partition=0, replicas=[4, 1, 2])
    # Three brokers are left to take RF 4: the refusal says why.
    await c.decommissions.decommission_broker(broker_id=3)
    with pytest.raises(InvalidReplicationFactorError, match=r"\[3, 4\] are decommissioned"):
        await c.topic_admin.create_topic(name="wide", partitions=1, replication_factor=4)


async def test_the_drain_empties_a_decommissioned_broker_and_the_answer_says_so() -> None:
    h = harness(4)
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [3, 0, 1], 1: [0, 3, 2]})
    await c.decommissions.decommission_broker(broker_id=3)
    # Moves that keep a decommissioned replica where it is are allowed (another replica moves).
    await c.moves.reassign(topic="t", partition=0, replicas=[3, 0, 2])
    s = h.state("t", 0)
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=3, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=list(s.replicas))
    for p, target in ((0, [1, 0, 2]), (1, [0, 1, 2])):
        await c.moves.reassign(topic="t", partition=p, replicas=target)
        s = h.state("t", p)
        await c.broker_requests.alter_partition(topic="t", partition=p, leader=s.leader, leader_epoch=s.leader_epoch,
                                partition_epoch=s.partition_epoch, isr=list(s.replicas))
    answer = await c.decommissions.broker_holdings(broker_id=3)
    assert answer == {"broker_id": 3, "decommissioned": True, "registered": True, "alive": True, "replicas": 0,
                      "leaders": 0, "partitions": [], "metadata_offset": c.state.image.offset}


async def test_a_decommissioned_broker_leads_only_when_no_other_replica_can() -> None:
    h = harness(3)
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 2, 1], 1: [0, 2, 1]})
    s = h.state("t", 1)
    await c.broker_requests.alter_partition(topic="t", partition=1, leader=0, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[0, 2])  # broker 1 fell behind on t-1
    await c.decommissions.decommission_broker(broker_id=2)
    del h.alive[0]
    await c._on_liveness(dict(h.alive))
    assert h.state("t", 0).leader == 1, "broker 2 comes first in the replica list, but it is leaving"
    assert h.state("t", 1).leader == 2, "its only other in-sync replica: better than offline"
    h.alive[0] = ep(0, incarnation="second-0")
    await c._on_liveness(dict(h.alive))
    s = h.state("t", 0)
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=1, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[1, 0, 2])
    await c.moves.elect_preferred_leaders()
    assert h.state("t", 0).leader == 0


async def test_the_mark_survives_a_restart_a_failover_and_a_snapshot_and_recommissioning_lifts_it() -> None:
    h = harness(3)
    c = await h.start()
    await c.decommissions.decommission_broker(broker_id=2)
    # Broker 2 restarts: a new process registers, the mark stays.
    h.alive[2] = ep(2, incarnation="second")  # the first was "first-2"
    await c._on_liveness(dict(h.alive))
    assert c.state.image.brokers[2].incarnation == "second" and c.state.image.brokers[2].decommissioned
    # A new controller incarnation replays the log.
    await c.stop()
    h.controller = h.make()
    c = await h.start()
    assert (await c.decommissions.broker_holdings(broker_id=2))["decommissioned"]
    created = await c.topic_admin.create_topic(name="t", partitions=6, replication_factor=2)
    assert all(2 not in p["replicas"] for p in created["partitions"])
    # A snapshot keeps it; an image without the field in its broker records (older snapshots) has none.
    image = image_from_snapshot(snapshot_to_json(c.state.image))
    assert image.brokers[2].decommissioned and not image.brokers[0].decommissioned
    # Recommissioned: it takes replicas again.
    answer = await c.decommissions.decommission_broker(broker_id=2, decommissioned=False)
    assert not answer["decommissioned"]
    created = await c.topic_admin.create_topic(name="u", partitions=6, replication_factor=2)
    assert any(2 in p["replicas"] for p in created["partitions"])


async def test_an_id_not_registered_yet_may_be_decommissioned_and_bad_ids_are_refused() -> None:
    h = harness(3)
    c = await h.start()
    answer = await c.decommissions.decommission_broker(broker_id=7)
    assert answer["decommissioned"] and not answer["registered"] and not answer["alive"]
    h.alive[7] = ep(7, incarnation="first")  # its process registers in between
    await c._on_liveness(dict(h.alive))
    assert c.state.image.brokers[7].decommissioned
    created = await c.topic_admin.create_topic(name="t", partitions=8, replication_factor=3)
    assert all(7 not in p["replicas"] for p in created["partitions"])
    for bad in (-1, "2", True, 1.5):
        with pytest.raises(InvalidRequestError, match="broker id"):
            await c.decommissions.decommission_broker(broker_id=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="true or false"):
        await c.decommissions.decommission_broker(broker_id=1, decommissioned="yes")  # type: ignore[arg-type]


def test_a_registration_record_keeps_the_mark_and_only_an_explicit_one_changes_it() -> None:
    image = MetadataImage()
    entries = [[broker_record(1, "a")], [broker_record(1, "a", decommissioned=True)], [broker_record(1, "b")],
               [broker_record(1, "b", shutting_down=True)], [broker_record(1, "b", decommissioned=False)]]
    seen = []
    for offset, records in enumerate(entries):
        image, _ = apply_entry(image, {"offset": offset, "epoch": 0, "records": records})
        seen.append(image.brokers[1].decommissioned)
    assert seen == [False, True, True, True, False]
    assert "decommissioned" not in broker_record(1, "a"), "registrations carry no mark: older readers see none"
