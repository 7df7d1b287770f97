"""InitProducerId: allocate producer ids for idempotent producers.

Why: `enable.idempotence` (the default in kafka-python 3, librdkafka with
idempotence, aiokafka) starts with this call. Ids come from blocks the
controller hands out cluster-wide (persisted in the metadata store before
they are given), so no two brokers and no restart ever hand out an id twice.
When no block can be had (the store write failed, no controller answers) the
request gets the error with its code — a retriable one — instead of a closed
connection, and no id is handed out.
Transactions are not supported: a transactional id is refused with a message.
"""

from __future__ import annotations

import logging

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from kelp.errors import ErrorCode, KelpError

from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")


@handles(InitProducerIdRequest, min_version=0, max_version=4)
async def handle_init_producer_id(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id:
        log.warning("InitProducerId from %s with transactional id '%s' refused: transactions are not supported",
                    ctx.client, request.transactional_id)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, producer_id=-1,
                                      producer_epoch=-1)
    if ctx.api_version >= 3 and request.producer_id is not None and request.producer_id >= 0:
        # KIP-360: a producer re-initialising after an error keeps its id with the next epoch.
        epoch = request.producer_epoch + 1
        if epoch < 32767:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                          producer_id=request.producer_id, producer_epoch=epoch)
    try:
        pid = await ctx.broker.cluster.next_producer_id()
    except KelpError as exc:
        log.warning("InitProducerId from %s: no producer id handed out: %s", ctx.client, exc)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=exc.code, producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0)
