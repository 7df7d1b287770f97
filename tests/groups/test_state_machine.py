"""The coordinator's state machine with a manual clock: joins, syncs, timeouts, fencing, offsets.

No test here sleeps: `ManualScheduler.advance(ms)` moves time and fires timers.
"""

from __future__ import annotations

import asyncio

from kelp.broker.groups.group import CommittedOffset, GroupState
from kelp.errors import ErrorCode

from .harness import make_coordinator, settle

PROTO = [("range", b"meta-range"), ("roundrobin", b"meta-rr")]


def join(coord, group="g", member="", **kw):
    kw.setdefault("session_timeout_ms", 10000)
    kw.setdefault("rebalance_timeout_ms", 30000)
    kw.setdefault("protocol_type", "consumer")
    kw.setdefault("protocols", PROTO)
    return asyncio.ensure_future(coord.join_group(group, member, **kw))


async def form_group(coord, sched, n, group="g", **kw):
    """n members join and sync; returns {member_id: assignment}."""
    tasks = [join(coord, group, client_id=f"c{i}", **kw) for i in range(n)]
    await sched.advance(2 * coord.config.initial_rebalance_delay_ms + 1)
    results = [await asyncio.wait_for(t, 1) for t in tasks]
    assert {r.error for r in results} == {0}
    gen = results[0].generation
    leader = next(r for r in results if r.members)
    assign = {r.member_id: f"a-{r.member_id}".encode() for r in results}
    syncs = [asyncio.ensure_future(coord.sync_group(group, gen, r.member_id,
                                                    assignments=assign if r is leader else None)) for r in results]
    done = [await asyncio.wait_for(s, 1) for s in syncs]
    assert all(s.error == 0 for s in done)
    return results, {r.member_id: s.assignment for r, s in zip(results, done, strict=True)}


async def test_three_members_join_one_generation_leader_gets_members() -> None:
    coord, sched, store = make_coordinator(initial_rebalance_delay_ms=300)
    tasks = [join(coord, client_id=f"c{i}") for i in range(3)]
    await sched.advance(299)
    assert not any(t.done() for t in tasks), "initial delay must hold the first join"
    # Members arrived during the delay, so (as Kafka's InitialDelayedJoin) it runs once more.
    await sched.advance(2)
    assert not any(t.done() for t in tasks)
    await sched.advance(300)
    results = [await asyncio.wait_for(t, 1) for t in tasks]
    assert {r.generation for r in results} == {1}
    assert {r.protocol_name for r in results} == {"range"}
    leaders = [r for r in results if r.members]
    assert len(leaders) == 1 and leaders[0].leader == leaders[0].member_id
    assert sorted(m for m, _, _ in leaders[0].members) == sorted(r.member_id for r in results)
    assert all(meta == b"meta-range" for _, _, meta in leaders[0].members)
    group = coord.groups["g"]
    assert group.state is GroupState.COMPLETING_REBALANCE
    assign = {r.member_id: r.member_id.encode() for r in results}
    follower = [r for r in results if not r.members][0]
    f_sync = asyncio.ensure_future(coord.sync_group("g", 1, follower.member_id))
    await settle()
    assert not f_sync.done(), "a follower's SyncGroup waits for the leader's assignment"
    l_sync = await coord.sync_group("g", 1, leaders[0].member_id, assignments=assign)
    assert l_sync.assignment == leaders[0].member_id.encode()
    assert (await asyncio.wait_for(f_sync, 1)).assignment == follower.member_id.encode()
    assert group.state is GroupState.STABLE
    assert store.appends >= 1, "the assignment is written to __consumer_offsets"


async def test_member_id_required_then_rejoin() -> None:
    coord, sched, _ = make_coordinator()
    first = await coord.join_group("g", "", session_timeout_ms=10000, protocol_type="consumer",
                                   protocols=PROTO, require_known_member_id=True)
    assert first.error == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    t = join(coord, member=first.member_id, require_known_member_id=True)
    await sched.advance(101)
    r = await asyncio.wait_for(t, 1)
    assert r.error == 0 and r.member_id == first.member_id and r.generation == 1


async def test_pending_member_that_never_rejoins_is_dropped() -> None:
    coord, sched, _ = make_coordinator()
    first = await coord.join_group("g", "", session_timeout_ms=500, protocol_type="consumer",
                                   protocols=PROTO, require_known_member_id=True)
    await sched.advance(501)
    assert first.member_id not in coord.groups["g"].pending_members


async def test_fourth_member_triggers_rebalance_and_existing_members_rejoin() -> None:
    coord, sched, _ = make_coordinator()
    results, _ = await form_group(coord, sched, 3)
    assert coord.groups["g"].state is GroupState.STABLE
    newcomer = join(coord, client_id="c3")
    await settle()
    assert coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    for r in results:
        assert coord.heartbeat("g", r.generation, r.member_id) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoins = [join(coord, member=r.member_id) for r in results]
    await settle()
    out = [await asyncio.wait_for(t, 1) for t in [newcomer, *rejoins]]
    assert {r.generation for r in out} == {2}
    assert len({r.member_id for r in out}) == 4


