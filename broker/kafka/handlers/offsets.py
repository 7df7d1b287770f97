"""ListOffsets and OffsetForLeaderEpoch: where a consumer or follower should be.

Why: consumers use ListOffsets to reset positions (auto.offset.reset, seek to
time): earliest (-2), latest (-1), max timestamp (-3, v7+), earliest local
(-4, v8+: the log start, Kelp does not tier), latest tiered (-5, v9+: -1, as
Kafka answers without tiered storage) or the first offset at a time; with
isolation_level 1 (read_committed, v2+) latest is the last stable offset. v0
answers through `old_style_offsets`. OffsetForLeaderEpoch tells a client
(KIP-320) or a follower (KIP-101) where an epoch ended, to detect truncation.

Authorization (Kafka's handleListOffsetRequest, handleOffsetForLeaderEpochRequest): ListOffsets needs DESCRIBE
on each topic; OffsetForLeaderEpoch CLUSTER_ACTION on the cluster (a follower) or else DESCRIBE on each topic (a
consumer, KIP-320). A topic refused is answered TOPIC_AUTHORIZATION_FAILED for each partition asked.
"""

from __future__ import annotations

import logging

from kafka.protocol.consumer import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

from kelp.errors import ErrorCode, KelpError

from ...loop_budget import LoopBudget
from ..access import AclOperation, ResourceType, access
from .error_log import PartitionErrors
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

TR = ListOffsetsResponse.ListOffsetsTopicResponse
PR = TR.ListOffsetsPartitionResponse
_ListPartition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
_EpochPartition = OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition


# -- authorization: Kafka's handleListOffsetRequest and handleOffsetForLeaderEpochRequest -------------------
def _list_refused(ctx: RequestContext, request: ListOffsetsRequest) -> set[str]:
    acc = access(ctx)
    names = {t.name for t in request.topics}
    return names - acc.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, names) if acc.enabled else set()


def _epoch_refused(ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> set[str]:
    acc = access(ctx)
    if not acc.enabled or acc.allows_cluster(AclOperation.CLUSTER_ACTION):
        return set()
    names = {t.topic for t in request.topics}
    return names - acc.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, names)


def _epoch(p: _ListPartition | _EpochPartition) -> int:
    """The request's current_leader_epoch (KIP-320), -1 when the version lacks it."""
    value = getattr(p, "current_leader_epoch", None)
    return -1 if value is None else int(value)


@handles(ListOffsetsRequest, min_version=0, max_version=9)
async def handle_list_offsets(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    replicas = ctx.broker.replicas
    refused = _list_refused(ctx, request)
    isolation = int(getattr(request, "isolation_level", 0) or 0)  # v2+; read_committed: latest is the LSO
    budget = LoopBudget()
    errors = PartitionErrors("ListOffsets", ctx.client)
    topics = []
    for t in request.topics:
        parts = []
        if t.name in refused:
            topics.append(TR(name=t.name, partitions=[
                PR(partition_index=p.partition_index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                   old_style_offsets=[], timestamp=-1, offset=-1, leader_epoch=-1) for p in t.partitions]))
            continue
        for p in t.partitions:
            await budget.tick()
            try:
                offset, ts = replicas.list_offset(t.name, p.partition_index, p.timestamp,
                                                  current_leader_epoch=_epoch(p), isolation_level=isolation)
                epoch = replicas.leader_epoch(t.name, p.partition_index) if offset >= 0 else -1
                code: int = ErrorCode.NONE
            except KelpError as exc:
                errors.add(t.name, p.partition_index, exc)
                offset, ts, epoch, code = -1, -1, -1, exc.code
            parts.append(PR(
                partition_index=p.partition_index, error_code=code,
                old_style_offsets=[offset] if offset >= 0 else [],
                timestamp=ts, offset=offset, leader_epoch=epoch,
            ))
        topics.append(TR(name=t.name, partitions=parts))
    errors.log(log)
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


@handles(OffsetForLeaderEpochRequest, min_version=0, max_version=4)
async def handle_offset_for_leader_epoch(
    ctx: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    replicas = ctx.broker.replicas
    TRes = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
    E = TRes.EpochEndOffset
    refused = _epoch_refused(ctx, request)
    budget = LoopBudget()
    errors = PartitionErrors("OffsetForLeaderEpoch", ctx.client)
    topics = []
    for t in request.topics:
        if t.topic in refused:
            topics.append(TRes(topic=t.topic, partitions=[
                E(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, partition=p.partition, leader_epoch=-1,
                  end_offset=-1) for p in t.partitions]))
            continue
        parts = []
        for p in t.partitions:
            await budget.tick()
            try:
                epoch, end = replicas.end_offset_for_epoch(
                    t.topic, p.partition, p.leader_epoch,
                    current_leader_epoch=_epoch(p) if ctx.api_version >= 2 else -1)
                code: int = ErrorCode.NONE
            except KelpError as exc:
                errors.add(t.topic, p.partition, exc)
                epoch, end, code = -1, -1, exc.code
            parts.append(E(error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end))
        topics.append(TRes(topic=t.topic, partitions=parts))
    errors.log(log)
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
