"""Partition moves for pod churn: drain before scale-down, spread after scale-up, moving as little as possible."""

from __future__ import annotations

from collections import Counter

import pytest

from kelp.operator.plans.moves import DrainBlocked, drain_plan, rebalance_plan


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


GiB = 2**30


def test_drain_moves_only_what_fits_the_staying_brokers_disks() -> None:
    # Issue 32, item 5: the drain ignored disk space. Broker 3 leaves with a 6 GiB partition and a 1 GiB one;
    # broker 0 (the least loaded by replica count) has 2 GiB free, broker 1 has 7 GiB free.
    before = [{"topic": "big", "partition": 0, "replicas": [3, 2], "size_bytes": 6 * GiB},
              {"topic": "small", "partition": 0, "replicas": [3, 2], "size_bytes": 1 * GiB},
              {"topic": "other", "partition": 0, "replicas": [1, 2], "size_bytes": 3 * GiB}]
    capacity = {0: 2 * GiB, 1: 11 * GiB, 2: 100 * GiB}  # what each staying broker's volume holds
    plan = drain_plan(before, keep=[0, 1, 2], capacity=capacity)
    targets = {m["topic"]: m["replicas"] for m in plan}
    assert targets["big"] == [1, 2], "6 GiB only fits broker 1 (3 used of 11, filled to 85% at most)"
    assert targets["small"] == [0, 2], "1 GiB fits broker 0, the least loaded"
    # Nowhere to put it: refused, naming the partition, its size and the free space, before anything moves.
    with pytest.raises(DrainBlocked, match=r"big-0 \(6\.0 GiB\).*broker 0: 2\.0 GiB free of 2\.0 GiB; "
                                           r"broker 1: 1\.0 GiB free of 4\.0 GiB"):
        drain_plan(before, keep=[0, 1, 2], capacity={0: 2 * GiB, 1: 4 * GiB, 2: 100 * GiB})


def test_drain_avoids_brokers_a_cancelled_move_stalled_on() -> None:
    # After `kelp.dev/reassignment=cancel` the next pass planned the very same moves onto the broker they stalled on.
    before = parts({"orders": [[3, 1], [3, 2]]})
    first = drain_plan(before, keep=[0, 1, 2])
    stalled = {r for m in first for r in m["replicas"] if r in (0, 1, 2)} - {1, 2}
    assert stalled == {0}, first
    again = drain_plan(before, keep=[0, 1, 2], avoid={0})
    assert all(0 not in m["replicas"] for m in again), again
    # Avoiding is a preference: with no other broker left it is still used.
    assert drain_plan(parts({"t": [[3, 1, 2]]}), keep=[0, 1, 2], avoid={0})[0]["replicas"] == [0, 1, 2]
