"""Protocol semantics a client relies on: long-poll, KIP-74 limits, offsets by time, admin APIs."""

from __future__ import annotations

import threading
import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from kelp.errors import ErrorCode
from tests.broker.helpers import batch_headers, create_topic_wire, list_offset, produce, raw_fetch
from tests.support.acls import open_acls
from tests.support.kafka_wire import WireClient, make_batch

pytestmark = pytest.mark.clients


def test_api_versions_cover_what_clients_need(broker) -> None:
    with WireClient(broker.bootstrap) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[0][0] <= 3 <= ranges[0][1]  # Produce v3 (librdkafka MsgVer2)
    assert ranges[1][0] <= 4 <= ranges[1][1]  # Fetch v4
    for key in (2, 3, 18, 19, 20, 22, 32, 37):
        assert key in ranges


def test_api_versions_v4_is_served_as_java_clients_send_it(broker) -> None:
    """The Java client (3.7+, Spark's Kafka connector) opens with ApiVersions v4: no refused round trip."""
    with WireClient(broker.bootstrap) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="apache-kafka-java", client_software_version="3.9.2"),
                         4)
    assert resp.error_code == 0
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[18] == (0, 4)
    assert "ApiVersions v4" not in broker.log_text()


def test_metadata_advertises_bound_port(broker) -> None:
    with WireClient(broker.bootstrap) as c:
        md = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
    assert [(b.host, b.port) for b in md.brokers] == [("127.0.0.1", broker.kafka_port)]


def test_empty_fetch_has_zero_length_records_and_long_poll_wakes_on_append(broker) -> None:
    assert create_topic_wire(broker.bootstrap, "poll") == 0
    t0 = time.monotonic()
    resp = raw_fetch(broker.bootstrap, "poll", 0, 0, max_wait_ms=300, min_bytes=1)
    waited = time.monotonic() - t0
    pd = resp.responses[0].partitions[0]
    assert pd.error_code == 0 and pd.records == b"" and pd.high_watermark == 0
    assert 0.25 <= waited < 3, waited

    def later() -> None:
        time.sleep(0.3)
        with WireClient(broker.bootstrap) as c:
            produce(c, "poll", make_batch([(b"k", b"v")]))

    threading.Thread(target=later, daemon=True).start()
    t0 = time.monotonic()
    resp = raw_fetch(broker.bootstrap, "poll", 0, 0, max_wait_ms=10000, min_bytes=1)
    waited = time.monotonic() - t0
    assert len(batch_headers(resp.responses[0].partitions[0].records)) == 1
    assert waited < 5, f"the fetch was not woken by the append ({waited:.1f}s)"


def test_kip74_first_batch_returned_even_if_larger_than_limits(broker) -> None:
    assert create_topic_wire(broker.bootstrap, "big") == 0
    with WireClient(broker.bootstrap) as c:
        for _ in range(3):
            assert produce(c, "big", make_batch([(None, bytes(5000))]))[0] == 0
    resp = raw_fetch(broker.bootstrap, "big", 0, 0, max_bytes=100)
    assert [h[0] for h in batch_headers(resp.responses[0].partitions[0].records)] == [0]
    resp = raw_fetch(broker.bootstrap, "big", 0, 1, max_bytes=12000)
    assert [h[0] for h in batch_headers(resp.responses[0].partitions[0].records)] == [1, 2]
    resp = raw_fetch(broker.bootstrap, "big", 0, 7)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_list_offsets_earliest_latest_and_by_time(broker) -> None:
    assert create_topic_wire(broker.bootstrap, "times") == 0
    with WireClient(broker.bootstrap) as c:
        for i, ts in enumerate((1000, 2000, 3000)):
            assert produce(c, "times", make_batch([(b"k", b"v")], timestamp_ms=ts)) == (0, i)
    assert list_offset(broker.bootstrap, "times", 0, -2)[:2] == (0, 0)
    assert list_offset(broker.bootstrap, "times", 0, -1)[:2] == (0, 3)
    assert list_offset(broker.bootstrap, "times", 0, 1500) == (0, 1, 2000)
    assert list_offset(broker.bootstrap, "times", 0, 9999)[1] == -1
    assert list_offset(broker.bootstrap, "nope", 0, -1)[0] == 3


