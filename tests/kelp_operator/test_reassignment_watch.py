"""A partition move that stops progressing is reported, and can be cancelled or retried (finding 4 of issue 18).

What a user relies on: a scale-down that waits on a move which will never
finish (the new replica's broker died, its fetcher is stuck) does not wait
silently forever: after `spec.reassignment.stallTimeoutSeconds` without a
move completing or a new replica's log growing, the Cluster says
`ReassignmentStalled` with the partitions and why, an Event says it too, and
the annotation `kelp.dev/reassignment=cancel|retry` gets it out. Time is an
injected clock; each pass's status is kept as the API server would.
"""

from __future__ import annotations

import asyncio

from kelp.operator.reconcile.cluster import reconcile_cluster
from kelp.operator.reconcile.resync import status_patch
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, resource, statefulset

T0 = 1_800_000_000.0


class Cluster:
    """A 4 -> 3 scale-down whose drain moves one replica from broker 3 to broker 0."""

    def __init__(self, stall_s: int = 120) -> None:
        self.body = resource("Cluster", "demo", {"brokers": 3, "reassignment": {"stallTimeoutSeconds": stall_s}})
        self.kube = FakeKube(self.body, statefulset("demo", 4), *(broker_pod("demo", n) for n in range(4)))
        self.admin = FakeAdmin(brokers=[0, 1, 2, 3], topics={"orders": [
            {"replicas": [1, 2], "isr": [1, 2]}, {"replicas": [3, 1], "isr": [3, 1]}]})

    def reconcile(self, now: float) -> list[dict]:
        # Each pass reads the object afresh, as the runner does: annotations the last pass wrote included.
        self.body["metadata"]["annotations"] = dict(self.annotations())
        result = asyncio.run(reconcile_cluster(self.body, self.kube, admin_of(self.admin),
                                               clock_ms=lambda: int(now * 1000)))
        self.body["status"] = {**self.body["status"], **status_patch(self.body, result)}
        self.body["status"] = {k: v for k, v in self.body["status"].items() if v is not None}
        return result[1]

    def annotate(self, key: str, value: str) -> None:
        self.kube.objects[("Cluster", "ns", "demo")]["metadata"]["annotations"][key] = value
        self.body["metadata"]["annotations"][key] = value

    def annotations(self) -> dict:
        return self.kube.objects[("Cluster", "ns", "demo")]["metadata"]["annotations"]


def progressing(conds: list[dict]) -> dict:
    return next(c for c in conds if c["type"] == "Progressing")


def test_a_move_without_progress_is_reported_after_the_deadline_and_cancel_gets_out() -> None:
    c = Cluster(stall_s=120)
    assert progressing(c.reconcile(T0))["reason"] == "Draining"
    assert c.admin.reassign_calls() == [{"partitions": [{"topic": "orders", "partition": 1, "replicas": [0, 1]}]}]
    # The new replica on broker 0 fetches for a while: progress, no report.
    c.admin.log_end[("orders", 1, 0)] = 500
    assert progressing(c.reconcile(T0 + 100))["reason"] == "Draining"
    assert c.body["status"]["reassignment"]["lastProgressTime"] == "2027-01-15T08:01:40Z"
    # Then nothing moves for longer than the deadline.
    assert progressing(c.reconcile(T0 + 200))["reason"] == "Draining"
    stalled = progressing(c.reconcile(T0 + 221))
    assert (stalled["status"], stalled["reason"]) == ("False", "ReassignmentStalled"), stalled
    assert "orders-1 (broker 0 log end 500 of 0)" in stalled["message"]
    assert "no progress for 121s" in stalled["message"] and "kelp.dev/reassignment=cancel" in stalled["message"]
    assert c.body["status"]["reassignment"]["stalledPartitions"] == ["orders-1"]
    assert c.kube.events("ReassignmentStalled")[0]["type"] == "Warning"
    assert c.kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 4  # still not shrunk

    c.annotate("kelp.dev/reassignment", "cancel")
    cancelled = progressing(c.reconcile(T0 + 230))
    assert cancelled["reason"] == "ReassignmentCancelled"
    assert c.admin.reassign_calls()[-1] == {"partitions": [{"topic": "orders", "partition": 1, "replicas": None}]}
    # Back on brokers 3 and 1 (the controller's cancel keeps the set; see docs/operator.md on the order).
    assert sorted(c.admin.topics["orders"][1]["replicas"]) == [1, 3] and "kelp.dev/reassignment" not in c.annotations()
    assert "reassignment" not in c.body["status"]
    # The drain is still wanted: the next pass plans it again, with a fresh deadline — and not onto broker 0,
    # which the cancelled move stalled on (issue 32, item 5: the same move came back and stalled again).
    assert c.annotations()["kelp.dev/drain-avoid"] == "0" and "avoids broker(s) [0]" in cancelled["message"]
    assert progressing(c.reconcile(T0 + 240))["reason"] == "Draining"
    assert len(c.admin.reassign_calls()) == 3
    assert c.admin.reassign_calls()[-1] == {"partitions": [{"topic": "orders", "partition": 1, "replicas": [1, 2]}]}
    assert c.body["status"]["reassignment"]["lastProgressTime"] == "2027-01-15T08:04:00Z"
    # Once the drain is done the mark goes.
    c.admin.complete("orders", 1)
    c.reconcile(T0 + 250)
    assert c.kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 3
    assert "kelp.dev/drain-avoid" not in c.annotations()


def test_retry_cancels_and_submits_the_same_moves_again() -> None:
    c = Cluster(stall_s=60)
    c.reconcile(T0)
    assert progressing(c.reconcile(T0 + 61))["reason"] == "ReassignmentStalled"
    c.annotate("kelp.dev/reassignment", "retry")
    assert progressing(c.reconcile(T0 + 62))["reason"] == "ReassignmentRetried"
    assert c.admin.reassign_calls()[-2:] == [
        {"partitions": [{"topic": "orders", "partition": 1, "replicas": None}]},
        {"partitions": [{"topic": "orders", "partition": 1, "replicas": [0, 1]}]}]
    assert c.admin.topics["orders"][1]["adding"] == [0]
    # Once the move completes, the drain finishes and the StatefulSet shrinks.
    c.admin.complete("orders", 1)
    c.reconcile(T0 + 70)
    assert c.kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 3
    assert "reassignment" not in c.body["status"]
