"""Plain-data views of topics and partitions shared by the admin API and the REST proxy.

Why: both APIs describe the same topics (one in Kelp's admin shape, one in
Confluent's); who leads a partition and which replicas are in sync is
decided here, in one place, so replication can change it once.

This module must never change state.
"""

from __future__ import annotations

from typing import Any

__all__ = ["partition_roles", "describe_topic", "topic_configs", "brokers_view"]


def partition_roles(broker: Any, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) of one partition.

    Asks the replica manager when it knows (`partition_roles(topic, p)` once
    replication lands); a single broker leads every partition it holds.
    """
    roles = getattr(broker.replicas, "partition_roles", None)
    if callable(roles):
        leader, replicas, isr = roles(topic, partition)
        return int(leader), list(replicas), list(isr)
    me = broker.config.broker_id
    return me, [me], [me]


def topic_configs(broker: Any, name: str) -> dict[str, dict[str, str]]:
    """`{config name: {"value": str, "source": "topic" | "default"}}`, sorted by name."""
    effective = broker.topics.effective_configs(name)
    return {
        key: {"value": str(value), "source": "default" if is_default else "topic"}
        for key, (value, is_default) in sorted(effective.items())
    }


def describe_topic(broker: Any, name: str) -> dict[str, Any]:
    info = broker.topics.describe(name)
    partitions = []
    for p in range(info.partitions):
        leader, replicas, isr = partition_roles(broker, name, p)
        pi = broker.replicas.partition_info(name, p)
        partitions.append(
            {
                "partition": p,
                "leader": leader,
                "replicas": replicas,
                "isr": isr,
                "log_start_offset": pi.log_start_offset,
                "log_end_offset": pi.log_end_offset,
                "high_watermark": pi.high_watermark,
                "size_bytes": pi.size_bytes,
            }
        )
    return {
        "name": info.name,
        "topic_id": info.topic_id,
        "internal": info.internal,
        "partitions_count": info.partitions,
        "replication_factor": info.replication_factor,
        "partitions": partitions,
        "configs": topic_configs(broker, name),
    }


def brokers_view(broker: Any) -> list[dict[str, Any]]:
    members = getattr(broker, "cluster_members", None)
    if callable(members):
        return list(members())
    ks = broker.kafka_server
    return [
        {
            "id": broker.config.broker_id,
            "host": ks.advertised_host if ks is not None else None,
            "port": ks.port if ks is not None else None,
            "http_port": broker.http_port,
            "rack": None,
            "controller": True,
        }
    ]
