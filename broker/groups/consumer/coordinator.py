"""The KIP-848 consumer-group coordinator: ConsumerGroupHeartbeat, ConsumerGroupDescribe, member timers, and the
member-epoch checks of offset commits and fetches for consumer-protocol groups.

Why: `group.protocol=consumer` moves the rebalance into the broker. Each heartbeat (1) validates the request
(`heartbeat.invalid_request`) and the member's epoch against what the coordinator knows (a heartbeat with a
newer epoch than the member's, or an older one that is not a lost response, is FENCED_MEMBER_EPOCH), (2)
applies the member's subscription, bumping the group epoch when membership, subscriptions or the subscribed
topics' partition counts change, (3) computes the target assignment with the group's assignor when the group
epoch is ahead of it, (4) moves the member one reconciliation step (`model.next_assignment`: revoke before
assign, never one partition held by two members), and answers its epoch and, when it changed, its assignment.
Everything is decided on values before any of it is applied, so a refused request changes nothing.

Timers: each heartbeat restarts the member's session (`group.consumer.session.timeout.ms`); a member asked to
revoke must acknowledge within its rebalance timeout. Either expiry fences the member: it leaves the group, its
partitions are free, the group epoch moves.

It coordinates the consumer groups of the `__consumer_offsets` partitions this broker leads (the classic
coordinator's ownership, `check_group`); `on_resign` drops them. This module must never speak the wire protocol.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Protocol

from kelp.errors import ErrorCode

from ..coordinator_config import CoordinatorConfig, Scheduler, TimerHandle
from ..group_metadata_manager import GroupMetadataManager
from .assignors import ASSIGNORS, MemberSubscription
from .heartbeat import HeartbeatRequest, HeartbeatResult, invalid_request
from .model import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    next_assignment,
    subset,
)

__all__ = ["ConsumerGroups", "TopicView", "ConsumerGroupDescription"]

log = logging.getLogger("kelp.broker.groups")


class TopicLike(Protocol):
    @property
    def topic_id(self) -> str: ...

    @property
    def partitions(self) -> int: ...


class TopicView(Protocol):
    """What the coordinator reads of the cluster's topics (the broker's TopicManager)."""

    def get(self, name: str) -> TopicLike | None: ...

    def name_of(self, topic_id: str) -> str | None: ...


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    error: int
    message: str | None = None
    group: ConsumerGroup | None = None


def _member_id() -> str:
    """A member id as Kafka's coordinator makes one for a v0 request without it (a base64 UUID)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ConsumerGroups:
    def __init__(self, group_manager: GroupMetadataManager, *, config: CoordinatorConfig, scheduler: Scheduler,
                 topics: TopicView) -> None:
        self.gm = group_manager
        self.config = config
        self.scheduler = scheduler
        self.topics = topics
        self.groups: dict[str, ConsumerGroup] = {}
        self._sessions: dict[tuple[str, str], TimerHandle] = {}
        self._revocations: dict[tuple[str, str], TimerHandle] = {}

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------------------
    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        bad = invalid_request(req, self.config.consumer_assignors)
        if bad is not None:
            return HeartbeatResult(bad[0], bad[1])
        err = self.gm.check_group(req.group_id)
        if err:
            return HeartbeatResult(err)
        classic = self.gm.groups.get(req.group_id)
        if classic is not None and classic.members:
            return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND,
                                   f"Group {req.group_id} is not a consumer group (it has classic members).")
        group = self.groups.get(req.group_id)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, req)
        if group is None:
            if req.member_epoch != 0:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                       f"Member {req.member_id} is not a member of group {req.group_id}.")
            group = ConsumerGroup(req.group_id)
        found = self._member_for(group, req)
        if isinstance(found, HeartbeatResult):
            return found
        member, replaced = found
        return self._step(group, req, member, replaced)

    def _member_for(self, group: ConsumerGroup,
                    req: HeartbeatRequest) -> tuple[ConsumerMember, str | None] | HeartbeatResult:
        """(the member as known before this heartbeat, the member id of a static member it replaces) or the
        error: UNRELEASED_INSTANCE_ID, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, FENCED_MEMBER_EPOCH,
        GROUP_MAX_SIZE_REACHED."""
        gid = group.group_id
        if req.member_epoch == 0:
            member_id = req.member_id or _member_id()
            holder = group.static_members.get(req.instance_id) if req.instance_id is not None else None
            if holder is not None and holder != member_id:
                old = group.members[holder]
                if old.member_epoch != STATIC_LEAVE_EPOCH:
                    return HeartbeatResult(ErrorCode.UNRELEASED_INSTANCE_ID,
                                           f"Static member {holder} with instance id {req.instance_id} is not "
                                           "released yet.")
                # The instance comes back as a new member id: it takes over the old one's assignment.
                return replace(old, member_id=member_id), holder
            known = group.members.get(member_id)
            if known is not None:
                return known, None
            if len(group.members) >= self.config.consumer_max_size:
                return HeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                       f"The consumer group has reached its maximum capacity of "
                                       f"{self.config.consumer_max_size} members.")
            return ConsumerMember(member_id), None
        member = group.members.get(req.member_id)
        if member is None:
            return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                   f"Member {req.member_id} is not a member of group {gid}.")
        if req.instance_id is not None and group.static_members.get(req.instance_id) != req.member_id:
            return HeartbeatResult(ErrorCode.FENCED_INSTANCE_ID,
                                   f"Instance id {req.instance_id} is not held by member {req.member_id}.")
        if req.member_epoch > member.member_epoch:
            return HeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH,
                                   f"The member epoch {req.member_epoch} is ahead of the member's, "
                                   f"{member.member_epoch}.")
        if req.member_epoch < member.member_epoch and (
                req.member_epoch != member.previous_member_epoch or req.owned is None
                or not subset(req.owned, member.assigned)):
            return HeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH,
                                   f"The member epoch {req.member_epoch} is behind the member's, "
                                   f"{member.member_epoch}.")
        return member, None

    def _step(self, group: ConsumerGroup, req: HeartbeatRequest, member: ConsumerMember,
              replaced: str | None) -> HeartbeatResult:
        gid = group.group_id
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names)))
            if req.subscribed_topic_names is not None else member.subscribed_topic_names,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            client_id=req.client_id, client_host=req.client_host,
        )
        # -- the group epoch: membership, subscriptions, subscribed topics ------------------------------------
        members = dict(group.members)
        if replaced is not None:
            members.pop(replaced, None)
        is_new = member.member_id not in group.members and replaced is None
        members[updated.member_id] = updated
        metadata = self._subscribed_topics(members.values())
        bump = (is_new or updated.subscribed_topic_names != member.subscribed_topic_names
                or updated.server_assignor != member.server_assignor or metadata != group.subscribed_topics)
        group_epoch = group.group_epoch + 1 if bump else group.group_epoch
        # -- the target assignment at the group epoch ----------------------------------------------------------
        target = dict(group.target)
        if replaced is not None and replaced in target:
            target[updated.member_id] = target.pop(replaced)
        assignor = group.assignor
        assignment_epoch = group.assignment_epoch
        if group_epoch > group.assignment_epoch:
            assignor = self._preferred_assignor(members.values())
            subs = {m.member_id: MemberSubscription(frozenset(metadata[t][0] for t in m.subscribed_topic_names
                                                              if t in metadata)) for m in members.values()}
            counts = {tid: n for tid, n in metadata.values()}
            target = ASSIGNORS[assignor](subs, counts, target)
            assignment_epoch = group_epoch
        # -- the member's reconciliation step -------------------------------------------------------------------
        owners = group.owners
        if replaced is not None:
            owners = {tp: (updated.member_id if m == replaced else m) for tp, m in owners.items()}
        mid = updated.member_id
        reconciled = next_assignment(updated, target_epoch=assignment_epoch, target=target.get(mid, {}),
                                     held_by_other=lambda t, p: owners.get((t, p), mid) != mid, owned=req.owned)
        # -- apply (nothing above changed the group) ------------------------------------------------------------
        if gid not in self.groups:
            self.groups[gid] = group
        if replaced is not None:
            self._cancel_timers(gid, replaced)
            group.remove_member(replaced)
        group.group_epoch = group_epoch
        group.assignment_epoch = assignment_epoch
        group.assignor = assignor
        group.target = target
        group.subscribed_topics = metadata
        group.put_member(reconciled)
        self._restart_session(group, mid)
        self._watch_revocation(group, member, reconciled)
        if bump or reconciled.member_epoch != member.member_epoch or replaced is not None:
            log.info("consumer group '%s': member %s at epoch %d (%s), group epoch %d", gid, mid,
                     reconciled.member_epoch, reconciled.state.value, group_epoch)
        full = req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None and req.owned is not None
        send = req.member_epoch == 0 or full or reconciled.assigned != member.assigned
        return HeartbeatResult(ErrorCode.NONE, None, mid, reconciled.member_epoch,
                               self.config.consumer_heartbeat_interval_ms,
                               dict(reconciled.assigned) if send else None)

    def _subscribed_topics(self, members: Iterable[ConsumerMember]) -> dict[str, tuple[str, int]]:
        names = {t for m in members for t in m.subscribed_topic_names}
        out: dict[str, tuple[str, int]] = {}
        for name in sorted(names):
            info = self.topics.get(name)
            if info is not None and info.partitions > 0:
                out[name] = (info.topic_id, info.partitions)
        return out

    def _preferred_assignor(self, members: Iterable[ConsumerMember]) -> str:
        """The assignor most members name (ties: the configured order), else the first configured."""
        order = self.config.consumer_assignors
        votes = Counter(m.server_assignor for m in members if m.server_assignor)
        if not votes:
            return order[0]
        return max(votes, key=lambda a: (votes[a], -order.index(a)))

    # -- leaving ---------------------------------------------------------------------------------------------
    def _leave(self, group: ConsumerGroup | None, req: HeartbeatRequest) -> HeartbeatResult:
        gid = req.group_id
        member = group.members.get(req.member_id) if group is not None else None
        if group is None or member is None:
            return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                   f"Member {req.member_id} is not a member of group {gid}.")
        if req.instance_id is not None and group.static_members.get(req.instance_id) != req.member_id:
            return HeartbeatResult(ErrorCode.FENCED_INSTANCE_ID,
                                   f"Instance id {req.instance_id} is not held by member {req.member_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # A static member restarting: it keeps its partitions (nobody else gets them) until its session ends.
            group.put_member(replace(member, member_epoch=STATIC_LEAVE_EPOCH,
                                     previous_member_epoch=member.member_epoch))
            self._cancel_revocation(gid, req.member_id)
            log.info("consumer group '%s': static member %s (%s) left for now", gid, req.member_id,
                     member.instance_id)
        else:
            self.fence(group, req.member_id, "left the group")
        return HeartbeatResult(ErrorCode.NONE, None, req.member_id, req.member_epoch,
                               self.config.consumer_heartbeat_interval_ms)

    def fence(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        """Remove a member (left, session expired, revocation not acknowledged): its partitions are free and
        the group epoch moves, so the next heartbeat computes a new target."""
        self._cancel_timers(group.group_id, member_id)
        if group.remove_member(member_id) is None:
            return
        group.group_epoch += 1
        log.info("consumer group '%s': member %s %s; group epoch %d", group.group_id, member_id, why,
                 group.group_epoch)

    # -- timers ----------------------------------------------------------------------------------------------
    def _restart_session(self, group: ConsumerGroup, member_id: str) -> None:
        key = (group.group_id, member_id)
        old = self._sessions.pop(key, None)
        if old is not None:
            old.cancel()
        self._sessions[key] = self.scheduler.call_later(
            self.config.consumer_session_timeout_ms, self._expiry(group, member_id, self._sessions, "session expired"))

    def _watch_revocation(self, group: ConsumerGroup, before: ConsumerMember, after: ConsumerMember) -> None:
        key = (group.group_id, after.member_id)
        if after.state is not MemberState.UNREVOKED_PARTITIONS:
            self._cancel_revocation(*key)
        elif before.state is not MemberState.UNREVOKED_PARTITIONS or key not in self._revocations:
            self._revocations[key] = self.scheduler.call_later(
                after.rebalance_timeout_ms,
                self._expiry(group, after.member_id, self._revocations, "did not revoke its partitions in time"))

    def _expiry(self, group: ConsumerGroup, member_id: str, timers: dict[tuple[str, str], TimerHandle],
                why: str) -> Callable[[], None]:
        key = (group.group_id, member_id)

        def fire() -> None:
            timers.pop(key, None)
            if self.groups.get(group.group_id) is group and member_id in group.members:
                self.fence(group, member_id, why)

        return fire

    def _cancel_revocation(self, group_id: str, member_id: str) -> None:
        handle = self._revocations.pop((group_id, member_id), None)
        if handle is not None:
            handle.cancel()

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        self._cancel_revocation(group_id, member_id)
        handle = self._sessions.pop((group_id, member_id), None)
        if handle is not None:
            handle.cancel()

    # -- leadership, describe, offsets ------------------------------------------------------------------------
    def on_resign(self, partition: int) -> None:
        """This broker no longer leads `partition`: forget its consumer groups and their timers."""
        for gid in [g for g in self.groups if self.gm.partition_for(g) == partition]:
            group = self.groups.pop(gid)
            for mid in list(group.members):
                self._cancel_timers(gid, mid)

    def stop(self) -> None:
        for handle in [*self._sessions.values(), *self._revocations.values()]:
            handle.cancel()
        self._sessions.clear()
        self._revocations.clear()

    def describe(self, group_id: str) -> ConsumerGroupDescription:
        err = self.gm.check_group(group_id)
        if err:
            return ConsumerGroupDescription(group_id, err)
        group = self.groups.get(group_id)
        if group is None:
            classic = self.gm.groups.get(group_id)
            why = "is not a consumer group" if classic is not None and classic.members else "not found"
            return ConsumerGroupDescription(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} {why}.")
        return ConsumerGroupDescription(group_id, ErrorCode.NONE, None, group)

    def topic_name(self, topic_id: str) -> str | None:
        return self.topics.name_of(topic_id)

    def commit_error(self, group_id: str, member_id: str, member_epoch: int, api_version: int) -> int | None:
        """Kafka's ConsumerGroup.validateOffsetCommit: None when `group_id` is not a consumer group here, NONE
        when the commit may go ahead, else its error (UNKNOWN_MEMBER_ID, FENCED/STALE_MEMBER_EPOCH,
        UNSUPPORTED_VERSION below OffsetCommit v9)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE  # the admin client, or a consumer not in the group, commits to an empty group
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch > member.member_epoch:
            return ErrorCode.FENCED_MEMBER_EPOCH
        if member_epoch < member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        self._restart_session(group, member_id)  # a commit is a sign of life, as a classic commit is
        return ErrorCode.NONE

    def fetch_error(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """Kafka's ConsumerGroup.validateOffsetFetch: NONE for a fetch without a member (the admin client) or
        from a member at its epoch; UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH otherwise."""
        group = self.groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return ErrorCode.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE
