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

from kelp.operator.brokers import BrokerAdmin
from kelp.operator.reconcile import REBALANCE_ANNOTATION, reconcile_cluster
from tests.kelp_operator.fakes import FakeKube, resource

pytestmark = pytest.mark.clients


def reconcile(body: dict, kube: FakeKube, urls: list[str]):
    async def go():
        async with aiohttp.ClientSession() as session:
            async def admin_for(_spec):
                return BrokerAdmin(session, urls)
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