async def test_session_timeout_evicts_silent_member_and_rebalances() -> None:
    coord, sched, _ = make_coordinator()
    results, _ = await form_group(coord, sched, 2, session_timeout_ms=1000)
    alive, dead = results
    for _ in range(4):  # alive heartbeats every 400 ms, dead says nothing
        await sched.advance(400)
        code = coord.heartbeat("g", alive.generation, alive.member_id)
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            break
    assert code == ErrorCode.REBALANCE_IN_PROGRESS
    assert dead.member_id not in coord.groups["g"].members
    t = join(coord, member=alive.member_id, session_timeout_ms=1000)
    await settle()
    r = await asyncio.wait_for(t, 1)
    assert r.generation == alive.generation + 1 and [m for m, _, _ in r.members] == [alive.member_id]
    assert coord.heartbeat("g", alive.generation, alive.member_id) == ErrorCode.ILLEGAL_GENERATION


async def test_member_that_never_syncs_is_removed_and_other_groups_keep_working() -> None:
    coord, sched, _ = make_coordinator()
    other, _ = await form_group(coord, sched, 1, group="other", session_timeout_ms=5000)
    t = join(coord, group="lazy", session_timeout_ms=1000)
    await sched.advance(101)
    lazy = await asyncio.wait_for(t, 1)
    assert coord.groups["lazy"].state is GroupState.COMPLETING_REBALANCE
    for _ in range(3):
        await sched.advance(400)
        assert coord.heartbeat("other", other[0].generation, other[0].member_id) == 0
    assert lazy.member_id not in coord.groups["lazy"].members
    assert coord.groups["lazy"].state is GroupState.EMPTY
    assert coord.groups["other"].state is GroupState.STABLE


async def test_rebalance_timeout_removes_members_that_do_not_rejoin() -> None:
    coord, sched, _ = make_coordinator()
    results, _ = await form_group(coord, sched, 2, session_timeout_ms=60000, rebalance_timeout_ms=2000)
    a, b = results
    t = join(coord, member=a.member_id, session_timeout_ms=60000, rebalance_timeout_ms=2000)
    await sched.advance(1999)
    assert not t.done()
    await sched.advance(2)
    r = await asyncio.wait_for(t, 1)
    assert r.error == 0 and [m for m, _, _ in r.members] == [a.member_id]


async def test_error_codes_for_bad_requests() -> None:
    coord, sched, _ = make_coordinator()
    results, _ = await form_group(coord, sched, 1)
    m = results[0]
    gen = m.generation
    assert coord.heartbeat("g", gen + 5, m.member_id) == ErrorCode.ILLEGAL_GENERATION
    assert coord.heartbeat("g", gen, "nobody") == ErrorCode.UNKNOWN_MEMBER_ID
    assert coord.heartbeat("", gen, m.member_id) == ErrorCode.INVALID_GROUP_ID
    assert (await coord.sync_group("g", gen + 1, m.member_id)).error == ErrorCode.ILLEGAL_GENERATION
    assert (await coord.sync_group("g", gen, "nobody")).error == ErrorCode.UNKNOWN_MEMBER_ID
    ok = CommittedOffset(5)
    assert await coord.commit_offsets("g", member_id=m.member_id, generation=gen + 1,
                                      offsets={("t", 0): ok}) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert await coord.commit_offsets("g", member_id="nobody", generation=gen,
                                      offsets={("t", 0): ok}) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert await coord.commit_offsets("", member_id="", generation=-1,
                                      offsets={("t", 0): ok}) == {("t", 0): ErrorCode.INVALID_GROUP_ID}
    codes = await coord.commit_offsets("g", member_id=m.member_id, generation=gen,
                                       offsets={("t", 0): ok, ("missing", 0): ok, ("t", 99): ok})
    assert codes == {("t", 0): 0, ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     ("t", 99): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert (await coord.join_group("g", "ghost", session_timeout_ms=10000, protocol_type="consumer",
                                   protocols=PROTO)).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await coord.join_group("g", "", session_timeout_ms=10, protocol_type="consumer",
                                   protocols=PROTO)).error == ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await coord.join_group("g", "", session_timeout_ms=10000, protocol_type="consumer",
                                   protocols=[("sticky", b"")])).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert await coord.commit_offsets("nogroup", member_id="x", generation=3,
                                      offsets={("t", 0): ok}) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert (await coord.delete_groups(["g", "nogroup"])) == {"g": ErrorCode.NON_EMPTY_GROUP,
                                                             "nogroup": ErrorCode.GROUP_ID_NOT_FOUND}
    err, offs = coord.fetch_offsets("g", [("t", 0), ("t", 1)])
    assert err == 0 and offs[("t", 0)].offset == 5 and offs[("t", 1)] is None


async def test_commit_is_acknowledged_only_after_append() -> None:
    coord, _, store = make_coordinator()
    store.fail = True
    codes = await coord.commit_offsets("simple", offsets={("t", 0): CommittedOffset(3)})
    assert codes == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert coord.fetch_offsets("simple", [("t", 0)])[1][("t", 0)] is None


