"""CreateTopics, DeleteTopics, CreatePartitions: topic administration over Kafka.

Why: AdminClient users (and clients' own tooling) create and grow topics with
these APIs; every refusal carries Kafka's code and a message naming the topic.

Authorization (what a KRaft controller's ControllerApis checks for these forwarded APIs): CreateTopics needs
CREATE on the cluster or on each topic (else TOPIC_AUTHORIZATION_FAILED), and answers a created topic's configs
only to DESCRIBE_CONFIGS on it (else its topic config error is TOPIC_AUTHORIZATION_FAILED); DeleteTopics needs
DELETE on the cluster, or DESCRIBE and DELETE on each topic (without DESCRIBE the answer is
TOPIC_AUTHORIZATION_FAILED whether or not it exists); CreatePartitions ALTER on each topic. A name given twice
is answered INVALID_REQUEST, as Kafka does. DeleteTopics v6 names topics by name or by id (KIP-516): an id no
topic has is UNKNOWN_TOPIC_ID, both or neither INVALID_REQUEST; each answer carries the topic's name and id.

Quotas (KIP-599): the partitions CreateTopics creates, CreatePartitions adds and DeleteTopics deletes count
against the client's `controller_mutation_rate` (`client_quota_manager`); from CreateTopics v6, DeleteTopics v5
and CreatePartitions v3 a topic asked for while the client's bucket is overdrawn is answered
THROTTLING_QUOTA_EXCEEDED and left alone, older versions are served; either way the answer carries the throttle
time and the connection is muted for it.
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

from kelp.config.entries import topic_default_source
from kelp.errors import ErrorCode, InvalidRequestError, KelpError, TopicAuthorizationFailedError, UnknownTopicIdError

from ....loop_budget import LoopBudget
from ...access import Access, AclOperation, ResourceType, access
from ..registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")
DUPLICATE = "Duplicate topic name."
# controller_mutation_rate (KIP-599): from CreateTopics v6 a topic beyond the quota is refused with this; older
# versions are served and the client throttled.
STRICT_MUTATIONS_FROM = 6
STRICT_DELETE_FROM = 5  # DeleteTopics
STRICT_PARTITIONS_FROM = 3  # CreatePartitions
THROTTLED = "The throttling quota has been exceeded."


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
    quotas, user, client_id = ctx.broker.quotas, ctx.principal.name, ctx.client_id or ""
    strict = ctx.api_version >= STRICT_MUTATIONS_FROM and not validate_only
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
        if strict and quotas.mutations_exceeded(user, client_id):
            results.append(R(name=t.name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=THROTTLED,
                             num_partitions=-1, replication_factor=-1, configs=None))
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
            if not validate_only:
                quotas.record_mutations(user, client_id, info.partitions)
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
    return CreateTopicsResponse(throttle_time_ms=_mutation_throttle(ctx), topics=results)


ZERO_UUID = uuid.UUID(int=0)


Target = tuple[str | None, uuid.UUID, KelpError | None]  # (name, id, why it is refused before anything else)


def _deletion_targets(ctx: RequestContext, request: DeleteTopicsRequest) -> list[Target]:
    """(name, id, refusal) per topic asked for: v0-v5 by name; v6 by name or by id (Kafka's rules), ids resolved."""
    tm = ctx.broker.topics
    if ctx.api_version < 6:
        names = list(request.topic_names or [])
        out: list[Target] = []
        for name in names:
            info = tm.get(name)
            out.append((name, uuid.UUID(hex=info.topic_id) if info is not None else ZERO_UUID, None))
        return out
    out = []
    for t in request.topics or []:
        tid = t.topic_id if isinstance(t.topic_id, uuid.UUID) else ZERO_UUID  # kafka-python: None for the zero id
        if t.name is not None and tid != ZERO_UUID:
            out.append((t.name, tid, InvalidRequestError("You may not specify both topic name and topic id.")))
        elif t.name is None and tid == ZERO_UUID:
            out.append((None, tid, InvalidRequestError("Neither topic name nor id were specified.")))
        elif t.name is None:
            found = tm.name_of(tid.hex)
            unknown = UnknownTopicIdError(f"topic id {tid} does not exist")
            out.append((found, tid, None if found is not None else unknown))
        else:
            info = tm.get(t.name)
            out.append((t.name, uuid.UUID(hex=info.topic_id) if info is not None else ZERO_UUID, None))
    return out


@handles(DeleteTopicsRequest, min_version=0, max_version=6)
async def handle_delete_topics(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    tm = ctx.broker.topics
    R = DeleteTopicsResponse.DeletableTopicResult
    by_id = ctx.api_version >= 6
    results = []
    acc = access(ctx)
    targets = _deletion_targets(ctx, request)
    valid = [(name, tid) for name, tid, refusal in targets if refusal is None]
    duplicates = _duplicates([name for name, _ in valid if name is not None])
    duplicate_ids = {tid for tid, count in Counter(tid for _, tid in valid if tid != ZERO_UUID).items() if count > 1}
    cluster_delete = acc.allows_cluster(AclOperation.DELETE)
    answered: set[tuple[str | None, uuid.UUID]] = set()
    quotas, user, client_id = ctx.broker.quotas, ctx.principal.name, ctx.client_id or ""
    strict = ctx.api_version >= STRICT_DELETE_FROM

    def answer(name: str | None, tid: uuid.UUID, code: int, message: str | None) -> None:
        if by_id:
            results.append(R(name=name, topic_id=tid, error_code=code, error_message=message))
        else:
            results.append(R(name=name, error_code=code, error_message=message))

    for name, tid, refusal in targets:
        if (name, tid) in answered:
            continue
        answered.add((name, tid))
        if refusal is not None:
            answer(name, tid, refusal.code, str(refusal))
            continue
        assert name is not None
        if name in duplicates or tid in duplicate_ids:
            answer(name, tid, ErrorCode.INVALID_REQUEST, DUPLICATE if name in duplicates else "Duplicate topic id.")
            continue
        refused = _delete_refusal(acc, name, cluster_delete=cluster_delete, exists=tm.exists(name))
        if refused is not None:
            answer(name, tid, refused.code, str(refused))
            continue
        if strict and quotas.mutations_exceeded(user, client_id):
            answer(name, tid, ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED)
            continue
        info = tm.get(name)
        try:  # by id, the controller deletes only the topic of that id (not one re-created under the name since)
            await tm.delete_topic(name, topic_id=tid.hex if by_id and tid != ZERO_UUID else None)
            quotas.record_mutations(user, client_id, info.partitions if info is not None else 0)
            answer(name, tid, ErrorCode.NONE, None)
        except KelpError as exc:
            log.warning("delete topic '%s' from %s refused: %s", name, ctx.client, exc)
            answer(name, tid, exc.code, str(exc))
    return DeleteTopicsResponse(throttle_time_ms=_mutation_throttle(ctx), responses=results)


@handles(CreatePartitionsRequest, min_version=0, max_version=3)
async def handle_create_partitions(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    tm = ctx.broker.topics
    R = CreatePartitionsResponse.CreatePartitionsTopicResult
    results = []
    names = [t.name for t in request.topics]
    duplicates = _duplicates(names)
    alterable = access(ctx).allowed(AclOperation.ALTER, ResourceType.TOPIC, names)
    answered: set[str] = set()
    quotas, user, client_id = ctx.broker.quotas, ctx.principal.name, ctx.client_id or ""
    validate_only = bool(request.validate_only)
    strict = ctx.api_version >= STRICT_PARTITIONS_FROM and not validate_only
    for t in request.topics:
        if t.name in answered:
            continue
        answered.add(t.name)
        if t.name in duplicates or t.name not in alterable:
            error = (ErrorCode.INVALID_REQUEST, DUPLICATE) if t.name in duplicates else \
                (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
            results.append(R(name=t.name, error_code=error[0], error_message=error[1]))
            continue
        if strict and quotas.mutations_exceeded(user, client_id):
            results.append(R(name=t.name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=THROTTLED))
            continue
        before = tm.get(t.name)
        try:
            await tm.create_partitions(t.name, t.count, validate_only=validate_only)
            if not validate_only and before is not None:
                quotas.record_mutations(user, client_id, max(0, t.count - before.partitions))
            results.append(R(name=t.name, error_code=ErrorCode.NONE, error_message=None))
        except KelpError as exc:
            log.warning("create partitions for topic '%s' from %s refused: %s", t.name, ctx.client, exc)
            results.append(R(name=t.name, error_code=exc.code, error_message=str(exc)))
    return CreatePartitionsResponse(throttle_time_ms=_mutation_throttle(ctx), results=results)


def _mutation_throttle(ctx: RequestContext) -> int:
    """The client's controller_mutation_rate throttle after its request (0: none); its connection muted for it."""
    throttle_ms = ctx.broker.quotas.mutation_throttle_ms(ctx.principal.name, ctx.client_id or "")
    if throttle_ms and ctx.throttle is not None:
        ctx.throttle(throttle_ms)
    return throttle_ms
