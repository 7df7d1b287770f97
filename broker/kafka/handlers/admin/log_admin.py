"""DeleteRecords and DescribeLogDirs: the admin view of partition logs over Kafka.

Why: `kafka-delete-records` and AdminClient.delete_records cut a partition's
head (the log start moves up, the segments wholly below it go at the next
retention check, followers follow the leader's log start through Fetch);
`kafka-log-dirs --describe` and AdminClient.describe_log_dirs show where each
replica lives on disk and how big it is. The rules (leader only, never past
the high watermark, not on compacted logs) are the replica manager's
(`ReplicaManager.delete_records`, shared with the HTTP API); this module only
translates requests and errors.

Authorization (Kafka's handleDeleteRecordsRequest, handleDescribeLogDirsRequest): DeleteRecords needs DELETE on
each topic (else TOPIC_AUTHORIZATION_FAILED per partition, whether or not it exists); DescribeLogDirs DESCRIBE on
the cluster (else CLUSTER_AUTHORIZATION_FAILED and no log dirs).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

from kafka.protocol.admin import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)

from kelp.errors import ErrorCode, KelpError

from ...access import AclOperation, ResourceType, access
from ..registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

_LogDirPartition = DescribeLogDirsResponse.DescribeLogDirsResult.DescribeLogDirsTopic.DescribeLogDirsPartition


# -- authorization: Kafka's handleDeleteRecordsRequest and handleDescribeLogDirsRequest --------------------------
def _deletable(ctx: RequestContext, request: DeleteRecordsRequest) -> set[str]:
    return access(ctx).allowed(AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))


def _may_describe_log_dirs(ctx: RequestContext) -> bool:
    return access(ctx).allows_cluster(AclOperation.DESCRIBE)


@handles(DeleteRecordsRequest, min_version=0, max_version=2)
async def handle_delete_records(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    replicas = ctx.broker.replicas
    TR = DeleteRecordsResponse.DeleteRecordsTopicResult
    PR = TR.DeleteRecordsPartitionResult

    async def one(topic: str, p: DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition
                  ) -> DeleteRecordsResponse.DeleteRecordsTopicResult.DeleteRecordsPartitionResult:
        try:
            low = await replicas.delete_records(topic, p.partition_index, p.offset, timeout_ms=request.timeout_ms)
            return PR(partition_index=p.partition_index, low_watermark=low, error_code=ErrorCode.NONE)
        except KelpError as exc:
            log.warning("delete records of topic '%s' partition %d before %d by %s refused: %s",
                        topic, p.partition_index, p.offset, ctx.client, exc)
            return PR(partition_index=p.partition_index, low_watermark=-1, error_code=exc.code)

    deletable = _deletable(ctx, request)

    async def refused(p: DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition
                      ) -> DeleteRecordsResponse.DeleteRecordsTopicResult.DeleteRecordsPartitionResult:
        return PR(partition_index=p.partition_index, low_watermark=-1, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)

    # Partitions at once: each may wait for its followers' log starts (up to the request's timeout).
    topics = [TR(name=t.name, partitions=list(await asyncio.gather(
        *((one(t.name, p) if t.name in deletable else refused(p)) for p in t.partitions))))
        for t in request.topics]
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


def _usage(directory: Path) -> tuple[int, int]:
    try:
        usage = shutil.disk_usage(directory)
        return usage.total, usage.free
    except OSError:
        return -1, -1


@handles(DescribeLogDirsRequest, min_version=1, max_version=4)
async def handle_describe_log_dirs(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    """Each log dir with the partitions it holds (all, or those asked for): size and LEO lag behind the HW."""
    broker = ctx.broker
    if not _may_describe_log_dirs(ctx):
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=denied, results=[])
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    dirs = [Path(d).resolve() for d in broker.config.log_dirs]
    R = DescribeLogDirsResponse.DescribeLogDirsResult
    T = R.DescribeLogDirsTopic
    P = T.DescribeLogDirsPartition
    by_dir: dict[Path, dict[str, list[_LogDirPartition]]] = {d: {} for d in dirs}
    for key in broker.logs.partitions():
        lg = broker.logs.get(*key)
        if lg is None or (wanted is not None and key not in wanted):
            continue
        home = lg.directory.parent.resolve()
        lag = max(lg.high_watermark - lg.log_end_offset, 0)
        by_dir.setdefault(home, {}).setdefault(key[0], []).append(
            P(partition_index=key[1], partition_size=lg.size_bytes, offset_lag=lag, is_future_key=False))
    usages = await asyncio.gather(*(asyncio.to_thread(_usage, d) for d in by_dir))
    results = [
        R(error_code=ErrorCode.NONE, log_dir=str(d), total_bytes=total, usable_bytes=free, is_cordoned=False,
          topics=[T(name=name, partitions=sorted(ps, key=lambda p: p.partition_index))
                  for name, ps in sorted(topics.items())])
        for (d, topics), (total, free) in zip(by_dir.items(), usages, strict=True)
    ]
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, results=results)
