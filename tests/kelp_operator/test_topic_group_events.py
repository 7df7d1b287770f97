"""Every decision the operator takes on a Topic or ConsumerGroup leaves an Event (`kubectl describe kt orders`).

What a user relies on: besides the condition, which holds only the latest
state, a trail says what the operator did or refused to do — a Kafka topic
deleted by the finalizer (its records are gone), partitions it will not
remove, a replication factor it will not change, an offset reset that waits
for the group to empty or that the brokers refused. Refusals are Warnings.
"""

from __future__ import annotations

import asyncio
import logging

import kopf

from kelp.operator import handlers
from kelp.operator.reconcile.brokers import AdminError
from kelp.operator.reconcile.runner import Runner
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, resource

CLUSTER = resource("Cluster", "demo", {"brokers": 3})


def reconcile(kube: FakeKube, admin: FakeAdmin, kind: str, name: str) -> dict[str, dict]:
    asyncio.run(Runner(kube, admin_of(admin)).reconcile(kind, "ns", name))
    return {c["type"]: c for c in kube.objects[(kind, "ns", name)]["status"]["conditions"]}


def only(kube: FakeKube, reason: str) -> dict:
    (event,) = kube.events(reason)
    assert event["involvedObject"]["kind"] in ("Topic", "ConsumerGroup")
    return event


def test_the_finalizer_deleting_a_topic_is_an_event() -> None:
    topic = resource("Topic", "audit", {"cluster": "demo", "deletePolicy": "delete"})
    kube = FakeKube(CLUSTER, topic)
    admin = FakeAdmin(brokers=[0, 1, 2], topics={"audit": [{"replicas": [0], "isr": [0]}]})
    memo = kopf.Memo(runner=Runner(kube, admin_of(admin)), kube=kube)
    asyncio.run(handlers.topic_deleted(body=topic, memo=memo, logger=logging.getLogger("test")))
    assert "audit" not in admin.topics
    event = only(kube, "TopicDeleted")
    assert (event["type"], event["involvedObject"]["name"]) == ("Normal", "audit")
    assert "topic 'audit' deleted from cluster 'demo'" in event["message"]


def test_partitions_it_will_not_remove_and_a_factor_it_will_not_change_are_warnings() -> None:
    wide = resource("Topic", "wide", {"cluster": "demo", "partitions": 3})
    tall = resource("Topic", "tall", {"cluster": "demo", "partitions": 1, "replicationFactor": 3})
    kube = FakeKube(CLUSTER, wide, tall)
    admin = FakeAdmin(brokers=[0, 1, 2], topics={"wide": [{"replicas": [0], "isr": [0]}] * 5,
                                                 "tall": [{"replicas": [0, 1], "isr": [0, 1]}]})
    assert reconcile(kube, admin, "Topic", "wide")["Ready"]["reason"] == "PartitionsCannotShrink"
    event = only(kube, "PartitionsCannotShrink")
    assert event["type"] == "Warning" and "set spec.partitions to at least 5" in event["message"]
    assert reconcile(kube, admin, "Topic", "tall")["Ready"]["reason"] == "ReplicationFactorDiffers"
    event = only(kube, "ReplicationFactorDiffers")
    assert event["type"] == "Warning" and "replication factor 2; changing it to 3" in event["message"]


def test_an_offset_reset_that_waits_or_is_refused_is_an_event() -> None:
    group = resource("ConsumerGroup", "audit", {"cluster": "demo", "resetOffsets": {
        "requestId": "replay-1", "topic": "orders", "to": "earliest"}})
    kube = FakeKube(CLUSTER, group)
    admin = FakeAdmin(brokers=[0, 1, 2])
    admin.groups["audit"] = {"state": "Stable", "offsets": [], "total_lag": 0, "members": [
        {"member_id": "m-1", "client_id": "audit-app", "client_host": "/10.0.0.7", "assignment": []}]}
    assert reconcile(kube, admin, "ConsumerGroup", "audit")["OffsetsReset"]["reason"] == "Waiting"
    event = only(kube, "OffsetsResetWaiting")
    assert event["type"] == "Normal" and "group 'audit' has 1 member(s)" in event["message"]

    admin.groups["audit"] = {"state": "Empty", "members": [], "offsets": [], "total_lag": 0}

    def refuse(method, path, body):
        if path.endswith("/reset-offsets"):
            raise AdminError(400, "POST /admin/v1/groups/audit/reset-offsets: unknown topic 'orders'")
    admin.fail = refuse
    assert reconcile(kube, admin, "ConsumerGroup", "audit")["OffsetsReset"]["reason"] == "Refused"
    event = only(kube, "OffsetsResetRefused")
    assert event["type"] == "Warning" and "unknown topic 'orders'" in event["message"]
