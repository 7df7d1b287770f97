"""KIP-848 mixed groups, the edges Kafka 4's GroupMetadataManager closes and the first cut of the migration left
open (issue 36, second pass), each attacked with the adversary's request or interleaving: a request of one
protocol naming a member of the other, a classic static member replacing the last consumer-protocol member, an
OffsetDelete of a topic a consumer (or mixed) group's members subscribe to, and a coordinator move in the middle
of the upgrade's write. Time is the harness's manual clock: no sleeps."""

from __future__ import annotations

import asyncio

import pytest

from kelp.broker.groups.group import CommittedOffset, GroupState, JoinResult
from kelp.broker.groups.group_coordinator import GroupCoordinator
from kelp.errors import ErrorCode

from .harness import ManualScheduler, MemoryStore, settle
from .test_consumer_migration import Classic, classic_group, mixed_group, owners_disjoint
from .test_consumer_reconciliation import Client, G, T, make


# -- OffsetDelete: GROUP_SUBSCRIBED_TO_TOPIC ------------------------------------------------------------------
async def test_offset_delete_refuses_a_topic_a_mixed_groups_members_subscribe_to() -> None:
    coord, sched = make()
    a, b = await classic_group(coord, sched)
    offsets = {("t", 0): CommittedOffset(5), ("u", 0): CommittedOffset(6)}
    assert set((await coord.commit_offsets(G, member_id=a.member_id, generation=a.generation,
                                           offsets=offsets)).values()) == {ErrorCode.NONE}
    # The classic group already refuses its members' topic.
    refused = {("t", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC}
    assert await coord.delete_offsets(G, [("t", 0)]) == (ErrorCode.NONE, refused)
    assert (await Client(coord, "C").beat()).error == ErrorCode.NONE  # now a mixed group
    err, per = await coord.delete_offsets(G, [("t", 0), ("u", 0)])
    assert (err, per) == (ErrorCode.NONE, {("t", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): ErrorCode.NONE})
    assert set(coord.fetch_offsets(G, None)[1]) == {("t", 0)}  # u-0's offset went, t-0's stayed


async def test_offset_delete_refuses_a_topic_a_consumer_group_subscribes_to_by_name_or_regex() -> None:
    coord, _ = make()
    c, d = Client(coord, "C"), Client(coord, "D", topics=())
    assert (await c.beat()).error == ErrorCode.NONE
    assert (await d.beat(subscribed_topic_regex="u|v")).error == ErrorCode.NONE
    # A consumer group without committed offsets answers per partition, as Kafka (not GROUP_ID_NOT_FOUND).
    err, per = await coord.delete_offsets(G, [("t", 1), ("u", 1), ("w", 0)])
    assert (err, per) == (ErrorCode.NONE, {("t", 1): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                                           ("u", 1): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("w", 0): ErrorCode.NONE})
    for _ in range(3):
        await c.beat()
    assert c.partitions()
    t, p = sorted(c.partitions())[0]
    r = await coord.commit_offsets(G, member_id="C", generation=c.epoch, offsets={("t", p): CommittedOffset(3)})
    assert r == {("t", p): ErrorCode.NONE}
    err, per = await coord.delete_offsets(G, [("t", p)])
    assert (err, per) == (ErrorCode.NONE, {("t", p): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC})
    assert coord.fetch_offsets(G, [("t", p)])[1][("t", p)] is not None


# -- a request of one protocol naming a member of the other ----------------------------------------------------
async def test_a_consumer_heartbeat_naming_a_classic_member_is_fenced_unless_at_its_epoch() -> None:
    store = MemoryStore()
    coord, sched, a, b, c = await mixed_group(store)
    group = coord.consumer.groups[G]
    before, appends = group.members[a.member_id], store.appends
    assert before.classic is not None and before.member_epoch > 0
    adversary = Client(coord, a.member_id)  # a consumer-protocol client that names A's member id
    for epoch in (0, before.member_epoch + 3, before.member_epoch - 1):
        r = await adversary.beat(epoch=epoch, full=True)
        assert r.error == ErrorCode.FENCED_MEMBER_EPOCH, epoch  # Kafka's throwIfConsumerGroupMemberEpochIsInvalid
    assert group.members[a.member_id] == before and store.appends == appends, "nothing written, nothing applied"
    assert a.beat() == ErrorCode.REBALANCE_IN_PROGRESS  # A goes on as a classic member
    await a.rejoin()
    assert coord.consumer.groups[G].members[a.member_id].classic is not None


async def test_a_consumer_heartbeat_at_a_classic_members_epoch_switches_it_to_the_consumer_protocol() -> None:
    """Kafka's consumerGroupHeartbeat clears the member's ClassicMemberMetadata: from then on it is a consumer-
    protocol member (its classic requests are UNKNOWN_MEMBER_ID, its classic join deadline no longer fences it),
    and the switch is written (a replayed coordinator sees it)."""
    store = MemoryStore()
    coord, sched, a, b, c = await mixed_group(store)
    assert a.beat() == ErrorCode.REBALANCE_IN_PROGRESS  # A must rejoin within its rebalance timeout (20 s)
    switched = Client(coord, a.member_id)
    switched.epoch = a.generation
    switched.owned = {T: frozenset(p for _, p in a.owned)}
    assert (await switched.beat(full=True)).error == ErrorCode.NONE
    group = coord.consumer.groups[G]
    assert group.members[a.member_id].classic is None
    assert a.beat() == ErrorCode.UNKNOWN_MEMBER_ID  # Kafka's throwIfMemberDoesNotUseClassicProtocol
    assert (await coord.sync_group(G, a.generation, a.member_id)).error == ErrorCode.UNKNOWN_MEMBER_ID
    for _ in range(5):  # past A's classic join deadline (20 s): it heartbeats as a consumer member now
        for cl in (switched, c):
            assert (await cl.beat()).error == ErrorCode.NONE
        if b.beat() == ErrorCode.REBALANCE_IN_PROGRESS:
            await b.rejoin()
        await sched.advance(4000)
    assert a.member_id in group.members
    owners_disjoint(coord, b, c, switched)
    replayed, _ = make(store)
    assert replayed.consumer.groups[G].members[a.member_id].classic is None


async def test_a_consumer_static_member_replaces_a_classic_member_of_its_instance_id() -> None:
    """Kafka's getOrMaybeSubscribeStaticConsumerGroupMember: the unreleased-instance check is between two
    consumer-protocol members only; a classic holder of the instance id is replaced, its partitions kept."""
    coord, sched, a, b, c = await mixed_group()
    r = await coord.join_group(G, "", group_instance_id="i1", session_timeout_ms=10000, rebalance_timeout_ms=20000,
                               protocol_type="consumer", protocols=[("range", a.metadata())])
    assert r.error == ErrorCode.NONE
    group = coord.consumer.groups[G]
    held = group.members[r.member_id].held()
    s = Client(coord, "S", instance_id="i1")
    assert (await s.beat()).error == ErrorCode.NONE
    assert group.static_members["i1"] == "S" and r.member_id not in group.members
    assert group.members["S"].classic is None and group.members["S"].held() == held
    assert coord.heartbeat(G, r.generation, r.member_id, group_instance_id="i1") == ErrorCode.FENCED_INSTANCE_ID


# -- downgrade when a classic static member replaces the last consumer-protocol member ----------------------------
async def static_mixed_group(store: MemoryStore) -> tuple[GroupCoordinator, ManualScheduler, Classic, Classic, Client]:
    """`classic_group` upgraded by the static consumer-protocol member C (instance id i1)."""
    coord, sched = make(store)
    a, b = await classic_group(coord, sched)
    c = Client(coord, "C", instance_id="i1")
    assert (await c.beat()).error == ErrorCode.NONE
    return coord, sched, a, b, c


async def static_classic_join(coord: GroupCoordinator, a: Classic) -> JoinResult:
    return await coord.join_group(G, "", group_instance_id="i1", session_timeout_ms=10000, rebalance_timeout_ms=20000,
                                  protocol_type="consumer", protocols=[("range", a.metadata())])


async def test_a_classic_static_member_replacing_the_last_consumer_member_downgrades_the_group_at_once() -> None:
    store = MemoryStore()
    coord, sched, a, b, c = await static_mixed_group(store)
    await coord.commit_offsets(G, member_id=a.member_id, generation=a.generation,
                               offsets={("t", 0): CommittedOffset(4)}, api_version=8)
    r = await static_classic_join(coord, a)
    assert r.error == ErrorCode.NONE
    assert G not in coord.consumer.groups, "downgraded at the replacement, not at the next leave"
    classic = coord.groups[G]
    assert set(classic.members) == {a.member_id, b.member_id, r.member_id}
    assert classic.is_(GroupState.STABLE) and classic.static_members == {"i1": r.member_id}
    assert classic.offsets[("t", 0)].offset == 4
    sync = await coord.sync_group(G, r.generation, r.member_id, group_instance_id="i1", protocol_type="consumer")
    assert sync.error in (ErrorCode.NONE, ErrorCode.ILLEGAL_GENERATION)  # either way the client goes on classic
    assert (await c.beat()).error == ErrorCode.GROUP_ID_NOT_FOUND  # the replaced member's group is classic now
    replayed, _ = make(store)
    assert G not in replayed.consumer.groups  # the classic group's (its members rejoin, `partition_loader`)
    assert replayed.groups[G].protocol_name == "range" and replayed.groups[G].offsets[("t", 0)].offset == 4


async def test_a_failed_downgrade_write_leaves_the_replacement_in_the_consumer_group() -> None:
    store = FailingStore()
    coord, sched, a, b, c = await static_mixed_group(store)
    store.fail_from = store.appends + 2  # the replacement is written, the downgrade's append fails
    r = await static_classic_join(coord, a)
    assert r.error == ErrorCode.NONE
    group = coord.consumer.groups[G]
    assert set(group.members) == {a.member_id, b.member_id, r.member_id} and "C" not in group.members
    assert not coord.groups[G].members, "never both: no classic member outside the consumer group"
    replayed, _ = make(store)
    assert set(replayed.consumer.groups[G].members) == {a.member_id, b.member_id, r.member_id}
    store.fail_from = None
    top, per = await coord.leave_group(G, [(b.member_id, None)])  # the next change tries again
    assert top == ErrorCode.NONE
    assert G in coord.consumer.groups or set(coord.groups[G].members) == {a.member_id, r.member_id}


# -- a coordinator move in the middle of the upgrade's write --------------------------------------------------
@pytest.mark.parametrize("written", [True, False])
async def test_a_partition_moving_during_the_upgrades_write_leaves_one_group_with_its_offsets(written: bool) -> None:
    """The partition moves while the upgrade is being written; the write then lands (`written`) or fails. The
    old coordinator answers NOT_COORDINATOR and keeps nothing; the new one replays exactly one group, classic or
    consumer, with the members and the committed offsets."""
    store = MemoryStore()
    coord, a, b, beat = await upgrade_in_flight(store, ("t", 1), 11)
    coord.on_resign(coord.partition_for(G), 1)
    store.fail = not written
    store.gate.set()
    assert (await asyncio.wait_for(beat, 5)).error in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert G not in coord.consumer.groups and G not in coord.mixed.converting
    assert a.beat() == ErrorCode.NOT_COORDINATOR
    store.fail, store.gate = False, None
    moved, _ = make(store)
    consumer = moved.consumer.groups.get(G)
    classic = moved.groups.get(G)
    if written:
        assert consumer is not None and set(consumer.members) == {a.member_id, b.member_id}
        assert classic is None or not classic.members
    else:  # the classic group at its generation (Kelp restores no classic member: they rejoin, `partition_loader`)
        assert consumer is None and classic is not None and classic.generation == a.generation
        assert classic.protocol_name == "range"
    assert moved.fetch_offsets(G, [("t", 1)])[1][("t", 1)].offset == 11  # type: ignore[union-attr]


async def upgrade_in_flight(store: MemoryStore, tp: tuple[str, int],
                            offset: int) -> tuple[GroupCoordinator, Classic, Classic, asyncio.Future]:
    """A Stable classic group with `offset` committed for `tp`, whose upgrade (C's first heartbeat, the returned
    future) is being written: `store.gate` holds the append."""
    coord, sched = make(store)
    a, b = await classic_group(coord, sched)
    await coord.commit_offsets(G, member_id=a.member_id, generation=a.generation, offsets={tp: CommittedOffset(offset)})
    store.gate = asyncio.Event()
    beat = asyncio.ensure_future(Client(coord, "C").beat())
    await settle()
    assert G in coord.mixed.converting
    return coord, a, b, beat


class FailingStore(MemoryStore):
    """Appends from the `fail_from`-th on fail (a disk that fills up between two writes)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_from: int | None = None

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        if self.fail_from is not None and self.appends + 1 >= self.fail_from:
            raise OSError("disk full")
        await super().append(partition, records)


async def test_a_classic_join_naming_a_consumer_member_switches_it_to_the_classic_protocol() -> None:
    """Kafka's classicGroupJoinToConsumerGroup takes a known member whatever its protocol (its SyncGroup, Heartbeat
    and LeaveGroup check it: UNKNOWN_MEMBER_ID for a consumer-protocol member); the switch is written."""
    store = MemoryStore()
    coord, sched, a, b, c = await mixed_group(store)
    assert coord.heartbeat(G, c.epoch, "C") == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await coord.sync_group(G, c.epoch, "C")).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await coord.leave_group(G, [("C", None)]))[1][0][2] == ErrorCode.UNKNOWN_MEMBER_ID
    switched = Classic(coord)
    switched.member_id = "C"
    assert await switched.joined(switched.join()) == ErrorCode.NONE and switched.member_id == "C"
    assert coord.consumer.groups[G].members["C"].classic is not None
    assert switched.beat() in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
    assert (await switched.sync()) in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
    owners_disjoint(coord, a, b, switched)
    replayed, _ = make(store)
    assert replayed.consumer.groups[G].members["C"].classic is not None


class ReplicatingStore(MemoryStore):
    """An append lands in the local log at once, then waits for `gate` (its replication), as the broker's."""

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        gate, self.gate = self.gate, None
        try:
            await super().append(partition, records)
        finally:
            self.gate = gate
        if gate is not None:
            await gate.wait()


