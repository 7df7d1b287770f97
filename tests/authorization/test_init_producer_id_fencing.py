"""InitProducerId without a transactional id cannot fence another producer (issue 33, item 10).

The attack: an idempotent InitProducerId naming another producer's id and epoch was answered with that id at the
next epoch, so any writer could take over a producer id and fence its owner (its next batch: an old epoch).
Kafka's coordinator answers a request without a transactional id with a fresh producer id at epoch 0, whatever
id and epoch it names; so does Kelp now, and the owner keeps writing.
"""

from __future__ import annotations

from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from kelp.records.build import build_batch
from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import SECRET

T = ProduceRequest.TopicProduceData


def _init(producer_id: int = -1, epoch: int = -1) -> InitProducerIdRequest:
    return InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000, producer_id=producer_id,
                                 producer_epoch=epoch)


async def _produce(b: InProcessBroker, pid: int, epoch: int, seq: int) -> int:
    batch = build_batch([(b"k", b"v%d" % seq)], producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    answer = await b.call(ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        T(name=SECRET, partition_data=[T.PartitionProduceData(index=0, records=batch)])]), 9)
    return answer.responses[0].partition_responses[0].error_code


async def test_naming_another_producers_id_gets_a_fresh_one(b: InProcessBroker) -> None:
    owner = await b.call(_init(), 4)
    assert owner.error_code == 0 and owner.producer_epoch == 0
    assert await _produce(b, owner.producer_id, 0, 0) == 0
    taker = await b.call(_init(owner.producer_id, owner.producer_epoch), 4)
    assert taker.error_code == 0
    assert taker.producer_id != owner.producer_id and taker.producer_epoch == 0
    assert await _produce(b, taker.producer_id, taker.producer_epoch, 0) == 0
    assert await _produce(b, owner.producer_id, 0, 1) == 0  # the owner is not fenced
