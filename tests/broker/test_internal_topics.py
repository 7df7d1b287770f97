"""`__consumer_offsets` is refused to clients at every door; the coordinator's own writes go on.

Kafka protocol: DeleteTopics, CreatePartitions and Produce naming the internal
topic answer INVALID_TOPIC_EXCEPTION (17) with a message saying why (Apache
Kafka's broker accepts the delete and loses every group's offsets; its tools
refuse it). HTTP: the same through the admin API and the REST produce route.
A group's commit survives all of it, and a restart.
"""

from __future__ import annotations

import time

import pytest
from kafka.protocol.admin import CreatePartitionsRequest, DeleteTopicsRequest
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from kelp.errors import ErrorCode
from tests.broker.helpers import create_topic_wire, produce
from tests.http.httpcall import call
from tests.support.kafka_wire import WireClient, make_batch

pytestmark = pytest.mark.clients

OFFSETS = "__consumer_offsets"


def _coordinator_ready(w: WireClient, group: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        fc = w.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
        if fc.coordinators[0].error_code == 0:
            return
        assert time.monotonic() < deadline, f"no coordinator for {group}: {fc.coordinators}"
        time.sleep(0.1)  # a client's retry.backoff.ms; the deadline bounds it


def _commit(w: WireClient, group: str, topic: str, offset: int) -> int:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                              topics=[T(name=topic, partitions=[P(partition_index=0, committed_offset=offset,
                                                                  committed_leader_epoch=-1, committed_metadata="")])])
    return w.request(req, 7).topics[0].partitions[0].error_code


def _committed(w: WireClient, group: str, topic: str) -> int:
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    resp = w.request(OffsetFetchRequest(group_id=group, topics=[T(name=topic, partition_indexes=[0])]), 5)
    return resp.topics[0].partitions[0].committed_offset


def test_kafka_protocol_refuses_deleting_growing_and_producing_into_the_offsets_topic(broker_factory) -> None:
    broker = broker_factory()
    assert create_topic_wire(broker.bootstrap, "orders") == 0
    # By hand it would get the broker defaults (one partition, no compaction): only the coordinator creates it.
    assert create_topic_wire(broker.bootstrap, OFFSETS) == ErrorCode.INVALID_TOPIC_EXCEPTION
    with WireClient(broker.bootstrap) as w:
        _coordinator_ready(w, "billing")
        assert _commit(w, "billing", "orders", 42) == 0
    assert create_topic_wire(broker.bootstrap, OFFSETS) == ErrorCode.TOPIC_ALREADY_EXISTS  # as for any topic
    with WireClient(broker.bootstrap) as w:
        deleted = w.request(DeleteTopicsRequest(topic_names=[OFFSETS], timeout_ms=5000), 5).responses[0]
        assert deleted.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert "internal" in deleted.error_message and "committed offsets" in deleted.error_message

        T = CreatePartitionsRequest.CreatePartitionsTopic
        grown = w.request(CreatePartitionsRequest(topics=[T(name=OFFSETS, count=10, assignments=None)],
                                                  timeout_ms=5000, validate_only=False), 2).results[0]
        assert grown.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION and "internal" in grown.error_message

        # A forged commit of another group, as a client would write it: refused like Kafka does.
        forged = make_batch([(b"\x00\x01\x00\x07billing", b"forged")])
        for partition in range(3):
            code, offset = produce(w, OFFSETS, forged, partition=partition)
            assert (code, offset) == (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)

        assert _commit(w, "billing", "orders", 43) == 0  # the coordinator's own writes still go in
    broker.wait_for_log("cannot write to internal topic '__consumer_offsets'")
    broker.restart(kill=True)
    with WireClient(broker.bootstrap) as w:
        _coordinator_ready(w, "billing")
        assert _committed(w, "billing", "orders") == 43


def test_http_admin_and_rest_produce_refuse_the_offsets_topic(broker_factory) -> None:
    broker = broker_factory()
    assert create_topic_wire(broker.bootstrap, "orders") == 0
    with WireClient(broker.bootstrap) as w:
        _coordinator_ready(w, "billing")
        assert _commit(w, "billing", "orders", 7) == 0
    base = f"{broker.http_url}/admin/v1/topics/{OFFSETS}"

    deleted = call("DELETE", base)
    assert deleted.status == 400 and deleted.json()["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION, deleted
    assert "internal" in deleted.json()["message"]
    grown = call("POST", f"{base}/partitions", body={"partitions": 10})
    assert grown.status == 400 and grown.json()["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION, grown
    uncompacted = call("PATCH", f"{base}/configs", body={"configs": {"cleanup.policy": "delete"}})
    assert uncompacted.status == 400 and "compaction" in uncompacted.json()["message"], uncompacted
    dropped = call("PATCH", f"{base}/configs", body={"configs": {"cleanup.policy": None}})
    assert dropped.status == 400, dropped  # back to the broker default (delete) is the same thing
    assert call("PATCH", f"{base}/configs", body={"configs": {"segment.bytes": 1048576}}).status == 200

    produced = call("POST", f"{broker.http_url}/topics/{OFFSETS}/partitions/0", body={"records": [{"value": "x"}]})
    refused = produced.json()["offsets"][0]  # the REST proxy's per-partition answer
    assert refused["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION and refused["offset"] is None, produced

    assert call("GET", base).json()["configs"]["cleanup.policy"]["value"] == "compact"
    with WireClient(broker.bootstrap) as w:
        assert _committed(w, "billing", "orders") == 7
