"""Fetch: serve whole record batches as stored, with long-poll.

Why: this is the read hot path. Limits follow KIP-74 (the first batch of the
first non-empty partition is returned even when larger than the limits) and
the wait is event-driven in the ReplicaManager. No fetch sessions: every
request is answered as a full fetch with session id 0, which clients accept
(a request for a new session gets id 0 = "no session").
Empty partitions carry zero-length records, never null. A read_committed
fetch (isolation_level 1) reads below the last stable offset and carries the
aborted transactions of what it returns; read_uncommitted gets null there.

Authorization (Kafka's handleFetchRequest): a follower's fetch (replica id set) needs CLUSTER_ACTION on the
cluster, else every partition is answered TOPIC_AUTHORIZATION_FAILED; a consumer's needs READ on each topic,
else its partitions are answered TOPIC_AUTHORIZATION_FAILED, whether or not the topic exists.
"""

from __future__ import annotations

import logging

from kafka.protocol.consumer import FetchRequest

from kelp.broker.replica_manager import FetchPartition
from kelp.errors import ErrorCode

from ..access import AclOperation, ResourceType, access
from ..fetch_encoder import PartitionAnswer, encode_fetch_response
from .error_log import PartitionErrors
from .registry import RawResponse, RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")


# -- authorization: Kafka's handleFetchRequest ------------------------------------------------------------
def _refused_topics(ctx: RequestContext, request: FetchRequest, replica_id: int) -> set[str]:
    """The topics whose partitions are answered TOPIC_AUTHORIZATION_FAILED."""
    acc = access(ctx)
    names = {t.topic for t in request.topics}
    if not acc.enabled:
        return set()
    if replica_id >= 0:
        return set() if acc.allows_cluster(AclOperation.CLUSTER_ACTION) else names
    return names - acc.allowed(AclOperation.READ, ResourceType.TOPIC, names)


@handles(FetchRequest, min_version=4, max_version=12)
async def handle_fetch(ctx: RequestContext, request: FetchRequest) -> RawResponse:
    replica_id = request.replica_id if request.replica_id is not None else -1
    if replica_id < 0 and ctx.consumer_fetching is not None:
        ctx.consumer_fetching()
    refused = _refused_topics(ctx, request, replica_id)
    reqs = []
    for t in request.topics:
        if t.topic in refused:
            continue
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
        replica_id=replica_id,
        zero_copy=True,
    ) if reqs else []
    topics: list[tuple[str, list[PartitionAnswer]]] = []
    by_name: dict[str, list[PartitionAnswer]] = {}
    errors = PartitionErrors("Fetch", ctx.client)
    for r in results:
        parts = by_name.get(r.topic)
        if parts is None:
            parts = by_name[r.topic] = []
            topics.append((r.topic, parts))
        code: int = ErrorCode.NONE
        if r.error is not None:
            code = r.error.code
            errors.add(r.topic, r.partition, r.error)
        parts.append((r.partition, code, r.high_watermark, r.last_stable_offset, r.log_start_offset, r.records,
                      r.aborted_transactions))
    errors.log(log)
    if refused:
        log.info("fetch by %s (%s): not authorized for topic(s) %s", ctx.client, ctx.principal, sorted(refused))
        for t in request.topics:
            if t.topic in refused:
                parts = by_name.setdefault(t.topic, [])
                if not parts:
                    topics.append((t.topic, parts))
                parts.extend((p.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1, -1, b"", None)
                             for p in t.partitions)
    buffers, size = encode_fetch_response(ctx.api_version, throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0,
                                          topics=topics)
    return RawResponse(buffers, size)
