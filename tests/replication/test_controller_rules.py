"""The controller's election and reassignment rules under churn (issue #17 items 4, 7, 8, 9, 13, 15).

Each test drives the controller with an in-memory metadata log and a
hand-driven liveness view: a cancelled reassignment never leaves the leader
outside the replicas, an AlterPartition retry is idempotent, a broker that
restarted within its lease is fenced out of every ISR and may rejoin, the
offsets topic waits for enough brokers, controlled shutdown never elects
uncleanly, and the watch loop completes a reassignment that became possible.
"""

from __future__ import annotations

import asyncio

import pytest

from kelp.broker.cluster.controller import core as controller_module
from kelp.broker.cluster.controller import writer as writer_module
from kelp.errors import (
    CoordinatorNotAvailableError,
    InvalidReplicaAssignmentError,
    InvalidUpdateVersionError,
)
from tests.replication.test_controller import Harness, ep


async def test_cancelling_a_reassignment_whose_leader_was_added_elects_from_the_original_isr() -> None:
    """Item 4: the cancel kept the new leader (an added replica) and dropped it from the replicas; it then
    deleted its own log while the metadata still named it leader."""
    h = Harness(5)
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 1, 2]})
    await c.moves.reassign(topic="t", partition=0, replicas=[3, 4])
    s = h.state("t")
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[0, 1, 2, 3])  # 3 caught up, 4 not yet
    del h.alive[0]
    await c._on_liveness(dict(h.alive))  # the leader dies: 3, an added replica, takes over
    s = h.state("t")
    assert s.reassigning and s.leader == 3
    await c.moves.reassign(topic="t", partition=0, replicas=None)
    reverted = h.state("t")
    assert reverted.replicas == (0, 1, 2) and not reverted.reassigning
    assert reverted.isr == (1, 2) and reverted.leader == 1 and reverted.leader_epoch == s.leader_epoch + 1


async def test_cancelling_is_refused_when_no_original_replica_is_in_sync() -> None:
    h = Harness(3)
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0]})
    await c.moves.reassign(topic="t", partition=0, replicas=[1, 2])
    s = h.state("t")
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[0, 1])  # 1 caught up, 2 not yet
    del h.alive[0]
    await c._on_liveness(dict(h.alive))
    s = h.state("t")
    assert s.reassigning and s.isr == (1,) and s.leader == 1
    with pytest.raises(InvalidReplicaAssignmentError, match="none of the original replicas"):
        await c.moves.reassign(topic="t", partition=0, replicas=None)
    assert h.state("t") == s  # nothing changed


async def test_an_isr_change_retried_after_it_landed_is_answered_not_refused() -> None:
    """Item 7: the leader's first AlterPartition answer was lost; its retry must learn the outcome."""
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 1, 2]})
    s = h.state("t")
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[0, 1])
    offset = c.state.image.offset
    again = await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s.leader_epoch,
                                    partition_epoch=s.partition_epoch, isr=[0, 1])
    assert again["isr"] == [0, 1] and again["partition_epoch"] == s.partition_epoch + 1
    assert c.state.image.offset == offset  # nothing new written
    with pytest.raises(InvalidUpdateVersionError):  # a stale request for another ISR is still refused
        await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s.leader_epoch,
                                partition_epoch=s.partition_epoch, isr=[0, 2])


async def test_a_broker_restarted_within_its_lease_leaves_every_isr_and_may_rejoin() -> None:
    """Item 8: `alive` was overwritten before incarnations were compared, so the restarted broker stayed
    'shutting down' (ISR re-entry refused forever) and was never fenced out of the ISRs it had been in."""
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [1, 0, 2]})
    await c.broker_requests.controlled_shutdown(broker_id=1)  # its SIGTERM ...
    s = h.state("t")
    assert s.leader != 1 and 1 not in s.isr
    await c.topic_admin.create_topic(name="u", assignments={0: [0, 1]})
    h.alive[1] = ep(1, incarnation="second-process")  # ... and it is back before its lease expired
    await c._on_liveness(dict(h.alive))
    assert 1 not in c.state.shutting_down
    u = h.state("u")
    assert 1 not in u.isr  # a bounced broker is fenced out of ISRs it was still in
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=s.leader, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=list(s.isr) + [1])
    assert 1 in h.state("t").isr  # caught up: it rejoins


async def test_a_restarted_leader_loses_leadership_at_a_new_epoch() -> None:
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [1, 0, 2]})
    s = h.state("t")
    h.alive[1] = ep(1, incarnation="after-kill")
    await c._on_liveness(dict(h.alive))
    s2 = h.state("t")
    assert s2.leader != 1 and s2.leader_epoch > s.leader_epoch and 1 not in s2.isr


