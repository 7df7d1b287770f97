"""Fetch: serve whole record batches as stored, with long-poll.

Why: this is the read hot path. Limits follow KIP-74 (the first batch of the
first non-empty partition is returned even when larger than the limits) and
the wait is event-driven in the ReplicaManager. No fetch sessions: every
request is answered as a full fetch with session id 0, which clients accept
(a request for a new session gets id 0 = "no session").
Empty partitions carry zero-length records, never null.
"""

from __future__ import annotations

import logging

from kafka.protocol.consumer import FetchRequest

from kelp.broker.replica_manager import FetchPartition
from kelp.errors import ErrorCode

from ..fetch_encoder import PartitionAnswer, encode_fetch_response
from .registry import RawResponse, RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")



@handles(FetchRequest, min_version=4, max_version=12)
async def handle_fetch(ctx: RequestContext, request: FetchRequest) -> RawResponse:
    reqs = []
    for t in request.topics:
        for p in t.partitions:
            reqs.append(FetchPartition(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                                       p.log_start_offset, p.current_leader_epoch))
    max_bytes = request.max_bytes if request.max_bytes and request.max_bytes > 0 else 0x7FFFFFFF
    results = await ctx.broker.replicas.fetch(
        reqs,
        max_wait_ms=request.max_wait_ms,
        min_bytes=request.min_bytes,
        max_bytes=max_bytes,
        isolation=request.isolation_level,
        replica_id=request.replica_id if request.replica_id is not None else -1,
        zero_copy=True,
    )
    topics: list[tuple[str, list[PartitionAnswer]]] = []
    by_name: dict[str, list[PartitionAnswer]] = {}
    for r in results:
        parts = by_name.get(r.topic)
        if parts is None:
            parts = by_name[r.topic] = []
            topics.append((r.topic, parts))
        code: int = ErrorCode.NONE
        if r.error is not None:
            code = r.error.code
            log.warning("fetch from topic '%s' partition %d by %s: %s", r.topic, r.partition, ctx.client, r.error)
        parts.append((r.partition, code, r.high_watermark, r.last_stable_offset, r.log_start_offset, r.records))
    buffers, size = encode_fetch_response(ctx.api_version, throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0,
                                          topics=topics)
    return RawResponse(buffers, size)
