"""A classic group survives a coordinator move (issue 36): the coordinator that loads its `__consumer_offsets`
partition restores it from its GroupMetadataValue as Kafka's GroupMetadataManager does (`replay` then `onLoaded`).

The group comes back Stable (Empty without members) at its stored generation, with its leader, protocol, members,
their subscriptions, assignments and static instance ids; each member's session starts afresh at the load. So
members that keep heartbeating carry on at their generation with no rebalance (heartbeats, SyncGroup and
OffsetCommit at it are accepted), and one that never comes back is expired a session timeout after the load and a
rebalance follows. Manual clocks, in-memory store: nothing sleeps.
"""

from __future__ import annotations

import asyncio

from kelp.broker.groups.group import CommittedOffset, GroupState
from kelp.broker.groups.offsets_log import decode_group_value, decode_key
from kelp.errors import ErrorCode

from .harness import ManualScheduler, MemoryStore, make_coordinator, settle
from .test_consumer_migration import classic_group, owners_disjoint
from .test_consumer_reconciliation import Client, G, make
from .test_state_machine import PROTO, form_group, join

SESSION = 10_000
HOUR = 3_600_000


async def move(store: MemoryStore, *, later_ms: int = HOUR, group: str = "g", **config):
    """The partition of `group` is led by a new coordinator (another broker, its own clock `later_ms` ahead of the
    first's), which loads it as a broker does (`on_become_leader`, the replay in a worker thread)."""
    sched = ManualScheduler()
    sched.now_ms += later_ms
    coord, _, _ = make_coordinator(store=store, scheduler=sched, owned=False, **config)
    await asyncio.wait_for(coord.on_become_leader(coord.partition_for(group), 1), 5)
    return coord, sched


async def stable_group(n: int, **kw):
    coord, sched, store = make_coordinator()
    results, assignments = await form_group(coord, sched, n, session_timeout_ms=SESSION, **kw)
    assert coord.groups["g"].is_(GroupState.STABLE)
    return coord, sched, store, results, assignments


async def test_members_keep_their_generation_and_assignments_across_a_coordinator_move() -> None:
    old, _, store, results, assignments = await stable_group(3)
    gen, leader = results[0].generation, results[0].leader
    new, _ = await move(store)
    group = new.groups["g"]
    assert group.is_(GroupState.STABLE) and group.generation == gen and group.leader_id == leader
    assert group.protocol_type == "consumer" and group.protocol_name == "range"
    assert {r.member_id for r in results} == set(group.members)
    for r in results:
        assert new.heartbeat("g", gen, r.member_id) == ErrorCode.NONE
    # SyncGroup at the generation answers the member's stored assignment (a member retrying its sync).
    follower = next(r for r in results if r.member_id != leader)
    sync = await asyncio.wait_for(new.sync_group("g", gen, follower.member_id), 1)
    assert (sync.error, sync.assignment, sync.protocol_name) == (ErrorCode.NONE, assignments[follower.member_id],
                                                                 "range")
    assert await new.commit_offsets("g", member_id=follower.member_id, generation=gen,
                                    offsets={("t", 0): CommittedOffset(5)}) == {("t", 0): ErrorCode.NONE}
    assert await new.commit_offsets("g", member_id=follower.member_id, generation=gen - 1,
                                    offsets={("t", 0): CommittedOffset(6)}) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    d = new.describe_group("g")
    assert (d.state, d.protocol_type, d.protocol, d.generation, d.leader) == ("Stable", "consumer", "range", gen,
                                                                              leader)
    assert {m.member_id: m.assignment for m in d.members} == assignments
    assert {m.member_id: m.metadata_for("range") for m in d.members} == {r.member_id: b"meta-range" for r in results}
    assert {m.client_id for m in d.members} == {"c0", "c1", "c2"}
    assert {(m.session_timeout_ms, m.rebalance_timeout_ms) for m in d.members} == {(SESSION, 30000)}
    assert new.list_groups() == [("g", "consumer", "Stable")]


