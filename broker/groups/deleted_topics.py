"""Deleting a topic drops its committed offsets from every group, durably (Kafka's cleanupGroupMetadata).

Why: a group that kept offsets of a deleted topic cannot be described
(`kafka-consumer-groups --describe` asks the partitions' end offsets and
fails with UNKNOWN_TOPIC_OR_PARTITION), and a topic re-created under the same
name would resume from the old topic's positions. Kafka removes them when the
topic goes; so does Kelp: every broker hears the deletion (whichever door it
came through: Kafka DeleteTopics, the HTTP API, the CLI, or the controller's
push) and its coordinator writes offset tombstones to `__consumer_offsets`
for the groups it coordinates, so a restart does not bring them back. An
Empty group left without offsets is deleted with its metadata, as in Kafka.

This module must never speak a wire protocol or decide group rules beyond
this one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Iterable

from .group import GroupState
from .group_coordinator import GroupCoordinator
from .offsets_log import encode_group_key, encode_offset_key

__all__ = ["drop_topic_offsets", "topic_listener"]

log = logging.getLogger("kelp.broker.groups")


async def drop_topic_offsets(coordinator: GroupCoordinator, topics: Iterable[str]) -> int:
    """Tombstone every committed offset of `topics` in the groups this broker coordinates; how many went."""
    gone = set(topics)
    owned = coordinator.ownership.owned()
    removed = 0
    for gid, group in list(coordinator.groups.items()):
        partition = coordinator.partition_for(gid)
        if group.is_(GroupState.DEAD) or partition not in owned:
            continue
        doomed = [tp for tp in group.offsets if tp[0] in gone]
        if not doomed:
            continue
        drop_group = group.is_(GroupState.EMPTY) and not group.members and len(doomed) == len(group.offsets)
        records: list[tuple[bytes, bytes | None]] = [(encode_offset_key(gid, t, p), None) for t, p in doomed]
        if drop_group:
            records.append((encode_group_key(gid), None))
        token = coordinator.ownership.token(partition)
        try:
            await coordinator.group_manager.store.append(partition, records)
        except Exception as exc:
            log.warning("group '%s': writing tombstones for %d offset(s) of deleted topic(s) %s failed; they stay "
                        "until the group's offsets expire: %s", gid, len(doomed), sorted(gone), exc)
            continue
        if coordinator.ownership.token(partition) != token:
            continue  # unloaded meanwhile: the next coordinator replays the tombstones
        for tp in doomed:
            group.offsets.pop(tp, None)
        removed += len(doomed)
        if drop_group and group.is_(GroupState.EMPTY) and not group.members and not group.offsets:
            group.transition(GroupState.DEAD, now_ms=coordinator.clock_ms())
            coordinator.groups.pop(gid, None)
        log.info("group '%s': %d committed offset(s) of deleted topic(s) %s removed%s", gid, len(doomed),
                 ", ".join(sorted({t for t, _ in doomed})), " and the empty group deleted" if drop_group else "")
    return removed


def topic_listener(coordinator: GroupCoordinator) -> Callable[[str, str], None]:
    """The TopicManager listener: on "deleted", drop the topic's offsets in the background (never blocks)."""
    tasks: set[asyncio.Task[int]] = set()

    def on_topic(event: str, topic: str) -> None:
        if event != "deleted" or coordinator.stopped:
            return
        try:
            task = asyncio.get_running_loop().create_task(drop_topic_offsets(coordinator, [topic]))
        except RuntimeError:  # no loop (a unit test applying metadata synchronously): nothing coordinates here
            return
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    return on_topic
