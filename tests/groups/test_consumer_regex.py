"""KIP-848 regex subscriptions (ConsumerGroupHeartbeat v1's SubscribedTopicRegex, issue 36), attacked in the
coordinator: a regex matches whole topic names (RE2, off the event loop); one that does not compile is
INVALID_REGULAR_EXPRESSION and admits nobody, writes nothing; a topic created or deleted later is resolved again
in the background and reaches (or leaves) the members through the normal incremental reconciliation, never one
partition held twice; a member's topics beyond its regex are the ones its ACLs let it describe; the regex
survives a coordinator move. Time is the harness's manual clock; background resolutions are awaited, bounded."""

from __future__ import annotations

from kelp.broker.groups.consumer.heartbeat import HeartbeatResult
from kelp.errors import ErrorCode

from .harness import MemoryStore
from .test_consumer_reconciliation import Client, G, T, U, _Topic, make, no_partition_twice

V = "c" * 32


class RegexClient(Client):
    """A consumer subscribed with a pattern: it sends the regex (and no topic names) when it joins."""

    def __init__(self, coord: object, member_id: str, regex: str, **kw: object) -> None:
        super().__init__(coord, member_id, (), **kw)  # type: ignore[arg-type]
        self.regex = regex

    async def beat(self, **kw: object) -> HeartbeatResult:  # type: ignore[override]
        e = self.epoch if kw.get("epoch") is None else kw["epoch"]
        if e == 0 or kw.get("full"):
            kw.setdefault("subscribed_topic_regex", self.regex)
        return await super().beat(**kw)  # type: ignore[arg-type]


def parts(topic_id: str, n: int) -> set[tuple[str, int]]:
    return {(topic_id, p) for p in range(n)}


async def test_a_regex_matches_whole_topic_names() -> None:
    coord, _ = make()
    coord.fake_topics.by_name["tt"] = _Topic(V, 3)  # type: ignore[attr-defined]
    a = RegexClient(coord, "A", "t|u")  # "tt" is no whole match of t|u
    r = await a.beat()
    assert r.error == ErrorCode.NONE, r.message
    assert a.partitions() == parts(T, 6) | parts(U, 2)
    described = coord.consumer.describe(G).group
    assert described is not None and described.members["A"].subscribed_topic_regex == "t|u"
    assert described.subscribed_topics.keys() == {"t", "u"}


async def test_an_invalid_regex_is_refused_and_changes_nothing() -> None:
    store = MemoryStore()
    coord, _ = make(store)
    for bad in ("(?=t)", "t(", r"(a)\1"):
        r = await RegexClient(coord, "A", bad).beat()
        assert r.error == ErrorCode.INVALID_REGULAR_EXPRESSION, (bad, r)
        assert r.message and r.message.startswith(f"SubscribedTopicRegex `{bad}` is not a valid regular expression")
    assert G not in coord.consumer.groups and store.appends == 0
    # A member already in the group changing to a bad regex is refused and keeps its subscription and partitions.
    a = Client(coord, "A")
    await a.beat()
    before = coord.consumer.groups[G].members["A"]
    r = await a.beat(full=True, subscribed_topic_regex="[")
    assert r.error == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert coord.consumer.groups[G].members["A"] == before


async def test_a_topic_created_later_is_assigned_and_a_deleted_one_revoked() -> None:
    coord, _ = make()
    topics = coord.fake_topics  # type: ignore[attr-defined]
    a, b = RegexClient(coord, "A", "t.*"), Client(coord, "B", ("u",))
    await a.beat()
    await b.beat()
    assert a.partitions() == parts(T, 6) and b.partitions() == parts(U, 2)
    epoch = coord.consumer.groups[G].group_epoch
    topics.by_name["t-new"] = _Topic(V, 4)
    coord.consumer.topics_changed()
    coord.consumer.topics_changed()  # a burst of changes coalesces: one pass runs, one more may follow
    await coord.consumer.regexes_settled()
    assert coord.consumer.groups[G].group_epoch == epoch + 1  # one bump for the one change in what matched
    await a.beat()
    await b.beat()
    assert a.partitions() == parts(T, 6) | parts(V, 4) and b.partitions() == parts(U, 2)
    no_partition_twice(a, b)
    del topics.by_name["t-new"]
    coord.consumer.topics_changed()
    await coord.consumer.regexes_settled()
    await a.beat()  # revocation of the deleted topic's partitions, then acknowledged
    await a.beat()
    await b.beat()
    assert a.partitions() == parts(T, 6)
    assert coord.consumer.groups[G].state.value == "Stable"


async def test_a_new_matching_topic_moves_partitions_without_two_owners() -> None:
    coord, _ = make()
    topics = coord.fake_topics  # type: ignore[attr-defined]
    a, b = RegexClient(coord, "A", "t|v"), RegexClient(coord, "B", "t|v")
    await a.beat()
    await b.beat()
    for _ in range(3):
        await a.beat()
        await b.beat()
        no_partition_twice(a, b)
    topics.by_name["v"] = _Topic(V, 6)
    coord.consumer.topics_changed()
    await coord.consumer.regexes_settled()
    for _ in range(4):
        await b.beat()
        no_partition_twice(a, b)
        await a.beat()
        no_partition_twice(a, b)
    assert a.partitions() | b.partitions() == parts(T, 6) | parts(V, 6)
    assert len(a.partitions()) == len(b.partitions()) == 6


async def test_regex_matches_are_filtered_by_the_members_describe_acl() -> None:
    coord, _ = make()
    a = RegexClient(coord, "A", ".*")
    r = await a.beat(topic_filter=lambda names: {n for n in names if n != "u"})
    assert r.error == ErrorCode.NONE and a.partitions() == parts(T, 6)
    coord.fake_topics.by_name["w"] = _Topic(V, 1)  # type: ignore[attr-defined]
    coord.consumer.topics_changed()  # the background pass filters with the member's permissions too
    await coord.consumer.regexes_settled()
    await a.beat()
    assert a.partitions() == parts(T, 6) | parts(V, 1)


async def test_the_regex_survives_a_coordinator_move() -> None:
    store = MemoryStore()
    coord, _ = make(store)
    a = RegexClient(coord, "A", "u")
    await a.beat()
    new, _ = make(store)  # the partition's next leader replays it and resolves the regex again
    await new.consumer.regexes_settled()
    group = new.consumer.groups[G]
    assert group.members["A"].subscribed_topic_regex == "u" and group.resolved_regexes == {"u": frozenset({"u"})}
    a.coord = new
    r = await a.beat()
    assert r.error == ErrorCode.NONE and a.partitions() == parts(U, 2)
