"""A real client's read_committed consumer against a broker holding transactions (issue 21).

The coordinator is another slice's work: here the test plays it, producing transactional batches with raw
Produce requests and ending them with WriteTxnMarkers, as a coordinator does over the wire. librdkafka
(confluent-kafka) with isolation.level=read_committed must then see committed data only, drop the aborted
records named in the Fetch response, stop at the last stable offset while a transaction is open, and go on
once it is aborted; a read_uncommitted consumer sees everything.
"""

from __future__ import annotations

import time

import pytest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.producer import ProduceRequest, WriteTxnMarkersRequest

from kelp.records.build import build_batch
from kelp.records.record import Record
from tests.broker.helpers import create_topic_wire
from tests.support.kafka_wire import WireClient

TOPIC = "txn-e2e"


def _produce(c: WireClient, values: list[bytes], *, pid: int = -1, seq: int = -1, tid: str | None = None) -> None:
    T = ProduceRequest.TopicProduceData
    data = build_batch([Record(b"k", v) for v in values], producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                       base_sequence=seq, is_transactional=tid is not None)
    resp = c.request(ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[
        T(name=TOPIC, partition_data=[T.PartitionProduceData(index=0, records=data)])]), 9)
    assert resp.responses[0].partition_responses[0].error_code == 0, resp


def _end(c: WireClient, pid: int, commit: bool) -> None:
    M = WriteTxnMarkersRequest.WritableTxnMarker
    resp = c.request(WriteTxnMarkersRequest(markers=[M(producer_id=pid, producer_epoch=0, transaction_result=commit,
                                                        coordinator_epoch=0, topics=[M.WritableTxnMarkerTopic(
                                                            name=TOPIC, partition_indexes=[0])])]), 1)
    assert resp.markers[0].topics[0].partitions[0].error_code == 0, resp


def _latest(c: WireClient, isolation: int) -> int:
    T = ListOffsetsRequest.ListOffsetsTopic
    resp = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[T(name=TOPIC, partitions=[
        T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 5)
    return int(resp.topics[0].partitions[0].offset)


def _consume(bootstrap: str, isolation: str, want: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{isolation}", "enable.auto.commit": False,
                         "isolation.level": isolation, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 20
        while len(got) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    return got


@pytest.fixture
def broker(broker_factory):
    """A broker of its own: the test plays the transaction coordinator, so KIP-890's verification (which asks
    the real one before a transaction's first batch) is off, as Kafka's own tests of this kind run."""
    return broker_factory(settings={"transaction.partition.verification.enable": "false"})


def test_librdkafka_read_committed_skips_aborted_and_open_transactions(broker) -> None:
    assert create_topic_wire(broker.bootstrap, TOPIC) == 0
    with WireClient(broker.bootstrap) as c:
        _produce(c, [b"a"])
        _produce(c, [b"abort-1", b"abort-2"], pid=1000, seq=0, tid="tx-a")
        _produce(c, [b"commit-1"], pid=1001, seq=0, tid="tx-b")
        _produce(c, [b"abort-3"], pid=1000, seq=2, tid="tx-a")
        _end(c, 1000, False)
        _end(c, 1001, True)
        _produce(c, [b"b"])
        _produce(c, [b"open"], pid=1002, seq=0, tid="tx-c")  # offset 8: stays open for now
        _produce(c, [b"c"])
        assert (_latest(c, 1), _latest(c, 0)) == (8, 10)  # read_committed "latest" is the LSO
        # read_committed stops at the LSO: exactly the committed records below it
        assert _consume(broker.bootstrap, "read_committed", 3) == [b"a", b"commit-1", b"b"]
        _end(c, 1002, False)
        assert _latest(c, 1) == _latest(c, 0) == 11
    # with producer 1002 aborted the LSO moved on: "c" follows, "open" is dropped as aborted
    assert _consume(broker.bootstrap, "read_committed", 4) == [b"a", b"commit-1", b"b", b"c"]
    everything = [b"a", b"abort-1", b"abort-2", b"commit-1", b"abort-3", b"b", b"open", b"c"]
    assert _consume(broker.bootstrap, "read_uncommitted", len(everything)) == everything