async def test_members_that_heartbeat_stay_while_a_silent_one_expires_a_session_after_the_load() -> None:
    old, _, store, results, _ = await stable_group(3)
    gen = results[0].generation
    a, b, silent = (r.member_id for r in results)
    new, sched = await move(store)  # an hour later: the stored state's age must not count
    for _ in range(2):
        await sched.advance(4000)
        assert new.heartbeat("g", gen, a) == new.heartbeat("g", gen, b) == ErrorCode.NONE
    await sched.advance(SESSION - 8000 - 1)  # a session timeout after the load, less 1 ms: still a member
    assert silent in new.groups["g"].members and new.groups["g"].is_(GroupState.STABLE)
    await sched.advance(1)
    group = new.groups["g"]
    assert silent not in group.members and group.is_(GroupState.PREPARING_REBALANCE)
    assert new.heartbeat("g", gen, a) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoins = [join(new, member=m, session_timeout_ms=SESSION) for m in (a, b)]
    await settle()
    joined = [await asyncio.wait_for(t, 1) for t in rejoins]
    assert {(j.error, j.generation) for j in joined} == {(ErrorCode.NONE, gen + 1)}
    assert set(group.members) == {a, b}
    assert new.heartbeat("g", gen, silent) == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_rebalance_under_way_when_the_coordinator_moves_resumes_from_the_stored_generation() -> None:
    old, _, store, results, _ = await stable_group(2)
    gen = results[0].generation
    leader = next(r for r in results if r.members).member_id
    follower = next(r for r in results if not r.members).member_id
    parked = join(old, member=leader, session_timeout_ms=SESSION)  # the leader rejoins: PreparingRebalance
    await settle()
    assert old.groups["g"].is_(GroupState.PREPARING_REBALANCE)
    old.on_resign(old.partition_for("g"), 1)
    assert (await asyncio.wait_for(parked, 1)).error == ErrorCode.NOT_COORDINATOR
    new, _ = await move(store)  # the log holds the last completed generation, Stable
    assert new.groups["g"].is_(GroupState.STABLE) and new.groups["g"].generation == gen
    again = join(new, member=leader, session_timeout_ms=SESSION)  # the leader's retried JoinGroup
    await settle()
    assert new.heartbeat("g", gen, follower) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoin = join(new, member=follower, session_timeout_ms=SESSION)
    out = [await asyncio.wait_for(t, 1) for t in (again, rejoin)]
    assert {(j.error, j.generation) for j in out} == {(ErrorCode.NONE, gen + 1)}


async def test_static_members_are_restored_with_their_instance_ids() -> None:
    coord, sched, store = make_coordinator()
    gen, ids, _ = await static_pair(coord, sched)
    new, _ = await move(store)
    group = new.groups["g"]
    assert group.static_members == ids and {m.group_instance_id for m in group.members.values()} == set(ids)
    assert new.heartbeat("g", gen, ids["i0"], group_instance_id="i0") == ErrorCode.NONE
    # Another incarnation naming instance i0 with some other member id is fenced, as before the move.
    assert new.heartbeat("g", gen, "zombie", group_instance_id="i0") == ErrorCode.FENCED_INSTANCE_ID
    assert await new.commit_offsets("g", member_id="zombie", generation=gen, group_instance_id="i0",
                                    offsets={("t", 0): CommittedOffset(1)}) == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}
    assert await new.commit_offsets("g", member_id=ids["i1"], generation=gen, group_instance_id="i1",
                                    offsets={("t", 0): CommittedOffset(1)}) == {("t", 0): ErrorCode.NONE}


async def test_a_restarted_static_member_takes_its_place_without_a_rebalance_after_a_move() -> None:
    """Kafka's updateStaticMemberThenRebalanceOrCompleteJoin: in a Stable group, a static member rejoining with a new
    member id keeps the generation and its assignment when the protocol the group would select does not change —
    though the restored member knows only the selected protocol and the client sends its whole list."""
    coord, sched, store = make_coordinator()
    gen, ids, assign = await static_pair(coord, sched)
    old_id = ids["i1"]
    new, _ = await move(store)
    again = await asyncio.wait_for(join(new, group_instance_id="i1", client_id="c1", session_timeout_ms=SESSION,
                                        protocols=PROTO), 1)
    group = new.groups["g"]
    assert (again.error, again.generation) == (ErrorCode.NONE, gen) and group.is_(GroupState.STABLE)
    assert again.member_id != old_id and group.static_member_id("i1") == again.member_id
    sync = await asyncio.wait_for(new.sync_group("g", gen, again.member_id, group_instance_id="i1"), 1)
    assert (sync.error, sync.assignment) == (ErrorCode.NONE, assign[old_id])
    assert new.heartbeat("g", gen, old_id, group_instance_id="i1") == ErrorCode.FENCED_INSTANCE_ID


