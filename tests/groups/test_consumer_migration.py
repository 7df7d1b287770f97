"""KIP-848 mixed groups and online migration (issue 36): a classic group upgrades to a consumer group on the first
consumer-protocol heartbeat and its classic members go on inside it (JoinGroup/SyncGroup/Heartbeat/LeaveGroup
answered from the consumer group's target assignment); a partition never has two owners while it moves between
a classic and a consumer member; the mixed group survives a coordinator restart with its classic members; the
group goes back to classic when the last consumer-protocol member leaves; `group.consumer.migration.policy`
gates both conversions as Kafka's. Attacked with the adversary's interleavings: a classic JoinGroup racing the
upgrade's write, a classic member that keeps heartbeating instead of rejoining, a restart mid-migration. Time is
the harness's manual clock: no sleeps."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from kelp.broker.groups.consumer.model import MemberState
from kelp.broker.groups.group import CommittedOffset, GroupState
from kelp.broker.groups.group_coordinator import GroupCoordinator
from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError, ErrorCode

from .harness import ManualScheduler, MemoryStore, settle
from .test_consumer_reconciliation import Client, G, T, make

DELAY = 2 * 3000  # the default group.initial.rebalance.delay.ms, extended once by a second member


def names(assignment: bytes) -> set[tuple[str, int]]:
    a = ConsumerProtocolAssignment.decode(assignment)
    return {(t, p) for t, ps in a.assigned_partitions or [] for p in ps}


class Classic:
    """A classic consumer as the Java client's cooperative-sticky (or, `eager`, range) protocol behaves: it
    joins with what it owns, syncs, heartbeats, and rejoins when told to."""

    def __init__(self, coord: GroupCoordinator, *, eager: bool = False, protocol: str = "range") -> None:
        self.coord, self.eager, self.protocol = coord, eager, protocol
        self.member_id = ""
        self.generation = -1
        self.owned: set[tuple[str, int]] = set()

    def metadata(self) -> bytes:
        owned = {} if self.eager else {t: sorted(p for tt, p in self.owned if tt == t) for t, _ in self.owned}
        TP = ConsumerProtocolSubscription.TopicPartition
        return bytes(ConsumerProtocolSubscription(version=1, topics=["t"], user_data=None, owned_partitions=[
            TP(topic=t, partitions=ps) for t, ps in sorted(owned.items())]).encode())

    def join(self) -> asyncio.Future:
        return asyncio.ensure_future(self.coord.join_group(
            G, self.member_id, session_timeout_ms=10000, rebalance_timeout_ms=20000, protocol_type="consumer",
            protocols=[(self.protocol, self.metadata())]))

    async def joined(self, fut: asyncio.Future) -> int:
        r = await asyncio.wait_for(fut, 5)
        if r.error == ErrorCode.NONE:
            self.member_id, self.generation = r.member_id, r.generation
        return int(r.error)

    async def sync(self, assignments: dict[str, bytes] | None = None) -> int:
        r = await asyncio.wait_for(self.coord.sync_group(G, self.generation, self.member_id, protocol_type="consumer",
                                                         assignments=assignments), 5)
        if r.error == ErrorCode.NONE:
            self.owned = names(r.assignment)
        return int(r.error)

    def beat(self) -> int:
        return self.coord.heartbeat(G, self.generation, self.member_id)

    async def rejoin(self) -> None:
        """Rejoin and sync (what the client does after REBALANCE_IN_PROGRESS)."""
        if self.eager:
            self.owned = set()
        assert await self.joined(self.join()) == ErrorCode.NONE
        assert await self.sync() == ErrorCode.NONE


def assignment(*parts: int) -> bytes:
    TP = ConsumerProtocolAssignment.TopicPartition
    return bytes(ConsumerProtocolAssignment(version=1, user_data=None, assigned_partitions=[
        TP(topic="t", partitions=list(parts))]).encode())


async def classic_group(coord: GroupCoordinator, sched: ManualScheduler, **kw: object) -> tuple[Classic, Classic]:
    """A Stable classic group: A holds t-0..2, B t-3..5, at generation 1."""
    a, b = Classic(coord, **kw), Classic(coord, **kw)  # type: ignore[arg-type]
    fa, fb = a.join(), b.join()
    await sched.advance(DELAY + 1)
    assert (await a.joined(fa), await b.joined(fb)) == (ErrorCode.NONE, ErrorCode.NONE)
    leader = coord.groups[G].leader_id
    first, second = (a, b) if a.member_id == leader else (b, a)
    other = asyncio.ensure_future(second.sync())
    await settle()
    assert await first.sync({first.member_id: assignment(0, 1, 2), second.member_id: assignment(3, 4, 5)}) == 0
    assert await asyncio.wait_for(other, 5) == ErrorCode.NONE
    assert coord.groups[G].is_(GroupState.STABLE)
    return first, second


async def mixed_group(store: MemoryStore | None = None, **config: object,
                      ) -> tuple[GroupCoordinator, ManualScheduler, Classic, Classic, Client]:
    """`classic_group` upgraded by a consumer-protocol member C's first heartbeat."""
    eager = bool(config.pop("eager", False))
    coord, sched = make(store, **config)
    a, b = await classic_group(coord, sched, eager=eager)
    c = Client(coord, "C")
    assert (await c.beat()).error == ErrorCode.NONE
    return coord, sched, a, b, c


