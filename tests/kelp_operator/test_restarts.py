"""Rolling restarts (Strimzi's KafkaRoller rule): who restarts next, who waits, and why.

What a user relies on: a config change reaches every broker pod, one at a
time, without an acks=all producer ever seeing NOT_ENOUGH_REPLICAS because
of the roll where that can be avoided; a roll never deadlocks on partitions
that cannot stay available by design (replication factor <= min.insync),
are already below min.insync or are offline (no leader), nor on pods that are not Ready (they restart
first); when it does wait, the condition names the partitions and why.
"""

from __future__ import annotations

from kelp.operator.restarts import next_restart


def pod(n: int, rev: str, *, ready: bool = True, deleting: bool = False) -> dict:
    meta = {"name": f"demo-{n}", "labels": {"controller-revision-hash": rev}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def topic(name: str, min_isr: str, parts: list[tuple[list[int], list[int]]]) -> dict:
    """parts: (replicas, isr) per partition; the leader is the first in-sync replica."""
    return {"name": name, "configs": {"min.insync.replicas": {"value": min_isr, "source": "topic"}},
            "partitions": [{"partition": i, "replicas": replicas, "isr": isr, "leader": isr[0] if isr else -1}
                           for i, (replicas, isr) in enumerate(parts)]}


OLD3 = [pod(0, "old"), pod(1, "old"), pod(2, "old")]


def test_replication_factor_at_or_below_min_isr_never_deadlocks_the_roll() -> None:
    # Finding 1: RF 2 with min.insync.replicas 2 (and RF 1 with 1) can never keep acks=all available through a
    # restart; the old rule waited for the ISR to "fill" forever.
    topics = [topic("pairs", "2", [([0, 1], [0, 1]), ([1, 2], [1, 2]), ([2, 0], [2, 0])]),
              topic("single", "1", [([0], [0]), ([1], [1]), ([2], [2])])]
    d = next_restart(OLD3, "new", topics, controller=0)
    assert d.pod == "demo-2" and d.reason == "RollingRestart"
    # The restart goes ahead, but says which partitions lose acks=all writes while it runs, and why.
    assert "pairs-1" in d.message and "pairs-2" in d.message and "replication factor 2" in d.message


def test_partitions_already_below_min_isr_do_not_block() -> None:
    # orders-1 is already below min.insync (only broker 2 in sync): acks=all writes fail with or without a restart.
    topics = [topic("orders", "2", [([0, 1, 2], [0, 1, 2]), ([1, 2, 0], [2]), ([2, 0, 1], [2, 0, 1])])]
    d = next_restart(OLD3, "new", topics, controller=0)
    assert d.pod == "demo-2"
    assert "orders-1" in d.message and "already below min.insync.replicas" in d.message


def test_an_offline_partition_does_not_block() -> None:
    # orders-1 has no leader (the controller found no live in-sync replica and kept its last ISR, [1, 2]): it takes
    # no writes whatever restarts, so a restart of broker 2 or 1 must not wait for it to "catch up".
    topics = [topic("orders", "2", [([0, 1, 2], [0, 1, 2]), ([0, 1, 2], [1, 2]), ([2, 0, 1], [2, 0, 1])])]
    topics[0]["partitions"][1]["leader"] = -1
    d = next_restart(OLD3, "new", topics, controller=0)
    assert d.pod == "demo-2" and d.reason == "RollingRestart", d
    assert "orders-1 already below min.insync.replicas or offline" in d.message
    d = next_restart([pod(0, "old"), pod(1, "old"), pod(2, "new")], "new", topics, controller=0)
    assert d.pod == "demo-1", d


def test_a_blocked_restart_names_the_partitions_and_why() -> None:
    topics = [topic("orders", "2", [([0, 1, 2], [0, 1]), ([1, 2, 0], [1, 2]), ([2, 0, 1], [2, 0])])]
    d = next_restart(OLD3, "new", topics, controller=0)
    assert d.pod is None and d.reason == "RestartBlocked"
    assert "orders-0 (in sync [0, 1] of [0, 1, 2], min.insync.replicas 2)" in d.message
    assert "would leave 1 in sync" in d.message and "kelp.dev/restart-ignore-min-insync" in d.message


def test_the_override_annotation_lets_a_blocked_restart_through() -> None:
    topics = [topic("orders", "2", [([0, 1, 2], [0, 1]), ([1, 2, 0], [1, 2]), ([2, 0, 1], [2, 0])])]
    d = next_restart(OLD3, "new", topics, controller=0, ignore_min_insync=True)
    assert d.pod == "demo-2" and "min.insync.replicas not checked" in d.message


def test_unready_pods_restart_first_and_never_block_the_roll() -> None:
    # Finding 2: a pod that is not Ready cannot lose availability by restarting; the old rule waited for it.
    full = [topic("orders", "2", [([0, 1, 2], [0, 1, 2])])]
    d = next_restart([pod(0, "old", ready=False), pod(1, "old"), pod(2, "old")], "new", full, controller=2)
    assert d.pod == "demo-0" and d.reason == "RestartingUnready"
    # Even when the brokers cannot be asked at all (no ready broker): restarting unready pods is always safe.
    d = next_restart([pod(0, "old", ready=False), pod(1, "old", ready=False), pod(2, "old", ready=False)], "new",
                     None, controller=-1)
    assert d.pod == "demo-2" and d.reason == "RestartingUnready"


def test_waits_for_a_restarted_pod_and_for_terminating_ones() -> None:
    full = [topic("orders", "2", [([0, 1, 2], [0, 1, 2])])]
    d = next_restart([pod(0, "old"), pod(1, "new", ready=False), pod(2, "old")], "new", full, controller=2)
    assert d.pod is None and d.reason == "RestartWaiting" and "demo-1" in d.message
    d = next_restart([pod(0, "old"), pod(1, "old", deleting=True), pod(2, "old")], "new", full, controller=2)
    assert d.pod is None and "demo-1" in d.message and "terminat" in d.message
    # Ready pods are checked against the brokers' view: none without one.
    d = next_restart(OLD3, "new", None, controller=-1)
    assert d.pod is None and d.reason == "RestartWaiting"


def test_order_is_highest_ordinal_first_controller_last() -> None:
    full = [topic("orders", "2", [([0, 1, 2], [0, 1, 2])])]
    assert next_restart(OLD3, "new", full, controller=2).pod == "demo-1"
    assert next_restart([pod(0, "new"), pod(1, "new"), pod(2, "old")], "new", full, controller=2).pod == "demo-2"
    assert next_restart([pod(0, "new"), pod(1, "new"), pod(2, "new")], "new", full, controller=2) is None
