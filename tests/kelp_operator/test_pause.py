"""`kelp.dev/pause-reconciliation: "true"` on a Topic or ConsumerGroup, and resuming a paused Cluster.

What a user relies on: while a resource is paused (during an incident, a
migration, a manual fix) the operator changes nothing for it — no topic
created, grown or altered, no offsets reset — yet its status still shows
what the brokers report and says it is paused (Ready=Unknown,
`ReconciliationPaused`); removing the annotation applies what the spec says
at once and leaves an Event (`ReconciliationResumed`).
"""

from __future__ import annotations

import asyncio

from kelp.operator.reconcile.cluster import reconcile_cluster, reconcile_group, reconcile_topic
from kelp.operator.reconcile.resync import status_patch
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, resource, statefulset

PAUSE = {"kelp.dev/pause-reconciliation": "true"}
CLUSTER = resource("Cluster", "demo", {"brokers": 3})


def cond(conds: list[dict], type_: str) -> dict:
    return next(c for c in conds if c["type"] == type_)


def test_a_paused_topic_is_observed_not_changed() -> None:
    topic = resource("Topic", "orders", {"cluster": "demo", "partitions": 3, "config": {"retention.ms": "60000"}},
                     annotations=PAUSE)
    kube = FakeKube(CLUSTER, topic)
    admin = FakeAdmin(brokers=[0, 1, 2], topics={"orders": [{"replicas": [0, 1], "isr": [0, 1]}]})
    status, conds = asyncio.run(reconcile_topic(topic, kube, admin_of(admin)))
    assert admin.writes() == [], "nothing may change while paused"
    ready = cond(conds, "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "ReconciliationPaused")
    assert "kelp.dev/pause-reconciliation=true" in ready["message"]
    assert (status["partitions"], status["replicationFactor"]) == (1, 2), "status shows what the brokers report"

    # A paused Topic whose topic does not exist yet does not create it.
    fresh = resource("Topic", "payments", {"cluster": "demo", "partitions": 3}, annotations=PAUSE)
    _, conds = asyncio.run(reconcile_topic(fresh, FakeKube(CLUSTER, fresh), admin_of(admin)))
    assert "payments" not in admin.topics and admin.writes() == []
    assert cond(conds, "Ready")["reason"] == "ReconciliationPaused"

    # Resumed: the spec is applied on the next pass.
    del topic["metadata"]["annotations"]["kelp.dev/pause-reconciliation"]
    status, conds = asyncio.run(reconcile_topic(topic, kube, admin_of(admin)))
    assert status["partitions"] == 3 and ("PUT", "/admin/v1/topics/orders/configs") in admin.writes()
    assert cond(conds, "Ready")["reason"] == "TopicReady"


def test_a_paused_consumer_group_resets_no_offsets() -> None:
    group = resource("ConsumerGroup", "audit", {"cluster": "demo", "resetOffsets": {
        "requestId": "replay-1", "topic": "orders", "to": "earliest"}}, annotations=PAUSE)
    kube = FakeKube(CLUSTER, group)
    admin = FakeAdmin(brokers=[0, 1, 2])
    admin.groups["audit"] = {"state": "Empty", "members": [], "total_lag": 7, "offsets": [
        {"topic": "orders", "partition": 0, "committed_offset": 3, "log_end_offset": 10, "lag": 7}]}
    status, conds = asyncio.run(reconcile_group(group, kube, admin_of(admin)))
    assert admin.writes() == [] and "lastAppliedRequestId" not in status
    reset = cond(conds, "OffsetsReset")
    assert (reset["status"], reset["reason"]) == ("False", "ReconciliationPaused") and "replay-1" in reset["message"]
    assert cond(conds, "Ready")["reason"] == "GroupObserved" and status["totalLag"] == 7

    del group["metadata"]["annotations"]["kelp.dev/pause-reconciliation"]
    status, conds = asyncio.run(reconcile_group(group, kube, admin_of(admin)))
    assert admin.writes() == [("POST", "/admin/v1/groups/audit/reset-offsets")]
    assert status["lastAppliedRequestId"] == "replay-1" and cond(conds, "OffsetsReset")["reason"] == "Applied"


def test_resuming_a_paused_cluster_reconciles_at_once_and_says_so() -> None:
    body = resource("Cluster", "demo", {"brokers": 3}, annotations=PAUSE)
    kube = FakeKube(body, statefulset("demo", 3, revision="rev-2"),
                    *(broker_pod("demo", n, revision="rev-1") for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], topics={"orders": [{"replicas": [0, 1, 2], "isr": [0, 1, 2]}]})

    def run() -> list[dict]:
        result = asyncio.run(reconcile_cluster(body, kube, admin_of(admin)))
        body["status"] = {**body["status"], **status_patch(body, result)}
        return result[1]
    run()
    assert kube.applied == [] and kube.deleted == [] and not kube.events("ReconciliationResumed")
    del body["metadata"]["annotations"]["kelp.dev/pause-reconciliation"]
    conds = run()
    (event,) = kube.events("ReconciliationResumed")
    assert event["type"] == "Normal" and "reconciling again" in event["message"]
    assert kube.applied and kube.deleted == [("Pod", "demo-2")], "the roll held back while paused goes ahead"
    assert cond(conds, "Progressing")["reason"] == "RollingRestart"
    run()
    assert kube.events("ReconciliationResumed")[0]["count"] == 1, "resumed once, not on every pass"
