"""Pod churn against a real 3-broker cluster: drain before the StatefulSet shrinks, spread after it grows.

The Kubernetes side is faked (a StatefulSet whose pods are all Ready); the
brokers, their controller and its reassignments are real. What a user relies
on: scaling down never deletes a pod that still holds a replica, records
written before survive, and brokers added later receive replicas.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from kelp.operator.reconcile.brokers import BrokerAdmin
from kelp.operator.reconcile.cluster import REBALANCE_ANNOTATION, reconcile_cluster
from tests.kelp_operator.fakes import FakeKube, resource

pytestmark = pytest.mark.clients


def reconcile(body: dict, kube: FakeKube, urls: list[str], admin_cls: type[BrokerAdmin] = BrokerAdmin):
    async def go():
        async with aiohttp.ClientSession() as session:
            async def admin_for(_spec):
                return admin_cls(session, urls)
            return await reconcile_cluster(body, kube, admin_for)
    return asyncio.run(go())


def sts(kube: FakeKube) -> dict:
    return kube.objects[("StatefulSet", "ns", "demo")]


def progressing(conds: list[dict]) -> dict:
    return next(c for c in conds if c["type"] == "Progressing")


def holders(cluster, broker: int) -> list[str]:
    out = []
    for t in cluster.admin("/admin/v1/topics")["topics"]:
        for p in cluster.admin(f"/admin/v1/topics/{t['name']}")["partitions"]:
            if broker in p["replicas"]:
                out.append(f"{t['name']}-{p['partition']}")
    return out


def test_scale_down_drains_first_and_scale_up_spreads_replicas(cluster_factory) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    cluster = cluster_factory(3, settings={"offsets.topic.replication.factor": 2, "default.replication.factor": 2})
    urls = [b.http_url for b in cluster.brokers]
    cluster.admin("/admin/v1/topics", "POST", {"name": "orders", "partitions": 6, "replication_factor": 2})
    cluster.wait_fully_replicated("orders")
    bootstrap = ",".join(b.bootstrap for b in cluster.brokers)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(300):
        producer.send("orders", value=b"r%03d" % i, partition=i % 6)
    producer.flush()
    producer.close()
    assert holders(cluster, 2), "broker 2 should hold replicas before the scale-down"

    body = resource("Cluster", "demo", {"brokers": 2})
    kube = FakeKube(body, {"apiVersion": "apps/v1", "kind": "StatefulSet",
                           "metadata": {"name": "demo", "namespace": "ns", "generation": 1},
                           "spec": {"replicas": 3}, "status": {"readyReplicas": 3, "updatedReplicas": 3,
                                                               "observedGeneration": 1}})
    _, conds = reconcile(body, kube, urls)
    assert sts(kube)["spec"]["replicas"] == 3, "the StatefulSet must not shrink while broker 2 holds replicas"
    assert progressing(conds)["reason"] == "Draining" and "[2]" in progressing(conds)["message"]

    def drained():
        _, conds = reconcile(body, kube, urls)
        return conds if sts(kube)["spec"]["replicas"] == 2 else None
    conds = cluster.wait_for("broker 2 drained and the StatefulSet shrunk", drained, timeout=60)
    assert holders(cluster, 2) == []
    assert progressing(conds)["reason"] != "Draining"

    consumer = KafkaConsumer(bootstrap_servers=",".join(b.bootstrap for b in cluster.brokers[:2]),
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    tps = [TopicPartition("orders", p) for p in range(6)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got = {m.value for m in consumer}
    consumer.close()
    assert got == {b"r%03d" % i for i in range(300)}

    # Scale back up: broker 2 (still running here, as a new pod would be) receives replicas again, once.
    body["spec"]["brokers"] = 3
    kube.put(body)
    sts(kube)["status"]["readyReplicas"] = 3
    _, conds = reconcile(body, kube, urls)
    assert sts(kube)["spec"]["replicas"] == 3
    assert any(p == ("Cluster", "demo", {"metadata": {"annotations": {REBALANCE_ANNOTATION: "2->3"}}})
               for p in kube.patches)
    cluster.wait_for("replicas on broker 2 again", lambda: holders(cluster, 2), timeout=60)
    assert REBALANCE_ANNOTATION not in body["metadata"].get("annotations", {})


def test_topics_created_while_draining_never_land_on_the_broker_that_goes(cluster_factory) -> None:
    """Issue 32, item 1, on real brokers: the scale-down decommissions broker 2 first, so the controller places no
    topic created meanwhile on it; a topic created in the window before the mark (after the pass observed the
    cluster) is caught by the controller's answer right before the shrink, and drained too. Once the pod is gone
    (the broker stopped), every partition is still fully replicated on the brokers that stay."""
    cluster = cluster_factory(3, settings={"offsets.topic.replication.factor": 2, "default.replication.factor": 2})
    urls = [b.http_url for b in cluster.brokers]
    cluster.admin("/admin/v1/topics", "POST", {"name": "orders", "partitions": 6, "replication_factor": 2})
    cluster.wait_fully_replicated("orders")
    raced: list[str] = []

    class RacingAdmin(BrokerAdmin):
        """An application creates a topic just before the operator's first decommission reaches the controller."""

        async def request(self, method, path, body=None, *, urls=None):
            if method == "POST" and path.endswith("/decommission") and not raced:
                raced.append("race")
                cluster.admin("/admin/v1/topics", "POST", {"name": "race", "partitions": 6, "replication_factor": 2})
            return await super().request(method, path, body, urls=urls)

    body = resource("Cluster", "demo", {"brokers": 2})
    kube = FakeKube(body, {"apiVersion": "apps/v1", "kind": "StatefulSet",
                           "metadata": {"name": "demo", "namespace": "ns", "generation": 1},
                           "spec": {"replicas": 3}, "status": {"readyReplicas": 3, "updatedReplicas": 3,
                                                               "observedGeneration": 1}})
    at_shrink: list[dict] = []

    async def on_apply(manifest) -> None:
        if manifest["kind"] == "StatefulSet" and manifest["spec"]["replicas"] == 2:
            at_shrink.append(cluster.admin("/admin/v1/brokers/2/decommission"))
    kube.hooks[("apply", "StatefulSet")] = on_apply
    _, conds = reconcile(body, kube, urls, RacingAdmin)
    assert raced and "race" in {t["name"] for t in cluster.admin("/admin/v1/topics")["topics"]}
    assert any(p.startswith("race-") for p in holders(cluster, 2)), "the race topic landed on broker 2"
    assert sts(kube)["spec"]["replicas"] == 3 and at_shrink == []
    assert cluster.admin("/admin/v1/cluster")["decommissioned"] == [2]
    created = []

    def drained():
        created.append(f"auto-{len(created)}")  # an application keeps creating topics while the drain runs
        cluster.admin("/admin/v1/topics", "POST", {"name": created[-1], "partitions": 4, "replication_factor": 2})
        reconcile(body, kube, urls)
        return sts(kube)["spec"]["replicas"] == 2
    cluster.wait_for("broker 2 drained and the StatefulSet shrunk", drained, timeout=90, interval=0.5)
    assert len(at_shrink) == 1 and at_shrink[0]["replicas"] == 0 and at_shrink[0]["decommissioned"], at_shrink
    assert holders(cluster, 2) == []
    # The pod goes: nothing is offline or under-replicated on the two brokers that stay.
    cluster.stop_process(cluster[2])
    for name in ["orders", "race", *created]:
        topic = cluster.wait_fully_replicated(name)
        assert all(2 not in p["replicas"] and p["leader"] in (0, 1) for p in topic["partitions"]), topic
