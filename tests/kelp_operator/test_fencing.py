"""Nothing reaches the brokers from a replica that lost the Lease (finding 5 of issue 18).

What a user relies on: once a stand-by has taken over, the deposed replica
changes nothing — not only no pod delete (test_runner.py), but no partition
move, no cancelled move, no leader election, no topic created, grown,
altered or deleted, no offsets reset — even while its own clock still says
its Lease is fresh (a suspended VM): each of those writes to the brokers
follows a fence, a Lease write on the resourceVersion it last wrote, which
the API server refuses. And a handler that meets a lost Lease gives up for
good (kopf's PermanentError: the run loop stops this replica), except the
Topic finalizer, which must stay until the new leader deletes the topic.
The Lease is a real compare-and-swap backend (files).
"""

from __future__ import annotations

import asyncio
import logging

import kopf
import pytest

from kelp.operator import handlers
from kelp.operator.kube.leadership import LeadershipLost
from kelp.operator.reconcile.cluster import delete_topic
from kelp.operator.reconcile.runner import Runner
from kelp.operator.reconcile.topics import TopicOwners
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, deposed, resource, statefulset

CLUSTER = resource("Cluster", "demo", {"brokers": 3})


async def reconcile_deposed(tmp_path, kind: str, name: str, kube: FakeKube, admin: FakeAdmin) -> None:
    kube.guard = await deposed(tmp_path)
    with pytest.raises(LeadershipLost, match="another writer took it"):
        await Runner(kube, admin_of(admin)).reconcile(kind, "ns", name)
    assert kube.fences == 1


@pytest.mark.parametrize("existing, spec, write", [
    ({}, {"partitions": 3}, ("POST", "/admin/v1/topics")),
    ({"orders": 1}, {"partitions": 3}, ("POST", "/admin/v1/topics/orders/partitions")),
    ({"orders": 3}, {"partitions": 3, "config": {"retention.ms": "60000"}}, ("PUT", "/admin/v1/topics/orders/configs")),
], ids=["create", "grow", "alter-configs"])
def test_a_deposed_operator_changes_no_topic(tmp_path, existing: dict, spec: dict, write: tuple) -> None:
    async def scenario() -> None:
        topic = resource("Topic", "orders", {"cluster": "demo", **spec})
        kube = FakeKube(CLUSTER, topic)
        admin = FakeAdmin(brokers=[0, 1, 2], topics={
            name: [{"replicas": [0], "isr": [0]} for _ in range(n)] for name, n in existing.items()})
        await reconcile_deposed(tmp_path, "Topic", "orders", kube, admin)
        assert admin.writes() == [], f"{write} was sent without the Lease"
        assert not kube.objects[("Topic", "ns", "orders")]["status"], "nor any status written"
    asyncio.run(scenario())


def test_a_deposed_operator_deletes_no_topic(tmp_path) -> None:
    async def scenario() -> None:
        topic = resource("Topic", "orders", {"cluster": "demo", "deletePolicy": "delete"})
        kube = FakeKube(CLUSTER, topic)
        admin = FakeAdmin(brokers=[0, 1, 2], topics={"orders": [{"replicas": [0], "isr": [0]}]})
        kube.guard = await deposed(tmp_path)
        with pytest.raises(LeadershipLost):
            await delete_topic(topic, kube, admin_of(admin))
        assert admin.writes() == [] and "orders" in admin.topics
    asyncio.run(scenario())


def test_a_deposed_operator_resets_no_offsets(tmp_path) -> None:
    async def scenario() -> None:
        group = resource("ConsumerGroup", "audit", {"cluster": "demo", "resetOffsets": {
            "requestId": "replay-1", "topic": "orders", "to": "earliest"}})
        kube = FakeKube(CLUSTER, group)
        admin = FakeAdmin(brokers=[0, 1, 2])
        admin.groups["audit"] = {"state": "Empty", "members": [], "offsets": [], "total_lag": 0}
        await reconcile_deposed(tmp_path, "ConsumerGroup", "audit", kube, admin)
        assert admin.writes() == []
    asyncio.run(scenario())


def test_a_deposed_operator_submits_no_moves(tmp_path) -> None:
    async def scenario() -> None:
        # 3 -> 2 brokers: broker 2's replica of orders-0 must move before its pod goes.
        body = resource("Cluster", "demo", {"brokers": 2})
        kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
        admin = FakeAdmin(brokers=[0, 1, 2], topics={"orders": [{"replicas": [2, 0], "isr": [2, 0]}]})
        await reconcile_deposed(tmp_path, "Cluster", "demo", kube, admin)
        assert admin.reassign_calls() == [] and admin.writes() == []
    asyncio.run(scenario())


def test_a_deposed_operator_cancels_no_moves(tmp_path) -> None:
    async def scenario() -> None:
        body = resource("Cluster", "demo", {"brokers": 3}, annotations={"kelp.dev/reassignment": "cancel"})
        kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
        admin = FakeAdmin(brokers=[0, 1, 2], topics={"orders": [{"replicas": [0, 1], "isr": [0, 1]}]})
        admin._reassign("orders", 0, [2, 1])  # a move in flight, which the user asks to cancel
        await reconcile_deposed(tmp_path, "Cluster", "demo", kube, admin)
        assert admin.writes() == [] and admin.topics["orders"][0]["adding"] == [2], "the move must stay"
    asyncio.run(scenario())


