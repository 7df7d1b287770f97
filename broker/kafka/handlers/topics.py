"""CreateTopics, DeleteTopics, CreatePartitions: topic administration over Kafka.

Why: AdminClient users (and clients' own tooling) create and grow topics with
these APIs; every refusal carries Kafka's code and a message naming the topic.

Authorization (what a KRaft controller's ControllerApis checks for these forwarded APIs): CreateTopics needs
CREATE on the cluster or on each topic (else TOPIC_AUTHORIZATION_FAILED), and answers a created topic's configs
only to DESCRIBE_CONFIGS on it (else its topic config error is TOPIC_AUTHORIZATION_FAILED); DeleteTopics needs
DELETE on the cluster, or DESCRIBE and DELETE on each topic (without DESCRIBE the answer is
TOPIC_AUTHORIZATION_FAILED whether or not it exists); CreatePartitions ALTER on each topic. A name given twice
is answered INVALID_REQUEST, as Kafka does.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from kelp.errors import ErrorCode, InvalidRequestError, KelpError, TopicAuthorizationFailedError

from ...config_entries import topic_default_source
from ...loop_budget import LoopBudget
from ..access import Access, AclOperation, ResourceType, access
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")
DUPLICATE = "Duplicate topic name."


# -- authorization: ControllerApis' createTopics, deleteTopics, createPartitions ------------------------------
def _creatable(acc: Access, names: set[str]) -> set[str]:
    if acc.allows_cluster(AclOperation.CREATE):
        return names
    return acc.allowed(AclOperation.CREATE, ResourceType.TOPIC, names)


def _delete_refusal(acc: Access, name: str, *, cluster_delete: bool, exists: bool) -> KelpError | None:
    """Kafka's order: not describable -> refused; unknown -> UNKNOWN_TOPIC_OR_PARTITION; not deletable -> refused."""
    if cluster_delete:
        return None
    if not acc.allows(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
        return TopicAuthorizationFailedError("Topic authorization failed.")
    if exists and not acc.allows(AclOperation.DELETE, ResourceType.TOPIC, name):
        return TopicAuthorizationFailedError("Topic authorization failed.")
    return None


def _duplicates(names: list[str]) -> set[str]:
    """Names given more than once: answered once each, INVALID_REQUEST."""
    return {n for n, count in Counter(names).items() if count > 1}


@handles(CreateTopicsRequest, min_version=0, max_version=7)
async def handle_create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    tm = ctx.broker.topics
    R = CreateTopicsResponse.CreatableTopicResult
    C = R.CreatableTopicConfigs
    results = []
    validate_only = bool(request.validate_only) if ctx.api_version >= 1 else False
    acc = access(ctx)
    names = [t.name for t in request.topics]
    duplicates = _duplicates(names)
    creatable = _creatable(acc, set(names))
    describable = acc.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)
    answered: set[str] = set()
    budget = LoopBudget()
    for t in request.topics:
        await budget.tick()
        if t.name in answered:
            continue
        answered.add(t.name)
        if t.name in duplicates or t.name not in creatable:
            error = (ErrorCode.INVALID_REQUEST, DUPLICATE) if t.name in duplicates else \
                (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            results.append(R(name=t.name, error_code=error[0], error_message=error[1], num_partitions=-1,
                             replication_factor=-1, configs=None))
            continue
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
            shown = t.name in describable  # a created topic's configs only to DESCRIBE_CONFIGS on it
            results.append(R(
                name=t.name, topic_id=uuid.UUID(hex=info.topic_id), error_code=ErrorCode.NONE, error_message=None,
                num_partitions=info.partitions, replication_factor=info.replication_factor,
                configs=cfgs if shown else [],
                topic_config_error_code=ErrorCode.NONE if shown else ErrorCode.TOPIC_AUTHORIZATION_FAILED,
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
    acc = access(ctx)
    names = list(request.topic_names or [])
    duplicates = _duplicates(names)
    cluster_delete = acc.allows_cluster(AclOperation.DELETE)
    for name in dict.fromkeys(names):
        if name in duplicates:
            results.append(R(name=name, error_code=ErrorCode.INVALID_REQUEST, error_message=DUPLICATE))
            continue
        refusal = _delete_refusal(acc, name, cluster_delete=cluster_delete, exists=tm.exists(name))
        if refusal is not None:
            results.append(R(name=name, error_code=refusal.code, error_message=str(refusal)))
            continue
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
    names = [t.name for t in request.topics]
    duplicates = _duplicates(names)
    alterable = access(ctx).allowed(AclOperation.ALTER, ResourceType.TOPIC, names)
    answered: set[str] = set()
    for t in request.topics:
        if t.name in answered:
            continue
        answered.add(t.name)
        if t.name in duplicates or t.name not in alterable:
            error = (ErrorCode.INVALID_REQUEST, DUPLICATE) if t.name in duplicates else \
                (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
            results.append(R(name=t.name, error_code=error[0], error_message=error[1]))
            continue
        try:
            await tm.create_partitions(t.name, t.count, validate_only=bool(request.validate_only))
            results.append(R(name=t.name, error_code=ErrorCode.NONE, error_message=None))
        except KelpError as exc:
            log.warning("create partitions for topic '%s' from %s refused: %s", t.name, ctx.client, exc)
            results.append(R(name=t.name, error_code=exc.code, error_message=str(exc)))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
