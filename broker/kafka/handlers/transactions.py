"""Transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeTransactions,
ListTransactions (InitProducerId is in `producer_ids`, FindCoordinator in `groups`).

Why: these turn kafka-python request objects into calls on the broker's `TransactionCoordinator`
(`broker.transactions`) — and, for TxnOffsetCommit, on its `GroupCoordinator` — and their results back
into responses, for transactions "v1" (the client adds its partitions) and "v2" (KIP-890 part 2, when the
broker's transaction.version is 2: EndTxn v5 bumps the epoch on every commit and abort and answers the next
producer id and epoch; TxnOffsetCommit v5 has its offsets partition added by the group coordinator's broker,
as Produce v12 has its partitions added by their leaders). AddPartitionsToTxn is served up to Kafka 4's v5,
its batched broker form (v4+) for partition leaders verifying (or, for v2 clients, adding to) a transaction.

Authorization (Kafka's KafkaApis), all in the block below: AddPartitionsToTxn v0-3 needs WRITE on the
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition) and WRITE on each topic
(TOPIC_AUTHORIZATION_FAILED; an internal topic is never authorized; the partitions that passed get
OPERATION_NOT_ATTEMPTED), v4+ CLUSTER_ACTION (CLUSTER_AUTHORIZATION_FAILED); AddOffsetsToTxn WRITE on the
transactional id and READ on the group (GROUP_AUTHORIZATION_FAILED); EndTxn WRITE on the transactional id;
TxnOffsetCommit WRITE on the transactional id, READ on the group and READ on each topic;
DescribeTransactions DESCRIBE on each transactional id; ListTransactions lists only the ids the principal
may DESCRIBE.

This module must never hold transaction state or decide transaction rules: that is
`kelp.broker.transactions.coordinator`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafka.protocol.admin import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from kelp.broker.groups.group import CommittedOffset
from kelp.broker.groups.placement import OFFSETS_TOPIC
from kelp.broker.metadata.model import INTERNAL_TOPICS
from kelp.errors import ErrorCode

from ...client_patterns import InvalidPattern, full_matches
from ...loop_budget import LoopBudget
from ...txn_verification import FIRST_ADD_PARTITION_TXN_OFFSET_VERSION, txn_offset_commit_error
from ..access import AclOperation, ResourceType, access
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


# -- authorization: Kafka's transaction handlers --------------------------------------------------------------
def _may_write_txn(ctx: RequestContext, transactional_id: str) -> bool:
    return access(ctx).allows(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _may_group(ctx: RequestContext, operation: AclOperation, group_id: str) -> bool:
    return access(ctx).allows(operation, ResourceType.GROUP, group_id)


def _topics_allowed(ctx: RequestContext, operation: AclOperation, names: set[str]) -> set[str]:
    acc = access(ctx)
    return acc.allowed(operation, ResourceType.TOPIC, names) if acc.enabled else set(names)


def _fenced(code: int, version: int) -> int:
    """Clients before v2 of these APIs know INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED (Kafka's rule)."""
    return ErrorCode.INVALID_PRODUCER_EPOCH if code == ErrorCode.PRODUCER_FENCED and version < 2 else code


# -- AddPartitionsToTxn ---------------------------------------------------------------------------------------
R = AddPartitionsToTxnResponse
_V3Topic = R.AddPartitionsToTxnTopicResult
_V4Topic = R.AddPartitionsToTxnResult.AddPartitionsToTxnTopicResult


def _by_topic(codes: dict[tuple[str, int], int]) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for (topic, p), code in sorted(codes.items()):
        out.setdefault(topic, []).append((p, code))
    return out


def _topic_results(codes: dict[tuple[str, int], int]) -> list[_V3Topic]:
    P = _V3Topic.AddPartitionsToTxnPartitionResult
    return [_V3Topic(name=t, results_by_partition=[P(partition_index=p, partition_error_code=c) for p, c in ps])
            for t, ps in _by_topic(codes).items()]


def _txn_topic_results(codes: dict[tuple[str, int], int]) -> list[_V4Topic]:
    P = _V4Topic.AddPartitionsToTxnPartitionResult
    return [_V4Topic(name=t, results_by_partition=[P(partition_index=p, partition_error_code=c) for p, c in ps])
            for t, ps in _by_topic(codes).items()]


async def _add_for_client(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int,
                          wanted: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v0-3 (a producer): Kafka's checks, then the coordinator; a code per partition."""
    if not _may_write_txn(ctx, transactional_id):
        return {tp: TXN_DENIED for tp in wanted}
    names = {t for t, _ in wanted}
    allowed = _topics_allowed(ctx, AclOperation.WRITE, names - INTERNAL_TOPICS)
    failed: dict[tuple[str, int], int] = {}
    for topic, p in wanted:
        info = ctx.broker.topics.get(topic)
        if topic not in allowed:
            failed[(topic, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif info is None or not 0 <= p < info.partitions:
            failed[(topic, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if failed:
        return {tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    code = await ctx.broker.transactions.add_partitions(transactional_id, producer_id, producer_epoch, wanted)
    return {tp: _fenced(code, ctx.api_version) for tp in wanted}


@handles(AddPartitionsToTxnRequest, min_version=0, max_version=5)
async def handle_add_partitions_to_txn(ctx: RequestContext,
                                       request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    v = ctx.api_version
    if v < 4:
        tid = request.v3_and_below_transactional_id
        wanted = [(t.name, p) for t in request.v3_and_below_topics or [] for p in t.partitions or []]
        codes = await _add_for_client(ctx, tid, request.v3_and_below_producer_id,
                                      request.v3_and_below_producer_epoch, wanted)
        bad = {tp: c for tp, c in codes.items() if c}
        if bad:
            log.info("AddPartitionsToTxn of transactional id '%s' from %s: errors %s", tid, ctx.client,
                     ", ".join(f"{t}-{p}:{c}" for (t, p), c in sorted(bad.items())[:10]))
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(codes))
    # v4+: brokers (partition leaders) verifying, or adding for, transactions; never producers.
    if not access(ctx).allows_cluster(AclOperation.CLUSTER_ACTION):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    coordinator = ctx.broker.transactions

    async def one(txn: Any) -> Any:
        wanted = [(t.name, p) for t in txn.topics or [] for p in t.partitions or []]
        if txn.verify_only:
            codes = coordinator.verify_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted)
        else:
            # a partition leader adding for a transactions v2 client (its Produce v12+ / TxnOffsetCommit v5+)
            code = await coordinator.add_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                                    wanted, tv2=True)
            codes = {tp: code for tp in wanted}
        return R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                          topic_results=_txn_topic_results(codes))

    # Each transaction on its own (Kafka answers each through its own callback): one whose previous transaction
    # is still completing waits for it (`completion_wait_ms`) without holding up the others of the request.
    results = await asyncio.gather(*(one(txn) for txn in request.transactions or []))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, results_by_transaction=list(results))


# -- AddOffsetsToTxn ------------------------------------------------------------------------------------------
@handles(AddOffsetsToTxnRequest, min_version=0, max_version=4)
async def handle_add_offsets_to_txn(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    """The group's `__consumer_offsets` partition joins the transaction (its TxnOffsetCommit follows)."""
    tid = request.transactional_id
    if not _may_write_txn(ctx, tid):
        code = int(TXN_DENIED)
    elif not _may_group(ctx, AclOperation.READ, request.group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        partition = ctx.broker.groups.partition_for(request.group_id)
        code = await ctx.broker.transactions.add_partitions(tid, request.producer_id, request.producer_epoch,
                                                            [(OFFSETS_TOPIC, partition)])
        code = _fenced(code, ctx.api_version)
    if code:
        log.info("AddOffsetsToTxn of transactional id '%s' (group '%s') from %s: error %d", tid, request.group_id,
                 ctx.client, code)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


# -- EndTxn ---------------------------------------------------------------------------------------------------
@handles(EndTxnRequest, min_version=0, max_version=5)
async def handle_end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    """v5 is transactions v2 (KIP-890 part 2): the epoch is bumped on every commit and abort and the answer
    carries the producer id and epoch of the client's next transaction."""
    tid = request.transactional_id
    pid, epoch = -1, -1
    if not _may_write_txn(ctx, tid):
        code = int(TXN_DENIED)
    elif ctx.api_version >= 5:
        result = await ctx.broker.transactions.end_txn_v2(tid, request.producer_id, request.producer_epoch,
                                                          bool(request.committed))
        code, pid, epoch = result.error, result.producer_id, result.producer_epoch
    else:
        code = _fenced(await ctx.broker.transactions.end_txn(tid, request.producer_id, request.producer_epoch,
                                                             bool(request.committed)), ctx.api_version)
    if code:
        log.info("EndTxn (%s) of transactional id '%s' producer %d epoch %d from %s: error %d (%s)",
                 "commit" if request.committed else "abort", tid, request.producer_id, request.producer_epoch,
                 ctx.client, code, _coordinator_view(ctx, tid))
    return EndTxnResponse(throttle_time_ms=0, error_code=code, producer_id=pid, producer_epoch=epoch)


def _coordinator_view(ctx: RequestContext, tid: str) -> str:
    """What the coordinator holds for `tid`, for the log line of a refused request (whose epoch was stale?)."""
    d = ctx.broker.transactions.describe(tid)
    if d.error:
        return f"coordinator answers error {d.error}"
    return f"the coordinator holds producer {d.producer_id} epoch {d.producer_epoch} in {d.state}"


# -- TxnOffsetCommit ------------------------------------------------------------------------------------------
async def _verify_offsets_partition(ctx: RequestContext, request: TxnOffsetCommitRequest) -> int:
    """KIP-890 for TxnOffsetCommit (Kafka's GroupCoordinator verification): the group's `__consumer_offsets`
    partition must be in the transaction (v0-4, verify-only) or is added to it (v5+, transactions v2, which
    sends no AddOffsetsToTxn); the error for every partition of the request, NONE to go on."""
    verifier = ctx.broker.transactions.verifier
    v = ctx.api_version
    add = v >= FIRST_ADD_PARTITION_TXN_OFFSET_VERSION
    if verifier is None or not (add or ctx.broker.transactions.config.partition_verification):
        return ErrorCode.NONE
    tp = (OFFSETS_TOPIC, ctx.broker.groups.partition_for(request.group_id))
    codes = await verifier.verify(request.transactional_id, request.producer_id, request.producer_epoch, [tp],
                                  add=add)
    return txn_offset_commit_error(codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR), v)


@handles(TxnOffsetCommitRequest, min_version=0, max_version=5)
async def handle_txn_offset_commit(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    T = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    P = T.TxnOffsetCommitResponsePartition
    v = ctx.api_version
    wanted = [(t.name, p) for t in request.topics or [] for p in t.partitions or []]
    codes: dict[tuple[str, int], int] = {}
    if not _may_write_txn(ctx, request.transactional_id):
        codes = {(t, p.partition_index): TXN_DENIED for t, p in wanted}
    elif not _may_group(ctx, AclOperation.READ, request.group_id):
        codes = {(t, p.partition_index): ErrorCode.GROUP_AUTHORIZATION_FAILED for t, p in wanted}
    else:
        allowed = _topics_allowed(ctx, AclOperation.READ, {t for t, _ in wanted})
        offsets: dict[tuple[str, int], CommittedOffset] = {}
        for topic, p in wanted:
            tp = (topic, p.partition_index)
            if topic not in allowed:
                codes[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not ctx.broker.topics.has_partition(topic, p.partition_index):
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets[tp] = CommittedOffset(p.committed_offset, p.committed_leader_epoch if v >= 2 else -1,
                                              p.committed_metadata or "")
        refused = await _verify_offsets_partition(ctx, request) if offsets else ErrorCode.NONE
        if refused:
            codes.update({tp: refused for tp in offsets})
        elif offsets:
            codes.update(await ctx.broker.groups.txn_commit_offsets(
                request.group_id, producer_id=request.producer_id, producer_epoch=request.producer_epoch,
                member_id=request.member_id or "" if v >= 3 else "",
                generation=request.generation_id if v >= 3 else -1,
                group_instance_id=request.group_instance_id if v >= 3 else None, offsets=offsets))
    bad = {tp: c for tp, c in codes.items() if c}
    if bad:
        log.info("TxnOffsetCommit of group '%s' (transactional id '%s') from %s: errors %s", request.group_id,
                 request.transactional_id, ctx.client,
                 ", ".join(f"{t}-{p}:{c}" for (t, p), c in sorted(bad.items())[:10]))
    by_topic: dict[str, list[int]] = {}
    for topic, p in wanted:
        by_topic.setdefault(topic, []).append(p.partition_index)
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        T(name=t, partitions=[P(partition_index=i, error_code=codes.get((t, i), ErrorCode.NONE)) for i in ps])
        for t, ps in by_topic.items()])


# -- DescribeTransactions / ListTransactions ------------------------------------------------------------------
@handles(DescribeTransactionsRequest, min_version=0, max_version=0)
async def handle_describe_transactions(ctx: RequestContext,
                                       request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    S = DescribeTransactionsResponse.TransactionState
    acc = access(ctx)
    states = []
    for tid in request.transactional_ids or []:
        if not acc.allows(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            states.append(S(error_code=TXN_DENIED, transactional_id=tid, transaction_state="",
                            transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                            producer_epoch=-1, topics=[]))
            continue
        d = ctx.broker.transactions.describe(tid)
        by_topic: dict[str, list[int]] = {}
        for topic, p in d.partitions:
            by_topic.setdefault(topic, []).append(p)
        states.append(S(error_code=d.error, transactional_id=tid, transaction_state=d.state,
                        transaction_timeout_ms=d.timeout_ms, transaction_start_time_ms=d.start_ms,
                        producer_id=d.producer_id, producer_epoch=d.producer_epoch,
                        topics=[S.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)


@handles(ListTransactionsRequest, min_version=0, max_version=2)
async def handle_list_transactions(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    """v1 adds the duration filter (KIP-994), v2 the transactional-id pattern (KIP-1152: a Java regular
    expression matched against the whole id). The ids the principal may not DESCRIBE are dropped first, then the
    pattern is matched by RE2 off the event loop (`client_patterns`); one that does not compile answers
    INVALID_REGULAR_EXPRESSION."""
    S = ListTransactionsResponse.TransactionState
    v = ctx.api_version
    unknown, found = await ctx.broker.transactions.list_transactions(
        states=request.state_filters or [], producer_ids=request.producer_id_filters or [],
        duration_ms=request.duration_filter if v >= 1 else -1)
    acc = access(ctx)
    if acc.enabled:
        shown = await acc.allowed_in_slices(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                            (f[0] for f in found))
        found = [f for f in found if f[0] in shown]
    pattern = request.transactional_id_pattern if v >= 2 else None
    if pattern:
        try:
            matched = set(await full_matches(pattern, [f[0] for f in found]))
        except InvalidPattern as exc:
            log.info("ListTransactions from %s: transactional id pattern %r does not compile: %s", ctx.client,
                     pattern[:200], exc)
            return ListTransactionsResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                                            unknown_state_filters=[], transaction_states=[])
        found = [f for f in found if f[0] in matched]
    states = []
    budget = LoopBudget()  # 10,000 answers' objects are tens of milliseconds
    for t, p, s in found:
        states.append(S(transactional_id=t, producer_id=p, transaction_state=s))
        await budget.tick()
    return ListTransactionsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, unknown_state_filters=unknown,
                                    transaction_states=states)
