"""InitProducerId: allocate producer ids for idempotent producers.

Why: `enable.idempotence` (the default in kafka-python 3, librdkafka with
idempotence, aiokafka) starts with this call. Ids come from blocks the
controller hands out cluster-wide (persisted in the metadata store before
they are given), so no two brokers and no restart ever hand out an id twice.
When no block can be had (the store write failed, no controller answers) the
request gets the error with its code — a retriable one — instead of a closed
connection, and no id is handed out.
A transactional id goes to the transaction coordinator (`kelp.broker.transactions`), which answers from
the id's `__transaction_state` partition (NOT_COORDINATOR on any other broker); older clients (v0-v3) get
INVALID_PRODUCER_EPOCH where newer ones get PRODUCER_FENCED, as Kafka answers them.

Authorization (Kafka's handleInitProducerIdRequest): a transactional id needs WRITE on it (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent
producer needs IDEMPOTENT_WRITE on the cluster or WRITE on at least one topic (else
CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from kelp.errors import ErrorCode, KelpError

from ..access import AclOperation, ResourceType, access
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")


# -- authorization: Kafka's handleInitProducerIdRequest --------------------------------------------------------
def _refusal(ctx: RequestContext, transactional_id: str | None) -> int:
    acc = access(ctx)
    if not acc.enabled:
        return ErrorCode.NONE
    if transactional_id:  # null or empty: an idempotent producer (as this handler has always read it)
        if not acc.allows(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not (acc.allows_cluster(AclOperation.IDEMPOTENT_WRITE)
              or acc.allows_any(AclOperation.WRITE, ResourceType.TOPIC)):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return ErrorCode.NONE


@handles(InitProducerIdRequest, min_version=0, max_version=5)
async def handle_init_producer_id(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    refusal = _refusal(ctx, request.transactional_id)
    if refusal:
        log.info("InitProducerId from %s (%s) refused: error %d", ctx.client, ctx.principal, refusal)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=refusal, producer_id=-1, producer_epoch=-1)
    if request.transactional_id:  # empty: an idempotent producer, as the refusal check reads it
        pid_given = ctx.api_version >= 3 and request.producer_id is not None and request.producer_id >= 0
        result = await ctx.broker.transactions.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms,
            expected=(request.producer_id, request.producer_epoch) if pid_given else None)
        code = result.error
        if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        if code:
            log.info("InitProducerId of transactional id '%s' from %s: error %d", request.transactional_id,
                     ctx.client, code)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=result.producer_id,
                                      producer_epoch=result.producer_epoch)
    # No transactional id: a fresh producer id at epoch 0, whatever id and epoch the request names, as Kafka's
    # coordinator answers ("always blindly accept the request and return a new producerId"). Handing back the
    # named id at the next epoch would let any writer fence another producer by naming its id (issue 33); the
    # proof KIP-360 asks before an epoch bump is the transactional coordinator's, for transactional ids only.
    try:
        pid = await ctx.broker.cluster.next_producer_id()
    except KelpError as exc:
        log.warning("InitProducerId from %s: no producer id handed out: %s", ctx.client, exc)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=exc.code, producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0)
