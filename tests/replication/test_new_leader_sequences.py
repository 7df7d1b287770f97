"""What a new leader answers an idempotent producer after a failover, batch by batch, as Kafka's broker does
(`ProducerAppendInfo.checkSequence`, `ProducerStateEntry.findDuplicateBatch`).

Why: these are the answers behind the 'duplicated' records of the chaos run of seed 1, fault #14
(docs/chaos.md, "Duplicates the client causes"). Broker 1 fetched a producer's batches from leader 0 at
leader epoch 3; leader 0 paused before its high watermark passed the second batch, answered the producer
NOT_LEADER_OR_FOLLOWER after the controller failover, and broker 1 leads at epoch 4 with the batch in its log
and in its producer state, built from the replicated batches:

- the retry under the same producer epoch is a duplicate, answered with the first copy's offsets;
- a batch that skips sequences (librdkafka sent the next one before re-queueing the failed one) is refused
  OUT_OF_ORDER_SEQUENCE_NUMBER — the answer that makes librdkafka bump its epoch for the whole producer;
- the batch renumbered under the bumped epoch from sequence 0 is a new batch and is stored again: duplicates
  are recognised within one producer epoch only, so that copy is the client's doing, as it is with Kafka;
- the old epoch is fenced from then on.
"""

from __future__ import annotations

import pytest

from kelp.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from kelp.records.header import assign_offsets
from kelp.records.validation import parse_batches
from tests.replication.replica_harness import TOPIC, Node, batch

PRODUCER = 7


def replicated(data: bytes, base_offset: int, leader_epoch: int) -> bytes:
    """`data` as the leader stored it and a follower fetches it."""
    buf = bytearray(data)
    assign_offsets(buf, parse_batches(buf), base_offset=base_offset, leader_epoch=leader_epoch)
    return bytes(buf)


async def test_a_new_leader_answers_a_retry_a_sequence_gap_and_a_bumped_epoch_as_kafka_does(tmp_path) -> None:
    replicas = (0, 1, 2)
    node = Node(tmp_path, 1)
    node.push(replicas=replicas, leader=0, leader_epoch=3, isr=replicas)
    first = batch(4, producer_id=PRODUCER, producer_epoch=0, base_sequence=0)
    unanswered = batch(3, producer_id=PRODUCER, producer_epoch=0, base_sequence=4)
    node.rm.append_as_follower(TOPIC, 0, replicated(first, 0, 3), leader_epoch=3, leader_high_watermark=0)
    node.rm.append_as_follower(TOPIC, 0, replicated(unanswered, 4, 3), leader_epoch=3, leader_high_watermark=4)
    assert node.log.log_end_offset == 7

    node.push(replicas=replicas, leader=1, leader_epoch=4, isr=(1, 2), partition_epoch=1)  # controller failover
    await node.settle()
    assert node.part.is_leader

    retry = await node.rm.append(TOPIC, 0, bytearray(unanswered), acks=1)
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (4, 6)

    with pytest.raises(OutOfOrderSequenceError, match="sent sequence 9 .* expected 7"):
        await node.rm.append(TOPIC, 0, bytearray(batch(2, producer_id=PRODUCER, producer_epoch=0,
                                                       base_sequence=9)), acks=1)
    assert node.log.log_end_offset == 7

    renumbered = batch(3, producer_id=PRODUCER, producer_epoch=1, base_sequence=0)
    again = await node.rm.append(TOPIC, 0, bytearray(renumbered), acks=1)
    assert not again.duplicate and (again.base_offset, again.last_offset) == (7, 9)
    assert (await node.rm.append(TOPIC, 0, bytearray(renumbered), acks=1)).duplicate  # within epoch 1: once

    with pytest.raises(InvalidProducerEpochError):
        await node.rm.append(TOPIC, 0, bytearray(unanswered), acks=1)
    node.close()
