"""KIP-848's server-side assignors: every subscribed partition goes to exactly one subscriber, uniform is balanced
and sticky, range gives contiguous ranges that line co-partitioned topics up (issue 36)."""

from __future__ import annotations

import random

import pytest

from kelp.broker.groups.consumer.assignors import MemberSubscription, assign_range, assign_uniform
from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError


def subs(**members: str) -> dict[str, MemberSubscription]:
    return {m: MemberSubscription(frozenset(t for t in topics.split(",") if t)) for m, topics in members.items()}


def owners(result: dict[str, dict[str, frozenset[int]]]) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for m, a in result.items():
        for t, ps in a.items():
            for p in ps:
                out.setdefault((t, p), []).append(m)
    return out


def check_complete(members, partitions, result, balanced: bool = True) -> None:
    held = owners(result)
    for t, n in partitions.items():
        subscribers = {m for m, s in members.items() if t in s.topic_ids}
        for p in range(n):
            if subscribers:
                assert len(held.get((t, p), [])) == 1, f"{t}-{p} held by {held.get((t, p))}"
                assert held[(t, p)][0] in subscribers
            else:
                assert (t, p) not in held
    assert all(p < partitions[t] for t, p in held)
    if not balanced:  # range balances each topic, not the whole
        return
    # Balanced where subscriptions allow: no partition could go to an eligible member holding two fewer.
    load = {m: sum(len(ps) for ps in result.get(m, {}).values()) for m in members}
    for (t, _p), [holder] in held.items():
        for m, s in members.items():
            if t in s.topic_ids:
                assert load[m] + 1 >= load[holder], f"{t} could move from {holder} ({load[holder]}) to {m}"


@pytest.mark.parametrize("seed", range(40))
def test_uniform_is_complete_balanced_and_sticky_under_random_membership(seed: int) -> None:
    rng = random.Random(seed)
    partitions = {f"t{i}": rng.randint(1, 12) for i in range(rng.randint(1, 4))}
    homogeneous = seed % 2 == 0
    members = {}
    for i in range(rng.randint(1, 7)):
        count = rng.randint(1, len(partitions))
        topics = set(partitions) if homogeneous else set(rng.sample(sorted(partitions), count))
        members[f"m{i}"] = MemberSubscription(frozenset(topics))
    first = assign_uniform(members, partitions, {})
    check_complete(members, partitions, first)
    if homogeneous:
        counts = [sum(len(ps) for ps in a.values()) for a in first.values()]
        assert max(counts) - min(counts) <= 1, counts
    # A member joins: the balance holds again, and (same subscriptions) nobody else gains anything.
    joined = dict(members, new=MemberSubscription(frozenset(partitions)))
    second = assign_uniform(joined, partitions, first)
    check_complete(joined, partitions, second)
    for m in members if homogeneous else ():
        for t, ps in second[m].items():
            assert ps <= first[m].get(t, frozenset()), f"{m} gained {t}:{ps - first[m].get(t, frozenset())}"
    if homogeneous:
        counts = [sum(len(ps) for ps in a.values()) for a in second.values()]
        assert max(counts) - min(counts) <= 1, counts
    # A member leaves: only its partitions move.
    gone = sorted(members)[0]
    left = {m: s for m, s in members.items() if m != gone}
    if left:
        third = assign_uniform(left, partitions, first)
        check_complete(left, partitions, third)
        if homogeneous:
            for m in left:
                for t, ps in first[m].items():
                    assert ps <= third[m].get(t, frozenset()), f"{m} lost {t}"


def test_uniform_spreads_a_heterogeneous_group_where_it_can() -> None:
    members = subs(a="x,y", b="y", c="y")
    result = assign_uniform(members, {"x": 3, "y": 6}, {})
    check_complete(members, {"x": 3, "y": 6}, result)
    assert result["a"]["x"] == frozenset({0, 1, 2})
    assert [len(result[m].get("y", ())) for m in "bc"] == [3, 3]  # a, with all of x, takes none of y


def test_range_gives_contiguous_ranges_in_member_order_and_lines_topics_up() -> None:
    members = subs(b="x,y", a="x,y", c="x,y")
    result = assign_range(members, {"x": 7, "y": 7}, {})
    assert result["a"]["x"] == frozenset({0, 1, 2}) and result["b"]["x"] == frozenset({3, 4})
    assert result["c"]["x"] == frozenset({5, 6})
    for m in "abc":
        assert result[m]["x"] == result[m]["y"]  # co-partitioned
    check_complete(members, {"x": 7, "y": 7}, result, balanced=False)


def test_range_with_more_members_than_partitions_leaves_some_empty() -> None:
    members = subs(a="x", b="x", c="x")
    result = assign_range(members, {"x": 2}, {})
    assert result == {"a": {"x": frozenset({0})}, "b": {"x": frozenset({1})}, "c": {}}


@pytest.mark.parametrize("settings, why", [
    ({"group.consumer.heartbeat.interval.ms": 5000, "group.consumer.session.timeout.ms": 5000}, "must be less"),
    ({"group.consumer.assignors": "uniform,sticky"}, "unknown assignor 'sticky'"),
    ({"group.consumer.assignors": ""}, "at least one assignor"),
    ({"group.consumer.session.timeout.ms": 0}, "must be > 0"),
])
def test_consumer_group_configs_are_validated_at_load(settings: dict, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        BrokerConfig.load(env={}, overrides=settings)


def test_assignors_accept_kafka_class_names() -> None:
    cfg = BrokerConfig.load(env={}, overrides={
        "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.RangeAssignor,uniform"})
    assert cfg["group.consumer.assignors"] == ["range", "uniform"]
