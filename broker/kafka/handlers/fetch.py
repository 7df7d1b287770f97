"""Fetch: serve whole record batches as stored, with long-poll.

Why: this is the read hot path. Limits follow KIP-74 (the first batch of the
first non-empty partition is returned even when larger than the limits) and
the wait is event-driven in the ReplicaManager. From v7 a fetch may belong to
an incremental fetch session (KIP-227, `replica/fetch_sessions.py`): a full
fetch (epoch 0) may create one, an incremental fetch names only the partitions
whose position changed and is answered only for the partitions that changed.
Kafka's leader reads every partition of the session at each fetch; this one
reads the partitions named and those its session marked dirty (their replica
changed, or their last read left something to tell), and parks on the session
rather than on each partition (`_read_session`): at 1,000s of partitions per
follower that walk was an acks=all record's latency. A periodic sweep of the
whole session (`fetch_sessions.new_context`) keeps a caught-up follower's
quiet partitions counted as fetched, as Kafka's. Session errors are answered alone.
Empty partitions carry zero-length records, never null. A read_committed
fetch (isolation_level 1) reads below the last stable offset and carries the
aborted transactions of what it returns; read_uncommitted gets null there.

From v13 topics are named by id (KIP-516): each is resolved to this broker's topic of that id, and one that no
topic has is answered UNKNOWN_TOPIC_ID for each partition asked; the answer names topics by id too. From v15 a
follower's id comes in the tagged ReplicaState.

Authorization (Kafka's handleFetchRequest): a follower's fetch (replica id set) needs CLUSTER_ACTION on the
cluster, else every partition is answered TOPIC_AUTHORIZATION_FAILED; a consumer's needs READ on each topic,
else its partitions are answered TOPIC_AUTHORIZATION_FAILED, whether or not the topic exists.
"""

from __future__ import annotations

import asyncio
import logging

from kafka.protocol.consumer import FetchRequest

from kelp.broker.replica.fetch_sessions import FetchContext, SessionKey, new_context
from kelp.broker.replica.fetch_sessions import finish as finish_context
from kelp.broker.replica.manager import FetchPartition
from kelp.broker.replica.partition import Partition
from kelp.errors import ErrorCode, UnknownTopicIdError

from ...client_quota_manager import FETCH as FETCH_QUOTA
from ...replica.results import FetchPartitionResult, close_results
from ..access import AclOperation, ResourceType, access
from ..fetch_encoder import MAX_VERSION, TOPIC_IDS_FROM, PartitionAnswer, encode_fetch_response
from ..request_time import exempt as exempt_from_request_quota
from ..request_time import throttle_ms as request_throttle_ms
from .error_log import PartitionErrors
from .registry import RawResponse, RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")


# -- authorization: Kafka's handleFetchRequest ------------------------------------------------------------
def _refused_topics(ctx: RequestContext, names: set[str], replica_id: int) -> set[str]:
    """The topics whose partitions are answered TOPIC_AUTHORIZATION_FAILED."""
    acc = access(ctx)
    if not acc.enabled:
        return set()
    if replica_id >= 0:
        return set() if acc.allows_cluster(AclOperation.CLUSTER_ACTION) else names
    return names - acc.allowed(AclOperation.READ, ResourceType.TOPIC, names)


def _replica_id(ctx: RequestContext, request: FetchRequest) -> int:
    if ctx.api_version >= 15 and request.replica_state is not None:
        return int(request.replica_state.replica_id)
    return request.replica_id if request.replica_id is not None else -1


def _quota(ctx: RequestContext, results: list[FetchPartitionResult]) -> int:
    """A consumer's answer counted against its consumer_byte_rate, and its time against its request_percentage.
    Over either (Kafka's handleFetchRequest): the bytes are taken back, the answer goes without records, carrying
    the larger throttle time, and the connection is muted."""
    size = sum(len(r.records) for r in results)
    quotas = ctx.broker.quotas
    user, client_id = ctx.principal.name, ctx.client_id or ""
    throttle_ms = quotas.record(FETCH_QUOTA, user, client_id, size)
    request_ms = request_throttle_ms(ctx)  # mutes the connection itself
    if throttle_ms or request_ms:
        quotas.unrecord(FETCH_QUOTA, user, client_id, size)
        close_results(results)
        for r in results:
            r.records, r.aborted_transactions = b"", None if r.aborted_transactions is None else []
        if throttle_ms and ctx.throttle is not None:
            ctx.throttle(throttle_ms)
    return max(throttle_ms, request_ms)


