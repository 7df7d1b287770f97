"""Produce: hand each partition's record batches to the ReplicaManager.

Why: this is the write hot path. Work here is per partition and per batch:
the records blob from the request goes to `ReplicaManager.append_local` as it
came (compression untouched unless the topic's `compression.type` names another
codec) as a writable view into the request frame
(`produce_decoder`), so the log rewrites offsets in place; errors are reported per partition with Kafka's code
and logged naming topic and partition. `acks=0` requests get no response. Once every partition is
appended the frame goes back to the listener's memory pool, and acks=all waits for every partition's
ISR together — a retried idempotent batch (a duplicate) too, for its original offsets, and each wait only
under the leader epoch its append happened at (`ReplicaManager.wait_for_isr` checks it on registration:
leadership may have moved while other partitions were appended).

Authorization (Kafka's handleProduceRequest): transactional batches need WRITE on the transactional id (else
every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED; "transactional" is a partition's first batch, and a
partition carries exactly one batch, else INVALID_RECORD, as Kafka's LogValidator answers), each topic WRITE
(else TOPIC_AUTHORIZATION_FAILED, whether or not it exists); Kelp's auto-creation on produce also needs CREATE on
the cluster or the topic, as Metadata's does (else UNKNOWN_TOPIC_OR_PARTITION, Kafka's answer for a topic a
produce names that does not exist).

A connection's produce requests append in the order they arrived (`kafka.append_order`), as Kafka's one request
of a connection at a time: a request waits, before its verification and appends, until the earlier ones of its
connection have appended, so pipelined batches of one producer reach each partition in sequence order however
the loop interleaves their verifications, loop-budget turns or recompression.

Transaction verification (KIP-890 part 1, `transaction.partition.verification.enable`): a partition whose
first batch is transactional, from a producer without its transaction open there, is appended only once the
transaction coordinator confirmed the partition is in the transaction (`kelp.broker.txn_verification`);
otherwise it gets the coordinator's error as Kafka translates it for the Produce version, nothing appended.
"""

from __future__ import annotations

import logging

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from kelp.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    KelpError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

from ...client_quota_manager import PRODUCE as PRODUCE_QUOTA
from ...loop_budget import LoopBudget
from ...replica.producer_state import VerificationGuard
from ...replica.results import ProduceResult
from ...txn_verification import FIRST_ADD_PARTITION_PRODUCE_VERSION, transactional_batch, verify_produce
from ..access import AclOperation, ResourceType, access
from ..produce_decoder import ProduceData, decode_produce_request
from .error_log import PartitionErrors
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

TR = ProduceResponse.TopicProduceResponse
PR = TR.PartitionProduceResponse
_TRANSACTIONAL = 0x10  # RecordBatch v2 attributes, bit 4 (the attributes' low byte is byte 22 of a batch)


def _more_than_one_batch(records: memoryview | bytes) -> bool:
    """Whether bytes follow the first RecordBatch v2 (its batchLength, at byte 8, counts from byte 12). Kafka's
    LogValidator refuses them (INVALID_RECORD): the checks of a request look at each partition's first batch (its
    transactional id's ACL, its verification), so a second one would ride on the first one's checks."""
    if len(records) < 12:
        return False  # too short to be a batch: the log's own checks answer that
    return 12 + int.from_bytes(records[8:12], "big", signed=True) < len(records)


