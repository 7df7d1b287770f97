"""DescribeConfigs, IncrementalAlterConfigs, AlterConfigs: topic and broker configs over Kafka.

Why: `kafka-configs --describe/--alter`, AdminClient.describe_configs /
incremental_alter_configs and tools like kcat read and change a topic's
settings with these APIs. A change goes through the same door as the HTTP
API's (`TopicManager.alter_config`: the one validator, then the controller and
the cluster metadata store), so both behave identically on one broker or many.

Each described entry (`kelp.config.entries`, which REST v3 describes with too)
says where its value comes from with Kafka's ConfigSource ids (TOPIC_CONFIG=1, DYNAMIC_BROKER_CONFIG=2,
DYNAMIC_DEFAULT_BROKER_CONFIG=3, STATIC_BROKER_CONFIG=4, DEFAULT_CONFIG=5) and,
when asked, its synonyms most specific first: the topic override, then the
broker settings it defaults to (`log.retention.ms`, `log.retention.hours`,
...) layer by layer, as Kafka lists them.

Broker resources (`kafka-configs --entity-type brokers`): the dynamic broker
configs (`DYNAMIC_BROKER_KEYS`) of the cluster-wide default entity (resource
name "") or of this broker ("<id>") are changed through the controller and
the metadata log (`TopicManager.alter_broker_configs`, the HTTP API's door
too), and apply on every broker without a restart. Every other broker config is
read-only: refused per resource, naming it and saying to set it and restart.
A broker resource of another broker id is refused, as Kafka's brokers do (its
clients send it to that broker). BROKER_LOGGER stays refused.

Group resources (type 32, `kafka-configs --entity-type groups`): a group's own session timeouts, heartbeat
intervals, share-group lock duration, delivery count limit and `share.auto.offset.reset`
(`metadata.group_configs`: Kafka's GroupConfig rules). A change is checked here against the group's configs after
it and this broker's bounds (`group.share.min.record.lock.duration.ms`, ...), then recorded by the controller in
the metadata log; an unknown key or a value out of bounds is INVALID_CONFIG naming the key, and nothing of that
resource is applied. A group's configs are described whether or not the group exists, as in Kafka.

Authorization (Kafka's ConfigHelper and ControllerApis' authorizeAlterResource): describing a topic's configs
needs DESCRIBE_CONFIGS on the topic (ALTER_CONFIGS implies it), a broker's or broker logger's
DESCRIBE_CONFIGS on the cluster; altering needs ALTER_CONFIGS on the topic or the cluster. A refused resource
is answered TOPIC_AUTHORIZATION_FAILED or CLUSTER_AUTHORIZATION_FAILED (GROUP_ for a group resource) with
Kafka's message and no configs.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, Mapping, Protocol, Sequence, TypeVar

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from kelp.config.entries import (
    SOURCE_DEFAULT,
    Entry,
    broker_entries,
    config_text,
    default_entity_entries,
    topic_entries,
)
from kelp.config.keys import DEFAULT_ENTITY
from kelp.config.listener_keys import is_sensitive
from kelp.errors import (
    ClusterAuthorizationFailedError,
    ConfigError,
    ErrorCode,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    KelpError,
    TopicAuthorizationFailedError,
)

from ....metadata.group_configs import (
    check_bounds,
    checked_group,
    checked_group_configs,
    config_change,
    group_entries,
)
from ...access import AclOperation, ResourceType, access
from ..registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

# ConfigResource.Type
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32
# AlterConfigOp.OpType
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
# The configs of type LIST (APPEND/SUBTRACT apply): topic and broker names
LIST_CONFIGS = frozenset({"cleanup.policy", "log.cleanup.policy"})


class _Resource(Protocol):
    """A config resource of any of the three requests: which topic or broker entity it names."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...


_R = TypeVar("_R", bound=_Resource)
_IncrementalResource = IncrementalAlterConfigsRequest.AlterConfigsResource
_LegacyResource = AlterConfigsRequest.AlterConfigsResource
_A = TypeVar("_A")  # a response's per-resource result


