"""Partition moves for pod churn: drain before scale-down, spread after scale-up, moving as little as possible."""

from __future__ import annotations

from collections import Counter

import pytest

from kelp.operator.plans import DrainBlocked, drain_plan, rebalance_plan


def parts(assignments: dict[str, list[list[int]]]) -> list[dict]:
    return [{"topic": t, "partition": i, "replicas": r} for t, rs in assignments.items() for i, r in enumerate(rs)]


def apply(partitions: list[dict], plan: list[dict]) -> list[dict]:
    moves = {(m["topic"], m["partition"]): m["replicas"] for m in plan}
    return [{**p, "replicas": moves.get((p["topic"], p["partition"]), p["replicas"])} for p in partitions]


def load(partitions: list[dict]) -> Counter:
    return Counter(r for p in partitions for r in p["replicas"])


def test_drain_replaces_only_the_leaving_brokers_replicas_and_spreads_them() -> None:
    before = parts({"orders": [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1]]})
    plan = drain_plan(before, keep=[0, 1, 2])
    after = apply(before, plan)
    assert all(set(p["replicas"]) <= {0, 1, 2} and len(set(p["replicas"])) == 3 for p in after)
    assert {(m["topic"], m["partition"]) for m in plan} == {("orders", 1), ("orders", 2), ("orders", 3), ("orders", 4)}
    # Replicas already on staying brokers keep their place (and the leader preference with it).
    assert after[1]["replicas"][:2] == [1, 2] and after[4]["replicas"][1:] == [0, 1]
    assert load(after) == Counter({0: 5, 1: 5, 2: 5})


def test_drain_keeps_racks_apart_when_it_can() -> None:
    racks = {0: "a", 1: "b", 2: "a", 3: "c"}
    plan = drain_plan(parts({"t": [[0, 3]]}), keep=[0, 1, 2], racks=racks)
    assert plan == [{"topic": "t", "partition": 0, "replicas": [0, 1]}]  # 2 would share rack a with 0


def test_drain_refuses_when_too_few_brokers_would_remain() -> None:
    with pytest.raises(DrainBlocked, match="t-0 has 3 replicas but only 2 broker"):
        drain_plan(parts({"t": [[0, 1, 2]]}), keep=[0, 1])


def test_rebalance_fills_new_brokers_with_the_fewest_moves() -> None:
    before = parts({"orders": [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [1, 0, 2], [2, 1, 0]]})
    plan = rebalance_plan(before, [0, 1, 2, 3, 4])
    after = apply(before, plan)
    counts = load(after)
    assert max(counts.values()) - min(counts[b] for b in range(5)) <= 1
    assert counts[3] >= 3 and counts[4] >= 3
    moves = sum(len(set(m["replicas"]) - set(before[m["partition"]]["replicas"])) for m in plan)
    assert moves == 6  # 18 replicas over 5 brokers (4,4,4,3,3): exactly 6 replicas change broker
    assert all(len(set(p["replicas"])) == 3 for p in after)
    assert all(m["replicas"][0] == before[m["partition"]]["replicas"][0] for m in plan), "leaders should not move"
    assert rebalance_plan(after, [0, 1, 2, 3, 4]) == []  # balanced: nothing more to do
