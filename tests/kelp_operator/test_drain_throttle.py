"""The operator's partition moves run under Kafka's replication quota, and the quota comes off after them.

Issue 32, item 5: a drain copied whole logs unthrottled. What a user relies on:
- every move the operator submits is throttled at `spec.reassignment.throttleBytesPerSecond`, with the same keys
  `kafka-reassign-partitions --throttle` sets: the two rates on each broker's own entity, so the cluster-wide
  default entity stays `spec.config`'s; and the moved partitions listed on their topics;
- pairs already listed (a user's) are kept while the moves run;
- once nothing moves, every throttle the operator set is removed, even by an operator restarted in between (the
  annotation records them first), and a Topic's reconcile does not undo a throttle set during a move;
- a bad throttle is refused naming the field.
"""

from __future__ import annotations

import asyncio

import pytest

from kelp.operator.manifests.spec import ClusterSpec, SpecError
from kelp.operator.reconcile.throttles import THROTTLE_ANNOTATION, merged, throttle_pairs
from kelp.operator.reconcile.topics import reconcile_topic
from tests.kelp_operator.fakes import FakeKube, admin_of, resource
from tests.kelp_operator.test_reassignment_watch import T0, Cluster

RATE = 5 * 1024 * 1024
RATES = {"leader.replication.throttled.rate": str(RATE), "follower.replication.throttled.rate": str(RATE)}


def _cluster(throttle: object = RATE) -> Cluster:
    c = Cluster()
    c.body["spec"]["reassignment"]["throttleBytesPerSecond"] = throttle
    c.kube.objects[("Cluster", "ns", "demo")]["spec"] = c.body["spec"]
    return c


def test_a_drain_is_throttled_before_it_is_submitted_and_the_throttle_comes_off_after_it() -> None:
    c = _cluster()
    c.admin.topic_configs["orders"] = {"leader.replication.throttled.replicas": "0:2"}  # a user's, kept
    c.reconcile(T0)
    assert c.admin.reassign_calls() == [{"partitions": [{"topic": "orders", "partition": 1, "replicas": [0, 1]}]}]
    # Set before the move was submitted: a move never runs unthrottled, not even for one fetch.
    writes = [(m, p) for m, p, _ in c.admin.requests if m in ("PATCH", "POST")]
    assert writes.index(("POST", "/admin/v1/partitions/reassign")) > max(
        i for i, w in enumerate(writes) if w[1].endswith("/configs"))
    assert c.admin.broker_dynamic == {b: RATES for b in range(4)}
    assert c.admin.dynamic == {}  # spec.config's entity is not touched
    assert c.admin.topic_configs["orders"] == {"leader.replication.throttled.replicas": "0:2,1:1,1:3",
                                               "follower.replication.throttled.replicas": "1:0"}
    assert '"topics":["orders"]' in c.annotations()[THROTTLE_ANNOTATION]
    c.reconcile(T0 + 10)  # still moving: the throttle stays
    assert c.admin.broker_dynamic[3] == RATES
    c.admin.complete("orders", 1)
    c.reconcile(T0 + 20)  # the drain ends, the StatefulSet shrinks
    assert c.kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 3
    c.reconcile(T0 + 30)
    assert c.admin.broker_dynamic == {b: {} for b in range(4)}
    assert c.admin.topic_configs["orders"] == {}
    assert THROTTLE_ANNOTATION not in c.annotations()
    assert "replication throttles removed" in c.kube.events("ReplicationThrottleCleared")[0]["message"]


def test_an_operator_restarted_mid_move_still_clears_what_the_last_one_set() -> None:
    c = _cluster()
    c.reconcile(T0)
    c.admin.complete("orders", 1)
    fresh = Cluster()  # a new operator process: only the Cluster object (and its annotations) carries over
    fresh.kube, fresh.admin, fresh.body = c.kube, c.admin, c.body
    fresh.reconcile(T0 + 20)
    fresh.reconcile(T0 + 30)
    assert c.admin.broker_dynamic == {b: {} for b in range(4)} and c.admin.topic_configs["orders"] == {}


def test_a_null_throttle_moves_unthrottled() -> None:
    c = _cluster(None)
    c.reconcile(T0)
    assert c.admin.reassign_calls() and not c.admin.broker_dynamic and not c.admin.topic_configs
    assert THROTTLE_ANNOTATION not in c.annotations()


def test_a_topics_reconcile_keeps_a_moves_throttle_it_does_not_name() -> None:
    c = _cluster()
    c.reconcile(T0)
    topic = resource("Topic", "orders", {"cluster": "demo", "partitions": 2, "replicationFactor": 2,
                                         "config": {"retention.ms": "1000"}})
    kube = FakeKube(c.kube.objects[("Cluster", "ns", "demo")], topic)
    asyncio.run(reconcile_topic(topic, kube, admin_of(c.admin)))
    assert c.admin.topic_configs["orders"] == {"retention.ms": "1000", "follower.replication.throttled.replicas": "1:0",
                                               "leader.replication.throttled.replicas": "1:1,1:3"}


def test_throttle_lists_name_the_current_replicas_as_leaders_and_the_added_ones_as_followers() -> None:
    plan = [{"topic": "a", "partition": 0, "replicas": [2, 3]}, {"topic": "a", "partition": 1, "replicas": None},
            {"topic": "b", "partition": 4, "replicas": [0]}]
    pairs = throttle_pairs(plan, {("a", 0): [1, 2], ("b", 4): [5]})
    assert pairs == {"a": ({"0:1", "0:2"}, {"0:3"}), "b": ({"4:5"}, {"4:0"})}
    assert merged("*", {"1:2"}) == "*"
    assert merged("10:1, 2:3", {"2:3", "1:0"}) == "10:1,2:3,1:0"
    assert merged(None, {"10:1", "2:1"}) == "2:1,10:1"


@pytest.mark.parametrize("value,error", [(1000, "at least 1048576"), ("fast", "a number of bytes per second"),
                                         (True, "a number of bytes per second")])
def test_a_bad_throttle_is_refused_naming_the_field(value: object, error: str) -> None:
    body = resource("Cluster", "demo", {"brokers": 3, "reassignment": {"throttleBytesPerSecond": value}})
    with pytest.raises(SpecError, match=f"spec.reassignment.throttleBytesPerSecond.*{error}"):
        ClusterSpec.from_resource(body).validate()