def owners_disjoint(coord: GroupCoordinator, *clients: Classic | Client) -> None:
    """No partition is believed owned by two clients, nor held by two members in the coordinator."""
    seen: dict[tuple[str, int], str] = {}
    for c in clients:
        mine = {("t", p) for _, p in c.partitions()} if isinstance(c, Client) else c.owned
        for tp in mine:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id
    group = coord.consumer.groups.get(G)
    held: dict[tuple[str, int], str] = {}
    for m in group.members.values() if group else []:
        for tp in m.held():
            assert tp not in held, f"{tp} held by {held[tp]} and {m.member_id}"
            held[tp] = m.member_id


# -- policy ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["disabled", "UPGRADE", "downgrade", "Bidirectional"])
def test_migration_policy_accepts_kafkas_four_values_and_defaults_to_bidirectional(value: str) -> None:
    cfg = BrokerConfig.load(env={}, overrides={"group.consumer.migration.policy": value})
    assert cfg["group.consumer.migration.policy"] == value.lower()
    assert BrokerConfig.load(env={})["group.consumer.migration.policy"] == "bidirectional"
    with pytest.raises(ConfigError, match="expected one of disabled, upgrade, downgrade, bidirectional"):
        BrokerConfig.load(env={}, overrides={"group.consumer.migration.policy": "sometimes"})