def _context(ctx: RequestContext, request: FetchRequest, by_id: bool, privileged: bool) -> FetchContext:
    """The fetch's partitions keyed as its session keys them, and its session context (v4-v6 are sessionless)."""
    asked: list[tuple[SessionKey, FetchPartition]] = []
    for t in request.topics:
        if by_id:  # kafka-python decodes the zero id as None: no topic has it
            key: str | bytes = t.topic_id.bytes if t.topic_id is not None else bytes(16)
        else:
            key = t.topic
        name = key if isinstance(key, str) else ""  # a topic id is resolved at each fetch
        for p in t.partitions:
            asked.append(((key, p.partition), FetchPartition(name, p.partition, p.fetch_offset, p.partition_max_bytes,
                                                             p.log_start_offset, p.current_leader_epoch)))
    if ctx.api_version < 7:
        return FetchContext(asked)
    forgotten: list[SessionKey] = []
    for f in request.forgotten_topics_data or ():
        fkey: str | bytes = (f.topic_id.bytes if f.topic_id is not None else bytes(16)) if by_id else f.topic
        forgotten.extend((fkey, p) for p in f.partitions)
    return new_context(ctx.broker.replicas.fetch_sessions, session_id=request.session_id,
                       epoch=request.session_epoch, privileged=privileged, by_id=by_id, asked=asked,
                       forgotten=forgotten)


# One read's outcome: the answers keyed by session key (in the order read), the results behind them (quota),
# and for each partition read the replica read and whether nothing is left to tell (`fetch_sessions.finish`).
Read = tuple[dict[SessionKey, PartitionAnswer], list[FetchPartitionResult],
             dict[SessionKey, tuple[Partition | None, bool]]]


def _told_all(r: FetchPartitionResult) -> bool:
    """Whether the answer leaves the fetcher nothing to learn until the replica changes again: no error, no records
    (the position is the end of what may be read) and what it says still true at the end of the read (a follower's
    own fetch may have moved the high watermark after it was taken, with no session yet watching the replica).
    The last stable offset is not compared: it moves only with the high watermark or an append (a marker)."""
    part = r.replica
    return (r.caught_up and r.error is None and part is not None and part.high_watermark == r.high_watermark
            and part.log.log_start_offset == r.log_start_offset)


async def _read(ctx: RequestContext, request: FetchRequest, partitions: list[tuple[SessionKey, FetchPartition]],
                replica_id: int, *, max_wait_ms: int, max_bytes: int, min_one: bool = True) -> Read:
    """Read `partitions` (waiting up to `max_wait_ms` for `request.min_bytes`), each topic resolved now."""
    topic_names = ctx.broker.topics
    # Each topic a session names is resolved at each fetch: by id, the topic may be created (or re-created) later.
    names: dict[str | bytes, str | None] = {}
    for (key, _), req in partitions:
        if key not in names:
            names[key] = topic_names.name_of(key.hex()) if isinstance(key, bytes) else key
        name = names[key]
        if name is not None and req.topic != name:
            req.topic = name
    refused = _refused_topics(ctx, {n for n in names.values() if n is not None}, replica_id)
    reqs = [req for (key, _), req in partitions if names[key] is not None and names[key] not in refused]
    results = await ctx.broker.replicas.fetch(
        reqs,
        max_wait_ms=max_wait_ms,
        min_bytes=request.min_bytes,
        max_bytes=max_bytes,
        isolation=request.isolation_level,
        replica_id=replica_id,
        zero_copy=True,
        min_one=min_one,
    ) if reqs else []
    # A topic deleted and re-created while the fetch waited: what was read is the new topic's, and the client asked
    # for the old id. Kafka answers UNKNOWN_TOPIC_ID; so does this, and the records read go back unanswered.
    gone = {name for key, name in names.items()
            if isinstance(key, bytes) and name is not None and topic_names.name_of(key.hex()) != name}
    errors = PartitionErrors("Fetch", ctx.client)
    answers: dict[SessionKey, PartitionAnswer] = {}
    read: dict[SessionKey, tuple[Partition | None, bool]] = {}
    it = iter(results)
    for (key, p), _ in partitions:
        name = names[key]
        if name is None or name in refused:
            refusal = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            answers[(key, p)] = (p, refusal, -1, -1, -1, b"", None)
            read[(key, p)] = (None, False)
            continue
        r = next(it)
        if r.topic in gone:
            close_results([r])
            r = FetchPartitionResult(r.topic, r.partition, UnknownTopicIdError(
                f"topic '{r.topic}' was deleted and re-created under another id while the fetch waited"))
        code: int = ErrorCode.NONE
        if r.error is not None:
            code = r.error.code
            errors.add(r.topic, r.partition, r.error)
        answers[(key, p)] = (r.partition, code, r.high_watermark, r.last_stable_offset, r.log_start_offset,
                             r.records, r.aborted_transactions)
        read[(key, p)] = (r.replica, _told_all(r))
    errors.log(log)
    if refused:
        log.info("fetch by %s (%s): not authorized for topic(s) %s", ctx.client, ctx.principal, sorted(refused))
    return answers, results, read


