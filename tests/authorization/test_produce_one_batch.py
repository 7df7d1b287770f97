"""One record batch per partition in a Produce request (issue 33, item 9).

The attack: the transactional id's ACL is checked on a partition's first batch (Kafka's hasTransactionalRecords),
so a plain batch followed by a transactional batch carrying another producer's id and epoch passed the check and
both were appended. Kafka's LogValidator refuses more than one RecordBatch v2 per partition (INVALID_RECORD); so
does Kelp now, and nothing of the request's partition is appended.
"""

from __future__ import annotations

from kafka.protocol.producer import ProduceRequest

from kelp.errors import ErrorCode
from kelp.records.build import build_batch
from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import BOB, SECRET, acl, grant

T = ProduceRequest.TopicProduceData


def _produce(records: bytes) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        T(name=SECRET, partition_data=[T.PartitionProduceData(index=0, records=records)])])


async def test_a_transactional_batch_cannot_ride_behind_a_plain_one(b: InProcessBroker) -> None:
    await grant(b, acl("TOPIC", SECRET, "WRITE"))  # bob may write the topic, and no transactional id at all
    log = b.parts.replicas.get_partition(SECRET, 0).log
    end = log.log_end_offset
    plain = build_batch([(b"k", b"plain")])
    # a transactional batch of another producer, without a sequence (so no idempotence check looks at it)
    smuggled = build_batch([(b"k", b"txn")], producer_id=4242, producer_epoch=7, is_transactional=True)
    answer = await b.call(_produce(plain + smuggled), 9, principal=BOB)
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.INVALID_RECORD, part
    assert "more than one record batch" in part.error_message
    assert log.log_end_offset == end  # nothing appended
    # one batch is served as before
    answer = await b.call(_produce(plain), 9, principal=BOB)
    assert answer.responses[0].partition_responses[0].error_code == 0
    assert log.log_end_offset == end + 1
