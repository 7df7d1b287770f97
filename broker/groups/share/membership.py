"""Share-group membership (KIP-932): ShareGroupHeartbeat's join/heartbeat/leave, the assignment, describe.

Why: a share consumer joins its group with ShareGroupHeartbeat and learns from the answer which partitions to
fetch from; the coordinator assigns them. Unlike a consumer group, a share group lets several members read
one partition (the share-partition's leader hands each record to one member at a time, `partition`), so the
assignment needs no revocation step: the simple assignor here gives every member every partition of the
topics it subscribes to, and a member's epoch moves straight to the group epoch whenever its assignment
changes. Epochs follow Kafka's rules: 0 joins, -1 leaves, any other epoch must be the member's current one
(FENCED_MEMBER_EPOCH) and the member must exist (UNKNOWN_MEMBER_ID); a member silent for
`group.share.session.timeout.ms` is removed.

Durability, as Kafka's: every change of a member or of the group epoch is written to the group's
`__consumer_offsets` partition as Kafka's share-group records (`records`) before it is applied and answered (one
change of a group at a time); a write that fails changes nothing and answers its error. The coordinator that
loads the partition (after a restart or a move) replays them (`adopt`): members keep their ids, epochs and
assignments, each with a session starting at the load. A member that leaves or times out is tombstoned.

This module must never speak the wire protocol: handlers translate.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Awaitable, Callable, Iterable, Protocol

from kelp.clock import WallClockMs, wall_clock_ms
from kelp.errors import ErrorCode

from ..coordinator_config import Scheduler
from . import records
from .model import Assignment, ShareGroup, ShareMember

__all__ = ["ShareMember", "ShareGroup", "ShareHeartbeat", "HeartbeatAnswer", "ShareMembership", "TopicLookup"]

log = logging.getLogger("kelp.broker.groups.share")
Write = Callable[[str, list[tuple[bytes, bytes | None]]], Awaitable[int]]  # (group, records) -> error code


async def _nowhere(_group: str, _records: list[tuple[bytes, bytes | None]]) -> int:
    return ErrorCode.NONE


class TopicLookup(Protocol):
    def __call__(self, name: str) -> tuple[str, int] | None:
        """(topic id, partition count) of a topic, None if it does not exist."""


@dataclass(frozen=True)
class ShareHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed_topic_names: tuple[str, ...] | None
    client_id: str
    client_host: str


@dataclass(frozen=True)
class HeartbeatAnswer:
    error: int = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged since the member's last answer


class ShareMembership:
    """The share groups this broker coordinates (see the module docstring)."""

    def __init__(self, *, topics: TopicLookup, scheduler: Scheduler, session_timeout_ms: int,
                 heartbeat_interval_ms: int, max_size: int, clock_ms: WallClockMs = wall_clock_ms,
                 on_member_gone: Callable[[str, str], None] | None = None,
                 timeouts_of: Callable[[str], tuple[int, int]] | None = None, write: Write = _nowhere) -> None:
        self.topics = topics
        self.scheduler = scheduler
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # (session timeout, heartbeat interval) of a group: the broker's, or the group's own configs
        # (share.session.timeout.ms, share.heartbeat.interval.ms), read at each heartbeat
        self.timeouts_of: Callable[[str], tuple[int, int]] = timeouts_of or (
            lambda _group: (session_timeout_ms, heartbeat_interval_ms))
        self.max_size = max_size
        self.clock_ms = clock_ms
        self.groups: dict[str, ShareGroup] = {}
        self.on_member_gone = on_member_gone
        self.write = write  # the group's records to its `__consumer_offsets` partition (the coordinator's)
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def _lock(self, group_id: str) -> asyncio.Lock:
        return self._locks.setdefault(group_id, asyncio.Lock())

    async def heartbeat(self, hb: ShareHeartbeat) -> HeartbeatAnswer:
        if not hb.member_id:
            return HeartbeatAnswer(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        async with self._lock(hb.group_id):
            return await self._heartbeat(hb)

    async def _heartbeat(self, hb: ShareHeartbeat) -> HeartbeatAnswer:
        group = self.groups.get(hb.group_id)
        if hb.member_epoch == -1:
            if group is None or hb.member_id not in group.members:
                return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID,
                                       f"Member {hb.member_id} is not a member of group {hb.group_id}.")
            err = await self.write(hb.group_id, [*records.member_tombstones(hb.group_id, hb.member_id),
                                                 records.group_epoch_record(hb.group_id, group.group_epoch + 1)])
            if err:
                return HeartbeatAnswer(err, "the member's leave could not be written; retry")
            self._remove(group, hb.member_id)
            return HeartbeatAnswer(member_id=hb.member_id, member_epoch=-1)
        new_group = group is None
        before: ShareMember | None = None
        if hb.member_epoch == 0:
            if not hb.subscribed_topic_names:
                return HeartbeatAnswer(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
            group = self.groups.get(hb.group_id) or ShareGroup(hb.group_id)
            member = group.members.get(hb.member_id)
            if member is None:
                if len(group.members) >= self.max_size:
                    return HeartbeatAnswer(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                           f"The share group has reached its maximum size of {self.max_size}.")
                member = ShareMember(hb.member_id, 0, hb.client_id, hb.client_host, hb.rack_id,
                                     tuple(hb.subscribed_topic_names))
            else:
                before = replace(member)
        else:
            member = group.members.get(hb.member_id) if group is not None else None
            if group is None or member is None:
                return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID,
                                       f"Member {hb.member_id} is not a member of group {hb.group_id}.")
            if hb.member_epoch != member.member_epoch:
                return HeartbeatAnswer(ErrorCode.FENCED_MEMBER_EPOCH,
                                       f"The share group member has a stale member epoch ({hb.member_epoch}); "
                                       f"the current one is {member.member_epoch}.")
            before = replace(member)
        # the change, decided on copies: written first, applied only once written
        epochs = (group.group_epoch, group.assignment_epoch)
        after = replace(member)
        epoch = group.group_epoch + (1 if before is None else 0)
        if hb.subscribed_topic_names is not None and tuple(hb.subscribed_topic_names) != after.subscribed_topic_names:
            after.subscribed_topic_names = tuple(hb.subscribed_topic_names)
            epoch += 1
        if hb.rack_id is not None:
            after.rack_id = hb.rack_id
        target = self._assignment(after)
        changed = hb.member_epoch == 0 or target != after.assigned or after.member_epoch != epoch
        if changed:
            after.assigned, after.member_epoch = target, epoch
        writes = []
        if before is None or (before.subscribed_topic_names, before.rack_id) != (after.subscribed_topic_names,
                                                                               after.rack_id):
            writes.append(records.member_record(group.group_id, after))
        if epoch != epochs[0]:
            writes.append(records.group_epoch_record(group.group_id, epoch))
        if changed:
            writes.append(records.assignment_record(group.group_id, after, before.member_epoch if before else 0))
        err = await self.write(group.group_id, writes) if writes else ErrorCode.NONE
        if err:
            return HeartbeatAnswer(err, "the share group's change could not be written; retry")
        if new_group:
            self.groups[group.group_id] = group
        after.timer = member.timer
        group.members[after.member_id] = after
        group.group_epoch = epoch
        if changed:
            group.assignment_epoch = epoch
        self._touch(group, after)
        return HeartbeatAnswer(member_id=after.member_id, member_epoch=after.member_epoch,
                               heartbeat_interval_ms=self.timeouts_of(group.group_id)[1],
                               assignment=dict(target) if changed else None)

    def _assignment(self, member: ShareMember) -> Assignment:
        """The simple assignor: every partition of every subscribed topic that exists."""
        out: Assignment = {}
        for name in member.subscribed_topic_names:
            found = self.topics(name)
            if found is not None and found[1] > 0:
                out[found[0]] = frozenset(range(found[1]))
        return out

    def _touch(self, group: ShareGroup, member: ShareMember) -> None:
        cancel = getattr(member.timer, "cancel", None)
        if cancel is not None:
            cancel()
        gid, mid = group.group_id, member.member_id
        member.timer = self.scheduler.call_later(self.timeouts_of(gid)[0], lambda: self._expire(gid, mid))

    def _expire(self, group_id: str, member_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._expire_now(group_id, member_id),
                                                      name=f"share-member-expiry-{group_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _expire_now(self, group_id: str, member_id: str) -> None:
        """A member silent for its session timeout: tombstoned, then removed (also when the write fails: the
        coordinator that replays it starts its session again)."""
        async with self._lock(group_id):
            group = self.groups.get(group_id)
            if group is None or member_id not in group.members:
                return
            err = await self.write(group_id, [*records.member_tombstones(group_id, member_id),
                                              records.group_epoch_record(group_id, group.group_epoch + 1)])
            if err:
                log.warning("share group '%s': member %s timed out; its removal was not written (error %d)",
                            group_id, member_id, err)
            if self.groups.get(group_id) is group and member_id in group.members:
                self._remove(group, member_id)

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        member = group.members.pop(member_id)
        cancel = getattr(member.timer, "cancel", None)
        if cancel is not None:
            cancel()
        group.group_epoch += 1
        if self.on_member_gone is not None:
            self.on_member_gone(group.group_id, member_id)

    def describe(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def adopt(self, groups: dict[str, ShareGroup]) -> None:
        """A loaded `__consumer_offsets` partition's share groups (replayed from their records): served from now
        on, each member's session starting now (one that does not heartbeat to this coordinator is removed)."""
        self.drop([g for g in groups if g in self.groups])
        for gid, group in groups.items():
            self.groups[gid] = group
            for member in group.members.values():
                self._touch(group, member)
            log.info("share group '%s' loaded: group epoch %d, %d member(s)", gid, group.group_epoch,
                     len(group.members))

    async def delete_group(self, group_id: str) -> int:
        """DeleteGroups of an empty share group: its metadata tombstoned, the group forgotten (NON_EMPTY_GROUP if
        a member joined meanwhile)."""
        async with self._lock(group_id):
            group = self.groups.get(group_id)
            if group is None:
                return ErrorCode.NONE
            if group.members:
                return ErrorCode.NON_EMPTY_GROUP
            err = await self.write(group_id, records.group_tombstones(group_id))
            if err == ErrorCode.NONE:
                self.drop([group_id])
            return err

    def drop(self, group_ids: Iterable[str]) -> None:
        """The coordinator lost these groups (its `__consumer_offsets` partition moved): forget them."""
        for gid in list(group_ids):
            group = self.groups.pop(gid, None)
            for m in group.members.values() if group is not None else ():
                cancel = getattr(m.timer, "cancel", None)
                if cancel is not None:
                    cancel()

    def stop(self) -> None:
        self.drop(list(self.groups))
        for task in self._tasks:
            task.cancel()
