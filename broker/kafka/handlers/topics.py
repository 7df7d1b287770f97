"""CreateTopics, DeleteTopics, CreatePartitions: topic administration over Kafka.

Why: AdminClient users (and clients' own tooling) create and grow topics with
these APIs; every refusal carries Kafka's code and a message naming the topic.
"""

from __future__ import annotations

import logging
import uuid

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from kelp.errors import ErrorCode, InvalidRequestError, KelpError

from .configs import topic_default_source
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")


@handles(CreateTopicsRequest, min_version=0, max_version=7)
async def handle_create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    tm = ctx.broker.topics
    R = CreateTopicsResponse.CreatableTopicResult
    C = R.CreatableTopicConfigs
    results = []
    validate_only = bool(request.validate_only) if ctx.api_version >= 1 else False
    for t in request.topics:
        try:
            assignments = None
            if t.assignments:
                if t.num_partitions not in (-1, None) or t.replication_factor not in (-1, None):
                    raise InvalidRequestError(
                        f"topic '{t.name}': give either a replica assignment or "
                        "numPartitions/replicationFactor, not both"
                    )
                assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            configs = {c.name: c.value for c in (t.configs or [])}
            info = await tm.create_topic(
                t.name, None if assignments else t.num_partitions, None if assignments else t.replication_factor,
                configs, validate_only=validate_only, assignments=assignments,
            )
            cfgs = [
                C(name=k, value=v, read_only=False, is_sensitive=False,
                  config_source=topic_default_source(ctx.broker.config, k) if d else 1)
                for k, (v, d) in sorted(
                    ({**{k: (v, True) for k, v in ctx.broker.config.default_topic_config().items()},
                      **{k: (v, False) for k, v in info.configs.items()}}).items()
                )
            ]
            results.append(R(
                name=t.name, topic_id=uuid.UUID(hex=info.topic_id), error_code=ErrorCode.NONE, error_message=None,
                num_partitions=info.partitions, replication_factor=info.replication_factor, configs=cfgs,
            ))
        except KelpError as exc:
            log.warning("create topic '%s' from %s refused: %s", t.name, ctx.client, exc)
            results.append(R(name=t.name, error_code=exc.code, error_message=str(exc),
                             num_partitions=-1, replication_factor=-1, configs=None))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


@handles(DeleteTopicsRequest, min_version=0, max_version=5)
async def handle_delete_topics(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    tm = ctx.broker.topics
    R = DeleteTopicsResponse.DeletableTopicResult
    results = []
    for name in request.topic_names or []:
        try:
            await tm.delete_topic(name)
            results.append(R(name=name, error_code=ErrorCode.NONE, error_message=None))
        except KelpError as exc:
            log.warning("delete topic '%s' from %s refused: %s", name, ctx.client, exc)
            results.append(R(name=name, error_code=exc.code, error_message=str(exc)))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


@handles(CreatePartitionsRequest, min_version=0, max_version=3)
async def handle_create_partitions(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    tm = ctx.broker.topics
    R = CreatePartitionsResponse.CreatePartitionsTopicResult
    results = []
    for t in request.topics:
        try:
            await tm.create_partitions(t.name, t.count, validate_only=bool(request.validate_only))
            results.append(R(name=t.name, error_code=ErrorCode.NONE, error_message=None))
        except KelpError as exc:
            log.warning("create partitions for topic '%s' from %s refused: %s", t.name, ctx.client, exc)
            results.append(R(name=t.name, error_code=exc.code, error_message=str(exc)))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