def test_a_deposed_operator_elects_no_leaders(tmp_path) -> None:
    async def scenario() -> None:
        # A roll just finished (marked): broker 2 is back in sync but leads nothing.
        body = resource("Cluster", "demo", {"brokers": 3}, annotations={"kelp.dev/elect-leaders": "pending"})
        kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
        admin = FakeAdmin(brokers=[0, 1, 2], topics={"orders": [{"replicas": [2, 0, 1], "isr": [0, 1, 2],
                                                                 "leader": 0}]})
        await reconcile_deposed(tmp_path, "Cluster", "demo", kube, admin)
        assert admin.writes() == [] and admin.topics["orders"][0]["leader"] == 0
    asyncio.run(scenario())


@pytest.mark.parametrize("handler, kind, name", [
    (handlers.cluster_changed, "Cluster", "demo"),
    (handlers.topic_changed, "Topic", "orders"),
    (handlers.group_changed, "ConsumerGroup", "audit"),
])
def test_a_handler_that_meets_a_lost_lease_gives_up_for_good(tmp_path, handler, kind: str, name: str) -> None:
    async def scenario() -> None:
        kube = FakeKube(CLUSTER, statefulset("demo", 3, revision="rev-2"),
                        *(broker_pod("demo", n, revision="rev-1") for n in range(3)),
                        resource("Topic", "orders", {"cluster": "demo", "partitions": 1}),
                        resource("ConsumerGroup", "audit", {"cluster": "demo", "resetOffsets": {
                            "requestId": "r1", "topic": "orders", "to": "earliest"}}))
        admin = FakeAdmin(brokers=[0, 1, 2], topics={"other": [{"replicas": [0, 1, 2], "isr": [0, 1, 2]}]})
        admin.groups["audit"] = {"state": "Empty", "members": [], "offsets": [], "total_lag": 0}
        kube.guard = await deposed(tmp_path)
        memo = kopf.Memo(runner=Runner(kube, admin_of(admin)), topic_owners=TopicOwners())
        with pytest.raises(kopf.PermanentError, match="lost the Lease"):
            await handler(body=kube.objects[(kind, "ns", name)], memo=memo)
        assert admin.writes() == [] and kube.deleted == []
    asyncio.run(scenario())


def test_the_topic_finalizer_stays_when_the_lease_is_lost(tmp_path) -> None:
    # A PermanentError would let kopf drop the finalizer with the Kafka topic still there; a TemporaryError keeps
    # it, so the replica that holds the Lease now deletes the topic.
    async def scenario() -> None:
        topic = resource("Topic", "orders", {"cluster": "demo", "deletePolicy": "delete"})
        kube = FakeKube(CLUSTER, topic)
        admin = FakeAdmin(brokers=[0, 1, 2], topics={"orders": [{"replicas": [0], "isr": [0]}]})
        kube.guard = await deposed(tmp_path)
        memo = kopf.Memo(runner=Runner(kube, admin_of(admin)), kube=kube)
        with pytest.raises(kopf.TemporaryError):
            await handlers.topic_deleted(body=topic, memo=memo, logger=logging.getLogger("test"))
        assert "orders" in admin.topics
    asyncio.run(scenario())


SECURED = resource("Cluster", "demo", {"brokers": 3, "authorization": {"type": "simple"}, "listeners": {"kafka": [
    {"name": "scram", "port": 9092, "tls": True, "authentication": {"type": "scram-sha-512"}}]}})


async def secured_kube() -> FakeKube:
    """A secured Cluster whose CAs exist (reconciled by a replica that held the Lease)."""
    from kelp.operator.reconcile.cluster import reconcile_cluster

    kube = FakeKube(SECURED, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    await reconcile_cluster(SECURED, kube, admin_of(FakeAdmin(brokers=[0, 1, 2])))
    return kube


def test_a_deposed_operator_sets_no_credential_and_no_acl(tmp_path) -> None:
    async def scenario() -> None:
        kube = await secured_kube()
        kube.put(resource("KelpUser", "alice", {"cluster": "demo", "authentication": {"type": "scram-sha-512"},
                                                "authorization": {"type": "simple", "acls": [
                                                    {"resource": {"type": "topic", "name": "t"},
                                                     "operations": ["Read"]}]}}))
        admin = FakeAdmin(brokers=[0, 1, 2])
        kube.fences = 0
        await reconcile_deposed(tmp_path, "KelpUser", "alice", kube, admin)
        assert admin.writes() == [] and admin.scram == {} and admin.acls == []
    asyncio.run(scenario())


def test_a_deposed_operator_removes_no_user(tmp_path) -> None:
    async def scenario() -> None:
        from kelp.operator.security.user_builders import USER_FINALIZER

        kube = await secured_kube()
        user = resource("KelpUser", "alice", {"cluster": "demo", "authentication": {"type": "scram-sha-512"}})
        user["metadata"].update({"finalizers": [USER_FINALIZER], "deletionTimestamp": "2026-11-02T00:00:00Z"})
        kube.put(user)
        admin = FakeAdmin(brokers=[0, 1, 2])
        admin.scram["alice"] = {"SCRAM-SHA-512": {"iterations": 8192}}
        kube.guard = await deposed(tmp_path)
        with pytest.raises(LeadershipLost):
            await Runner(kube, admin_of(admin)).finalize("KelpUser", "ns", "alice")
        assert admin.writes() == [] and "SCRAM-SHA-512" in admin.scram["alice"]
        assert kube.objects[("KelpUser", "ns", "alice")]["metadata"]["finalizers"] == [USER_FINALIZER]
    asyncio.run(scenario())