# -- authorization: Kafka's ConfigHelper (describe) and authorizeAlterResource (alter) --------------------------
def _config_refusal(ctx: RequestContext, operation: AclOperation, resource_type: int, name: str) -> KelpError | None:
    """Why `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on a config resource is refused, or None."""
    acc = access(ctx)
    if not acc.enabled:
        return None
    if resource_type in (BROKER, BROKER_LOGGER):
        if not acc.allows_cluster(operation):
            return ClusterAuthorizationFailedError("Cluster authorization failed.")
    elif resource_type == TOPIC:
        if not acc.allows(operation, ResourceType.TOPIC, name):
            return TopicAuthorizationFailedError("Topic authorization failed.")
    elif resource_type == GROUP and not acc.allows(operation, ResourceType.GROUP, name):
        return GroupAuthorizationFailedError("Group authorization failed.")
    return None


def _broker_entity(ctx: RequestContext, name: str) -> int:
    """The entity of a BROKER resource: -1 (the cluster-wide default) for "", else this broker's id."""
    if name == "":
        return DEFAULT_ENTITY
    if name != str(ctx.broker.config.broker_id):
        raise InvalidRequestError(f"Unexpected broker id, expected {ctx.broker.config.broker_id} or empty string, "
                                  f"but received {name!r}: send a broker's configs to that broker")
    return ctx.broker.config.broker_id


def _describe(ctx: RequestContext, res: DescribeConfigsRequest.DescribeConfigsResource) -> list[Entry]:
    """(name, value, read_only, source, synonyms) of each config of one resource."""
    broker = ctx.broker
    if res.resource_type == TOPIC:
        info = broker.topics.describe(res.resource_name)
        return topic_entries(broker.config, broker.topics.effective_configs(res.resource_name), info.configs)
    if res.resource_type == BROKER:
        if _broker_entity(ctx, res.resource_name) == DEFAULT_ENTITY:
            return default_entity_entries(broker.topics.dynamic_broker_configs(DEFAULT_ENTITY))
        return broker_entries(broker.config)
    if res.resource_type == GROUP:
        return group_entries(broker.config, broker.topics.group_configs(checked_group(res.resource_name)))
    raise InvalidRequestError(f"config resource type {res.resource_type} is not supported (topic=2, broker=4, "
                              "group=32)")


