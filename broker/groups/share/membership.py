"""Share-group membership (KIP-932): ShareGroupHeartbeat's join/heartbeat/leave, the assignment, describe.

Why: a share consumer joins its group with ShareGroupHeartbeat and learns from the answer which partitions to
fetch from; the coordinator assigns them. Unlike a consumer group, a share group lets several members read
one partition (the share-partition's leader hands each record to one member at a time, `partition`), so the
assignment needs no revocation step: the simple assignor here gives every member every partition of the
topics it subscribes to, and a member's epoch moves straight to the group epoch whenever its assignment
changes. Epochs follow Kafka's rules: 0 joins, -1 leaves, any other epoch must be the member's current one
(FENCED_MEMBER_EPOCH) and the member must exist (UNKNOWN_MEMBER_ID); a member silent for
`group.share.session.timeout.ms` is removed.

Slice 1's limit: membership is kept in memory by the group's coordinator (the `__consumer_offsets` partition's
leader), not written to `__consumer_offsets`; after a coordinator restart or move, members are told
UNKNOWN_MEMBER_ID and rejoin (the Java share consumer does so by itself). What must survive, the delivery
state, is in `__share_group_state` (`state_log`).

This module must never speak the wire protocol: handlers translate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from kelp.clock import WallClockMs, wall_clock_ms
from kelp.errors import ErrorCode

from ..coordinator_config import Scheduler

__all__ = ["ShareMember", "ShareGroup", "ShareHeartbeat", "HeartbeatAnswer", "ShareMembership", "TopicLookup"]

Assignment = dict[str, frozenset[int]]  # topic id (32 hex digits) -> partitions


class TopicLookup(Protocol):
    def __call__(self, name: str) -> tuple[str, int] | None:
        """(topic id, partition count) of a topic, None if it does not exist."""


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed_topic_names: tuple[str, ...]
    assigned: Assignment = field(default_factory=dict)
    timer: object | None = None


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


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
                 timeouts_of: Callable[[str], tuple[int, int]] | None = None) -> None:
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

    def heartbeat(self, hb: ShareHeartbeat) -> HeartbeatAnswer:
        if not hb.member_id:
            return HeartbeatAnswer(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        group = self.groups.get(hb.group_id)
        if hb.member_epoch == -1:
            if group is None or hb.member_id not in group.members:
                return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID,
                                       f"Member {hb.member_id} is not a member of group {hb.group_id}.")
            self._remove(group, hb.member_id)
            return HeartbeatAnswer(member_id=hb.member_id, member_epoch=-1)
        if hb.member_epoch == 0:
            if not hb.subscribed_topic_names:
                return HeartbeatAnswer(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
            group = self.groups.setdefault(hb.group_id, ShareGroup(hb.group_id))
            member = group.members.get(hb.member_id)
            if member is None:
                if len(group.members) >= self.max_size:
                    return HeartbeatAnswer(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                           f"The share group has reached its maximum size of {self.max_size}.")
                member = group.members[hb.member_id] = ShareMember(
                    hb.member_id, 0, hb.client_id, hb.client_host, hb.rack_id, tuple(hb.subscribed_topic_names))
                group.group_epoch += 1
        else:
            member = group.members.get(hb.member_id) if group is not None else None
            if group is None or member is None:
                return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID,
                                       f"Member {hb.member_id} is not a member of group {hb.group_id}.")
            if hb.member_epoch != member.member_epoch:
                return HeartbeatAnswer(ErrorCode.FENCED_MEMBER_EPOCH,
                                       f"The share group member has a stale member epoch ({hb.member_epoch}); "
                                       f"the current one is {member.member_epoch}.")
        if hb.subscribed_topic_names is not None and tuple(hb.subscribed_topic_names) != member.subscribed_topic_names:
            member.subscribed_topic_names = tuple(hb.subscribed_topic_names)
            group.group_epoch += 1
        if hb.rack_id is not None:
            member.rack_id = hb.rack_id
        self._touch(group, member)
        target = self._assignment(member)
        changed = hb.member_epoch == 0 or target != member.assigned or member.member_epoch != group.group_epoch
        if changed:
            member.assigned = target
            member.member_epoch = group.group_epoch
            group.assignment_epoch = group.group_epoch
        return HeartbeatAnswer(member_id=member.member_id, member_epoch=member.member_epoch,
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
        group = self.groups.get(group_id)
        if group is not None and member_id in group.members:
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
