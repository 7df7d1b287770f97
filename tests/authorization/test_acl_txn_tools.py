"""What `kafka-transactions` needs under an authorizer (Kafka's KafkaApis, KIP-664), and DescribeProducers' answer.

DescribeProducers needs READ on the topic (TOPIC_AUTHORIZATION_FAILED per partition, the same for a topic
that does not exist); WriteTxnMarkers, which `kafka-transactions abort` sends itself, needs ALTER on the
cluster (an administrator) or CLUSTER_ACTION (a broker).
"""

from __future__ import annotations

from kafka.protocol.admin import DescribeProducersRequest
from kafka.protocol.producer import ProduceRequest, WriteTxnMarkersRequest

from kelp.errors import ErrorCode
from kelp.records.build import build_batch
from kelp.records.record import Record
from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import (
    BOB,
    CLUSTER_DENIED,
    GHOST,
    SECRET,
    TOPIC_DENIED,
    acl,
    grant,
)

DP = DescribeProducersRequest
M = WriteTxnMarkersRequest.WritableTxnMarker


def describe(*topics: str) -> DescribeProducersRequest:
    return DP(topics=[DP.TopicRequest(name=t, partition_indexes=[0, 3]) for t in topics])


async def open_transaction(b: InProcessBroker, pid: int) -> int:
    """A transactional batch of producer `pid` (epoch 2), written as its producer would (no coordinator knows
    it: KIP-890's verification, which would refuse it, is switched off on this broker); returns its offset."""
    b.parts.transactions.verifier = None
    T = ProduceRequest.TopicProduceData
    data = build_batch([Record(b"k", b"v"), Record(b"k", b"w")], producer_id=pid, producer_epoch=2,
                       base_sequence=0, is_transactional=True, now_ms=1_000_000)
    resp = await b.call(ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=5000, topic_data=[
        T(name=SECRET, partition_data=[T.PartitionProduceData(index=0, records=data)])]), 9)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0, part
    return int(part.base_offset)


async def test_describe_producers_needs_read_on_the_topic(b: InProcessBroker) -> None:
    start = await open_transaction(b, 77)
    refused = await b.call(describe(SECRET, GHOST), 0, principal=BOB)
    answers = [[(p.partition_index, p.error_code, p.active_producers) for p in t.partitions] for t in refused.topics]
    assert answers == [[(0, TOPIC_DENIED, []), (3, TOPIC_DENIED, [])]] * 2  # a missing topic answers the same
    await grant(b, acl("TOPIC", SECRET, "READ"), acl("TOPIC", GHOST, "READ"))
    got = await b.call(describe(SECRET, GHOST), 0, principal=BOB)
    secret, ghost = got.topics
    assert [p.error_code for p in secret.partitions] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert [p.error_code for p in ghost.partitions] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    [producer] = secret.partitions[0].active_producers
    assert (producer.producer_id, producer.producer_epoch, producer.last_sequence, producer.last_timestamp,
            producer.coordinator_epoch, producer.current_txn_start_offset) == (77, 2, 1, 1_000_000, -1, start)


async def test_write_txn_markers_from_an_administrator(b: InProcessBroker) -> None:
    """`kafka-transactions abort`: ALTER on the cluster suffices (KIP-664); ALTER on the topic does not."""
    start = await open_transaction(b, 78)
    req = WriteTxnMarkersRequest(markers=[M(producer_id=78, producer_epoch=2, transaction_result=False,
                                            coordinator_epoch=0, topics=[M.WritableTxnMarkerTopic(
                                                name=SECRET, partition_indexes=[0])])])
    await grant(b, acl("TOPIC", SECRET, "ALTER"))
    refused = await b.call(req, 1, principal=BOB)
    assert refused.markers[0].topics[0].partitions[0].error_code == CLUSTER_DENIED
    await grant(b, acl("CLUSTER", "kafka-cluster", "ALTER"))
    written = await b.call(req, 1, principal=BOB)
    assert written.markers[0].topics[0].partitions[0].error_code == 0
    part = b.parts.replicas.get_partition(SECRET, 0)
    assert part is not None and part.producers.ongoing_transactions() == {}
    assert [(t.producer_id, t.first_offset) for t in part.log.collect_aborted_txns(0, part.log.log_end_offset)] \
        == [(78, start)]
