"""The coordinator serves only the `__consumer_offsets` partitions this broker leads.

Leadership events drive it: an election loads the partition (COORDINATOR_LOAD_IN_PROGRESS
meanwhile), a resignation drops its groups and fails their parked requests with
NOT_COORDINATOR, stale events are ignored, and failed writes answer the error Kafka's
GroupMetadataManager maps them to. Manual clock, in-memory store: nothing sleeps.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from kelp.broker.groups.append_errors import commit_error_code, group_write_error_code
from kelp.broker.groups.group import CommittedOffset, GroupState
from kelp.broker.groups.ownership import PartitionOwnership, PartitionState
from kelp.errors import (
    CorruptRecordError,
    ErrorCode,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RecordTooLargeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)

from .harness import MemoryStore, make_coordinator, settle
from .test_state_machine import form_group, join

N = 4


def groups_on_distinct_partitions(coord, count: int) -> list[str]:
    """Group ids whose `__consumer_offsets` partitions differ (one per partition, `count` of them)."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < count:
        found.setdefault(coord.partition_for(f"grp-{i}"), f"grp-{i}")
        i += 1
    return [found[p] for p in sorted(found)]


class GatedReplayStore(MemoryStore):
    """Replay blocks (in the worker thread) until `release()`: a long partition load."""

    def __init__(self) -> None:
        super().__init__()
        self._release = threading.Event()

    def release(self) -> None:
        self._release.set()

    def replay(self, partition: int):  # type: ignore[override]
        if not self._release.wait(10):
            raise TimeoutError("test never released the replay")
        return super().replay(partition)


async def test_groups_of_partitions_not_led_get_not_coordinator() -> None:
    coord, _, _ = make_coordinator(owned=False, num_partitions=N)
    assert (await join(coord, "g")).error == ErrorCode.NOT_COORDINATOR
    committed = await coord.commit_offsets("g", offsets={("t", 0): CommittedOffset(1)})
    assert committed == {("t", 0): ErrorCode.NOT_COORDINATOR}
    assert coord.heartbeat("g", 1, "m") == ErrorCode.NOT_COORDINATOR
    assert coord.fetch_offsets("g", None)[0] == ErrorCode.NOT_COORDINATOR
    assert (await coord.sync_group("g", 1, "m")).error == ErrorCode.NOT_COORDINATOR
    assert (await coord.leave_group("g", [("m", None)]))[0] == ErrorCode.NOT_COORDINATOR
    assert coord.describe_group("g").error == ErrorCode.NOT_COORDINATOR
    assert await coord.delete_groups(["g"]) == {"g": ErrorCode.NOT_COORDINATOR}
    assert coord.list_groups() == []


