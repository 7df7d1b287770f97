"""Produce: hand each partition's record batches to the ReplicaManager.

Why: this is the write hot path. Work here is per partition and per batch:
the records blob from the request goes to `ReplicaManager.append` as it came
(compression untouched) as a writable view into the request frame
(`produce_decoder`), so the log rewrites offsets in place; errors are reported per partition with Kafka's code
and logged naming topic and partition. `acks=0` requests get no response.
"""

from __future__ import annotations

import logging

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from kelp.errors import CorruptRecordError, KelpError

from ..produce_decoder import decode_produce_request
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

TR = ProduceResponse.TopicProduceResponse
PR = TR.PartitionProduceResponse


@handles(ProduceRequest, min_version=3, max_version=9, decoder=decode_produce_request)
async def handle_produce(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    broker = ctx.broker
    replicas = broker.replicas
    topics = broker.topics
    acks = request.acks
    responses = []
    for td in request.topic_data:
        name = td.name
        parts = []
        topic_error: KelpError | None = None
        if not topics.exists(name):
            try:
                await topics.ensure_topic(name)
            except KelpError as exc:
                topic_error = exc
        for pd in td.partition_data:
            if topic_error is not None:
                log.warning("produce to topic '%s' partition %d from %s refused: %s", name, pd.index, ctx.client, topic_error)
                parts.append(PR(index=pd.index, error_code=topic_error.code, base_offset=-1, error_message=str(topic_error)))
                continue
            try:
                if pd.records is None:
                    raise CorruptRecordError(f"produce to topic '{name}' partition {pd.index} carries no records")
                res = await replicas.append(name, pd.index, pd.records, acks=acks, timeout_ms=request.timeout_ms)
            except KelpError as exc:
                log.warning("produce to topic '%s' partition %d from %s refused: %s", name, pd.index, ctx.client, exc)
                parts.append(PR(index=pd.index, error_code=exc.code, base_offset=-1, error_message=str(exc)))
                continue
            parts.append(PR(
                index=pd.index, error_code=0, base_offset=res.base_offset,
                log_append_time_ms=res.log_append_time_ms, log_start_offset=res.log_start_offset,
            ))
        responses.append(TR(name=name, partition_responses=parts))
    if acks == 0:
        return None
    return ProduceResponse(responses=responses, throttle_time_ms=0)