# -- upgrade -----------------------------------------------------------------------------------------------------
async def test_a_consumer_heartbeat_upgrades_a_classic_group_keeping_members_assignments_and_offsets() -> None:
    store = MemoryStore()
    coord, sched = make(store)
    a, b = await classic_group(coord, sched)
    await coord.commit_offsets(G, member_id=a.member_id, generation=a.generation,
                               offsets={("t", 0): CommittedOffset(42)})
    c = Client(coord, "C")
    r = await c.beat()
    assert r.error == ErrorCode.NONE
    group = coord.consumer.groups[G]
    assert set(group.members) == {a.member_id, b.member_id, "C"}
    for cl, parts in ((a, {0, 1, 2}), (b, {3, 4, 5})):
        m = group.members[cl.member_id]
        assert m.classic is not None and m.classic.session_timeout_ms == 10000
        assert m.subscribed_topic_names == ("t",) and m.member_epoch == 1
        assert m.held() == {(T, p) for p in parts}  # still theirs until they rejoin without them
    assert c.partitions() == set() and group.members["C"].state is MemberState.UNRELEASED_PARTITIONS
    assert not coord.groups[G].members and coord.groups[G].offsets[("t", 0)].offset == 42
    owners_disjoint(coord, a, b, c)
    # The classic group's metadata is tombstoned and the members are written with ClassicMemberMetadata: a
    # coordinator replaying the partition serves the same mixed group.
    replayed, _ = make(store)
    again = replayed.consumer.groups[G]
    assert again.members[a.member_id].classic == group.members[a.member_id].classic
    assert {mid: m.held() for mid, m in again.members.items()} == {mid: m.held() for mid, m in group.members.items()}
    assert not replayed.groups[G].members and replayed.groups[G].offsets[("t", 0)].offset == 42


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
async def test_without_upgrade_in_the_policy_a_heartbeat_on_a_classic_group_is_group_id_not_found(
        policy: str) -> None:
    coord, sched = make(consumer_migration_policy=policy)
    a, _ = await classic_group(coord, sched)
    r = await Client(coord, "C").beat()
    assert (r.error, r.message) == (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {G} is not a consumer group.")
    assert G not in coord.consumer.groups and a.beat() == ErrorCode.NONE


@pytest.mark.parametrize("protocol_type, metadata, why", [
    ("connect", b"x", "not a consumer group"),  # Kafka Connect's group: not the consumer protocol
    ("consumer", b"\x00", "malformed"),  # a subscription that does not decode
])
async def test_a_classic_group_that_cannot_be_upgraded_is_left_alone(protocol_type: str, metadata: bytes,
                                                                     why: str) -> None:
    coord, sched = make()
    fut = asyncio.ensure_future(coord.join_group(G, "", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                                 protocol_type=protocol_type, protocols=[("range", metadata)]))
    await sched.advance(DELAY + 1)
    member = (await asyncio.wait_for(fut, 5)).member_id
    r = await Client(coord, "C").beat()
    assert r.error == ErrorCode.GROUP_ID_NOT_FOUND and why in (r.message or "")
    assert G not in coord.consumer.groups and list(coord.groups[G].members) == [member]
    assert coord.heartbeat(G, coord.groups[G].generation, member) == ErrorCode.NONE


async def test_a_classic_join_racing_the_upgrades_write_lands_in_the_consumer_group() -> None:
    store = MemoryStore()
    coord, sched = make(store)
    a, b = await classic_group(coord, sched)
    store.gate = asyncio.Event()  # the upgrade's records are being replicated
    beat = asyncio.ensure_future(Client(coord, "C").beat())
    await settle()
    assert G in coord.mixed.converting
    assert a.beat() == ErrorCode.REBALANCE_IN_PROGRESS  # frozen: told to rejoin
    join = a.join()  # A rejoins while the write is in flight: it waits for it
    await settle()
    assert not join.done()
    store.gate.set()
    assert (await asyncio.wait_for(beat, 5)).error == ErrorCode.NONE
    assert await a.joined(join) == ErrorCode.NONE
    assert not coord.groups[G].members, "no classic member outside the consumer group"
    assert coord.consumer.groups[G].members[a.member_id].classic is not None
    owners_disjoint(coord, a, b)


async def test_a_failed_upgrade_write_leaves_a_rebalancing_classic_group() -> None:
    store = MemoryStore()
    coord, sched = make(store)
    a, b = await classic_group(coord, sched)
    store.fail = True
    assert (await Client(coord, "C").beat()).error != ErrorCode.NONE
    store.fail = False
    assert G not in coord.consumer.groups and coord.groups[G].is_(GroupState.PREPARING_REBALANCE)
    assert a.beat() == ErrorCode.REBALANCE_IN_PROGRESS


# -- classic members inside a consumer group -------------------------------------------------------------------
@pytest.mark.parametrize("eager", [False, True])
async def test_a_partition_reaches_the_consumer_member_only_after_the_classic_owner_rejoined_without_it(
        eager: bool) -> None:
    coord, sched, a, b, c = await mixed_group(eager=eager)
    for _ in range(3):  # C keeps asking while A and B have not rejoined: nothing of theirs is given to C
        await c.beat()
        owners_disjoint(coord, a, b, c)
        assert c.partitions() == set()
    # A keeps heartbeating: it is told to rejoin, and nothing moves until it does.
    assert a.beat() == ErrorCode.REBALANCE_IN_PROGRESS
    for cl in (a, b):
        while cl.beat() == ErrorCode.REBALANCE_IN_PROGRESS:
            await cl.rejoin()
            owners_disjoint(coord, a, b, c)
            await c.beat()
            owners_disjoint(coord, a, b, c)
    await c.beat()
    owners_disjoint(coord, a, b, c)
    assert len(a.owned) == len(b.owned) == 2 and len(c.partitions()) == 2
    assert coord.consumer.groups[G].state.value == "Stable"
    r = await coord.commit_offsets(G, member_id=a.member_id, generation=a.generation,
                                   offsets={("t", 0): CommittedOffset(7)}, api_version=8)
    assert r == {("t", 0): ErrorCode.NONE}
    r = await coord.commit_offsets(G, member_id=a.member_id, generation=a.generation - 1,
                                   offsets={("t", 0): CommittedOffset(8)}, api_version=8)
    assert r == {("t", 0): ErrorCode.ILLEGAL_GENERATION}


async def test_classic_requests_to_a_consumer_group_are_validated_as_kafka() -> None:
    coord, sched, a, _, c = await mixed_group()
    assert coord.heartbeat(G, a.generation + 5, a.member_id) == ErrorCode.ILLEGAL_GENERATION
    assert coord.heartbeat(G, c.epoch, "C") == ErrorCode.UNKNOWN_MEMBER_ID  # a consumer-protocol member
    assert coord.heartbeat(G, 1, "ghost") == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await coord.sync_group(G, a.generation, a.member_id, protocol_type="connect")).error \
        == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await coord.sync_group(G, a.generation, a.member_id)).error == ErrorCode.REBALANCE_IN_PROGRESS
    bad = await coord.join_group(G, "", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                 protocol_type="consumer", protocols=[("roundrobin", a.metadata())])
    assert bad.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # A and B only speak range
    need = await coord.join_group(G, "", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                  protocol_type="consumer", protocols=[("range", a.metadata())],
                                  require_known_member_id=True)
    assert need.error == ErrorCode.MEMBER_ID_REQUIRED and need.member_id


