"""Rolling restarts (Strimzi's KafkaRoller rule): who restarts next, who waits, and why.

What a user relies on: a config change reaches every broker pod, one at a
time, without an acks=all producer ever seeing NOT_ENOUGH_REPLICAS because
of the roll where that can be avoided; a roll never takes a partition
offline by restarting its last in-sync replica, nor one already below
min.insync further down (issue 32); it never deadlocks on partitions that
cannot stay available by design (replication factor 1, RF <= min.insync)
or are offline, nor on pods that are stuck (they restart first), but a
readiness blip is waited for, never restarted into a second broker down;
when it does wait, the condition names the partitions or pods and why.
"""

from __future__ import annotations

from kelp.operator.model.status import rfc3339
from kelp.operator.plans.restarts import next_restart

NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DEADLINE_S = 300


def _ago(seconds: float) -> str:
    return rfc3339(NOW_MS - int(seconds * 1000))


def pod(n: int, rev: str, *, ready: bool = True, deleting: bool = False, unready_for_s: float = 5,
        waiting: str | None = None, unschedulable: bool = False) -> dict:
    """Broker pod n on revision `rev`; an unready one has been so for `unready_for_s`, its container waiting with
    reason `waiting` (CrashLoopBackOff, ...) if given."""
    meta = {"name": f"demo-{n}", "labels": {"controller-revision-hash": rev}, "creationTimestamp": _ago(3600)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    ready_cond = {"type": "Ready", "status": "True" if ready else "False",
                  "lastTransitionTime": _ago(3000 if ready else unready_for_s)}
    status: dict = {"conditions": [ready_cond], "phase": "Running"}
    if waiting:
        status["containerStatuses"] = [{"name": "kelp", "ready": False, "restartCount": 4,
                                        "state": {"waiting": {"reason": waiting, "message": "back-off 40s"}}}]
    if unschedulable:
        status = {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/1 nodes are available: 1 Insufficient cpu.", "lastTransitionTime": _ago(unready_for_s)}]}
    return {"metadata": meta, "status": status}


def restart(pods: list[dict], topics: list[dict] | None, controller: int, **kw):
    """next_restart at NOW_MS with the default deadline, every pod of the StatefulSet expected."""
    kw.setdefault("replicas", len(pods))
    return next_restart(pods, "new", topics, controller, now_ms=NOW_MS, stuck_after_s=DEADLINE_S, **kw)


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


def test_never_restarts_a_partitions_last_in_sync_replica_nor_one_already_below_min_isr() -> None:
    # Issue 32, item 2: orders-1 (RF 3, min.insync 2) is down to ISR [2]. Restarting broker 2 takes it offline
    # (for good if the new config crash-loops); KafkaRoller refuses, and so must we. Broker 1 is not in its ISR:
    # restarting it costs orders-1 nothing, so the roll goes on with it.
    topics = [topic("orders", "2", [([0, 1, 2], [0, 1, 2]), ([1, 2, 0], [2]), ([2, 0, 1], [2, 0, 1])])]
    d = next_restart(OLD3, "new", topics, controller=0)
    assert d.pod == "demo-1" and d.reason == "RollingRestart", d
    # Only broker 2 left to restart: the roll waits, and says why.
    d = next_restart([pod(0, "new"), pod(1, "new"), pod(2, "old")], "new", topics, controller=0)
    assert d.pod is None and d.reason == "RestartBlocked", d
    assert "orders-1 (in sync [2] of [1, 2, 0], min.insync.replicas 2)" in d.message
    assert "its last in-sync replica" in d.message
    # Below min.insync with two in sync (RF 4, min.insync 3): restarting one of them is refused too.
    topics = [topic("wide", "3", [([0, 1, 2, 3], [1, 2])])]
    d = next_restart([pod(0, "new"), pod(1, "new"), pod(2, "old"), pod(3, "new")], "new", topics, controller=0)
    assert d.pod is None and d.reason == "RestartBlocked", d
    assert "already below min.insync.replicas" in d.message
    # The override lets it through, and says what it costs.
    d = next_restart([pod(0, "new"), pod(1, "new"), pod(2, "old")], "new",
                     [topic("orders", "2", [([1, 2, 0], [2])])], controller=0, ignore_min_insync=True)
    assert d.pod == "demo-2" and "offline" in d.message, d


def test_the_last_in_sync_replica_blocks_even_when_rf_is_at_min_isr() -> None:
    # RF 2 with min.insync 2 loses acks=all through any restart (by design), but a partition down to one in-sync
    # replica still serves reads and acks=1 writes: restarting that one replica takes it offline.
    topics = [topic("pairs", "2", [([1, 2], [2])])]
    d = next_restart([pod(0, "new"), pod(1, "new"), pod(2, "old")], "new", topics, controller=0)
    assert d.pod is None and d.reason == "RestartBlocked", d
    assert "pairs-0" in d.message and "its last in-sync replica" in d.message
    # RF 1 has no other replica that could catch up: a restart is the only way, as with any roll.
    topics = [topic("single", "1", [([2], [2])])]
    d = next_restart([pod(0, "new"), pod(1, "new"), pod(2, "old")], "new", topics, controller=0)
    assert d.pod == "demo-2" and "single-0" in d.message, d


def test_an_offline_partition_does_not_block() -> None:
    # orders-1 has no leader (the controller found no live in-sync replica and kept its last ISR, [1, 2]): it takes
    # no writes whatever restarts, so a restart of broker 2 or 1 must not wait for it to "catch up".
    topics = [topic("orders", "2", [([0, 1, 2], [0, 1, 2]), ([0, 1, 2], [1, 2]), ([2, 0, 1], [2, 0, 1])])]
    topics[0]["partitions"][1]["leader"] = -1
    d = next_restart(OLD3, "new", topics, controller=0)
    assert d.pod == "demo-2" and d.reason == "RollingRestart", d
    assert "orders-1 offline (no leader) already" in d.message
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


def test_a_readiness_blip_mid_roll_is_waited_for_not_restarted() -> None:
    # Issue 32, item 3: broker 1 is restarting (new revision, not Ready yet) and the controller, broker 2, fails
    # its readiness probe for a few seconds. The old rule restarted every unready pod at once, without the
    # availability check and before waiting for broker 1: two brokers down, the controller not last.
    full = [topic("orders", "2", [([0, 1, 2], [0, 1, 2])])]
    pods = [pod(0, "old"), pod(1, "new", ready=False), pod(2, "old", ready=False)]
    d = next_restart(pods, "new", full, controller=2)
    assert d.pod is None and d.reason == "RestartWaiting" and "demo-1" in d.message, d
    # Nothing is starting, but the controller blips: wait for it, it is not stuck (6 s of a 300 s deadline).
    pods = [pod(0, "new"), pod(1, "new"), pod(2, "old", ready=False, unready_for_s=6)]
    d = restart(pods, full, controller=2)
    assert d.pod is None and d.reason == "RestartWaiting", d
    assert "demo-2" in d.message and "not Ready for 6s" in d.message and "300s" in d.message
    # A blip of a pod on the new revision while others wait: nothing restarts either.
    pods = [pod(0, "old"), pod(1, "old"), pod(2, "new", ready=False, unready_for_s=2)]
    assert restart(pods, full, controller=2).pod is None


def test_only_stuck_pods_are_force_restarted() -> None:
    full = [topic("orders", "2", [([0, 1, 2], [0, 1, 2])])]
    # Not Ready for longer than the deadline: stuck, restarted without the availability check.
    d = restart([pod(0, "old", ready=False, unready_for_s=301), pod(1, "old"), pod(2, "old")], full, controller=2)
    assert d.pod == "demo-0" and d.reason == "RestartingUnready" and "301s" in d.message, d
    # A crash-looping (or image-less, or unschedulable) container is stuck at once: the new revision may be its fix.
    for stuck in (pod(0, "old", ready=False, waiting="CrashLoopBackOff"),
                  pod(0, "old", ready=False, waiting="ImagePullBackOff"),
                  pod(0, "old", ready=False, unschedulable=True)):
        d = restart([stuck, pod(1, "old"), pod(2, "old")], full, controller=2)
        assert d.pod == "demo-0" and d.reason == "RestartingUnready", d
    # Even when no broker answers at all (every pod crash-looping on the old config).
    d = restart([pod(n, "old", ready=False, waiting="CrashLoopBackOff") for n in range(3)], None, controller=-1)
    assert d.pod == "demo-2" and d.reason == "RestartingUnready", d
    # ...but never while another pod is starting or missing.
    d = restart([pod(0, "old", ready=False, waiting="CrashLoopBackOff"), pod(1, "new", ready=False), pod(2, "old")],
                full, controller=2)
    assert d.pod is None and d.reason == "RestartWaiting" and "demo-1" in d.message, d
    d = restart([pod(0, "old", ready=False, waiting="CrashLoopBackOff"), pod(2, "old")], full, controller=2,
                replicas=3)
    assert d.pod is None and d.reason == "RestartWaiting" and "demo-1" in d.message, d


def test_a_missing_pod_is_waited_for() -> None:
    # Between a pod's deletion and the StatefulSet creating it again, it is in no list: a roll that took the
    # remaining Ready pods for the whole cluster would restart a second broker meanwhile.
    full = [topic("orders", "2", [([0, 1, 2], [0, 1, 2])])]
    d = restart([pod(0, "old"), pod(2, "old")], full, controller=0, replicas=3)
    assert d.pod is None and d.reason == "RestartWaiting" and "demo-1" in d.message and "created" in d.message, d


def test_a_restarted_pod_that_never_becomes_ready_stalls_the_roll_with_a_warning() -> None:
    # Issue 32, item 8: no deadline meant RestartWaiting forever. Past it, the roll says it stalled and why.
    full = [topic("orders", "2", [([0, 1, 2], [0, 1, 2])])]
    pods = [pod(0, "old"), pod(1, "old"), pod(2, "new", ready=False, unready_for_s=400, waiting="CrashLoopBackOff")]
    d = restart(pods, full, controller=0)
    assert d.pod is None and d.reason == "RestartStalled", d
    assert "demo-2" in d.message and "400s" in d.message and "CrashLoopBackOff" in d.message


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