async def test_loading_partition_answers_load_in_progress_then_serves() -> None:
    store = GatedReplayStore()
    coord, _, _ = make_coordinator(owned=False, store=store, num_partitions=N)
    g = "g"
    p = coord.partition_for(g)
    loading = coord.on_become_leader(p, 3)
    await settle()
    assert coord.check_group(g) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert (await join(coord, g)).error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert await coord.commit_offsets(g, offsets={("t", 0): CommittedOffset(1)}) == {
        ("t", 0): ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
    assert coord.fetch_offsets(g, None)[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    other = next(x for x in groups_on_distinct_partitions(coord, N) if coord.partition_for(x) != p)
    assert coord.check_group(other) == ErrorCode.NOT_COORDINATOR, "only the elected partition is loading"
    store.release()
    await asyncio.wait_for(loading, 5)
    assert coord.check_group(g) == ErrorCode.NONE
    assert await coord.commit_offsets(g, offsets={("t", 0): CommittedOffset(1)}) == {("t", 0): 0}


async def test_election_loads_offsets_and_metadata_of_that_partition_only() -> None:
    writer, sched, store = make_coordinator(num_partitions=N)
    a, b = groups_on_distinct_partitions(writer, 2)
    await writer.commit_offsets(a, offsets={("t", 0): CommittedOffset(10, 4, "meta-a"), ("t", 1): CommittedOffset(11)})
    await writer.commit_offsets(b, offsets={("t", 0): CommittedOffset(20)})
    results, _ = await form_group(writer, sched, 1, group=a)
    generation = results[0].generation

    fresh, _, _ = make_coordinator(owned=False, store=store, num_partitions=N)
    await asyncio.wait_for(fresh.on_become_leader(fresh.partition_for(a), 1), 5)
    err, offsets = fresh.fetch_offsets(a, None)
    assert err == 0
    assert {tp: (co.offset, co.leader_epoch, co.metadata) for tp, co in offsets.items()} == {
        ("t", 0): (10, 4, "meta-a"), ("t", 1): (11, -1, ""),
    }
    group = fresh.groups[a]
    assert group.generation == generation and group.protocol_name == "range"
    assert group.state is GroupState.STABLE and set(group.members) == {results[0].member_id}, "members are restored"
    assert b not in fresh.groups, "groups of partitions it does not lead are not loaded"
    assert fresh.fetch_offsets(b, None)[0] == ErrorCode.NOT_COORDINATOR
    assert [gid for gid, _, _ in fresh.list_groups()] == [a]


async def test_resignation_drops_groups_and_fails_parked_requests() -> None:
    coord, sched, _ = make_coordinator(num_partitions=N, initial_rebalance_delay_ms=100)
    stable, elsewhere = groups_on_distinct_partitions(coord, 2)
    results, _ = await form_group(coord, sched, 2, group=stable)
    await coord.commit_offsets(elsewhere, offsets={("t", 0): CommittedOffset(5)})
    gen = results[0].generation
    leader = next(r for r in results if r.members)
    follower = next(r for r in results if not r.members)
    # A rebalance: the leader rejoins (parked), the follower has not rejoined yet.
    parked_join = join(coord, stable, member=leader.member_id)
    await settle()
    assert not parked_join.done()
    p = coord.partition_for(stable)
    coord.on_resign(p, 1)
    assert (await asyncio.wait_for(parked_join, 1)).error == ErrorCode.NOT_COORDINATOR
    assert stable not in coord.groups
    assert coord.heartbeat(stable, gen, follower.member_id) == ErrorCode.NOT_COORDINATOR
    assert coord.list_groups() == [(elsewhere, "", "Empty")], "other partitions' groups stay"
    # Its timers are gone: nothing fires for the dropped group when time passes.
    await sched.advance(120_000)
    assert stable not in coord.groups
    assert coord.fetch_offsets(elsewhere, None)[1][("t", 0)].offset == 5


async def test_resignation_fails_a_parked_sync_with_not_coordinator() -> None:
    coord, sched, _ = make_coordinator(num_partitions=N)
    tasks = [join(coord, "g", client_id=f"c{i}") for i in range(2)]
    await sched.advance(2 * coord.config.initial_rebalance_delay_ms + 1)
    joined = [await asyncio.wait_for(t, 1) for t in tasks]
    follower = next(r for r in joined if not r.members)
    parked_sync = asyncio.ensure_future(coord.sync_group("g", follower.generation, follower.member_id))
    await settle()
    assert not parked_sync.done(), "a follower waits for the leader's assignment"
    coord.on_resign(coord.partition_for("g"), 0)
    assert (await asyncio.wait_for(parked_sync, 1)).error == ErrorCode.NOT_COORDINATOR


async def test_stale_leadership_events_are_ignored() -> None:
    coord, _, store = make_coordinator(owned=False, num_partitions=N)
    p = coord.partition_for("g")
    await asyncio.wait_for(coord.on_become_leader(p, 5), 5)
    assert await coord.commit_offsets("g", offsets={("t", 0): CommittedOffset(7)}) == {("t", 0): 0}
    coord.on_resign(p, 4)  # from before the election at epoch 5: stale
    assert coord.check_group("g") == ErrorCode.NONE
    assert coord.fetch_offsets("g", None)[1][("t", 0)].offset == 7
    coord.on_resign(p, 6)
    assert coord.check_group("g") == ErrorCode.NOT_COORDINATOR
    await asyncio.wait_for(coord.on_become_leader(p, 5), 5)  # an election older than that resignation
    assert coord.check_group("g") == ErrorCode.NOT_COORDINATOR
    await asyncio.wait_for(coord.on_become_leader(p, 7), 5)
    assert coord.fetch_offsets("g", None)[1][("t", 0)].offset == 7, "reloaded from the log"


async def test_resignation_during_a_load_discards_its_result() -> None:
    store = GatedReplayStore()
    store.release()
    writer, _, _ = make_coordinator(store=store, num_partitions=N)
    await writer.commit_offsets("g", offsets={("t", 0): CommittedOffset(9)})
    store._release.clear()
    coord, _, _ = make_coordinator(owned=False, store=store, num_partitions=N)
    p = coord.partition_for("g")
    load = coord.on_become_leader(p, 1)
    await settle()
    coord.on_resign(p, 2)
    store.release()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(load, 5)
    await settle()
    assert coord.check_group("g") == ErrorCode.NOT_COORDINATOR
    assert "g" not in coord.groups


def test_ownership_terms() -> None:
    o = PartitionOwnership()
    t1 = o.begin_load(0, 1)
    assert t1 is not None and o.state(0) is PartitionState.LOADING
    assert o.begin_load(0, 1) is None, "a repeated election keeps the running load"
    assert o.finish_load(0, t1) and o.state(0) is PartitionState.OWNED
    assert o.begin_load(0, 2) is None and o.epoch(0) == 2, "a newer election of the same leader keeps its state"
    assert not o.resign(0, 1) and o.state(0) is PartitionState.OWNED
    assert o.resign(0, 2) and o.state(0) is PartitionState.RESIGNED
    assert not o.finish_load(0, t1), "an ended term's load cannot complete"
    assert o.owned() == set() and o.token(0) is None


@pytest.mark.parametrize(("exc", "commit_code", "group_code"), [
    (NotEnoughReplicasError("isr 1 < min.insync.replicas 2"), ErrorCode.COORDINATOR_NOT_AVAILABLE,
     ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (RequestTimedOutError("isr did not acknowledge in 5000 ms"), ErrorCode.COORDINATOR_NOT_AVAILABLE,
     ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (UnknownTopicOrPartitionError("__consumer_offsets-3"), ErrorCode.COORDINATOR_NOT_AVAILABLE,
     ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (NotLeaderOrFollowerError("broker 1 is not the leader"), ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_COORDINATOR),
    (RecordTooLargeError("batch of 2 MB"), 28, ErrorCode.UNKNOWN_SERVER_ERROR),
    (CorruptRecordError("bad crc"), ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.UNKNOWN_SERVER_ERROR),
    (OSError("disk full"), ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_NOT_AVAILABLE),
])
async def test_write_failures_answer_kafkas_coordinator_errors(exc, commit_code, group_code) -> None:
    assert commit_error_code(exc) == commit_code and group_write_error_code(exc) == group_code
    coord, _, store = make_coordinator(num_partitions=N)
    store.fail_with = exc
    assert await coord.commit_offsets("g", offsets={("t", 0): CommittedOffset(3)}) == {("t", 0): commit_code}
    assert coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)] is None, "a failed commit is not cached"


async def test_commit_answers_not_coordinator_when_leadership_moved_during_the_write() -> None:
    coord, _, store = make_coordinator(num_partitions=N)
    store.gate = asyncio.Event()
    store.fail_with = NotEnoughReplicasError("the ISR shrank")
    commit = asyncio.ensure_future(coord.commit_offsets("g", offsets={("t", 0): CommittedOffset(3)}))
    await settle()
    coord.on_resign(coord.partition_for("g"), 1)
    store.gate.set()
    assert await asyncio.wait_for(commit, 1) == {("t", 0): ErrorCode.NOT_COORDINATOR}


async def test_failed_assignment_write_fails_sync_and_rebalances() -> None:
    coord, sched, store = make_coordinator(num_partitions=N)
    tasks = [join(coord, "g", client_id=f"c{i}") for i in range(2)]
    await sched.advance(2 * coord.config.initial_rebalance_delay_ms + 1)
    joined = [await asyncio.wait_for(t, 1) for t in tasks]
    leader = next(r for r in joined if r.members)
    follower = next(r for r in joined if not r.members)
    f_sync = asyncio.ensure_future(coord.sync_group("g", follower.generation, follower.member_id))
    await settle()
    store.fail_with = NotEnoughReplicasError("1 in-sync replica, min.insync.replicas is 2")
    l_sync = await coord.sync_group("g", leader.generation, leader.member_id,
                                    assignments={r.member_id: b"parts" for r in joined})
    assert l_sync.error == ErrorCode.COORDINATOR_NOT_AVAILABLE and l_sync.assignment == b""
    f = await asyncio.wait_for(f_sync, 1)
    assert f.error == ErrorCode.COORDINATOR_NOT_AVAILABLE and f.assignment == b""
    group = coord.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in group.members.values())
    # Once writes work again, the members rejoin and the group becomes Stable at the next generation.
    store.fail_with = None
    rejoins = [join(coord, "g", member=r.member_id) for r in joined]
    again = [await asyncio.wait_for(t, 5) for t in rejoins]
    assert {r.generation for r in again} == {leader.generation + 1}
    new_leader = next(r for r in again if r.members)
    ok = await coord.sync_group("g", new_leader.generation, new_leader.member_id,
                                assignments={r.member_id: b"parts" for r in again})
    assert ok.error == 0 and ok.assignment == b"parts"


async def test_offsets_expire_only_on_owned_partitions() -> None:
    coord, sched, store = make_coordinator(num_partitions=N, offsets_retention_ms=60000)
    kept, expired = groups_on_distinct_partitions(coord, 2)
    for g in (kept, expired):
        await coord.commit_offsets(g, offsets={("t", 0): CommittedOffset(1)})
    coord.on_resign(coord.partition_for(kept), 1)
    await sched.advance(60001)
    assert await coord.expiry.expire_offsets() == 1
    appended = [k for k, v in store.partitions.get(coord.partition_for(kept), []) if v is None]
    assert appended == [], "no tombstones are written to a partition this broker does not lead"
    await asyncio.wait_for(coord.on_become_leader(coord.partition_for(kept), 2), 5)
    assert coord.fetch_offsets(kept, None)[1][("t", 0)].offset == 1