def test_admin_create_partitions_describe_configs_delete(broker) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic("adm", 1, 1, topic_configs={"retention.ms": "12345"})])
        admin.create_partitions({"adm": NewPartitions(3)})
        with WireClient(broker.bootstrap) as c:
            md = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="adm")],
                                           allow_auto_topic_creation=False), 8)
        assert len(md.topics[0].partitions) == 3
        result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "adm")])
        text = repr(result)
        assert "retention.ms" in text and "12345" in text
        admin.delete_topics(["adm"])
    finally:
        admin.close()
    assert list_offset(broker.bootstrap, "adm", 0, -1)[0] == 3


def test_confluent_admin_errors_carry_kafka_codes(broker_factory) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    b = broker_factory(settings={"auto.create.topics.enable": "false"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("dup", 2, 1)])["dup"].result(10)
    with pytest.raises(KafkaException) as err:
        admin.create_topics([NewTopic("dup", 2, 1)])["dup"].result(10)
    assert err.value.args[0].code() == ErrorCode.TOPIC_ALREADY_EXISTS
    with pytest.raises(KafkaException) as err:
        admin.create_partitions([NewPartitions("dup", 1)])["dup"].result(10)
    assert err.value.args[0].code() == ErrorCode.INVALID_PARTITIONS
    with pytest.raises(KafkaException) as err:
        admin.create_topics([NewTopic("bad", 1, 1, config={"retention.ms": "soon"})])["bad"].result(10)
    assert err.value.args[0].code() == ErrorCode.INVALID_CONFIG
    assert "'retention.ms'" in b.wait_for_log("create topic 'bad'")


def test_acks_all_refused_below_min_insync_replicas(broker) -> None:
    assert create_topic_wire(broker.bootstrap, "minisr", configs={"min.insync.replicas": 2}) == 0
    with WireClient(broker.bootstrap) as c:
        assert produce(c, "minisr", make_batch([(b"k", b"v")]), acks=-1)[0] == 19
        assert produce(c, "minisr", make_batch([(b"k", b"v")]), acks=1) == (0, 0)
        assert produce(c, "minisr", make_batch([(b"k", b"v")]), acks=2)[0] == 21
    assert "min.insync.replicas is 2" in broker.wait_for_log("acks=all")


def test_pipelined_requests_answered_in_order_and_acks0_unanswered(broker) -> None:
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    assert create_topic_wire(broker.bootstrap, "pipe") == 0
    T = ProduceRequest.TopicProduceData

    def req(acks: int) -> ProduceRequest:
        return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
            T(name="pipe", partition_data=[T.PartitionProduceData(index=0, records=make_batch([(b"k", b"v")]))])])

    with WireClient(broker.bootstrap) as c:
        c.send(req(0), 7)  # no response expected
        corrs = [c.send(req(1), 7) for _ in range(50)]
        offsets = []
        for corr in corrs:
            resp = ProduceResponse.decode(c.recv_frame(), version=7, header=True)
            assert resp.header.correlation_id == corr
            offsets.append(resp.responses[0].partition_responses[0].base_offset)
        assert offsets == list(range(1, 51))


def test_offset_for_leader_epoch(broker) -> None:
    from kafka.protocol.consumer import OffsetForLeaderEpochRequest

    assert create_topic_wire(broker.bootstrap, "epochs") == 0
    with WireClient(broker.bootstrap) as c:
        for _ in range(3):
            assert produce(c, "epochs", make_batch([(b"k", b"v")]))[0] == 0
        T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
        resp = c.request(OffsetForLeaderEpochRequest(replica_id=-1, topics=[T(topic="epochs", partitions=[
            T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0),
            T.OffsetForLeaderPartition(partition=5, current_leader_epoch=-1, leader_epoch=0)])]), 4)
    p0, p5 = resp.topics[0].partitions
    assert (p0.error_code, p0.leader_epoch, p0.end_offset) == (0, 0, 3)
    assert p5.error_code == 3


