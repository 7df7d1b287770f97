"""KIP-848 reconciliation in the coordinator, attacked by interleavings (issue 36): a partition is revoked from
its old owner, and acknowledged, before its new owner gets it; a member that never acknowledges is fenced after
its rebalance timeout; stale and future epochs are fenced and change nothing; static members keep their
partitions across a restart and an instance id is not taken while held; offsets are committed and fetched at
the member's epoch. Time is the harness's manual clock: no sleeps."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest

from kelp.broker.groups.consumer.heartbeat import HeartbeatRequest, HeartbeatResult
from kelp.broker.groups.consumer.model import MemberState
from kelp.broker.groups.coordinator_config import CoordinatorConfig
from kelp.broker.groups.group import CommittedOffset
from kelp.broker.groups.group_coordinator import GroupCoordinator
from kelp.errors import ErrorCode

from .harness import ManualScheduler, MemoryStore

T = "a" * 32  # topic id of "t", 6 partitions
U = "b" * 32  # topic id of "u", 2 partitions
G = "cg"


@dataclass
class _Topic:
    topic_id: str
    partitions: int
    name: str = ""


class Topics:
    def __init__(self) -> None:
        self.by_name = {"t": _Topic(T, 6), "u": _Topic(U, 2)}

    def get(self, name: str) -> _Topic | None:
        return self.by_name.get(name)

    def name_of(self, topic_id: str) -> str | None:
        return next((n for n, t in self.by_name.items() if t.topic_id == topic_id), None)

    def list_topics(self) -> list[_Topic]:
        return [_Topic(t.topic_id, t.partitions, n) for n, t in self.by_name.items()]


def make(store: MemoryStore | None = None, **config: object) -> tuple[GroupCoordinator, ManualScheduler]:
    scheduler = ManualScheduler()
    cfg = CoordinatorConfig(num_partitions=4, consumer_session_timeout_ms=config.pop("session", 10000),  # type: ignore[arg-type]
                            consumer_heartbeat_interval_ms=1000, **config)  # type: ignore[arg-type]
    topics = Topics()
    coord = GroupCoordinator(cfg, store=store or MemoryStore(), clock_ms=scheduler.clock, scheduler=scheduler,
                             topic_partitions=lambda n: t.partitions if (t := topics.get(n)) else None,
                             topics=topics)
    coord.loader.load()
    coord.fake_topics = topics  # type: ignore[attr-defined]  # tests create and delete topics through it
    return coord, scheduler


class Client:
    """A consumer as the Java client behaves: it heartbeats with what it owns, and takes what it is told."""

    def __init__(self, coord: GroupCoordinator, member_id: str, topics: tuple[str, ...] = ("t",),
                 instance_id: str | None = None, rebalance_timeout_ms: int = 5000) -> None:
        self.coord, self.member_id, self.topics = coord, member_id, topics
        self.instance_id, self.rebalance_timeout_ms = instance_id, rebalance_timeout_ms
        self.epoch = 0
        self.owned: dict[str, frozenset[int]] = {}

    async def beat(self, *, epoch: int | None = None, owned: dict[str, frozenset[int]] | None = None,
                   full: bool = False, **kw: object) -> HeartbeatResult:
        e = self.epoch if epoch is None else epoch
        req = HeartbeatRequest(
            group_id=G, member_id=self.member_id, member_epoch=e, instance_id=self.instance_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms if e == 0 or full else -1,
            subscribed_topic_names=self.topics if e == 0 or full else None,
            owned=owned if owned is not None else ({} if e == 0 else self.owned), **kw)  # type: ignore[arg-type]
        result = await self.coord.consumer.heartbeat(req)
        if result.error == ErrorCode.NONE and e >= 0:
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = {t: ps for t, ps in result.assignment.items() if ps}
        return result

    def partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def no_partition_twice(*clients: Client) -> None:
    """What the clients believe they own never overlaps, nor does what the coordinator counts as held."""
    seen: dict[tuple[str, int], str] = {}
    for c in clients:
        for tp in c.partitions():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id
    group = clients[0].coord.consumer.groups[G]
    held: dict[tuple[str, int], str] = {}
    for m in group.members.values():
        for tp in m.held():
            assert tp not in held, f"{tp} held by {held[tp]} and {m.member_id}"
            held[tp] = m.member_id


def all_t() -> set[tuple[str, int]]:
    return {(T, p) for p in range(6)}


async def test_a_partition_moves_only_after_its_old_owner_acknowledges_the_revocation() -> None:
    coord, _ = make()
    a, b = Client(coord, "A"), Client(coord, "B")
    r = await a.beat()
    assert (r.error, r.member_epoch, a.partitions()) == (ErrorCode.NONE, 1, all_t())
    r = await b.beat()  # B joins: group epoch 2; its target is held by A
    assert r.member_epoch == 2 and b.partitions() == set()
    assert coord.consumer.groups[G].members["B"].state is MemberState.UNRELEASED_PARTITIONS
    no_partition_twice(a, b)
    r = await a.beat()  # A learns it must give up three: it stays at epoch 1 with the three it keeps
    assert r.member_epoch == 1 and len(a.partitions()) == 3
    assert coord.consumer.groups[G].members["A"].state is MemberState.UNREVOKED_PARTITIONS
    # Adversary: B heartbeats again before A acknowledged, and A heartbeats still claiming all six.
    await b.beat()
    assert b.partitions() == set()
    r = await a.beat(owned={T: frozenset(range(6))})
    assert r.error == ErrorCode.NONE and coord.consumer.groups[G].members["A"].state is MemberState.UNREVOKED_PARTITIONS
    await b.beat()
    assert b.partitions() == set(), "B got partitions A had not released"
    no_partition_twice(a, b)
    await a.beat()  # acknowledges: owns only the three kept
    assert a.epoch == 2 and coord.consumer.groups[G].members["A"].state is MemberState.STABLE
    await b.beat()
    assert b.epoch == 2 and a.partitions() | b.partitions() == all_t() and len(b.partitions()) == 3
    no_partition_twice(a, b)
    assert coord.consumer.describe(G).group.state.value == "Stable"  # type: ignore[union-attr]


async def test_a_member_that_never_revokes_is_fenced_after_its_rebalance_timeout() -> None:
    coord, sched = make()
    a, b = Client(coord, "A", rebalance_timeout_ms=3000), Client(coord, "B")
    await a.beat()
    await b.beat()
    await a.beat()  # told to revoke; never acknowledges
    for _ in range(4):  # B keeps heartbeating within its session; A's timer runs
        await sched.advance(700)
        await b.beat()
        assert b.partitions() == set()
        no_partition_twice(a, b)
    await sched.advance(700)  # 3.5 s: past A's rebalance timeout
    assert "A" not in coord.consumer.groups[G].members
    await b.beat()
    assert b.partitions() == all_t() and b.epoch == 3
    late = await a.beat(owned={T: frozenset(range(6))})
    assert late.error == ErrorCode.UNKNOWN_MEMBER_ID


async def test_stale_and_future_epochs_are_fenced_and_change_nothing() -> None:
    coord, _ = make()
    a, b = Client(coord, "A"), Client(coord, "B")
    await a.beat()
    await b.beat()
    await a.beat()
    await a.beat()  # A at epoch 2 with three partitions; its previous epoch is 1
    group = coord.consumer.groups[G]
    before = copy.deepcopy((group.members, group.owners, group.group_epoch, group.target))
    r = await a.beat(epoch=3)
    assert r.error == ErrorCode.FENCED_MEMBER_EPOCH
    r = await a.beat(epoch=1, owned={T: frozenset(range(6))})  # the previous epoch, owning more than assigned
    assert r.error == ErrorCode.FENCED_MEMBER_EPOCH
    r = await a.beat(epoch=0, full=True, owned={T: frozenset({0})})  # a join must own nothing
    assert r.error == ErrorCode.INVALID_REQUEST
    assert before == (group.members, group.owners, group.group_epoch, group.target)
    # The previous epoch with a subset of the assignment is a lost response: accepted, answered the current epoch.
    r = await a.beat(epoch=1, owned=a.owned)
    assert (r.error, r.member_epoch) == (ErrorCode.NONE, 2)


async def test_static_member_restart_keeps_its_partitions_and_a_held_instance_id_is_refused() -> None:
    coord, _ = make()
    a, b = Client(coord, "A", instance_id="ia"), Client(coord, "B", instance_id="ib")
    await a.beat()
    await b.beat()
    await a.beat()
    await a.beat()
    await b.beat()
    kept = b.partitions()
    assert len(kept) == 3
    group = coord.consumer.groups[G]
    # Adversary: another process with B's instance id joins while B is alive.
    intruder = Client(coord, "B2", instance_id="ib")
    before = copy.deepcopy((group.members, group.owners, group.group_epoch))
    r = await intruder.beat()
    assert r.error == ErrorCode.UNRELEASED_INSTANCE_ID
    assert before == (group.members, group.owners, group.group_epoch)
    epoch = group.group_epoch
    r = await b.beat(epoch=-2)  # B restarts
    assert (r.error, r.member_epoch) == (ErrorCode.NONE, -2)
    await a.beat()
    assert len(a.partitions()) == 3, "B's partitions stay B's while it restarts"
    b2 = Client(coord, "B2", instance_id="ib")
    await b2.beat()
    assert b2.partitions() == kept and group.group_epoch == epoch, "same partitions, no rebalance"
    assert "B" not in group.members and group.static_members["ib"] == "B2"
    no_partition_twice(a, b2)


async def test_leave_and_session_expiry_free_the_partitions() -> None:
    coord, sched = make(session=5000)
    a, b, c = Client(coord, "A"), Client(coord, "B"), Client(coord, "C")
    for _ in range(3):
        for cl in (a, b, c):
            await cl.beat()
    assert len(a.partitions()) == len(b.partitions()) == len(c.partitions()) == 2
    r = await c.beat(epoch=-1)
    assert (r.error, r.member_epoch) == (ErrorCode.NONE, -1) and "C" not in coord.consumer.groups[G].members
    for _ in range(3):
        await a.beat()
        await b.beat()
        no_partition_twice(a, b)
    assert a.partitions() | b.partitions() == all_t()
    for _ in range(6):  # B stops heartbeating; A goes on
        await sched.advance(1000)
        await a.beat()
    assert "B" not in coord.consumer.groups[G].members
    await a.beat()
    assert a.partitions() == all_t()


@pytest.mark.parametrize("change, code", [
    ({"group_id": ""}, ErrorCode.INVALID_REQUEST),
    ({"member_id": ""}, ErrorCode.INVALID_REQUEST),
    ({"rebalance_timeout_ms": -1}, ErrorCode.INVALID_REQUEST),
    ({"subscribed_topic_names": None}, ErrorCode.INVALID_REQUEST),
    ({"subscribed_topic_regex": "t(?=x)"}, ErrorCode.INVALID_REGULAR_EXPRESSION),
    ({"member_epoch": -3}, ErrorCode.INVALID_REQUEST),
    ({"member_epoch": -2, "instance_id": None}, ErrorCode.INVALID_REQUEST),
    ({"server_assignor": "sticky"}, ErrorCode.UNSUPPORTED_ASSIGNOR),
])
async def test_bad_heartbeats_are_refused_before_anything_changes(change: dict, code: int) -> None:
    coord, _ = make()
    fields = dict(group_id=G, member_id="A", member_epoch=0, rebalance_timeout_ms=5000,
                  subscribed_topic_names=("t",), owned={})
    fields.update(change)
    r = await coord.consumer.heartbeat(HeartbeatRequest(**fields))  # type: ignore[arg-type]
    assert r.error == code and r.message
    assert coord.consumer.groups == {}


async def test_server_assignor_range_is_used_when_the_members_name_it() -> None:
    coord, _ = make()
    a, b = Client(coord, "A", topics=("t", "u")), Client(coord, "B", topics=("t", "u"))
    await a.beat(server_assignor="range")
    await b.beat(server_assignor="range")
    for _ in range(2):
        await a.beat()
        await b.beat()
    assert coord.consumer.groups[G].assignor == "range"
    assert a.owned == {T: frozenset({0, 1, 2}), U: frozenset({0})}
    assert b.owned == {T: frozenset({3, 4, 5}), U: frozenset({1})}


async def test_describe_an_unknown_group_is_group_id_not_found() -> None:
    coord, _ = make()
    assert coord.consumer.describe("nope").error == ErrorCode.GROUP_ID_NOT_FOUND


async def test_offsets_are_committed_and_fetched_at_the_member_epoch() -> None:
    coord, _ = make()
    a, b = Client(coord, "A"), Client(coord, "B")
    await a.beat()
    offsets = {("t", 0): CommittedOffset(42, -1, "", -1)}
    assert await coord.commit_offsets(G, member_id="A", generation=1, offsets=offsets) == {("t", 0): 0}
    await b.beat()
    await a.beat()
    await a.beat()  # A at epoch 2
    gone = ("t", next(p for p in range(6) if (T, p) not in a.partitions()))  # a partition A gave up
    stale = await coord.commit_offsets(G, member_id="A", generation=1, offsets={gone: offsets[("t", 0)]})
    assert stale == {gone: ErrorCode.STALE_MEMBER_EPOCH}
    future = await coord.commit_offsets(G, member_id="A", generation=3, offsets=offsets)
    assert future == {("t", 0): ErrorCode.FENCED_MEMBER_EPOCH}
    unknown = await coord.commit_offsets(G, member_id="Z", generation=2, offsets=offsets)
    assert unknown == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    old_api = await coord.commit_offsets(G, member_id="A", generation=2, offsets=offsets, api_version=8)
    assert old_api == {("t", 0): ErrorCode.UNSUPPORTED_VERSION}
    assert coord.fetch_offsets(G, [("t", 0)], member_id="A", member_epoch=1)[0] == ErrorCode.STALE_MEMBER_EPOCH
    err, got = coord.fetch_offsets(G, [("t", 0)], member_id="A", member_epoch=2)
    assert err == ErrorCode.NONE and got[("t", 0)].offset == 42  # type: ignore[union-attr]
    assert coord.fetch_offsets(G, [("t", 0)])[0] == ErrorCode.NONE  # the admin client
    assert [g for g in coord.list_groups() if g[0] == G] == [(G, "consumer", "Reconciling")]  # B waits for A's
    await b.beat()
    assert [g for g in coord.list_groups() if g[0] == G] == [(G, "consumer", "Stable")]


async def test_a_commit_that_raced_an_epoch_bump_is_accepted_for_partitions_held_since_its_epoch() -> None:
    """KIP-1251 (Kafka 4.4): a member commits at epoch 1 while the heartbeat that moves it to epoch 2 is answered
    (a librdkafka member committing in its revocation callback as the group changes). The partitions it has
    held since epoch 1 are committed; one it gave up, or one assigned at a later epoch, is STALE_MEMBER_EPOCH, per
    partition. The old coordinator refused the whole commit (STALE_MEMBER_EPOCH for every partition), so the
    member gave its partitions up uncommitted and their next owner read their records again."""
    coord, _ = make()
    a, b = Client(coord, "A"), Client(coord, "B")
    await a.beat()  # A: epoch 1, all six
    await b.beat()  # B joins: group epoch 2
    await a.beat()  # A must give up three: it stays at epoch 1
    await a.beat()  # A acknowledges: epoch 2, with the three it has held since epoch 1
    await b.beat()  # B gets the other three, at epoch 2
    assert (a.epoch, b.epoch) == (2, 2)
    kept = sorted(("t", p) for _, p in a.partitions())
    given = sorted(("t", p) for _, p in b.partitions())
    assert len(kept) == len(given) == 3
    offsets = {tp: CommittedOffset(7, -1, "", -1) for tp in [*kept, given[0]]}
    got = await coord.commit_offsets(G, member_id="A", generation=1, offsets=offsets)
    assert got == {**{tp: ErrorCode.NONE for tp in kept}, given[0]: ErrorCode.STALE_MEMBER_EPOCH}
    err, fetched = coord.fetch_offsets(G, [*kept, given[0]], member_id="A", member_epoch=2)
    assert err == ErrorCode.NONE and [fetched[tp] and fetched[tp].offset for tp in kept] == [7, 7, 7]  # type: ignore[union-attr]
    assert fetched[given[0]] is None, "the refused partition's offset was not written"
    # B got its partitions at epoch 2: at epoch 1 it holds nothing it may commit.
    got = await coord.commit_offsets(G, member_id="B", generation=1, offsets={given[1]: CommittedOffset(9, -1, "", -1)})
    assert got == {given[1]: ErrorCode.STALE_MEMBER_EPOCH}
    assert await coord.commit_offsets(G, member_id="A", generation=3, offsets={kept[0]: offsets[kept[0]]}) == {
        kept[0]: ErrorCode.FENCED_MEMBER_EPOCH}


async def test_a_topic_created_or_grown_after_the_subscription_is_assigned_on_the_next_heartbeat() -> None:
    coord, _ = make()
    topics = coord.consumer.topics
    a = Client(coord, "A", topics=("v",))
    r = await a.beat()
    assert r.error == ErrorCode.NONE and a.partitions() == set()  # "v" does not exist yet: nothing to assign
    epoch = coord.consumer.groups[G].group_epoch
    topics.by_name["v"] = _Topic("c" * 32, 2)  # type: ignore[attr-defined]
    await a.beat()
    assert a.partitions() == {("c" * 32, 0), ("c" * 32, 1)} and coord.consumer.groups[G].group_epoch == epoch + 1
    topics.by_name["v"] = _Topic("c" * 32, 3)  # type: ignore[attr-defined]
    await a.beat()
    assert a.partitions() == {("c" * 32, p) for p in range(3)}


async def test_a_consumer_protocol_member_commits_offsets_in_a_transaction() -> None:
    """Exactly-once processing with `group.protocol=consumer`: the producer's TxnOffsetCommit carries the
    consumer's member id and member epoch (`consumer.groupMetadata()`). Kafka judges them as an OffsetCommit's
    (ConsumerGroup.validateOffsetCommit, transactional), per partition at an older epoch (KIP-1251). The
    coordinator before looked only for classic members: every such commit was UNKNOWN_MEMBER_ID, and the
    transaction had to abort — a read-process-write loop with KIP-848 consumers could never commit."""
    coord, _ = make()
    a, b = Client(coord, "A"), Client(coord, "B")
    await a.beat()
    offsets = {("t", 0): CommittedOffset(7, -1, "", -1)}
    ok = await coord.txn_commit_offsets(G, producer_id=5, producer_epoch=0, member_id="A", generation=1,
                                        offsets=offsets)
    assert ok == {("t", 0): ErrorCode.NONE}
    assert coord.unstable_offsets(G, [("t", 0)]) == {("t", 0)}  # pending until the transaction's marker
    coord.handle_txn_completion(5, [coord.partition_for(G)], commit=True)
    err, got = coord.fetch_offsets(G, [("t", 0)], member_id="A", member_epoch=1)
    assert err == ErrorCode.NONE and got[("t", 0)].offset == 7  # type: ignore[union-attr]
    await b.beat()
    await a.beat()
    await a.beat()  # A at epoch 2, three partitions gone to B
    kept = ("t", next(p for p in range(6) if (T, p) in a.partitions()))
    gone = ("t", next(p for p in range(6) if (T, p) not in a.partitions()))
    mixed = await coord.txn_commit_offsets(G, producer_id=5, producer_epoch=1, member_id="A", generation=1,
                                           offsets={kept: offsets[("t", 0)], gone: offsets[("t", 0)]})
    assert mixed == {kept: ErrorCode.NONE, gone: ErrorCode.STALE_MEMBER_EPOCH}
    assert coord.unstable_offsets(G, [kept, gone]) == {kept}  # nothing of the refused partition was written
    unknown = await coord.txn_commit_offsets(G, producer_id=6, producer_epoch=0, member_id="Z", generation=2,
                                             offsets=offsets)
    assert unknown == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    future = await coord.txn_commit_offsets(G, producer_id=6, producer_epoch=0, member_id="A", generation=9,
                                            offsets=offsets)
    assert future == {("t", 0): ErrorCode.FENCED_MEMBER_EPOCH}