@handles(DescribeConfigsRequest, min_version=0, max_version=4)
async def handle_describe_configs(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    R = DescribeConfigsResponse.DescribeConfigsResult
    E = R.DescribeConfigsResourceResult
    S = E.DescribeConfigsSynonym
    with_synonyms = ctx.api_version >= 1 and bool(getattr(request, "include_synonyms", False))
    results = []
    for res in request.resources:
        keys = set(res.configuration_keys) if res.configuration_keys else None
        try:
            refusal = _config_refusal(ctx, AclOperation.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
            if refusal is not None:
                raise refusal
            # A secret (ssl.key.password, sasl.jaas.config) is described as Kafka describes it: sensitive, no value.
            configs = [
                E(name=n, value=None if is_sensitive(n) else v, read_only=ro, config_source=src,
                  is_default=src == SOURCE_DEFAULT, is_sensitive=is_sensitive(n), config_type=0, documentation=None,
                  synonyms=[S(name=sn, value=None if is_sensitive(sn) else sv, source=ss) for sn, sv, ss in syn]
                  if with_synonyms else [])
                for n, v, ro, src, syn in _describe(ctx, res) if keys is None or n in keys
            ]
            results.append(R(error_code=ErrorCode.NONE, error_message=None, resource_type=res.resource_type,
                             resource_name=res.resource_name, configs=configs))
        except KelpError as exc:
            log.warning("describe configs of %s '%s' from %s: %s", res.resource_type, res.resource_name, ctx.client,
                        exc)
            results.append(R(error_code=exc.code, error_message=str(exc), resource_type=res.resource_type,
                             resource_name=res.resource_name, configs=[]))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _what(res: _Resource) -> str:
    if res.resource_type == TOPIC:
        return f"topic '{res.resource_name}'"
    if res.resource_type == GROUP:
        return f"group '{res.resource_name}'"
    return "the cluster-wide broker default" if res.resource_name == "" else f"broker {res.resource_name}"


def _current_list(ctx: RequestContext, res: _Resource, name: str) -> str:
    """The value APPEND/SUBTRACT start from: the topic's effective value, or the broker entity's."""
    if res.resource_type == TOPIC:
        return ctx.broker.topics.effective_configs(res.resource_name).get(name, ("", True))[0] or ""
    config = ctx.broker.config
    if res.resource_name == "":  # the default entity: its dynamic value, else what it falls back to
        layers = [(layer, v) for layer, v in config.layers(name) if layer != "dynamic_broker"]
        return config_text(layers[0][1]) or "" if layers else ""
    return config_text(config[name]) or ""


def _incremental_changes(ctx: RequestContext, res: _IncrementalResource) -> tuple[dict[str, str], list[str]]:
    """(sets, deletes) of one topic or broker entity from SET/DELETE/APPEND/SUBTRACT operations."""
    seen: set[str] = set()
    sets: dict[str, str] = {}
    deletes: list[str] = []
    for c in res.configs:
        if c.name in seen:
            raise InvalidRequestError(f"config '{c.name}' is given more than once for {_what(res)}")
        seen.add(c.name)
        op = c.config_operation
        if op == SET:
            if c.value is None:
                raise ConfigError(f"config '{c.name}' of {_what(res)}: SET needs a value")
            sets[c.name] = c.value
        elif op == DELETE:
            deletes.append(c.name)
        elif op in (APPEND, SUBTRACT):
            if c.name not in LIST_CONFIGS:
                raise ConfigError(f"config '{c.name}' is not a list: {'APPEND' if op == APPEND else 'SUBTRACT'} "
                                  "applies to list configs only (cleanup.policy, log.cleanup.policy); use SET")
            current = [v.strip() for v in _current_list(ctx, res, c.name).split(",") if v.strip()]
            given = [v.strip() for v in (c.value or "").split(",") if v.strip()]
            items = current + [v for v in given if v not in current] if op == APPEND else \
                [v for v in current if v not in given]
            if not items:
                raise ConfigError(f"config '{c.name}' of {_what(res)} would be empty after SUBTRACT")
            sets[c.name] = ",".join(items)
        else:
            raise InvalidRequestError(f"unknown config operation {op} for '{c.name}' (SET=0, DELETE=1, APPEND=2, "
                                      "SUBTRACT=3)")
    return sets, deletes


async def _alter_group(ctx: RequestContext, group: str, sets: Mapping[str, str | None], deletes: Sequence[str], *,
                       replace: bool, validate_only: bool) -> None:
    """A GROUP resource's change (Kafka's GroupConfig rules, `metadata.group_configs`): names and values checked,
    then the group's configs after the change within this broker's bounds, then the controller records it. Any
    refusal is INVALID_CONFIG naming the key, and nothing of the resource is applied."""
    group = checked_group(group)
    changes: dict[str, str | None] = {**dict(sets), **{k: None for k in deletes}}
    clean = checked_group_configs(changes)
    after, _ = config_change(ctx.broker.topics.group_configs(group), clean, replace_all=replace)
    check_bounds(after, ctx.broker.config)
    await ctx.broker.cluster.routing.call("alter_group_configs", group=group, configs=clean, replace_all=replace,
                                          validate_only=validate_only)


async def _alter_each(ctx: RequestContext, resources: Sequence[_R], answer: Callable[..., _A],
                      alter_topic: Callable[[_R], Awaitable[None]],
                      alter_broker: Callable[[_R, int], Awaitable[None]],
                      alter_group: Callable[[_R], Awaitable[None]]) -> list[_A]:
    """Each resource on its own: a topic through `alter_topic`, a broker entity through `alter_broker`, a group
    through `alter_group`; errors per resource; `answer` builds a response's result of one resource."""
    results: list[_A] = []
    for res in resources:
        try:
            refusal = _config_refusal(ctx, AclOperation.ALTER_CONFIGS, res.resource_type, res.resource_name)
            if refusal is not None:
                raise refusal
            if res.resource_type == TOPIC:
                await alter_topic(res)
            elif res.resource_type == BROKER_LOGGER:
                raise InvalidRequestError("Kelp does not change broker log levels at run time; start it "
                                          "with --log-level")
            elif res.resource_type == BROKER:
                await alter_broker(res, _broker_entity(ctx, res.resource_name))
            elif res.resource_type == GROUP:
                await alter_group(res)
            else:
                raise InvalidRequestError(f"config resource type {res.resource_type} is not supported "
                                          "(topic=2, broker=4, group=32)")
            results.append(answer(error_code=ErrorCode.NONE, error_message=None, resource_type=res.resource_type,
                                  resource_name=res.resource_name))
        except KelpError as exc:
            log.warning("alter configs of %s '%s' from %s refused: %s", res.resource_type, res.resource_name,
                        ctx.client, exc)
            results.append(answer(error_code=exc.code, error_message=str(exc), resource_type=res.resource_type,
                                  resource_name=res.resource_name))
    return results


@handles(IncrementalAlterConfigsRequest, min_version=0, max_version=1)
async def handle_incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    validate_only = bool(request.validate_only)

    async def alter_topic(res: _IncrementalResource) -> None:
        sets, deletes = _incremental_changes(ctx, res)
        await ctx.broker.topics.alter_config(res.resource_name, sets, delete=tuple(deletes),
                                             validate_only=validate_only)

    async def alter_broker(res: _IncrementalResource, entity: int) -> None:
        if not res.configs:
            return  # nothing to change, as in Kafka
        sets, deletes = _incremental_changes(ctx, res)
        await ctx.broker.topics.alter_broker_configs(entity, {**sets, **{k: None for k in deletes}},
                                                     validate_only=validate_only)

    async def alter_group(res: _IncrementalResource) -> None:
        sets, deletes = _incremental_changes(ctx, res)
        await _alter_group(ctx, res.resource_name, sets, deletes, replace=False, validate_only=validate_only)

    results = await _alter_each(ctx, request.resources, IncrementalAlterConfigsResponse.AlterConfigsResourceResponse,
                                alter_topic, alter_broker, alter_group)
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)


@handles(AlterConfigsRequest, min_version=0, max_version=2)
async def handle_alter_configs(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    """The legacy API: the given configs replace every override of the topic, or every dynamic config of the
    broker entity (as Kafka's does)."""
    validate_only = bool(request.validate_only)

    async def alter_topic(res: _LegacyResource) -> None:
        names = [c.name for c in res.configs]
        if len(set(names)) != len(names):
            raise InvalidRequestError(f"a config is given more than once for topic '{res.resource_name}'")
        await ctx.broker.topics.alter_config(res.resource_name, {c.name: c.value for c in res.configs},
                                             replace=True, validate_only=validate_only)

    async def alter_broker(res: _LegacyResource, entity: int) -> None:
        names = [c.name for c in res.configs]
        if len(set(names)) != len(names):
            raise InvalidRequestError(f"a config is given more than once for {_what(res)}")
        await ctx.broker.topics.alter_broker_configs(entity, {c.name: c.value for c in res.configs}, replace=True,
                                                     validate_only=validate_only)

    async def alter_group(res: _LegacyResource) -> None:
        names = [c.name for c in res.configs]
        if len(set(names)) != len(names):
            raise InvalidRequestError(f"a config is given more than once for {_what(res)}")
        await _alter_group(ctx, res.resource_name, {c.name: c.value for c in res.configs}, (), replace=True,
                           validate_only=validate_only)

    results = await _alter_each(ctx, request.resources, AlterConfigsResponse.AlterConfigsResourceResponse,
                                alter_topic, alter_broker, alter_group)
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)
