"""DescribeCluster and DescribeTopicPartitions (issue 36): what Kafka 4's admin clients ask first.

Each answer is checked against Kafka's rules: the brokers and controller Metadata gives, the controllers' endpoint
refused by a broker, the cluster's operations only with DESCRIBE on it; topics sorted by name and paged by the
partition limit and cursor, a topic the principal may not describe refused by name and hidden from "all", an
unknown one UNKNOWN_TOPIC_OR_PARTITION and never created, a cursor outside the named topics INVALID_REQUEST.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kafka.protocol.admin import DescribeClusterRequest, DescribeTopicPartitionsRequest

from kelp.errors import ErrorCode
from kelp.security.principal import KafkaPrincipal
from tests.authorization.harness import InProcessBroker

ALICE = KafkaPrincipal.user("alice")
T = DescribeTopicPartitionsRequest.TopicRequest
Cursor = DescribeTopicPartitionsRequest.Cursor


def _acl(name: str, op: str) -> dict:
    return {"resourceType": "TOPIC", "resourceName": name, "patternType": "LITERAL", "principal": str(ALICE),
            "host": "*", "operation": op, "permission": "ALLOW"}


@pytest.fixture
async def b(tmp_path: Path):
    async with InProcessBroker(tmp_path) as broker:
        await broker.parts.topics.create_topic("alpha", 5, 1)
        await broker.parts.topics.create_topic("beta", 3, 1)
        await broker.parts.topics.create_topic("gamma", 2, 1)
        await broker.parts.acls.create([_acl("alpha", "DESCRIBE"), _acl("gamma", "DESCRIBE")])
        yield broker


async def test_describe_cluster_answers_the_brokers_and_controller_metadata_gives(b: InProcessBroker) -> None:
    from kafka.protocol.metadata import MetadataRequest

    metadata = await b.call(MetadataRequest(topics=[], allow_auto_topic_creation=False), 12)
    for version in (0, 1, 2):
        answer = await b.call(DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1,
                                                     include_fenced_brokers=True), version)
        assert answer.error_code == 0
        assert answer.cluster_id == metadata.cluster_id and answer.controller_id == metadata.controller_id
        assert [(x.broker_id, x.host, x.port) for x in answer.brokers] == [
            (x.node_id, x.host, x.port) for x in metadata.brokers]
        assert answer.authorized_operations  # the super user may do everything on the cluster
    denied = await b.call(DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1), 1,
                          principal=ALICE)
    assert denied.error_code == 0 and denied.brokers and not denied.authorized_operations
    controllers = await b.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=2),
                               1)
    assert controllers.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE and not controllers.brokers
    unknown = await b.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=7), 1)
    assert unknown.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


def _seen(answer) -> list[tuple[str, int, list[int]]]:
    return [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in answer.topics]


async def test_describe_topic_partitions_pages_every_topic_by_the_limit_and_cursor(b: InProcessBroker) -> None:
    pages, cursor = [], None
    for _ in range(10):
        answer = await b.call(DescribeTopicPartitionsRequest(topics=[], response_partition_limit=4, cursor=cursor), 0)
        pages.append(_seen(answer))
        if answer.next_cursor is None:
            break
        cursor = Cursor(topic_name=answer.next_cursor.topic_name, partition_index=answer.next_cursor.partition_index)
    internal = [p for page in pages for p in page if p[0].startswith("__")]
    user = [p for page in pages for p in page if not p[0].startswith("__")]
    assert not internal or all(e == 0 for _, e, _ in internal)
    partitions = {}
    for name, error, indexes in user:
        assert error == 0
        partitions.setdefault(name, []).extend(indexes)
    assert partitions == {"alpha": [0, 1, 2, 3, 4], "beta": [0, 1, 2], "gamma": [0, 1]}
    assert all(sum(len(i) for _, _, i in page) <= 4 for page in pages)
    names = [n for page in pages for n, _, _ in page]
    assert names == sorted(names)  # in name order, a topic split across pages continued on the next


async def test_describe_topic_partitions_refuses_by_name_hides_from_all_and_creates_nothing(
        b: InProcessBroker) -> None:
    named = await b.call(DescribeTopicPartitionsRequest(
        topics=[T(name="gamma"), T(name="beta"), T(name="alpha"), T(name="missing")], response_partition_limit=100,
        cursor=None), 0, principal=ALICE)
    assert _seen(named) == [("alpha", 0, [0, 1, 2, 3, 4]), ("beta", ErrorCode.TOPIC_AUTHORIZATION_FAILED, []),
                            ("gamma", 0, [0, 1]), ("missing", ErrorCode.TOPIC_AUTHORIZATION_FAILED, [])]
    everything = await b.call(DescribeTopicPartitionsRequest(topics=[], response_partition_limit=100, cursor=None), 0,
                              principal=ALICE)
    assert [n for n, _, _ in _seen(everything)] == ["alpha", "gamma"]
    unknown = await b.call(DescribeTopicPartitionsRequest(topics=[T(name="missing")], response_partition_limit=10,
                                                          cursor=None), 0)
    assert _seen(unknown) == [("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])]
    assert not b.parts.topics.exists("missing")
    stray = await b.call(DescribeTopicPartitionsRequest(topics=[T(name="alpha")], response_partition_limit=10,
                                                        cursor=Cursor(topic_name="beta", partition_index=0)), 0)
    assert _seen(stray) == [("beta", ErrorCode.INVALID_REQUEST, [])]
    middle = await b.call(DescribeTopicPartitionsRequest(topics=[T(name="alpha"), T(name="beta")],
                                                         response_partition_limit=2,
                                                         cursor=Cursor(topic_name="alpha", partition_index=3)), 0)
    assert _seen(middle) == [("alpha", 0, [3, 4])]
    assert (middle.next_cursor.topic_name, middle.next_cursor.partition_index) == ("beta", 0)
    assert middle.topics[0].topic_id == uuid.UUID(hex=b.parts.topics.get("alpha").topic_id)