def test_large_fetch_served_from_file_ranges_intact(broker) -> None:
    """Fetches above the zero-copy threshold go out with sendfile; bytes must match a copying read."""
    assert create_topic_wire(broker.bootstrap, "zc") == 0
    payloads = [bytes([i]) * 100_000 for i in range(8)]
    with WireClient(broker.bootstrap) as c:
        for i, p in enumerate(payloads):
            assert produce(c, "zc", make_batch([(str(i).encode(), p)])) == (0, i)
    resp = raw_fetch(broker.bootstrap, "zc", 0, 0, max_bytes=10 << 20)
    data = resp.responses[0].partitions[0].records
    from kelp.records.record import iter_records

    assert [r.value for r in iter_records(data)] == payloads
    # a small fetch after a big one on the same connection still lines up
    with WireClient(broker.bootstrap) as c:
        from kafka.protocol.consumer import FetchRequest

        F = FetchRequest.FetchTopic
        for offset in (0, 7, 3):
            resp = c.request(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=10 << 20,
                                          isolation_level=0, session_id=0, session_epoch=-1,
                                          topics=[F(topic="zc", partitions=[F.FetchPartition(
                                              partition=0, fetch_offset=offset, partition_max_bytes=10 << 20)])],
                                          forgotten_topics_data=[], rack_id=""), 11)
            recs = list(iter_records(resp.responses[0].partitions[0].records))
            assert recs[0].value == payloads[offset] and len(recs) == 8 - offset


def test_retention_deletes_expired_segments_in_the_background(broker_factory) -> None:
    b = broker_factory(settings={"log.retention.check.interval.ms": 300})
    assert create_topic_wire(b.bootstrap, "ret", configs={"retention.ms": 60000, "segment.bytes": 2000}) == 0
    old = int(time.time() * 1000) - 3_600_000
    with WireClient(b.bootstrap) as c:
        for i in range(6):
            assert produce(c, "ret", make_batch([(b"k", bytes(900))], timestamp_ms=old)) == (0, i)
        assert produce(c, "ret", make_batch([(b"k", b"fresh")])) == (0, 6)
    deadline = time.monotonic() + 10
    while list_offset(b.bootstrap, "ret", 0, -2)[1] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    earliest = list_offset(b.bootstrap, "ret", 0, -2)[1]
    assert earliest > 0, "expired segments were not deleted"
    assert list_offset(b.bootstrap, "ret", 0, -1)[1] == 7
    assert b.wait_for_log("retention deleted")


def test_metadata_names_a_listed_broker_as_controller_while_none_is_elected() -> None:
    """Admin clients (aiokafka's among them) route CreateTopics to the controller id in Metadata
    and fail on one they cannot reach: while the controller this broker last heard of is gone (its
    lease still held, or not yet re-elected) and not among the brokers listed, Metadata names a broker
    it lists (which forwards admin requests), never -1 or the ghost. A broker serves only once a
    controller registered it (docs/metadata.md), so the window is driven at the handler."""
    import asyncio
    from types import SimpleNamespace

    from kelp.broker.kafka.handlers.metadata import handle_metadata
    from kelp.broker.kafka.handlers.registry import RequestContext
    from kelp.broker.metadata.model import BrokerEndpoint

    me = BrokerEndpoint(0, "127.0.0.1", 9092, "127.0.0.1", 8080)
    for known, listed in ((7, {0: me}), (-1, {0: me}), (7, {})):
        broker = SimpleNamespace(
            config=_Config(broker_id=0, values={"cluster.id": "kelp-local"}),
            topics=SimpleNamespace(list_topics=lambda: []),
            cluster=SimpleNamespace(state=SimpleNamespace(controller_id=known, brokers=listed, endpoint=me)),
            acls=open_acls())
        ctx = RequestContext(broker=broker, api_key=3, api_version=9, correlation_id=1, client_id="t", peer="p")
        md = asyncio.run(handle_metadata(ctx, MetadataRequest(topics=None, allow_auto_topic_creation=False)))
        assert [b.node_id for b in md.brokers] == [0] and md.controller_id == 0, (known, listed, md)


class _Config(dict):
    def __init__(self, *, broker_id: int, values: dict) -> None:
        super().__init__(values)
        self.broker_id = broker_id
