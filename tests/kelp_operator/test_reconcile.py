"""Reconciliation against a real broker's admin API (the Kubernetes side faked).

What a user relies on: a Topic resource creates and grows its topic and owns
its configs, never shrinks or touches topics it does not declare, the older of
two resources naming one topic wins, deletion honours deletePolicy and lets go
when the Cluster is gone; a ConsumerGroup shows the lag `kelp groups describe`
shows, and a reset runs once per requestId and only while the group is Empty.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from kelp.cli.main import main as kelp_main
from kelp.operator.reconcile.brokers import BrokerAdmin
from kelp.operator.reconcile.cluster import delete_topic, reconcile_cluster, reconcile_group, reconcile_topic
from tests.kelp_operator.fakes import FakeKube, resource

pytestmark = pytest.mark.clients

CLUSTER = resource("Cluster", "demo", {"brokers": 1})


def run(coro_fn, *args):
    async def go():
        async with aiohttp.ClientSession() as session:
            return await coro_fn(session, *args)
    return asyncio.run(go())


def admin_factory(session, url: str):
    async def admin_for(_spec):
        return BrokerAdmin(session, [url])
    return admin_for


def reconcile(fn, body: dict, kube: FakeKube, url: str):
    return run(lambda s: fn(body, kube, admin_factory(s, url)))


def ready(conds: list[dict]) -> dict:
    return next(c for c in conds if c["type"] == "Ready")


def admin_get(url: str, path: str) -> dict:
    async def go(session):
        return await BrokerAdmin(session, [url]).get(path)
    return run(go)


@pytest.fixture
def broker(broker_factory):
    return broker_factory(settings={"offsets.topic.num.partitions": 1, "auto.create.topics.enable": False})


def test_topic_is_created_grown_and_its_configs_owned(broker) -> None:
    url = broker.http_url
    topic = resource("Topic", "orders", {"cluster": "demo", "partitions": 2, "replicationFactor": 1,
                                          "config": {"retention.ms": "3600000"}})
    kube = FakeKube(CLUSTER, topic)
    status, conds = reconcile(reconcile_topic, topic, kube, url)
    assert ready(conds)["status"] == "True", conds
    assert status["topicName"] == "orders" and status["partitions"] == 2 and status["replicationFactor"] == 1
    assert [p["partition"] for p in status["partitionStates"]] == [0, 1]
    assert admin_get(url, "/admin/v1/topics/orders/configs")["configs"]["retention.ms"] == {
        "value": "3600000", "source": "topic"}

    # Someone alters the topic behind the resource's back: the resource wins on the next pass.
    run(lambda s: BrokerAdmin(s, [url]).request("PATCH", "/admin/v1/topics/orders/configs",
                                               {"configs": {"cleanup.policy": "compact"}}))
    topic["spec"]["partitions"] = 4
    topic["spec"]["config"] = {"retention.ms": "7200000"}
    status, conds = reconcile(reconcile_topic, topic, kube, url)
    assert ready(conds)["status"] == "True" and status["partitions"] == 4
    configs = admin_get(url, "/admin/v1/topics/orders/configs")["configs"]
    assert configs["retention.ms"]["value"] == "7200000" and configs["cleanup.policy"]["source"] == "default"


def test_topic_never_shrinks_and_says_so(broker) -> None:
    url = broker.http_url
    run(lambda s: BrokerAdmin(s, [url]).request("POST", "/admin/v1/topics", {"name": "wide", "partitions": 5}))
    topic = resource("Topic", "wide", {"cluster": "demo", "partitions": 3})
    status, conds = reconcile(reconcile_topic, topic, FakeKube(CLUSTER, topic), url)
    r = ready(conds)
    assert r["status"] == "False" and r["reason"] == "PartitionsCannotShrink" and "at least 5" in r["message"]
    assert status["partitions"] == 5
    assert admin_get(url, "/admin/v1/topics/wide")["partitions_count"] == 5


def test_the_older_of_two_resources_naming_one_topic_wins(broker) -> None:
    url = broker.http_url
    old = resource("Topic", "payments", {"cluster": "demo", "partitions": 1}, created="2026-11-01T00:00:00Z")
    new = resource("Topic", "payments-copy", {"cluster": "demo", "topicName": "payments", "partitions": 6},
                   created="2026-11-02T00:00:00Z")
    kube = FakeKube(CLUSTER, old, new)
    _, conds = reconcile(reconcile_topic, new, kube, url)
    r = ready(conds)
    assert (r["reason"] == "DuplicateTopic" and "'payments'" in r["message"]
            and "Topic resource 'payments'" in r["message"])
    _, conds = reconcile(reconcile_topic, old, kube, url)
    assert ready(conds)["status"] == "True"
    assert admin_get(url, "/admin/v1/topics/payments")["partitions_count"] == 1  # the newer one changed nothing
    # Deleting the newer resource (even with deletePolicy delete) leaves the older one's topic.
    new["spec"]["deletePolicy"] = "delete"
    assert "belongs to Topic resource 'payments'" in run(lambda s: delete_topic(new, kube, admin_factory(s, url)))
    assert admin_get(url, "/admin/v1/topics/payments")["name"] == "payments"


def test_delete_policy_and_a_cluster_that_is_gone(broker) -> None:
    url = broker.http_url
    topic = resource("Topic", "audit", {"cluster": "demo", "partitions": 1, "deletePolicy": "delete"})
    kube = FakeKube(CLUSTER, topic)
    reconcile(reconcile_topic, topic, kube, url)
    assert "deleted" in run(lambda s: delete_topic(topic, kube, admin_factory(s, url)))
    topics = [t["name"] for t in admin_get(url, "/admin/v1/topics")["topics"]]
    assert "audit" not in topics
    # With the Cluster gone the finalizer lets go without asking any broker.
    gone = FakeKube(topic)
    assert "is gone" in run(lambda s: delete_topic(topic, gone, admin_factory(s, "http://127.0.0.1:9")))
    _, conds = reconcile(reconcile_topic, topic, gone, url)
    assert ready(conds)["reason"] == "ClusterNotFound"


def test_unreachable_brokers_are_a_condition_not_a_crash() -> None:
    topic = resource("Topic", "orders", {"cluster": "demo", "partitions": 1})
    _, conds = reconcile(reconcile_topic, topic, FakeKube(CLUSTER, topic), "http://127.0.0.1:9")
    r = ready(conds)
    assert r["status"] == "False" and r["reason"] == "BrokersUnreachable" and "127.0.0.1:9" in r["message"]


def _commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        c.commit({TopicPartition("events", p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
    finally:
        c.close()


def test_group_lag_matches_kelp_groups_describe_and_resets_run_once_while_empty(broker, capsys) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    url = broker.http_url
    run(lambda s: BrokerAdmin(s, [url]).request("POST", "/admin/v1/topics", {"name": "events", "partitions": 2}))
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(30):
        producer.send("events", value=b"v%d" % i, partition=i % 2)
    producer.flush()
    producer.close()
    _commit(broker.bootstrap, "audit", {0: 5, 1: 12})
    group = resource("ConsumerGroup", "audit", {"cluster": "demo"})
    kube = FakeKube(CLUSTER, group)
    status, conds = reconcile(reconcile_group, group, kube, url)
    assert ready(conds)["status"] == "True"
    capsys.readouterr()
    assert kelp_main(["groups", "describe", "audit", "--http", url, "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert [(o["topic"], o["partition"], o["committedOffset"], o["logEndOffset"], o["lag"])
            for o in status["offsets"]] \
        == [(o["topic"], o["partition"], o["committed_offset"], o["log_end_offset"], o["lag"])
            for o in cli["offsets"]] \
        == [("events", 0, 5, 15, 10), ("events", 1, 12, 15, 3)]
    assert status["totalLag"] == cli["total_lag"] == 13 and status["state"] == "Empty"

    # A member joins: the reset waits and says why.
    group["spec"]["resetOffsets"] = {"requestId": "replay-1", "topic": "events", "to": "earliest"}
    consumer = KafkaConsumer("events", bootstrap_servers=broker.bootstrap, group_id="audit",
                             enable_auto_commit=False, session_timeout_ms=6000)
    try:
        for _ in range(40):
            consumer.poll(timeout_ms=250)
            if consumer.assignment():
                break
        assert consumer.assignment()
        status, conds = reconcile(reconcile_group, group, kube, url)
        waiting = next(c for c in conds if c["type"] == "OffsetsReset")
        assert waiting["status"] == "False" and waiting["reason"] == "Waiting" and "1 member" in waiting["message"]
        assert "lastAppliedRequestId" not in status and status["members"] == 1
        assert status["memberList"][0]["assignments"] == [{"topic": "events", "partitions": [0, 1]}]
    finally:
        consumer.close()
    status, conds = reconcile(reconcile_group, group, kube, url)
    applied = next(c for c in conds if c["type"] == "OffsetsReset")
    assert (applied["status"] == "True" and applied["reason"] == "Applied"
            and status["lastAppliedRequestId"] == "replay-1")
    assert [o["committedOffset"] for o in status["offsets"]] == [0, 0] and status["totalLag"] == 30

    # The same requestId is never applied twice: later commits stay.
    group["status"] = {"lastAppliedRequestId": "replay-1"}
    _commit(broker.bootstrap, "audit", {0: 9, 1: 9})
    status, conds = reconcile(reconcile_group, group, kube, url)
    assert [o["committedOffset"] for o in status["offsets"]] == [9, 9]
    assert not any(c["type"] == "OffsetsReset" for c in conds)


def test_cluster_children_are_applied_and_status_says_pods_are_missing() -> None:
    kube = FakeKube(CLUSTER)
    status, conds = run(lambda s: reconcile_cluster(CLUSTER, kube, admin_factory(s, "http://127.0.0.1:9")))
    assert [m["kind"] for m in kube.applied] == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service",
                                                 "Service", "Service", "StatefulSet", "PodDisruptionBudget"]
    assert status["brokers"] == 0 and status["bootstrap"] == "demo.ns.svc:9092"
    r = ready(conds)
    assert r["status"] == "False" and r["reason"] == "BrokersUnreachable"
    racked = resource("Cluster", "racked", {"rack": {"topologyKey": "topology.kubernetes.io/zone"}})
    kube = FakeKube(racked)
    _, conds = run(lambda s: reconcile_cluster(racked, kube, admin_factory(s, "http://127.0.0.1:9")))
    rack = next(c for c in conds if c["type"] == "RackAware")
    assert rack["status"] == "Unknown" and rack["reason"] == "BrokersUnreachable"
    assert [m["metadata"]["name"] for m in kube.applied if m["kind"].startswith("Cluster")] == [
        "kelp-broker-rack", "kelp-ns-racked-rack"]
    bad = resource("Cluster", "bad", {"config": {"log.dirs": "/x"}})
    kube = FakeKube(bad)
    _, conds = run(lambda s: reconcile_cluster(bad, kube, admin_factory(s, "http://127.0.0.1:9")))
    assert ready(conds)["reason"] == "InvalidSpec" and "log.dirs" in ready(conds)["message"]
    assert kube.applied == []  # nothing changes while the spec is wrong
    # Issue 32, item 8: every condition a valid pass wrote is replaced, so an old Degraded=False (or RackAware)
    # does not stay claiming health nobody observed.
    by_type = {c["type"]: c for c in conds}
    assert set(by_type) >= {"Ready", "Progressing", "Degraded"}, conds
    assert by_type["Degraded"]["status"] == "Unknown" and by_type["Degraded"]["reason"] == "InvalidSpec"