async def test_a_classic_member_that_does_not_rejoin_is_fenced_after_its_rebalance_timeout() -> None:
    coord, sched, a, b, c = await mixed_group()
    assert a.beat() == ErrorCode.REBALANCE_IN_PROGRESS  # told to rejoin within its rebalance timeout (20 s)
    for _ in range(3):  # A heartbeats (its 10 s session lives on) but never rejoins; B falls silent
        await sched.advance(5000)
        assert a.beat() == ErrorCode.REBALANCE_IN_PROGRESS
        await c.beat()
    group = coord.consumer.groups[G]
    assert set(group.members) == {a.member_id, "C"}  # B's session ended at 10 s
    await sched.advance(5001)
    assert set(group.members) == {"C"}  # A's join deadline ended at 20 s
    await c.beat()
    await c.beat()
    assert len(c.partitions()) == 6


async def test_a_classic_leave_frees_its_partitions() -> None:
    coord, sched, a, b, c = await mixed_group()
    top, per = await coord.leave_group(G, [(a.member_id, None), ("ghost", None)])
    assert (top, [e for _, _, e in per]) == (ErrorCode.NONE, [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID])
    group = coord.consumer.groups[G]
    assert a.member_id not in group.members and a.beat() == ErrorCode.UNKNOWN_MEMBER_ID
    await c.beat()
    await c.beat()
    assert c.partitions() and all(p in (0, 1, 2) for _, p in c.partitions())  # A's, freed; B's wait for B
    owners_disjoint(coord, b, c)


