"""DescribeProducers (API 61, Kafka 4's v0): the producers a partition replica knows, for hanging transactions.

Why: `kafka-transactions describe-producers`, `find-hanging` and `abort` (Kafka's TransactionsCommand, KIP-664)
find a transaction no coordinator will ever end — a producer's batches opened it on a partition, and the
coordinator lost it — by asking each partition for its active producers: per producer its epoch, last
sequence, last timestamp, the coordinator epoch of its last marker and the first offset of its open
transaction (Kafka's `UnifiedLog.activeProducers`, here `ProducerStateManager.active_producers`). Any replica
answers from its own producer state (the admin client asks the leader, or the broker `--broker-id` names);
a broker without a replica of the partition answers NOT_LEADER_OR_FOLLOWER, an unknown one
UNKNOWN_TOPIC_OR_PARTITION. `abort` then ends the transaction with WriteTxnMarkers (`txn_markers`).

Authorization (Kafka's handleDescribeProducersRequest): READ on the topic, else TOPIC_AUTHORIZATION_FAILED for
each of its partitions (whether or not it exists).

This module must never change producer state: it only reads it through the replica manager.
"""

from __future__ import annotations

from kafka.protocol.admin import DescribeProducersRequest, DescribeProducersResponse

from kelp.errors import ErrorCode, KelpError

from ...access import AclOperation, ResourceType, access
from ..registry import RequestContext, handles

_Topic = DescribeProducersResponse.TopicResponse
_Partition = _Topic.PartitionResponse
_Producer = _Partition.ProducerState


def _describe(ctx: RequestContext, topic: str, partition: int) -> _Partition:
    try:
        producers, _, _ = ctx.broker.replicas.active_producers(topic, partition)
    except KelpError as exc:
        return _Partition(partition_index=partition, error_code=exc.code, error_message=str(exc),
                          active_producers=[])
    return _Partition(partition_index=partition, error_code=ErrorCode.NONE, error_message=None, active_producers=[
        _Producer(producer_id=p.producer_id, producer_epoch=p.producer_epoch, last_sequence=p.last_sequence,
                  last_timestamp=p.last_timestamp, coordinator_epoch=p.coordinator_epoch,
                  current_txn_start_offset=p.txn_start_offset) for p in producers])


@handles(DescribeProducersRequest, min_version=0, max_version=0)
async def handle_describe_producers(ctx: RequestContext,
                                    request: DescribeProducersRequest) -> DescribeProducersResponse:
    readable = access(ctx).allowed(AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics or []))
    topics = []
    for t in request.topics or []:
        if t.name not in readable:
            partitions = [_Partition(partition_index=p, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                     error_message=None, active_producers=[]) for p in t.partition_indexes]
        else:
            partitions = [_describe(ctx, t.name, p) for p in t.partition_indexes]
        topics.append(_Topic(name=t.name, partitions=partitions))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
