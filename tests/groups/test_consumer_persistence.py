"""A KIP-848 group survives a coordinator move (issue 36): its state is written to `__consumer_offsets` as Kafka's
records before it is applied, and a coordinator that loads the partition replays it — members keep their epochs
and assignments mid-reconciliation, members that left stay gone, and reconciliation finishes on the new
coordinator without a partition held twice. A write that fails, or outlives its leadership term, changes
nothing."""

from __future__ import annotations

import asyncio
import copy

from kelp.broker.groups.consumer import records
from kelp.broker.groups.consumer.model import MemberState
from kelp.broker.groups.group import CommittedOffset
from kelp.errors import ErrorCode

from .harness import MemoryStore, settle
from .test_consumer_reconciliation import Client, G, all_t, make, no_partition_twice


def state(coord) -> tuple:
    g = coord.consumer.groups[G]
    return g.group_epoch, g.assignment_epoch, g.members, g.target, g.owners, g.static_members, g.subscribed_topics


async def test_a_group_mid_reconciliation_survives_a_coordinator_move() -> None:
    store = MemoryStore()
    old, _ = make(store)
    a, b, c = Client(old, "A", instance_id="ia"), Client(old, "B"), Client(old, "C")
    for cl in (a, b, c):
        await cl.beat()
    await c.beat(epoch=-1)  # C leaves: its records are tombstoned
    await a.beat()  # A must now revoke (B waits for A's partitions)
    assert old.consumer.groups[G].members["A"].state is MemberState.UNREVOKED_PARTITIONS
    before = copy.deepcopy(state(old))
    kinds = {records.record_key_of(k)[0] for k, _ in store.partitions[old.partition_for(G)]  # type: ignore[index]
             if records.record_key_of(k) is not None}
    assert kinds == set(records.CONSUMER_RECORD_TYPES), kinds
    new, _ = make(store)  # the partition's next leader replays it
    assert state(new) == before
    assert "C" not in new.consumer.groups[G].members
    for cl in (a, b):
        cl.coord = new
    r = await b.beat()
    assert r.error == ErrorCode.NONE and b.partitions() == set()
    no_partition_twice(a, b)
    await a.beat()  # acknowledges the revocation on the new coordinator
    await b.beat()
    assert a.epoch == b.epoch == new.consumer.groups[G].assignment_epoch
    assert a.partitions() | b.partitions() == all_t() and len(a.partitions()) == 3
    no_partition_twice(a, b)
    late = await c.beat(epoch=c.epoch)
    assert late.error == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_failed_write_changes_nothing() -> None:
    store = MemoryStore()
    coord, _ = make(store)
    a, b = Client(coord, "A"), Client(coord, "B")
    await a.beat()
    before = copy.deepcopy(state(coord))
    store.fail = True
    r = await b.beat()
    assert r.error not in (ErrorCode.NONE,) and b.epoch == 0
    assert state(coord) == before and "B" not in coord.consumer.groups[G].members
    r = await a.beat(epoch=-1)
    assert r.error != ErrorCode.NONE and state(coord) == before
    store.fail = False
    assert (await b.beat()).error == ErrorCode.NONE


async def test_a_write_that_outlives_its_leadership_is_not_applied() -> None:
    store = MemoryStore()
    coord, _ = make(store)
    a = Client(coord, "A")
    store.gate = asyncio.Event()
    joining = asyncio.ensure_future(a.beat())
    await settle()
    partition = coord.partition_for(G)
    coord.on_resign(partition, 1)  # the partition moves while the join is being written
    store.gate.set()
    r = await joining
    assert r.error == ErrorCode.NOT_COORDINATOR
    assert G not in coord.consumer.groups


async def test_delete_a_consumer_group_only_when_empty_and_it_stays_deleted_after_replay() -> None:
    store = MemoryStore()
    coord, _ = make(store)
    a = Client(coord, "A")
    await a.beat()
    offsets = {("t", 0): CommittedOffset(7, -1, "", -1)}
    assert await coord.commit_offsets(G, member_id="A", generation=a.epoch, offsets=offsets) == {("t", 0): 0}
    assert await coord.delete_groups([G]) == {G: ErrorCode.NON_EMPTY_GROUP}
    await a.beat(epoch=-1)
    assert await coord.delete_groups([G]) == {G: ErrorCode.NONE}
    assert G not in coord.consumer.groups and coord.fetch_offsets(G, [("t", 0)])[1] == {("t", 0): None}
    again, _ = make(store)
    assert G not in again.consumer.groups and again.fetch_offsets(G, [("t", 0)])[1] == {("t", 0): None}
    assert await again.delete_groups([G]) == {G: ErrorCode.GROUP_ID_NOT_FOUND}


async def test_offsets_of_a_consumer_group_with_members_do_not_expire() -> None:
    coord, sched = make(offsets_retention_ms=1000)
    a = Client(coord, "A")
    await a.beat()
    offsets = {("t", 0): CommittedOffset(7, -1, "", -1)}
    await coord.commit_offsets(G, member_id="A", generation=a.epoch, offsets=offsets)
    sched.now_ms += 5000  # past the retention; A is still a member (its session is 10 s)
    assert await coord.expiry.expire_offsets() == 0
    await a.beat(epoch=-1)
    assert await coord.expiry.expire_offsets() == 1  # an empty consumer group's offsets expire as Kafka's do