async def test_a_group_of_another_protocol_type_is_restored_too() -> None:
    """Kafka Connect's workers form classic groups of protocol type `connect`; they come back the same way."""
    coord, sched, store = make_coordinator()
    protos = [("sessioned", b"worker-config"), ("compatible", b"worker-config")]
    tasks = [join(coord, client_id=f"w{i}", protocol_type="connect", protocols=protos, session_timeout_ms=SESSION)
             for i in range(2)]
    await sched.advance(2 * coord.config.initial_rebalance_delay_ms + 1)
    results = [await asyncio.wait_for(t, 1) for t in tasks]
    gen = results[0].generation
    assign = {r.member_id: b"connectors" for r in results}
    syncs = [asyncio.ensure_future(coord.sync_group("g", gen, r.member_id, assignments=assign if r.members else None))
             for r in results]
    assert {(await asyncio.wait_for(s, 1)).error for s in syncs} == {ErrorCode.NONE}
    new, _ = await move(store)
    d = new.describe_group("g")
    assert (d.state, d.protocol_type, d.protocol, d.generation) == ("Stable", "connect", "sessioned", gen)
    assert {m.assignment for m in d.members} == {b"connectors"}
    assert all(new.heartbeat("g", gen, r.member_id) == ErrorCode.NONE for r in results)
    # A consumer cannot join a Connect group (INCONSISTENT_GROUP_PROTOCOL), as before the move.
    assert (await asyncio.wait_for(join(new, session_timeout_ms=SESSION), 1)).error == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL


async def test_a_group_stored_without_members_loads_empty_at_its_generation() -> None:
    old, sched, store, results, _ = await stable_group(1)
    assert (await old.leave_group("g", [(results[0].member_id, None)]))[0] == ErrorCode.NONE
    await settle()
    assert old.groups["g"].is_(GroupState.EMPTY)
    new, _ = await move(store)
    group = new.groups["g"]
    assert group.is_(GroupState.EMPTY) and not group.members and group.generation == results[0].generation + 1
    assert new.heartbeat("g", group.generation, results[0].member_id) == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_loaded_group_over_group_max_size_rebalances_at_once() -> None:
    """Kafka's onLoaded: a freshly loaded group bigger than group.max.size (lowered meanwhile) rebalances, so its
    members rejoin (and get the chance to commit)."""
    old, _, store, results, _ = await stable_group(3)
    new, _ = await move(store, max_group_size=2)
    group = new.groups["g"]
    assert group.is_(GroupState.PREPARING_REBALANCE) and len(group.members) == 3
    assert new.heartbeat("g", results[0].generation, results[0].member_id) == ErrorCode.REBALANCE_IN_PROGRESS


async def test_the_stored_record_carries_every_member_as_kafka_writes_it() -> None:
    """What the load reads: the group's newest GroupMetadataValue (v3) names each member with its subscription and
    assignment; the restore depends on nothing else."""
    old, _, store, results, assignments = await stable_group(2)
    metas = [decode_group_value(v) for k, v in store.partitions[old.partition_for("g")]
             if v is not None and not hasattr(decode_key(k), "topic")]
    last = metas[-1]
    assert {m.member_id: m.assignment for m in last.members} == assignments
    assert (last.generation, last.protocol, last.leader) == (results[0].generation, "range", results[0].leader)