async def test_the_offsets_topic_waits_for_as_many_brokers_as_its_replication_factor() -> None:
    """Item 9: created with min(wanted, live) replicas when the first FindCoordinator came early, it stayed
    under-replicated for good."""
    h = Harness(1)
    c = await h.start()
    with pytest.raises(CoordinatorNotAvailableError, match="needs 3 live brokers"):
        await c.topic_admin.ensure_internal_topic(name="__consumer_offsets", partitions=3, configs={},
                                                  replication_factor=3)
    assert "__consumer_offsets" not in c.state.topics
    h.alive.update({1: ep(1), 2: ep(2)})
    await c._on_liveness(dict(h.alive))
    made = await c.topic_admin.ensure_internal_topic(name="__consumer_offsets", partitions=3, configs={},
                                                     replication_factor=3)
    assert all(len(p["replicas"]) == 3 for p in made["partitions"])


async def test_controlled_shutdown_never_elects_uncleanly() -> None:
    """Item 13: with unclean election enabled, the shutting-down (in-sync) leader was replaced by an
    out-of-sync replica, losing what only the leader had."""
    h = Harness(**{"unclean.leader.election.enable": True})
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 1]})
    s = h.state("t")
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[0])  # 1 fell behind
    result = await c.broker_requests.controlled_shutdown(broker_id=0)
    assert result["remaining_leaderships"] == ["t-0"]
    assert h.state("t").leader == 0


async def test_the_watch_loop_completes_a_reassignment_that_became_possible(monkeypatch) -> None:
    """Item 15: `periodic()` was never called, so a completion deferred (no eligible leader in the target
    when the last replica caught up) never happened and the operator's drain waited forever."""
    monkeypatch.setattr(controller_module, "PERIODIC_S", 0.0)
    h = Harness(3, **{"controller.liveness.check.interval.ms": 10})
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 1, 2]})
    c.state.shutting_down.update({1, 2})  # both targets are in sync but not eligible to lead right now
    await c.moves.reassign(topic="t", partition=0, replicas=[1, 2])
    assert h.state("t").reassigning  # its completion is deferred: no eligible leader among the targets
    c.state.shutting_down.clear()
    c._task = asyncio.create_task(c._watch())
    for _ in range(200):
        if not h.state("t").reassigning:
            break
        await asyncio.sleep(0.01)
    c._task.cancel()
    done = h.state("t")
    assert not done.reassigning and done.replicas == (1, 2) and done.leader in (1, 2)


async def test_a_failover_of_thousands_of_partitions_is_split_into_entries_that_fit(monkeypatch) -> None:
    """One entry must fit one ConfigMap: a broker that led many partitions dies, and every partition still
    gets its new leader (in several consecutive entries) instead of the whole failover being refused."""
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", partitions=300, replication_factor=3)
    monkeypatch.setattr(writer_module, "MAX_ENTRY_BYTES", 8 * 1024)
    led = [p for p, s in enumerate(c.state.image.topics["t"].partition_states) if s.leader == 1]
    before = c.state.image.offset
    del h.alive[1]
    await c._on_liveness(dict(h.alive))
    assert c.state.image.offset > before + 1  # several entries
    after = h.store.topic("t").partition_states  # replayed from the log
    assert all(s.leader not in (1, -1) and 1 not in s.isr for s in after)
    assert led


async def test_a_restart_while_no_controller_watched_is_still_fenced() -> None:
    """Broker registrations live in the metadata log (KRaft's broker epochs): a broker that restarted during
    a controller failover is recognised by the new controller as a new process, not trusted as in sync."""
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 1, 2]})
    assert {b: r.incarnation for b, r in c.state.image.brokers.items()} == {0: "", 1: "", 2: ""}
    await c.broker_requests.controlled_shutdown(broker_id=2)
    h.alive[1] = ep(1, incarnation="restarted-meanwhile")
    c2 = h.make()
    await c2.start()  # a new controller: it never saw broker 1's old process
    c2._task.cancel()
    s = h.state("t")
    assert 1 not in s.isr and s.leader == 0
    assert c2.state.image.brokers[1].incarnation == "restarted-meanwhile"
    assert 2 in c2.state.shutting_down  # broker 2's controlled shutdown survives the failover too


async def test_a_cancelled_move_restores_the_original_replica_order() -> None:
    """The preferred leader is the first replica: a cancel must give back [3, 1], not the union's [1, 3]."""
    h = Harness(4)
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [3, 1]})
    await c.moves.reassign(topic="t", partition=0, replicas=[0, 1])
    assert h.state("t").replicas == (0, 1, 3)
    await c.moves.reassign(topic="t", partition=0, replicas=None)
    assert h.state("t").replicas == (3, 1) and h.state("t").leader == 3
