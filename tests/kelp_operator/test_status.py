"""Status the operator writes: conditions that only move on real change, counts that match what was seen.

And nothing shown that this pass did not see: counts observed earlier are
removed (not left stale in `kubectl get`) when no broker answers.
"""

from __future__ import annotations

import asyncio

import pytest

from kelp.operator.model.status import (
    Observed,
    cluster_status,
    condition,
    group_status,
    merge_conditions,
    rfc3339,
    rfc3339_ms,
)
from kelp.operator.reconcile.runner import Runner
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, resource, statefulset


def test_last_transition_time_moves_only_when_the_status_changes() -> None:
    first = merge_conditions([], [condition("Ready", False, "PodsNotReady", "1 of 3")], generation=1, now="T1")
    assert first == [{"type": "Ready", "status": "False", "reason": "PodsNotReady", "message": "1 of 3",
                      "observedGeneration": 1, "lastTransitionTime": "T1"}]
    again = merge_conditions(first, [condition("Ready", False, "PodsNotReady", "2 of 3")], generation=2, now="T2")
    assert again[0]["lastTransitionTime"] == "T1" and again[0]["message"] == "2 of 3"
    assert again[0]["observedGeneration"] == 2
    ready = merge_conditions(again, [condition("Ready", True, "ClusterReady", "ok")], generation=2, now="T3")
    assert ready[0]["lastTransitionTime"] == "T3" and ready[0]["status"] == "True"


def test_times_are_written_as_the_api_server_writes_them() -> None:
    """Wall-clock milliseconds (kelp.clock) in, whole UTC seconds out, and back."""
    assert rfc3339(1_800_000_000_999) == "2027-01-15T08:00:00Z"
    assert rfc3339_ms("2027-01-15T08:00:00Z") == 1_800_000_000_000
    assert rfc3339_ms(rfc3339(1_800_000_100_500)) == 1_800_000_100_000


def _topic(name: str, parts: list[tuple[int, list[int], list[int]]], internal: bool = False) -> dict:
    return {"name": name, "internal": internal, "partitions": [
        {"partition": i, "leader": leader, "replicas": replicas, "isr": isr}
        for i, (leader, replicas, isr) in enumerate(parts)]}


def test_cluster_status_counts_what_the_brokers_report() -> None:
    observed = Observed(cluster={"controller": 1, "brokers": [{"id": 0}, {"id": 1}, {"id": 2}]}, topics=[
        _topic("orders", [(0, [0, 1, 2], [0, 1, 2]), (1, [1, 2, 0], [1, 2])]),
        _topic("clicks", [(-1, [2], [])]),
        _topic("__consumer_offsets", [(0, [0, 1, 2], [0, 1, 2])], internal=True),
    ])
    status, conds = cluster_status(desired=3, ready_brokers={0, 1, 2}, observed=observed, managed_topics={"orders"},
                                   bootstrap="demo.ns.svc:9092", generation=2, sts_generation_current=True)
    assert status == {"brokers": 3, "bootstrap": "demo.ns.svc:9092", "observedGeneration": 2, "controller": 1,
                      "topics": 2, "unmanagedTopics": ["clicks"], "underReplicatedPartitions": 1,
                      "offlinePartitions": 1, "readyBrokers": "3/3",
                      # broker 0 leads orders-0 and the offsets partition, 1 leads orders-1, 2 leads nothing.
                      "leaderSkew": 2, "preferredLeaderImbalance": 0}
    by = {c["type"]: c for c in conds}
    assert by["Ready"]["status"] == "True" and by["Progressing"]["status"] == "False"
    assert by["Degraded"]["status"] == "True" and "1 offline and 1 under-replicated" in by["Degraded"]["message"]