async def test_a_restored_group_upgraded_by_a_consumer_member_keeps_each_partition_with_one_owner() -> None:
    """A rolling upgrade across a coordinator move: the first consumer-protocol heartbeat on the restored group
    converts it with its classic members holding their assignments (Kafka's convertToConsumerGroup), so the new
    member gets a partition only once its classic owner gave it up. (On a coordinator that lost the members, the
    empty classic group was replaced by a consumer group of the new member alone, given every partition while the
    classic members still consumed them.)"""
    store = MemoryStore()
    coord, sched = make(store)
    a, b = await classic_group(coord, sched)
    new, _ = make(store)  # the partition's next leader replays it
    a.coord = b.coord = new
    c = Client(new, "C")
    assert (await c.beat()).error == ErrorCode.NONE
    owners_disjoint(new, a, b, c)
    group = new.consumer.groups[G]
    assert set(group.members) == {a.member_id, b.member_id, "C"}
    assert group.members[a.member_id].classic is not None and group.members[a.member_id].member_epoch == a.generation
    for cl in (a, b):
        while cl.beat() == ErrorCode.REBALANCE_IN_PROGRESS:
            await cl.rejoin()
            await c.beat()
            owners_disjoint(new, a, b, c)
    await c.beat()
    owners_disjoint(new, a, b, c)
    assert len(a.owned) + len(b.owned) + len(c.partitions()) == 6 and c.partitions()


async def static_pair(coord, sched) -> tuple[int, dict[str, str], dict[str, bytes]]:
    """Two static members (i0, i1) Stable: (generation, instance id -> member id, member id -> assignment)."""
    tasks = [join(coord, client_id=f"c{i}", group_instance_id=f"i{i}", session_timeout_ms=SESSION) for i in range(2)]
    await sched.advance(2 * coord.config.initial_rebalance_delay_ms + 1)
    results = [await asyncio.wait_for(t, 1) for t in tasks]
    gen = results[0].generation
    assign = {r.member_id: b"part-" + r.member_id.encode() for r in results}
    syncs = [asyncio.ensure_future(coord.sync_group("g", gen, r.member_id, assignments=assign if r.members else None))
             for r in results]
    assert {(await asyncio.wait_for(s, 1)).error for s in syncs} == {ErrorCode.NONE}
    return gen, {f"i{i}": coord.groups["g"].static_member_id(f"i{i}") for i in range(2)}, assign


async def test_a_static_members_new_id_is_answered_only_once_durable() -> None:
    """Kafka answers a replacing static member's JoinGroup once the group record naming its new member id is
    written: a coordinator taking over the partition right after the answer must know the new id, or it would fence
    the member (FENCED_INSTANCE_ID, fatal for the client)."""
    coord, sched, store = make_coordinator()
    gen, ids, _ = await static_pair(coord, sched)
    store.gate = asyncio.Event()  # the group record's replication is in flight
    rejoin = join(coord, group_instance_id="i1", client_id="c1", session_timeout_ms=SESSION, protocols=PROTO)
    await settle()
    assert not rejoin.done(), "answered before its new member id is durable"
    store.gate.set()
    again = await asyncio.wait_for(rejoin, 1)
    assert (again.error, again.generation) == (ErrorCode.NONE, gen)
    new, _ = await move(store)
    assert new.groups["g"].static_member_id("i1") == again.member_id
    assert new.heartbeat("g", gen, again.member_id, group_instance_id="i1") == ErrorCode.NONE


async def test_a_failed_write_of_a_static_members_new_id_keeps_the_old_one() -> None:
    """Kafka's revert: the write failed, so the group (and a coordinator replaying the log) still knows the old
    member id; the JoinGroup answers the write's error and the old incarnation is not fenced."""
    coord, sched, store = make_coordinator()
    gen, ids, assign = await static_pair(coord, sched)
    store.fail = True
    again = await asyncio.wait_for(join(coord, group_instance_id="i1", client_id="c1", session_timeout_ms=SESSION,
                                        protocols=PROTO), 1)
    assert again.error == ErrorCode.COORDINATOR_NOT_AVAILABLE and again.member_id == ""
    group = coord.groups["g"]
    assert group.static_member_id("i1") == ids["i1"] and group.members[ids["i1"]].assignment == assign[ids["i1"]]
    assert group.is_(GroupState.STABLE) and group.generation == gen
    assert coord.heartbeat("g", gen, ids["i1"], group_instance_id="i1") == ErrorCode.NONE
    store.fail = False
    ok = await asyncio.wait_for(join(coord, group_instance_id="i1", client_id="c1", session_timeout_ms=SESSION,
                                     protocols=PROTO), 1)
    assert (ok.error, ok.generation) == (ErrorCode.NONE, gen) and group.static_member_id("i1") == ok.member_id
