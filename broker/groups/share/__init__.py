"""KIP-932 share groups ("queues for Kafka"): many members read one partition, each record acknowledged alone.

Why a subpackage: share groups share nothing with the classic and consumer protocols but the coordinator's
placement (a group is coordinated by the leader of its `__consumer_offsets` partition). Its parts:
`membership` (ShareGroupHeartbeat, the simple assignor, describe), `partition` (one share-partition's
delivery state: acquisition locks, delivery counts, acknowledgements), `manager` (the share-partitions and
share sessions of the partitions this broker leads) and `state_log` (their durable state in
`__share_group_state`). `share_groups_of(parts)` gives the broker's one `ShareGroups`, built on first use and
kept with the group coordinator (`GroupCoordinator.extensions`), stopped with it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, Iterable

from kelp.clock import wall_clock_ms
from kelp.errors import NotLeaderOrFollowerError

from ...metadata.group_configs import effective, reset_strategy
from ...parts import BrokerParts
from ..coordinator_config import LoopScheduler
from ..group_coordinator import GroupCoordinator
from .manager import ShareConfig, SharePartitions
from .membership import ShareMembership
from .state_log import ShareStateLog, StateKey

__all__ = ["ShareGroups", "share_groups_of", "listed_share_groups", "reset_here", "initial_start", "SHARE_GROUP_TYPE"]

SHARE_GROUP_TYPE = "share"  # ListGroups v5's group type and protocol type of a share group


@dataclass
class ShareGroups:
    membership: ShareMembership
    partitions: SharePartitions


def listed_share_groups(coord: GroupCoordinator, *, states: Iterable[str] | None) -> list[tuple[str, str, str]]:
    """(group, protocol type, state) of the share groups this broker coordinates, for ListGroups (those its loads
    replayed, before the first share-group request built the share groups)."""
    found = coord.extensions.get("share")
    groups = found.membership.groups if isinstance(found, ShareGroups) else coord.share_loaded  # loaded, not built
    wanted = {s.lower() for s in states} if states else None
    owned = coord.ownership.owned()  # a group whose partition moved away is the new coordinator's to list
    return [(gid, SHARE_GROUP_TYPE, g.state) for gid, g in sorted(groups.items())
            if coord.partition_for(gid) in owned and (wanted is None or g.state.lower() in wanted)]


def share_groups_of(parts: BrokerParts) -> ShareGroups:
    """The broker's share groups, built on first use from its config (see the module docstring)."""
    coord = parts.groups
    found = coord.extensions.get("share")
    if isinstance(found, ShareGroups):
        return found
    cfg = parts.config
    scheduler = LoopScheduler()
    state = ShareStateLog(
        parts.cluster, parts.topics, parts.replicas, parts.logs,
        partitions=cfg["share.coordinator.state.topic.num.partitions"],
        topic_configs={"cleanup.policy": "compact", "compression.type": "uncompressed",
                       "min.insync.replicas": str(cfg["share.coordinator.state.topic.min.isr"]),
                       "segment.bytes": str(100 * 1024 * 1024)},
        replication_factor=cfg["share.coordinator.state.topic.replication.factor"],
        write_timeout_ms=cfg["offsets.commit.timeout.ms"])
    base = ShareConfig(
        lock_duration_ms=cfg["group.share.record.lock.duration.ms"],
        delivery_count_limit=cfg["group.share.delivery.count.limit"],
        max_record_locks=cfg["group.share.partition.max.record.locks"],
        session_idle_ms=cfg["group.share.session.timeout.ms"])

    def config_of(group: str) -> ShareConfig:
        own = parts.topics.group_configs(group)
        if not own:
            return base
        return replace(base, lock_duration_ms=effective(own, "share.record.lock.duration.ms", cfg),
                       delivery_count_limit=effective(own, "share.delivery.count.limit", cfg),
                       session_idle_ms=effective(own, "share.session.timeout.ms", cfg))

    def timeouts_of(group: str) -> tuple[int, int]:
        own = parts.topics.group_configs(group)
        return (effective(own, "share.session.timeout.ms", cfg), effective(own, "share.heartbeat.interval.ms", cfg))

    partitions = SharePartitions(state, base, scheduler=scheduler, config_of=config_of)

    def topic(name: str) -> tuple[str, int] | None:
        t = parts.topics.get(name)
        return (t.topic_id, t.partitions) if t is not None else None

    membership = ShareMembership(
        topics=topic, scheduler=scheduler, session_timeout_ms=cfg["group.share.session.timeout.ms"],
        heartbeat_interval_ms=cfg["group.share.heartbeat.interval.ms"], max_size=cfg["group.share.max.size"],
        on_member_gone=partitions.member_gone, timeouts_of=timeouts_of, write=coord.consumer.write_records)
    groups = ShareGroups(membership, partitions)
    coord.extensions["share"] = groups
    membership.adopt(dict(coord.share_loaded))  # what loads replayed before the share groups were built
    coord.share_loaded.clear()
    coord.loader.on_share_groups = membership.adopt
    coord.resign_hooks.append(lambda p: membership.drop(
        [g for g in list(membership.groups) if coord.partition_for(g) == p]))

    def on_leadership(topic_name: str, partition: int, is_leader: bool, _epoch: int) -> None:
        t = parts.topics.get(topic_name)
        partitions.on_leadership(t.topic_id if t is not None else None, partition, is_leader)
        if topic_name == "__share_group_state" and not is_leader:
            state.forget_partition(partition)

    parts.replicas.add_leadership_listener(on_leadership)

    async def stop() -> None:
        membership.stop()
        await partitions.stop()

    coord.stop_hooks.append(stop)
    return groups


async def reset_here(parts: BrokerParts, key: StateKey, start: int) -> None:
    """AlterShareGroupOffsets of one share-partition on its leader (this broker; else NOT_LEADER_OR_FOLLOWER):
    the start is clamped to the log's [start, high watermark], as Kafka's reset keeps it within the log."""
    name = parts.topics.name_of(key[1])
    part = parts.replicas.get_partition(name, key[2]) if name is not None else None
    if part is None or not part.is_leader:
        raise NotLeaderOrFollowerError(f"this broker does not lead partition {key[2]} of topic id {key[1]}")
    start = min(max(start, part.log.log_start_offset), part.high_watermark)
    await share_groups_of(parts).partitions.reset(key, start)


async def initial_start(parts: BrokerParts, group: str, part: Any) -> int:
    """Where a new share-partition of `group` on the partition `part` (led here) starts: the group's
    share.auto.offset.reset (Kafka's ShareGroupAutoOffsetResetStrategy): `latest` (the default) the high
    watermark, `earliest` the log start, `by_duration:<d>` the first record written at or after now - d (the
    time index read off the event loop), the high watermark when there is none."""
    strategy = reset_strategy(parts.topics.group_configs(group))
    if strategy.kind == "earliest":
        return int(part.log.log_start_offset)
    if strategy.kind == "latest":
        return int(part.high_watermark)
    found = await asyncio.to_thread(part.log.offset_for_timestamp, wall_clock_ms() - strategy.duration_ms)
    return int(part.high_watermark) if found is None else min(int(found[0]), int(part.high_watermark))
