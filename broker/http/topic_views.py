"""Plain-data views of topics and partitions shared by the admin API and the REST proxy.

Why: both APIs describe the same topics (one in Kelp's admin shape, one in
Confluent's); who leads a partition and which replicas are in sync is
decided here, in one place, so replication can change it once.

This module must never change state.
"""

from __future__ import annotations

from typing import Mapping, cast

from kelp.errors import UnknownTopicOrPartitionError
from kelp.json_types import JsonData

from ..metadata.model import TopicState
from ..parts import BrokerParts
from ..replica.results import PartitionInfo, SegmentSlice

__all__ = ["partition_roles", "describe_topic", "topic_configs", "brokers_view", "record_bytes"]


def partition_roles(broker: BrokerParts, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) of one partition, from the cluster metadata this broker holds."""
    leader, replicas, isr = broker.replicas.partition_roles(topic, partition)
    return int(leader), list(replicas), list(isr)


def topic_configs(broker: BrokerParts, name: str) -> dict[str, dict[str, str]]:
    """`{config name: {"value": str, "source": "topic" | "default"}}`, sorted by name."""
    effective = broker.topics.effective_configs(name)
    return {
        key: {"value": str(value), "source": "default" if is_default else "topic"}
        for key, (value, is_default) in sorted(effective.items())
    }


async def describe_topic(broker: BrokerParts, name: str, *, created: TopicState | None = None) -> dict[str, JsonData]:
    """A topic with each partition's roles and offsets (as its leader knows them; nulls while it has none).

    `created`: the controller's answer to a creation, described in the topic's place while this broker has not
    applied it yet — the controller committed it, but a broker given thousands of partitions on a busy machine
    can take longer than the creation waits for it (`routing.call`), and answering "does not exist" for the
    topic just created would tell the client it failed. Its offsets are then unknown (nulls) and its configs
    are the overrides only.
    """
    try:
        info = broker.topics.describe(name)
    except UnknownTopicOrPartitionError:
        if created is None or created.name != name:
            raise
        overrides = {k: {"value": v, "source": "topic"} for k, v in sorted(created.configs.items())}
        return _view(broker, created, {}, overrides)
    infos = await broker.cluster.routing.partition_infos([(name, p) for p in range(info.partitions)])
    return _view(broker, info, infos, topic_configs(broker, name))


def _view(broker: BrokerParts, info: TopicState, infos: Mapping[tuple[str, int], PartitionInfo | None],
          configs: dict[str, dict[str, str]]) -> dict[str, JsonData]:
    name = info.name
    partitions: list[JsonData] = []
    for p, state in enumerate(info.partition_states):
        pi = infos.get((name, p))
        entry: dict[str, JsonData] = {
            "partition": p,
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "replicas": list(state.replicas),
            "isr": list(state.isr),
            "offline_replicas": [r for r in state.replicas if r not in broker.cluster.state.brokers],
            "log_start_offset": pi.log_start_offset if pi else None,
            "log_end_offset": pi.log_end_offset if pi else None,
            "high_watermark": pi.high_watermark if pi else None,
            "size_bytes": pi.size_bytes if pi else None,
        }
        if state.reassigning:
            entry["adding"], entry["removing"] = list(state.adding), list(state.removing)
        partitions.append(entry)
    return {
        "name": info.name,
        "topic_id": info.topic_id,
        "internal": info.internal,
        "partitions_count": info.partitions,
        "replication_factor": info.replication_factor,
        "partitions": partitions,
        "configs": cast(JsonData, configs),
    }


def record_bytes(records: bytes | memoryview | SegmentSlice) -> bytes | memoryview:
    """The bytes of a fetch result's records, for the REST reads that decode them. They fetch without
    `zero_copy`, so the replica manager hands bytes; a file range would be read here, and closed."""
    if isinstance(records, SegmentSlice):
        try:
            return records.read()
        finally:
            records.close()
    return records


def brokers_view(broker: BrokerParts) -> list[JsonData]:
    member = broker.cluster
    return [
        {"id": b.id, "host": b.host, "port": b.port, "http_port": b.http_port, "rack": b.rack,
         "controller": b.id == member.state.controller_id,
         "listeners": {name: f"{host}:{port}" for name, host, port in b.listeners}}
        for b in sorted(member.state.brokers.values(), key=lambda b: b.id)
    ]
