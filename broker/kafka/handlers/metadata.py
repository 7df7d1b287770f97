"""Metadata: brokers, topics and partition leaders as the client must see them.

Why: clients route every produce and fetch by this answer: the live brokers
(as the controller last pushed them, each with the host and port it
advertises on the listener the request came in on — Kafka's rule; a broker
without that listener is left out), the controller, and per partition the leader, its epoch
(KIP-320), the replicas, the ISR and the offline replicas. A topic may be asked for by id (v12+: librdkafka
resolves a KIP-848 assignment's topic ids so); an unknown id is answered UNKNOWN_TOPIC_ID. Asking for an
unknown topic auto-creates it (through the controller) when
`auto.create.topics.enable` is on and the client allows it (v4+).

Authorization (Kafka's handleTopicMetadataRequest): a principal learns nothing of a topic it may not
DESCRIBE. Asked for all topics, those are left out; asked for by name, each is answered
TOPIC_AUTHORIZATION_FAILED with no id and no partitions, whether or not it exists. Auto-creating needs CREATE
on the cluster or the topic (else TOPIC_AUTHORIZATION_FAILED). The cluster's and each topic's authorized
operations are answered when asked for (v8+; the cluster's in v8-v10).
"""

from __future__ import annotations

import logging
import uuid

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from kelp.errors import ErrorCode, KelpError

from ...loop_budget import LoopBudget
from ...metadata.model import INTERNAL_TOPICS
from ...parts import BrokerParts
from ...topic_manager import validate_topic_name
from ..access import Access, AclOperation, ResourceType, access
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

T = MetadataResponse.MetadataResponseTopic
P = T.MetadataResponsePartition
B = MetadataResponse.MetadataResponseBroker
_NO_ID = uuid.UUID(int=0)


# -- authorization: Kafka's handleTopicMetadataRequest ------------------------------------------------------
async def _describable(acc: Access, names: list[str]) -> set[str]:
    return await acc.allowed_in_slices(AclOperation.DESCRIBE, ResourceType.TOPIC, names)


def _may_create(acc: Access, name: str) -> bool:
    return acc.allows_cluster(AclOperation.CREATE) or acc.allows(AclOperation.CREATE, ResourceType.TOPIC, name)


def _refused(name: str, *, internal: bool = False) -> T:
    return T(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=_NO_ID, is_internal=internal,
             partitions=[])


async def _resolve_ids(ctx: RequestContext, request: MetadataRequest, names: list[str]) -> tuple[list[str], list[T]]:
    """The names to answer, with those of the topics asked for by id (v12+, name null) that the principal may
    DESCRIBE added; and the answers for the other ids: UNKNOWN_TOPIC_ID, or TOPIC_AUTHORIZATION_FAILED without the
    name (Kafka never leaks the name of a topic asked for by id)."""
    ids = [t.topic_id for t in request.topics or [] if t.name is None and t.topic_id is not None
           and t.topic_id != _NO_ID]
    if not ids:
        return names, []
    found = {i: ctx.broker.topics.name_of(i.hex) for i in ids}
    describable = await _describable(access(ctx), [n for n in found.values() if n is not None])
    out: list[T] = []
    for topic_id, name in found.items():
        if name is None or name not in describable:
            code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            out.append(T(error_code=code, name=None, topic_id=topic_id, is_internal=False, partitions=[]))
        elif name not in names:
            names.append(name)
    return names, out


def topic_entry(broker: BrokerParts, name: str, *, error: int = ErrorCode.NONE) -> T:
    info = broker.topics.get(name)
    alive = broker.cluster.state.brokers
    parts = []
    if info is not None and error == ErrorCode.NONE:
        for p, state in enumerate(info.partition_states):
            code = ErrorCode.NONE
            if state.leader < 0:
                code = ErrorCode.LEADER_NOT_AVAILABLE  # offline until an in-sync replica returns
            elif state.leader not in alive:
                code = ErrorCode.LEADER_NOT_AVAILABLE
            parts.append(P(
                error_code=code, partition_index=p, leader_id=state.leader, leader_epoch=state.leader_epoch,
                replica_nodes=list(state.replicas), isr_nodes=list(state.isr),
                offline_replicas=[r for r in state.replicas if r not in alive],
            ))
    topic_id = bytes.fromhex(info.topic_id) if info is not None else bytes(16)
    return T(
        error_code=error, name=name, topic_id=uuid.UUID(bytes=topic_id),
        is_internal=bool(info and info.internal), partitions=parts,
    )