# -- authorization: Kafka's handleProduceRequest ------------------------------------------------------------
def _refusals(ctx: RequestContext, request: ProduceData) -> dict[str, KelpError]:
    """The error each refused topic's partitions get: every topic's, when a transactional batch's id may not be
    written (Kafka's RequestUtils.hasTransactionalRecords: a partition's first batch is transactional). This runs on
    every produce request: a topic's WRITE decision is one lookup in the AclManager's produce cache. (A topic to
    be created needs CREATE too: `_create_refusal`, asked only for a topic that does not exist.)"""
    acls = ctx.broker.acls
    if not acls.enabled:
        return {}
    principal = ctx.principal
    ptype, pname, ip = principal.principal_type, principal.name, ctx.peer.rpartition(":")[0]
    writes = acls.writes
    refusals: dict[str, KelpError] = {}
    transactional = False
    for td in request.topic_data:
        for pd in td.partition_data:
            records = pd.records
            if records is not None and len(records) > 22 and records[22] & _TRANSACTIONAL:
                transactional = True
        name = td.name
        allowed = writes.get((ptype, pname, ip, name))
        if allowed is None:
            allowed = acls.may_write(principal, ip, name)
        if not allowed:
            refusals[name] = TopicAuthorizationFailedError("Topic authorization failed.")
    if transactional:
        tid = request.transactional_id
        if tid is None or not access(ctx).allows(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
            error = TransactionalIdAuthorizationFailedError("Transactional Id authorization failed.")
            return {td.name: error for td in request.topic_data}
    return refusals


def _create_refusal(ctx: RequestContext, name: str) -> KelpError | None:
    """Kelp creates a missing topic a produce names, if the principal may (CREATE on the cluster or the topic);
    else the answer is Kafka's for a topic that does not exist."""
    acc = access(ctx)
    if acc.allows_cluster(AclOperation.CREATE) or acc.allows(AclOperation.CREATE, ResourceType.TOPIC, name):
        return None
    return UnknownTopicOrPartitionError("This server does not host this topic-partition.")


async def _verifications(ctx: RequestContext, request: ProduceData, refusals: dict[str, KelpError]
                         ) -> dict[tuple[str, int], KelpError | VerificationGuard] | None:
    """KIP-890 part 1 (`txn_verification`): None when this broker does not verify transactions, else the
    guard (or error) of each partition whose first batch is transactional and needs the coordinator's word."""
    verifier = ctx.broker.transactions.verifier
    add = ctx.api_version >= FIRST_ADD_PARTITION_PRODUCE_VERSION  # v2 clients: always, their partitions join so
    if verifier is None or not (add or ctx.broker.transactions.config.partition_verification):
        return None
    batches = {}
    for td in request.topic_data:
        if refusals and td.name in refusals:
            continue
        for pd in td.partition_data:
            producer = transactional_batch(pd.records)
            if producer is not None:
                batches[(td.name, pd.index)] = producer
    if not batches:
        return {}
    return await verify_produce(ctx.broker.replicas, verifier, request.transactional_id, batches,
                                produce_version=ctx.api_version, add=add)


async def _append(ctx: RequestContext, request: ProduceData
                  ) -> list[tuple[str, list[tuple[int, ProduceResult | KelpError]]]]:
    """Authorize, verify (KIP-890) and append every partition of `request`, in order; each partition's result
    or error. Every partition is appended first; acks=all then waits for all of them at once (Kafka's
    purgatory): a request naming N partitions waits one replication round trip, not N."""
    broker = ctx.broker
    replicas = broker.replicas
    topics = broker.topics
    refusals = _refusals(ctx, request)
    guards = await _verifications(ctx, request, refusals)
    # The append checks the guard only under transaction.partition.verification.enable (Kafka's
    # batchMissingRequiredVerification): a transactions v2 produce has its partition added either way.
    verify = guards is not None and broker.transactions.config.partition_verification
    outcomes: list[tuple[str, list[tuple[int, ProduceResult | KelpError]]]] = []
    budget = LoopBudget()
    for td in request.topic_data:
        name = td.name
        parts: list[tuple[int, ProduceResult | KelpError]] = []
        topic_error = refusals.get(name) if refusals else None
        if topic_error is None and not topics.exists(name):
            topic_error = _create_refusal(ctx, name)
            if topic_error is None:
                try:
                    await topics.ensure_topic(name)
                except KelpError as exc:
                    topic_error = exc
        for pd in td.partition_data:
            await budget.tick()
            if topic_error is not None:
                outcome: ProduceResult | KelpError = topic_error
            elif pd.records is None:
                outcome = CorruptRecordError(f"produce to topic '{name}' partition {pd.index} carries no records")
            elif _more_than_one_batch(pd.records):
                outcome = InvalidRecordError(
                    f"produce to topic '{name}' partition {pd.index} carries more than one record batch: Produce "
                    "v3+ takes exactly one batch per partition")
            else:
                guard = guards.get((name, pd.index)) if guards else None
                if isinstance(guard, KelpError):
                    outcome = guard  # the coordinator did not confirm the partition: nothing appended
                else:
                    try:
                        outcome = await replicas.append_local(name, pd.index, pd.records, acks=request.acks,
                                                              timeout_ms=request.timeout_ms, verify_txn=verify,
                                                              txn_guard=guard)
                    except KelpError as exc:
                        outcome = exc
            pd.records = None  # the log has the bytes: no view of the frame outlives the append
            parts.append((pd.index, outcome))
        outcomes.append((name, parts))
    return outcomes


@handles(ProduceRequest, min_version=3, max_version=12, decoder=decode_produce_request)
async def handle_produce(ctx: RequestContext, request: ProduceData) -> ProduceResponse | None:
    replicas = ctx.broker.replicas
    acks = request.acks
    size = sum(len(pd.records) for td in request.topic_data for pd in td.partition_data if pd.records is not None)
    # The connection's earlier produce requests append first (`append_order`): the turn is taken before anything
    # awaits, so turns follow arrival, and ended once every partition is appended, before the ISR waits.
    turn = ctx.append_order.take() if ctx.append_order is not None else None
    try:
        if turn is not None:
            await turn.wait()
        outcomes = await _append(ctx, request)
    finally:
        if turn is not None:
            turn.end()
    if ctx.release_frame is not None:
        ctx.release_frame()  # as Kafka clears a parked produce's records: the pool is not held while waiting
    throttle_ms = _quota(ctx, size)
    if acks == -1:
        waits = [(parts, i, res) for _, parts in outcomes for i, (_, res) in enumerate(parts)
                 if not isinstance(res, KelpError)]
        done = await replicas.wait_all_for_isr([res for _, _, res in waits], timeout_ms=request.timeout_ms)
        for (parts, i, _), outcome in zip(waits, done, strict=True):
            parts[i] = (parts[i][0], outcome)
    if acks == 0:
        return None
    responses = []
    errors = PartitionErrors("Produce", ctx.client)
    budget = LoopBudget()  # thousands of partitions' answers are tens of milliseconds
    for name, parts in outcomes:
        answers = []
        for index, res in parts:
            await budget.tick()
            if isinstance(res, KelpError):
                errors.add(name, index, res)
                answers.append(PR(index=index, error_code=res.code, base_offset=-1, error_message=str(res)))
            else:
                answers.append(PR(index=index, error_code=ErrorCode.NONE, base_offset=res.base_offset,
                                  log_append_time_ms=res.log_append_time_ms, log_start_offset=res.log_start_offset))
        responses.append(TR(name=name, partition_responses=answers))
    errors.log(log)
    return ProduceResponse(responses=responses, throttle_time_ms=throttle_ms)


def _quota(ctx: RequestContext, size: int) -> int:
    """The records' bytes counted against the client's producer_byte_rate; over it, the connection is muted for the
    throttle time the answer carries (also for acks=0, which has no answer), as Kafka does."""
    throttle_ms = ctx.broker.quotas.record(PRODUCE_QUOTA, ctx.principal.name, ctx.client_id or "", size)
    if throttle_ms and ctx.throttle is not None:
        ctx.throttle(throttle_ms)
    return throttle_ms