def test_cluster_is_not_ready_while_brokers_are_missing_or_unreachable() -> None:
    status, conds = cluster_status(desired=3, ready_brokers=set(), observed=Observed(error="connection refused"),
                                   managed_topics=set(), bootstrap="b", generation=1, sts_generation_current=True)
    ready = next(c for c in conds if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "BrokersUnreachable"
    assert "connection refused" in ready["message"] and status["controller"] == -1
    # Partition health was not seen either: Degraded is Unknown, not "every partition has its full ISR".
    degraded = next(c for c in conds if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("Unknown", "BrokersUnreachable")
    assert "connection refused" in degraded["message"]
    _, conds = cluster_status(desired=3, ready_brokers={0, 1}, observed=Observed(
        cluster={"controller": 0, "brokers": [{"id": 0}, {"id": 1}]}), managed_topics=set(), bootstrap="b",
        generation=1, sts_generation_current=True)
    ready = next(c for c in conds if c["type"] == "Ready")
    assert ready["reason"] == "BrokersMissing" and "2 of 3" in ready["message"]


def test_group_status_keeps_uncommitted_partitions_visible() -> None:
    described = {"state": "Stable", "total_lag": 7, "members": [
        {"member_id": "m-1", "client_id": "c", "client_host": "/10.0.0.9",
         "assignment": [{"topic": "orders", "partitions": [0, 1]}]}],
        "offsets": [{"topic": "orders", "partition": 0, "committed_offset": 3, "log_end_offset": 10, "lag": 7},
                    {"topic": "orders", "partition": 1, "committed_offset": None, "log_end_offset": 4, "lag": None}]}
    s = group_status(described)
    assert s["state"] == "Stable" and s["members"] == 1 and s["totalLag"] == 7
    assert s["memberList"] == [{"memberId": "m-1", "clientId": "c", "host": "/10.0.0.9",
                                "assignments": [{"topic": "orders", "partitions": [0, 1]}]}]
    assert s["offsets"] == [{"topic": "orders", "partition": 0, "committedOffset": 3, "logEndOffset": 10, "lag": 7},
                            {"topic": "orders", "partition": 1, "committedOffset": -1, "logEndOffset": 4}]
    assert group_status(None)["state"] == "Dead"


# What `kubectl get` showed from an earlier pass that saw the brokers (a printer column for most of them).
SEEN = {
    "Cluster": {"controller": 1, "topics": 4, "unmanagedTopics": ["clicks"], "underReplicatedPartitions": 2,
                "offlinePartitions": 1, "leaderSkew": 3, "preferredLeaderImbalance": 2},
    "Topic": {"topicName": "orders", "partitions": 6, "replicationFactor": 3, "partitionStates": [
        {"partition": 0, "leader": 1, "replicas": [1, 2, 0], "isr": [1, 2, 0]}]},
    "ConsumerGroup": {"state": "Stable", "members": 2, "memberList": [], "offsets": [], "totalLag": 1234},
}
SPECS = {"Cluster": {"brokers": 3}, "Topic": {"cluster": "demo", "partitions": 6},
         "ConsumerGroup": {"cluster": "demo"}}


@pytest.mark.parametrize("kind", sorted(SEEN))
def test_what_a_pass_could_not_observe_is_cleared_not_left_stale(kind: str) -> None:
    # Status is a merge patch: a field left out keeps its old value. A pass on which no broker answers must not
    # leave the last observed counts on show as if they were current.
    name = "demo" if kind == "Cluster" else "orders"
    body = resource(kind, name, SPECS[kind], status=dict(SEEN[kind]))
    cluster = body if kind == "Cluster" else resource("Cluster", "demo", SPECS["Cluster"])
    kube = FakeKube(cluster, body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    admin = FakeAdmin(brokers=[])
    admin.unreachable = True
    asyncio.run(Runner(kube, admin_of(admin)).reconcile(kind, "ns", name))
    status = kube.objects[(kind, "ns", name)]["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "BrokersUnreachable")
    left = {k: status[k] for k in SEEN[kind] if k in status}
    assert left == ({"controller": -1} if kind == "Cluster" else {"topicName": "orders"} if kind == "Topic" else {})