def visible_brokers(ctx: RequestContext) -> tuple[list[tuple[int, str, int, str | None]], int]:
    """The live brokers as (id, host, port, rack) on the request's listener (a broker without it left out), and
    the controller id a client is given (Metadata, DescribeCluster).

    Admin clients send CreateTopics & co. to the controller id named here; every broker forwards those to the
    elected controller (as KRaft brokers do), so while no controller is known yet -- or it is not among the
    brokers listed -- this broker names itself rather than -1, which clients such as aiokafka's admin cannot
    route to."""
    broker = ctx.broker
    cluster = broker.cluster
    known = sorted(cluster.state.brokers.values(), key=lambda b: b.id)
    if not any(b.id == broker.config.broker_id for b in known) and cluster.state.endpoint is not None:
        known.append(cluster.state.endpoint)  # before the first push: at least this broker
    listed = [(b.id, address[0], address[1], b.rack) for b in known
              if (address := b.address(ctx.listener)) is not None]
    controller_id = cluster.state.controller_id
    if not any(i == controller_id for i, _, _, _ in listed):
        controller_id = broker.config.broker_id
    return listed, controller_id


@handles(MetadataRequest, min_version=0, max_version=12)
async def handle_metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    version = ctx.api_version
    all_topics = request.topics is None or (version == 0 and not request.topics)
    names: list[str]
    by_id: list[T] = []  # topics asked for by id (v12+, as KIP-848 clients resolve their assignment)
    if all_topics:
        names = [t.name for t in broker.topics.list_topics()]
    else:
        names = [t.name for t in request.topics or [] if t.name is not None]
        if version >= 12:
            names, by_id = await _resolve_ids(ctx, request, names)
    allow_auto = True if version < 4 else bool(request.allow_auto_topic_creation)
    acc = access(ctx)
    describable = await _describable(acc, names)
    budget = LoopBudget()  # every topic of the cluster: the loop gets a turn every few milliseconds
    auto_create = allow_auto and bool(broker.config["auto.create.topics.enable"])
    topics = []
    refused = []
    for name in names:
        await budget.tick()
        error: int = ErrorCode.NONE
        if name not in describable:
            if not all_topics:  # asked for by name: refused, never told whether it exists
                refused.append(_refused(name))
            continue
        if not broker.topics.exists(name):
            if auto_create and acc.enabled and not _may_create(acc, name):
                refused.append(_refused(name, internal=name in INTERNAL_TOPICS))
                continue
            try:
                if allow_auto:
                    await broker.topics.ensure_topic(name)
                else:
                    validate_topic_name(name)
                    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            except KelpError as exc:
                log.warning("metadata for topic '%s' from %s: %s", name, ctx.client, exc)
                error = exc.code
        topics.append(topic_entry(broker, name, error=error))
    cluster_operations: set[int] | None = None
    if version >= 8:
        if getattr(request, "include_topic_authorized_operations", False):
            for t in topics:
                t.authorized_operations = acc.operations(ResourceType.TOPIC, t.name or "")
                await budget.tick()
        if version <= 10 and getattr(request, "include_cluster_authorized_operations", False):
            cluster_operations = (acc.operations(ResourceType.CLUSTER, "kafka-cluster")
                                  if acc.allows_cluster(AclOperation.DESCRIBE) else set())
    topics += refused + by_id
    listed, controller_id = visible_brokers(ctx)
    brokers = [B(node_id=i, host=host, port=port, rack=rack) for i, host, port, rack in listed]
    response = MetadataResponse(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=str(broker.config["cluster.id"]),
        controller_id=controller_id,
        topics=topics,
    )
    if cluster_operations is not None:
        response.authorized_operations = cluster_operations
    return response
