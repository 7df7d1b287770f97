"""Offset expiry (offsets.retention.minutes): committed offsets of Empty groups do not live forever.

Why: a group nobody consumes with any more would keep its offsets (and its
metadata) in `__consumer_offsets` and in memory for ever. Like Kafka's
GroupMetadataManager.cleanupGroupMetadata, every
offsets.retention.check.interval.ms this broker tombstones the offsets of
the Empty groups it coordinates that are older than the retention (counted
from the later of the commit and the moment the group became Empty), and
deletes a group left without offsets. The tombstones go to the log first, so
a restart or a new coordinator does not bring the offsets back.

This module must never touch groups that have members, groups of partitions
this broker does not own, or the state machine's timers; it writes only
through `GroupMetadataManager`'s store.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from .coordinator_config import Scheduler, TimerHandle
from .group import GroupState
from .group_metadata_manager import GroupMetadataManager
from .offsets_log import encode_group_key, encode_offset_key

__all__ = ["OffsetExpiry"]

log = logging.getLogger("kelp.broker.groups")


class OffsetExpiry:
    def __init__(self, manager: GroupMetadataManager, *, scheduler: Scheduler) -> None:
        self.manager = manager
        self.config = manager.config
        self.scheduler = scheduler
        self._handle: TimerHandle | None = None  # the scheduler's handle of the next check
        self._stopped = False
        # A group whose offsets must not expire though its classic state is Empty: a KIP-848 consumer group with
        # members (its offsets are kept in a memberless classic group; the coordinator sets this).
        self.in_use: Callable[[str], bool] = lambda group_id: False

    def start(self) -> None:
        """Check every offsets.retention.check.interval.ms until `stop()`."""
        def tick() -> None:
            if self._stopped:
                return
            asyncio.ensure_future(self.expire_offsets())
            self._handle = self.scheduler.call_later(self.config.offsets_retention_check_interval_ms, tick)

        self._handle = self.scheduler.call_later(self.config.offsets_retention_check_interval_ms, tick)

    def stop(self) -> None:
        self._stopped = True
        if self._handle is not None:
            self._handle.cancel()

    async def expire_offsets(self) -> int:
        """offsets.retention.minutes: drop offsets of Empty groups older than the retention; tombstones."""
        manager = self.manager
        now = manager.clock_ms()
        retention = self.config.offsets_retention_ms
        removed = 0
        owned = manager.ownership.owned()
        for gid, group in list(manager.groups.items()):
            if not group.is_(GroupState.EMPTY) or manager.partition_for(gid) not in owned or self.in_use(gid):
                continue
            reference = max(group.state_timestamp_ms, 0)
            expired = [
                tp for tp, co in group.offsets.items()
                if max(co.commit_timestamp_ms, reference) + retention <= now
            ]
            records: list[tuple[bytes, bytes | None]] = [(encode_offset_key(gid, t, p), None) for t, p in expired]
            drop_group = len(expired) == len(group.offsets)
            if drop_group:
                records.append((encode_group_key(gid), None))
            if not records:
                continue
            partition = manager.partition_for(gid)
            token = manager.ownership.token(partition)
            try:
                await manager.store.append(partition, records)
            except Exception as exc:
                log.warning("writing expiry tombstones for group '%s' failed (retried at the next check): %s", gid, exc)
                continue
            if manager.ownership.token(partition) != token:
                continue  # unloaded meanwhile; the next coordinator replays the tombstones
            for tp in expired:
                group.offsets.pop(tp, None)
            removed += len(expired)
            if drop_group and group.is_(GroupState.EMPTY) and not group.members:
                group.transition(GroupState.DEAD, now_ms=now)
                manager.groups.pop(gid, None)
            if expired:
                log.info("group '%s': %d committed offset(s) expired (offsets.retention.minutes)", gid, len(expired))
        return removed
