"""The KIP-848 consumer-group coordinator: ConsumerGroupHeartbeat, ConsumerGroupDescribe, member timers, and the
member-epoch checks of offset commits and fetches for consumer-protocol groups.

Why: `group.protocol=consumer` moves the rebalance into the broker. Each heartbeat (1) validates the request
(`heartbeat.invalid_request`) and the member's epoch against what the coordinator knows (a heartbeat with a
newer epoch than the member's, or an older one that is not a lost response, is FENCED_MEMBER_EPOCH), (2)
applies the member's subscription, bumping the group epoch when membership, subscriptions or the subscribed
topics' partition counts change, (3) computes the target assignment with the group's assignor when the group
epoch is ahead of it, (4) moves the member one reconciliation step (`model.next_assignment`: revoke before
assign, never one partition held by two members), and answers its epoch and, when it changed, its assignment.
Everything is decided on values, written to `__consumer_offsets` as Kafka's records (`records`), and only
then applied, so a refused request or a failed write changes nothing; a group's changes are serialised by its
lock. A coordinator that loads the partition replays the records (`adopt`): the group survives a move.
A member's topics are its names plus what its regex matched (`regex`: resolved in the heartbeat that brings it,
again in the background when topics come and go or the group is loaded).

Timers: each heartbeat restarts the member's session (`group.consumer.session.timeout.ms`); a member asked to
revoke must acknowledge within its rebalance timeout. Either expiry fences the member: it leaves the group, its
partitions are free, the group epoch moves.

It coordinates the consumer groups of the `__consumer_offsets` partitions this broker leads (the classic
coordinator's ownership, `check_group`); `on_resign` drops them. This module must never speak the wire protocol.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from typing import Awaitable, Callable, Collection, Iterable

from kelp.errors import ErrorCode

from ..append_errors import group_write_error_code
from ..coordinator_config import CoordinatorConfig, Scheduler, TimerHandle
from ..group_metadata_manager import GroupMetadataManager
from ..placement import OFFSETS_TOPIC
from . import offset_rules, records
from .assignors import ASSIGNORS, MemberSubscription
from .heartbeat import HeartbeatRequest, HeartbeatResult, invalid_request
from .model import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    TopicView,
    member_topics,
    next_assignment,
    subset,
)
from .regex import InvalidPattern, RegexRefresh, TopicFilter, invalid_message, resolve

__all__ = ["ConsumerGroups", "ConsumerGroupDescription"]

log = logging.getLogger("kelp.broker.groups")


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
        # A group's own value of consumer.session.timeout.ms / consumer.heartbeat.interval.ms (its GROUP config
        # resource, clamped to the broker's bounds), None without one: set by `groups.attach`, read at each use.
        self.group_setting: Callable[[str, str], int | None] = lambda _group, _key: None
        self.scheduler = scheduler
        self.topics = topics
        self.groups: dict[str, ConsumerGroup] = {}
        self._sessions: dict[tuple[str, str], TimerHandle] = {}
        self._revocations: dict[tuple[str, str], TimerHandle] = {}
        # One change of a group at a time: a change is decided, written, then applied, and the next one is
        # decided on what the previous applied (heartbeats, leaves and timer-driven fencing alike).
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Regex subscriptions: resolved again in the background when topics come and go (`topics_changed`), with
        # the DESCRIBE filter of the member that last subscribed with each regex.
        self._regex_refresh = RegexRefresh(self._refresh_regexes)
        self._regex_filters: dict[str, dict[str, TopicFilter | None]] = {}  # group -> regex -> filter
        # Online migration (`migration.ClassicBridge` sets them): converting a classic group with members on the
        # first heartbeat (None: converted; else the answer), and a fencing that may turn the group back into a
        # classic group (None: not a downgrade; else the write's error code).
        self.upgrade: Callable[[str], Awaitable[HeartbeatResult | None]] = _no_upgrade
        self.downgrade: Callable[[ConsumerGroup, str], Awaitable[int | None]] = _no_downgrade

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------------------
    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        bad = invalid_request(req, self.config.consumer_assignors)
        if bad is not None:
            return HeartbeatResult(bad[0], bad[1])
        err = self.gm.check_group(req.group_id)
        if err:
            return HeartbeatResult(err)
        async with self._lock(req.group_id):
            err = self.gm.check_group(req.group_id)  # the partition may have moved while this waited
            if err:
                return HeartbeatResult(err)
            # A classic group with members becomes a consumer group when the policy and the group allow it
            # (`migration.upgrade`, Kafka's getOrMaybeCreateConsumerGroup), else GROUP_ID_NOT_FOUND. Under the lock
            # a classic JoinGroup also passes through (`delete`, `migration.join`).
            classic = self.gm.groups.get(req.group_id)
            if classic is not None and classic.members:
                upgrade = self.upgrade if req.member_epoch == 0 else _no_upgrade
                if (refused := await upgrade(req.group_id)) is not None:
                    return refused
            return await self._heartbeat(req)

    def _lock(self, group_id: str) -> asyncio.Lock:
        return self._locks.setdefault(group_id, asyncio.Lock())

    async def _heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        group = self.groups.get(req.group_id)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return await self._leave(group, req)
        if group is None:
            if req.member_epoch != 0:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                       f"Member {req.member_id} is not a member of group {req.group_id}.")
            group = ConsumerGroup(req.group_id)
        found = self._member_for(group, req)
        if isinstance(found, HeartbeatResult):
            return found
        member, replaced = found
        return await self._step(group, req, member, replaced)

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
                if old.member_epoch != STATIC_LEAVE_EPOCH and old.classic is None:  # a classic one is replaced
                    return HeartbeatResult(ErrorCode.UNRELEASED_INSTANCE_ID,
                                           f"Static member {holder} with instance id {req.instance_id} is not "
                                           "released yet.")
                # The instance comes back as a new member id: it takes over the old one's assignment.
                return replace(old, member_id=member_id), holder
            if member_id not in group.members:  # a known one is checked below, its epoch too (as Kafka)
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

    async def _step(self, group: ConsumerGroup, req: HeartbeatRequest, member: ConsumerMember,
                    replaced: str | None) -> HeartbeatResult:
        gid = group.group_id
        regex = member.subscribed_topic_regex
        if req.subscribed_topic_regex is not None:  # "" clears it (librdkafka sends "" with topic names)
            regex = req.subscribed_topic_regex or None
        updated = replace(
            member,
            subscribed_topic_regex=regex,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names)))
            if req.subscribed_topic_names is not None else member.subscribed_topic_names,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            client_id=req.client_id, client_host=req.client_host, classic=req.classic,  # None: a consumer heartbeat
        )
        # -- the group epoch: membership, subscriptions, subscribed topics ------------------------------------
        members = dict(group.members)
        if replaced is not None:
            members.pop(replaced, None)
        is_new = member.member_id not in group.members and replaced is None
        members[updated.member_id] = updated
        # -- the regexes: one new to the group is resolved now (off the loop), once, for every member using it --
        resolved = dict(group.resolved_regexes)
        if regex is not None and regex not in resolved:
            try:
                resolved[regex] = await resolve(regex, self._topic_names(), req.topic_filter)
            except InvalidPattern as exc:
                return HeartbeatResult(ErrorCode.INVALID_REGULAR_EXPRESSION, invalid_message(regex, exc))
        in_use = {m.subscribed_topic_regex for m in members.values() if m.subscribed_topic_regex}
        resolved = {rx: ts for rx, ts in resolved.items() if rx in in_use}
        metadata = self._subscribed_topics(members.values(), resolved)
        bump = (is_new or updated.subscribed_topic_names != member.subscribed_topic_names
                or updated.subscribed_topic_regex != member.subscribed_topic_regex
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
            subs = {m.member_id: MemberSubscription(frozenset(metadata[t][0] for t in member_topics(m, resolved)
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
        # -- write the change as Kafka's records, then apply it (nothing above changed the group) ---------------
        fresh = is_new or replaced is not None
        recs: list[records.Record] = records.member_tombstones(gid, replaced) if replaced is not None else []
        if fresh or records.member_fields(updated) != records.member_fields(member):
            recs.append(records.member_record(gid, reconciled))
        if metadata != group.subscribed_topics:
            recs.append(records.subscription_record(gid, metadata))
        if group_epoch != group.group_epoch or gid not in self.groups:
            recs.append(records.group_epoch_record(gid, group_epoch))
        if assignment_epoch != group.assignment_epoch:
            recs += [records.target_member_record(gid, m, a) for m, a in sorted(target.items())
                     if a != group.target.get(m)]
            recs.append(records.target_epoch_record(gid, assignment_epoch))
        elif replaced is not None and mid in target:
            recs.append(records.target_member_record(gid, mid, target[mid]))
        if fresh or records.assignment_fields(reconciled) != records.assignment_fields(member):
            recs.append(records.current_assignment_record(gid, reconciled))
        err = await self._write(gid, recs)
        if err:
            return HeartbeatResult(err)
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
        group.resolved_regexes = resolved
        filters = self._regex_filters.setdefault(gid, {})
        if regex is not None and (regex != member.subscribed_topic_regex or req.topic_filter is not None):
            filters[regex] = req.topic_filter
        for rx in [rx for rx in filters if rx not in resolved]:
            del filters[rx]
        group.put_member(reconciled)
        self._restart_session(group, mid)
        self._watch_revocation(group, member, reconciled)
        if bump or reconciled.member_epoch != member.member_epoch or replaced is not None:
            log.info("consumer group '%s': member %s at epoch %d (%s), group epoch %d", gid, mid,
                     reconciled.member_epoch, reconciled.state.value, group_epoch)
        full = req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None and req.owned is not None
        send = req.member_epoch == 0 or full or reconciled.assigned != member.assigned
        return HeartbeatResult(ErrorCode.NONE, None, mid, reconciled.member_epoch, self._heartbeat_ms(gid),
                               dict(reconciled.assigned) if send else None)

    def _subscribed_topics(self, members: Iterable[ConsumerMember],
                           resolved: dict[str, frozenset[str]]) -> dict[str, tuple[str, int]]:
        names = {t for m in members for t in member_topics(m, resolved)}
        out: dict[str, tuple[str, int]] = {}
        for name in sorted(names):
            info = self.topics.get(name)
            if info is not None and info.partitions > 0:
                out[name] = (info.topic_id, info.partitions)
        return out

    def _topic_names(self) -> list[str]:
        return [t.name for t in self.topics.list_topics()]

    # -- regex subscriptions: resolved again when topics come and go -------------------------------------------
    async def regexes_settled(self, timeout_s: float = 10.0) -> None:
        """Wait (bounded) for the background resolutions under way (tests, shutdown)."""
        await self._regex_refresh.settled(timeout_s)

    def topics_changed(self) -> None:
        """A topic was created or deleted: every group subscribed with a regex resolves its regexes again (in the
        background, one pass at a time per group)."""
        for gid, group in list(self.groups.items()):
            if group.regexes():
                self._regex_refresh.request(gid)

    async def _refresh_regexes(self, gid: str) -> None:
        """Match the group's regexes against the topics now; when what they match changed, write the group's new
        subscribed topics and bump its epoch (the next heartbeat computes the new target), as Kafka's
        handleRegularExpressionsResult."""
        group = self.groups.get(gid)
        if group is None:
            return
        names = self._topic_names()
        fresh: dict[str, frozenset[str]] = {}
        for rx in sorted(group.regexes()):
            try:
                fresh[rx] = await resolve(rx, names, self._regex_filters.get(gid, {}).get(rx))
            except InvalidPattern:  # refused when subscribed; a replayed one matches nothing
                fresh[rx] = frozenset()
        async with self._lock(gid):
            if self.groups.get(gid) is not group or self.gm.check_group(gid):
                return
            resolved = {rx: fresh.get(rx, group.resolved_regexes.get(rx, frozenset())) for rx in group.regexes()}
            if resolved == group.resolved_regexes:
                return
            metadata = self._subscribed_topics(group.members.values(), resolved)
            epoch = group.group_epoch + 1
            recs = [records.subscription_record(gid, metadata)] if metadata != group.subscribed_topics else []
            err = await self._write(gid, [*recs, records.group_epoch_record(gid, epoch)])
            if err:
                log.warning("consumer group '%s': the new matches of its regexes were not written (error %d); "
                            "the next topic change resolves them again", gid, err)
                return
            group.resolved_regexes = resolved
            group.subscribed_topics = metadata
            group.group_epoch = epoch
            log.info("consumer group '%s': regexes now match %s; group epoch %d", gid,
                     {rx: sorted(ts) for rx, ts in sorted(resolved.items())}, epoch)

    def _preferred_assignor(self, members: Iterable[ConsumerMember]) -> str:
        """The assignor most members name (ties: the configured order), else the first configured."""
        order = self.config.consumer_assignors
        votes = Counter(m.server_assignor for m in members if m.server_assignor)
        if not votes:
            return order[0]
        return max(votes, key=lambda a: (votes[a], -order.index(a)))

    async def write_records(self, group_id: str, recs: list[tuple[bytes, bytes | None]]) -> int:
        """`_write` for the share groups kept in the same partitions (`groups.share.membership`)."""
        return await self._write(group_id, recs)

    async def _write(self, group_id: str, recs: list[records.Record]) -> int:
        """Append `recs` to the group's `__consumer_offsets` partition; NONE when they are durable in this
        leadership term, else the error to answer (the change is then not applied: the next coordinator replays
        whatever was written)."""
        if not recs:
            return ErrorCode.NONE
        partition = self.gm.partition_for(group_id)
        token = self.gm.ownership.token(partition)
        try:
            await self.gm.store.append(partition, recs)
        except Exception as exc:
            moved = self.gm.ownership.token(partition) != token
            code = ErrorCode.NOT_COORDINATOR if moved else group_write_error_code(exc)
            log.warning("writing consumer group '%s' to %s-%d failed (answering error %d): %s", group_id,
                        OFFSETS_TOPIC, partition, code, exc, exc_info=getattr(exc, "code", None) is None)
            return code
        return ErrorCode.NONE if self.gm.ownership.token(partition) == token else ErrorCode.NOT_COORDINATOR

    # -- leaving ---------------------------------------------------------------------------------------------
    async def _leave(self, group: ConsumerGroup | None, req: HeartbeatRequest) -> HeartbeatResult:
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
            left = replace(member, member_epoch=STATIC_LEAVE_EPOCH, previous_member_epoch=member.member_epoch)
            err = await self._write(gid, [records.current_assignment_record(gid, left)])
            if err:
                return HeartbeatResult(err)
            group.put_member(left)
            self._cancel_revocation(gid, req.member_id)
            log.info("consumer group '%s': static member %s (%s) left for now", gid, req.member_id,
                     member.instance_id)
        else:
            err = await self._fence(group, req.member_id, "left the group")
            if err:
                return HeartbeatResult(err)
        return HeartbeatResult(ErrorCode.NONE, None, req.member_id, req.member_epoch, self._heartbeat_ms(gid))

    async def _fence(self, group: ConsumerGroup, member_id: str, why: str, may_downgrade: bool = True) -> int:
        """Remove a member (left, session expired, revocation not acknowledged): its partitions are free and
        the group epoch moves, so the next heartbeat computes a new target. The caller holds the group's lock."""
        gid = group.group_id
        if member_id not in group.members:
            return ErrorCode.NONE
        if may_downgrade and (downgraded := await self.downgrade(group, member_id)) is not None:
            return downgraded
        err = await self._write(gid, [*records.member_tombstones(gid, member_id),
                                      records.group_epoch_record(gid, group.group_epoch + 1)])
        if err:
            return err
        self._cancel_timers(gid, member_id)
        group.remove_member(member_id)
        group.group_epoch += 1
        log.info("consumer group '%s': member %s %s; group epoch %d", gid, member_id, why, group.group_epoch)
        return ErrorCode.NONE

    # -- timers ----------------------------------------------------------------------------------------------
    def _heartbeat_ms(self, group_id: str) -> int:
        own = self.group_setting(group_id, "consumer.heartbeat.interval.ms")
        return own if own is not None else self.config.consumer_heartbeat_interval_ms

    def _restart_session(self, group: ConsumerGroup, member_id: str) -> None:
        key = (group.group_id, member_id)
        old = self._sessions.pop(key, None)
        if old is not None:
            old.cancel()
        classic = group.members[member_id].classic if member_id in group.members else None
        own = self.group_setting(group.group_id, "consumer.session.timeout.ms")  # the group's config, else the broker's
        self._sessions[key] = self.scheduler.call_later(
            classic.session_timeout_ms if classic is not None
            else own if own is not None else self.config.consumer_session_timeout_ms,
            self._expiry(group, member_id, self._sessions, "session expired", lambda m: True))

    def _watch_revocation(self, group: ConsumerGroup, before: ConsumerMember, after: ConsumerMember) -> None:
        key = (group.group_id, after.member_id)
        if after.state is not MemberState.UNREVOKED_PARTITIONS or after.classic is not None:
            self._cancel_revocation(*key)  # a classic member has join and sync deadlines instead (`migration`)
        elif before.state is not MemberState.UNREVOKED_PARTITIONS or key not in self._revocations:
            epoch = after.member_epoch

            def still_revoking(m: ConsumerMember) -> bool:
                return m.state is MemberState.UNREVOKED_PARTITIONS and m.member_epoch == epoch

            self._revocations[key] = self.scheduler.call_later(
                after.rebalance_timeout_ms,
                self._expiry(group, after.member_id, self._revocations, "did not revoke its partitions in time",
                             still_revoking))

    def _expiry(self, group: ConsumerGroup, member_id: str, timers: dict[tuple[str, str], TimerHandle],
                why: str, still: Callable[[ConsumerMember], bool]) -> Callable[[], None]:
        """The callback of a member's timer: fences it (a task: the fencing is written first) unless, once the
        group's lock is held, the group moved, the member left, a newer timer replaced this one, or `still`
        says the reason is gone."""
        key = (group.group_id, member_id)

        async def expire() -> None:
            async with self._lock(group.group_id):
                member = group.members.get(member_id)
                if self.groups.get(group.group_id) is group and member is not None and key not in timers \
                        and still(member):
                    await self._fence(group, member_id, why)

        def fire() -> None:
            timers.pop(key, None)
            task = asyncio.get_running_loop().create_task(expire())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

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
    async def delete(self, group_id: str) -> int:
        """DeleteGroups of a consumer group: NON_EMPTY_GROUP while it has members; else its records are
        tombstoned and it is forgotten (the caller removes its offsets). GROUP_ID_NOT_FOUND when there is none,
        answered once no heartbeat of that group id is under way."""
        if group_id not in self.groups and group_id not in self._locks:
            return ErrorCode.GROUP_ID_NOT_FOUND  # no heartbeat ever came for it: nothing can be in flight
        async with self._lock(group_id):
            group = self.groups.get(group_id)
            if group is None:
                return ErrorCode.GROUP_ID_NOT_FOUND
            if group.members:
                return ErrorCode.NON_EMPTY_GROUP
            err = await self._write(group_id, records.group_tombstones(group_id))
            if err:
                return err
            if self.groups.get(group_id) is group:
                del self.groups[group_id]
                self._regex_filters.pop(group_id, None)
            log.info("consumer group '%s' deleted", group_id)
            return ErrorCode.NONE

    def adopt(self, groups: dict[str, ConsumerGroup]) -> None:
        """A loaded partition's consumer groups (replayed from their records): served from now on, each member's
        session starting now (a member that does not heartbeat to this coordinator is fenced after it)."""
        for gid, group in groups.items():
            group.assignor = self._preferred_assignor(group.members.values()) if group.members else ""
            self.groups[gid] = group
            for mid in group.members:
                self._restart_session(group, mid)
            if group.regexes():
                self._regex_refresh.request(gid)
            log.info("consumer group '%s' loaded: group epoch %d, %d member(s)", gid, group.group_epoch,
                     len(group.members))

    def on_resign(self, partition: int) -> None:
        """This broker no longer leads `partition`: forget its consumer groups and their timers."""
        for gid in [g for g in self.groups if self.gm.partition_for(g) == partition]:
            group = self.groups.pop(gid)
            for mid in list(group.members):
                self._cancel_timers(gid, mid)
            self._locks.pop(gid, None)
            self._regex_filters.pop(gid, None)

    def stop(self) -> None:
        self._regex_refresh.stop()
        for handle in [*self._sessions.values(), *self._revocations.values()]:
            handle.cancel()
        self._sessions.clear()
        self._revocations.clear()
        for task in self._tasks:
            task.cancel()

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

    def commit_error(self, group_id: str, member_id: str, member_epoch: int, api_version: int,
                     partitions: Collection[tuple[str, int]] = ()) -> int | dict[tuple[str, int], int] | None:
        """None when `group_id` is not a consumer group here, else `offset_rules.commit_error`'s answer."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        ids = {name: t.topic_id for name in {n for n, _ in partitions} if (t := self.topics.get(name)) is not None}
        err = offset_rules.commit_error(group, member_id, member_epoch, api_version, partitions, ids)
        if (isinstance(err, dict) or err == ErrorCode.NONE) and member_id in group.members:
            self._restart_session(group, member_id)  # a commit is a sign of life, as a classic commit is
        return err

    def fetch_error(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        group = self.groups.get(group_id)
        return ErrorCode.NONE if group is None else offset_rules.fetch_error(group, member_id, member_epoch)


async def _no_upgrade(group_id: str) -> HeartbeatResult | None:
    return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")


async def _no_downgrade(group: ConsumerGroup, member_id: str) -> int | None:
    return None