async def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    coord, sched, _ = make_coordinator()
    results, assignments = await form_group(coord, sched, 2, group_instance_id=None)
    # Re-form with static members.
    coord, sched, _ = make_coordinator()
    tasks = [join(coord, client_id=f"c{i}", group_instance_id=f"inst-{i}") for i in range(2)]
    await sched.advance(101)
    results = [await asyncio.wait_for(t, 1) for t in tasks]
    gen = results[0].generation
    leader = next(r for r in results if r.members)
    assign = {r.member_id: f"parts-of-{r.member_id}".encode() for r in results}
    syncs = [asyncio.ensure_future(coord.sync_group("g", gen, r.member_id, group_instance_id=f"inst-{i}",
                                                    assignments=assign if r is leader else None))
             for i, r in enumerate(results)]
    [await asyncio.wait_for(s, 1) for s in syncs]
    follower_idx = next(i for i, r in enumerate(results) if r is not leader)
    old = results[follower_idx]
    # The follower process restarts: joins with no member id but the same instance id.
    again = await coord.join_group("g", "", group_instance_id=f"inst-{follower_idx}", session_timeout_ms=10000,
                                   rebalance_timeout_ms=30000, protocol_type="consumer", protocols=PROTO)
    assert again.error == 0 and again.generation == gen and again.member_id != old.member_id
    assert coord.groups["g"].state is GroupState.STABLE
    s = await coord.sync_group("g", gen, again.member_id, group_instance_id=f"inst-{follower_idx}")
    assert s.assignment == f"parts-of-{old.member_id}".encode()
    # The old incarnation is fenced.
    assert coord.heartbeat("g", gen, old.member_id,
                           group_instance_id=f"inst-{follower_idx}") == ErrorCode.FENCED_INSTANCE_ID


async def test_leave_group_rebalances_and_last_leave_empties() -> None:
    coord, sched, _ = make_coordinator()
    results, _ = await form_group(coord, sched, 2)
    a, b = results
    top, per = await coord.leave_group("g", [(b.member_id, None), ("ghost", None)])
    assert top == 0 and per == [(b.member_id, None, 0), ("ghost", None, ErrorCode.UNKNOWN_MEMBER_ID)]
    assert coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    t = join(coord, member=a.member_id)
    r = await asyncio.wait_for(t, 1)
    assert r.generation == a.generation + 1
    await coord.leave_group("g", [(a.member_id, None)])
    await settle()
    assert coord.groups["g"].state is GroupState.EMPTY
    assert await coord.delete_groups(["g"]) == {"g": 0}
    assert "g" not in coord.groups


async def test_offsets_and_groups_replay_into_a_new_coordinator() -> None:
    coord, sched, store = make_coordinator()
    await coord.commit_offsets("a", offsets={("t", 0): CommittedOffset(10, 2, "m"), ("t", 1): CommittedOffset(20)})
    await coord.commit_offsets("a", offsets={("t", 0): CommittedOffset(11)})
    await coord.commit_offsets("b", offsets={("t", 0): CommittedOffset(7)})
    await coord.delete_groups(["b"])
    results, _ = await form_group(coord, sched, 1, group="c")
    fresh, _, _ = make_coordinator(store=store)
    assert fresh.loader.load() > 0
    err, offs = fresh.fetch_offsets("a", None)
    assert {tp: co.offset for tp, co in offs.items()} == {("t", 0): 11, ("t", 1): 20}
    assert "b" not in fresh.groups
    assert fresh.groups["c"].generation == results[0].generation
    assert fresh.groups["c"].state is GroupState.STABLE  # its member is restored (test_classic_group_load)
    assert set(fresh.groups["c"].members) == {results[0].member_id}


async def test_offsets_of_empty_groups_expire_with_tombstones() -> None:
    coord, sched, store = make_coordinator(offsets_retention_ms=60000, max_session_timeout_ms=600000)
    await coord.commit_offsets("old", offsets={("t", 0): CommittedOffset(1)})
    results, _ = await form_group(coord, sched, 1, group="active", session_timeout_ms=600000)
    await coord.commit_offsets("active", member_id=results[0].member_id, generation=results[0].generation,
                               offsets={("t", 0): CommittedOffset(2)})
    await sched.advance(60001)
    assert await coord.expiry.expire_offsets() == 1
    assert "old" not in coord.groups
    assert coord.fetch_offsets("active", None)[1][("t", 0)].offset == 2
    fresh, _, _ = make_coordinator(store=store)
    fresh.loader.load()
    assert "old" not in fresh.groups


async def test_describe_and_list() -> None:
    coord, sched, _ = make_coordinator()
    await form_group(coord, sched, 2)
    d = coord.describe_group("g")
    assert d.state == "Stable" and d.protocol == "range" and len(d.members) == 2
    assert coord.list_groups() == [("g", "consumer", "Stable")]
    assert coord.list_groups(states=["Empty"]) == []
    assert coord.describe_group("nope").state == "Dead"
