"""Metadata: brokers, topics and partition leaders as the client must see them.

Why: clients route every produce and fetch by this answer, so the broker
advertises the host and port it is really bound to (port 0 resolves to the
ephemeral port). Asking for an unknown topic auto-creates it when
`auto.create.topics.enable` is on and the client allows it (v4+).
"""

from __future__ import annotations

import logging

import uuid

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from kelp.errors import KelpError

from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

T = MetadataResponse.MetadataResponseTopic
P = T.MetadataResponsePartition
B = MetadataResponse.MetadataResponseBroker


def topic_entry(broker, name: str, *, error: int = 0) -> T:
    info = broker.topics.get(name)
    node = broker.config.broker_id
    parts = []
    if info is not None and error == 0:
        for p in range(info.partitions):
            epoch = 0
            parts.append(P(
                error_code=0, partition_index=p, leader_id=node, leader_epoch=epoch,
                replica_nodes=[node], isr_nodes=[node], offline_replicas=[],
            ))
    topic_id = bytes.fromhex(info.topic_id) if info is not None else bytes(16)
    return T(
        error_code=error, name=name, topic_id=uuid.UUID(bytes=topic_id),
        is_internal=bool(info and info.internal), partitions=parts,
    )


@handles(MetadataRequest, min_version=0, max_version=12)
async def handle_metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    server = ctx.server
    version = ctx.api_version
    names: list[str]
    if request.topics is None or (version == 0 and not request.topics):
        names = [t.name for t in broker.topics.list_topics()]
    else:
        names = [t.name for t in request.topics if t.name is not None]
    allow_auto = True if version < 4 else bool(request.allow_auto_topic_creation)
    topics = []
    for name in names:
        error = 0
        if not broker.topics.exists(name):
            try:
                if allow_auto:
                    broker.topics.ensure_topic(name)
                else:
                    from kelp.broker.topic_manager import validate_topic_name

                    validate_topic_name(name)
                    error = 3
            except KelpError as exc:
                log.warning("metadata for topic '%s' from %s: %s", name, ctx.client, exc)
                error = exc.code
        topics.append(topic_entry(broker, name, error=error))
    host = server.advertised_host if server is not None else "127.0.0.1"
    port = (server.advertised_port or server.port) if server is not None else 9092
    node = broker.config.broker_id
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[B(node_id=node, host=host, port=port, rack=None)],
        cluster_id=str(broker.config["cluster.id"]),
        controller_id=node,
        topics=topics,
    )