async def test_a_mixed_group_survives_a_coordinator_restart() -> None:
    store = MemoryStore()
    coord, sched, a, b, c = await mixed_group(store)
    await a.rejoin()
    replayed, sched2 = make(store)
    c.coord = replayed
    a.coord = b.coord = replayed
    group = replayed.consumer.groups[G]
    assert group.members[a.member_id].classic is not None and group.members["C"].classic is None
    for cl in (a, b):
        while cl.beat() == ErrorCode.REBALANCE_IN_PROGRESS:
            await cl.rejoin()
            await c.beat()
            owners_disjoint(replayed, a, b, c)
    await c.beat()
    owners_disjoint(replayed, a, b, c)
    assert len(a.owned) + len(b.owned) + len(c.partitions()) == 6


# -- downgrade ---------------------------------------------------------------------------------------------------
async def test_the_last_consumer_member_leaving_downgrades_the_group_keeping_offsets() -> None:
    store = MemoryStore()
    coord, sched, a, b, c = await mixed_group(store)
    await coord.commit_offsets(G, member_id="C", generation=c.epoch, offsets={("t", 5): CommittedOffset(9)})
    assert (await c.beat(epoch=-1)).error == ErrorCode.NONE
    assert G not in coord.consumer.groups
    classic = coord.groups[G]
    assert set(classic.members) == {a.member_id, b.member_id} and classic.offsets[("t", 5)].offset == 9
    assert classic.is_(GroupState.PREPARING_REBALANCE)
    # The classic members rejoin a classic rebalance.
    assert a.beat() in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS)  # either way: rejoin
    fa, fb = a.join(), b.join()
    assert (await a.joined(fa), await b.joined(fb)) == (ErrorCode.NONE, ErrorCode.NONE)
    replayed, _ = make(store)  # the consumer group's records were tombstoned
    assert G not in replayed.consumer.groups and replayed.groups[G].offsets[("t", 5)].offset == 9


async def test_without_downgrade_in_the_policy_the_group_stays_a_consumer_group() -> None:
    coord, sched, a, b, c = await mixed_group(consumer_migration_policy="upgrade")
    assert (await c.beat(epoch=-1)).error == ErrorCode.NONE
    assert set(coord.consumer.groups[G].members) == {a.member_id, b.member_id}


async def test_the_last_consumer_member_timing_out_downgrades_the_group_too() -> None:
    coord, sched, a, b, c = await mixed_group()
    await sched.advance(5000)
    assert a.beat() == b.beat() == ErrorCode.REBALANCE_IN_PROGRESS  # alive, not rejoining yet
    await sched.advance(5001)  # C's 10 s session ends: fenced, only classic members remain
    assert G not in coord.consumer.groups
    assert set(coord.groups[G].members) == {a.member_id, b.member_id}


async def test_a_static_classic_member_restarting_takes_over_its_assignment() -> None:
    coord, sched, a, b, c = await mixed_group()
    meta = a.metadata()

    async def static_join(member_id: str) -> tuple[int, str]:
        r = await coord.join_group(G, member_id, group_instance_id="i1", session_timeout_ms=10000,
                                   rebalance_timeout_ms=20000, protocol_type="consumer", protocols=[("range", meta)])
        return int(r.error), r.member_id

    err, first = await static_join("")
    assert err == ErrorCode.NONE
    group = coord.consumer.groups[G]
    before = group.members[first]
    assert (await static_join("someone-else"))[0] == ErrorCode.FENCED_INSTANCE_ID
    err, second = await static_join("")  # the same instance restarted: a new member id, the same member
    assert err == ErrorCode.NONE and second != first
    assert first not in group.members and group.static_members["i1"] == second
    assert group.members[second].held() == before.held()
    owners_disjoint(coord, a, b, c)