async def test_the_partition_moving_away_and_back_during_the_upgrades_write_serves_the_group_from_its_log() -> None:
    """The upgrade's records are in the log, being replicated, when the partition moves away and comes back to
    this broker: the old write answers NOT_COORDINATOR and changes nothing; the reload serves what the log says,
    one consumer group with the classic members, the offsets kept, no classic member anywhere."""
    store = ReplicatingStore()
    coord, a, b, beat = await upgrade_in_flight(store, ("t", 2), 22)
    p = coord.partition_for(G)
    coord.on_resign(p, 1)
    await asyncio.wait_for(coord.on_become_leader(p, 2), 5)
    assert store.gate is not None
    store.gate.set()
    assert (await asyncio.wait_for(beat, 5)).error == ErrorCode.NOT_COORDINATOR
    group = coord.consumer.groups[G]
    assert set(group.members) == {a.member_id, b.member_id}
    assert not coord.groups[G].members
    assert coord.fetch_offsets(G, [("t", 2)])[1][("t", 2)].offset == 22  # type: ignore[union-attr]
    assert a.beat() == ErrorCode.NONE  # A goes on, a classic member of the consumer group, at its generation
    c = Client(coord, "C")  # C's heartbeat is retried at the coordinator: it joins the consumer group
    assert (await c.beat()).error == ErrorCode.NONE
    for cl in (a, b):
        while cl.beat() == ErrorCode.REBALANCE_IN_PROGRESS:
            await cl.rejoin()
            await c.beat()
            owners_disjoint(coord, a, b, c)