async def _read_session(ctx: RequestContext, request: FetchRequest, context: FetchContext, replica_id: int,
                        max_bytes: int) -> Read:
    """An incremental fetch: its dirty and named partitions read, then parked on the session (not on each of its
    partitions) until any of them changes, as Kafka's delayed fetch: each wake reads only what changed since."""
    session = context.session
    assert session is not None
    answers, results, read = await _read(ctx, request, context.partitions, replica_id, max_wait_ms=0,
                                         max_bytes=max_bytes)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000.0
    total = sum(len(a[5]) for a in answers.values())
    while total < max(request.min_bytes, 1) and not any(a[1] for a in answers.values()):
        session.watch(read, keep_unclean=False)  # a change to what was read wakes the wait below
        timeout = deadline - loop.time()
        if timeout <= 0:
            break
        await session.wait_dirty(timeout)
        keys = session.take_dirty()
        if not keys:
            continue
        more, more_results, more_read = await _read(
            ctx, request, [(key, session.partitions[key].req) for key in keys], replica_id, max_wait_ms=0,
            max_bytes=max(max_bytes - total, 0), min_one=total == 0)
        fresh = {(r.topic, r.partition) for r in more_results}
        close_results([r for r in results if (r.topic, r.partition) in fresh])
        results = [r for r in results if (r.topic, r.partition) not in fresh] + more_results
        answers.update(more)
        read.update(more_read)
        total = sum(len(a[5]) for a in answers.values())
    return answers, results, read


@handles(FetchRequest, min_version=4, max_version=MAX_VERSION)
async def handle_fetch(ctx: RequestContext, request: FetchRequest) -> RawResponse:
    replica_id = _replica_id(ctx, request)
    if replica_id >= 0:
        exempt_from_request_quota(ctx)  # a follower's fetch: counted, never throttled (Kafka's maybeRecordExempt)
    elif ctx.consumer_fetching is not None:
        ctx.consumer_fetching()
    by_id = ctx.api_version >= TOPIC_IDS_FROM
    context = _context(ctx, request, by_id, replica_id >= 0)
    if context.error:
        log.info("fetch by %s: session %d epoch %d answered with error %d", ctx.client, request.session_id,
                 request.session_epoch, context.error)
        buffers, size = encode_fetch_response(ctx.api_version, error_code=context.error, session_id=0, topics=[])
        return RawResponse(buffers, size)
    max_bytes = request.max_bytes if request.max_bytes and request.max_bytes > 0 else 0x7FFFFFFF
    if context.session is None:
        answers, results, read = await _read(ctx, request, context.partitions, replica_id,
                                             max_wait_ms=request.max_wait_ms, max_bytes=max_bytes)
    else:
        answers, results, read = await _read_session(ctx, request, context, replica_id, max_bytes)
    throttle_ms = _quota(ctx, results) if replica_id < 0 else 0
    if throttle_ms:  # the records were taken back
        answers = {key: a[:5] + (b"", None if a[6] is None else []) for key, a in answers.items()}
    session_id, answered = finish_context(ctx.broker.replicas.fetch_sessions, context, replica_id >= 0, by_id,
                                          list(answers.items()), read)
    topics: list[tuple[str | bytes, list[PartitionAnswer]]] = []
    by_key: dict[str | bytes, list[PartitionAnswer]] = {}
    for (key, _), a in answered:
        parts = by_key.get(key)
        if parts is None:
            parts = by_key[key] = []
            topics.append((key, parts))
        parts.append(a)
    buffers, size = encode_fetch_response(ctx.api_version, throttle_time_ms=throttle_ms, error_code=ErrorCode.NONE,
                                          session_id=session_id, topics=topics)
    return RawResponse(buffers, size)
