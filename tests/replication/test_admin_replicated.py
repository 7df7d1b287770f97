"""Kafka's admin APIs on a two-broker cluster: configs live in the cluster metadata, deleted records stay deleted.

A topic config altered over the Kafka protocol on one broker is what every
broker (and the HTTP API) reports; records deleted through any broker's HTTP
API are cut on the leader, the answer comes once the follower's log start
followed (through Fetch), and after the leader is killed the new leader
serves from the same log start.
"""

from __future__ import annotations

import pytest
from kafka.protocol.admin import DeleteRecordsRequest, IncrementalAlterConfigsRequest
from kafka.protocol.consumer import ListOffsetsRequest

from kelp.broker.storage.checkpoint import PartitionCheckpoint
from tests.broker.helpers import produce
from tests.support.kafka_wire import WireClient, make_batch

pytestmark = pytest.mark.clients


def _earliest(bootstrap: str, topic: str) -> tuple[int, int]:
    T = ListOffsetsRequest.ListOffsetsTopic
    with WireClient(bootstrap) as w:
        p = w.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[T(name=topic, partitions=[
            T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-2)])]),
            9).topics[0].partitions[0]
    return p.error_code, p.offset


@pytest.mark.timeout(180)
def test_configs_and_deleted_records_follow_across_brokers_and_a_failover(cluster_factory) -> None:
    cluster = cluster_factory(2)
    cluster.admin("/admin/v1/topics", "POST", {"name": "r", "partitions": 1, "replication_factor": 2})
    leader = cluster.topic("r")["partitions"][0]["leader"]
    follower = 1 - leader

    def follower_knows_r() -> bool:  # a broker applies the controller's delivery a moment after CreateTopics answers
        try:
            return bool(cluster.topic("r", via=cluster[follower]))
        except Exception:
            return False
    cluster.wait_for("the follower to know topic r", follower_knows_r, timeout=15)

    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    with WireClient(cluster[follower].bootstrap) as w:  # any broker: the change goes through the controller
        resp = w.request(IncrementalAlterConfigsRequest(resources=[R(resource_type=2, resource_name="r", configs=[
            R.AlterableConfig(name="retention.ms", config_operation=0, value="7200000")])], validate_only=False), 1)
        assert resp.responses[0].error_code == 0, resp
    for b in (leader, follower):
        configs = cluster.admin("/admin/v1/topics/r/configs", via=cluster[b])["configs"]
        assert configs["retention.ms"] == {"value": "7200000", "source": "topic"}

    with WireClient(cluster[leader].bootstrap) as w:
        for i in range(10):
            assert produce(w, "r", make_batch([(None, b"v%d" % i)]), acks=-1)[0] == 0
    cluster.wait_fully_replicated("r")
    # Through the follower's HTTP API: forwarded to the leader.
    body = cluster.admin("/admin/v1/topics/r/delete-records", "POST", {"partitions": [{"partition": 0, "offset": 6}]},
                         via=cluster[follower])
    assert body["partitions"] == [{"partition": 0, "low_watermark": 6}]
    # As Kafka's DeleteRecords, the answer comes once the in-sync follower's log start followed (durably).
    replica_dir = cluster[follower].log_dir / "r-0"
    assert PartitionCheckpoint.read(replica_dir).log_start_offset == 6

    # A paused in-sync follower: the leader cuts, the answer is REQUEST_TIMED_OUT after the request's timeout.
    cluster.stop_process(cluster[follower])
    try:
        T = DeleteRecordsRequest.DeleteRecordsTopic
        with WireClient(cluster[leader].bootstrap) as w:
            resp = w.request(DeleteRecordsRequest(topics=[T(name="r", partitions=[
                T.DeleteRecordsPartition(partition_index=0, offset=8)])], timeout_ms=800), 2)
        assert resp.topics[0].partitions[0].error_code == 7, resp
    finally:
        cluster.continue_process(cluster[follower])
    cluster.wait_for("the resumed follower to follow the log start",
                     lambda: PartitionCheckpoint.read(replica_dir).log_start_offset == 8, timeout=20)

    cluster[leader].kill()
    cluster.wait_for("the follower to lead", lambda: cluster.topic("r")["partitions"][0]["leader"] == follower,
                     timeout=20)
    assert cluster.wait_for("ListOffsets earliest on the new leader",
                            lambda: (lambda r: r if r[0] == 0 else None)(_earliest(cluster[follower].bootstrap, "r")),
                            timeout=20) == (0, 8)
