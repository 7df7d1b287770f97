"""The rebalance state machine: JoinGroup, SyncGroup, Heartbeat and LeaveGroup with Kafka's rules.

Why: consumers of every client library (kafka-python, aiokafka, librdkafka)
and the REST proxy's HTTP consumers share partitions through this one state
machine, with Kafka's semantics: delayed joins parked on futures, generation
fencing, session-timeout eviction, rebalance-timeout bounds, the initial
rebalance delay, static membership, and an assignment that is durable in
`__consumer_offsets` before any member gets it. It owns every timer of a
group (heartbeat, join, pending member) and every parked request, so it is
also what answers them when the group is unloaded or the coordinator stops.

Time is injected (`clock_ms`, wall-clock milliseconds; `scheduler.call_later(delay_ms, fn)`)
so the unit tests drive timeouts without sleeping.

This module must never write `__consumer_offsets` except through
`GroupMetadataManager.store_group`, change committed offsets, or react to
leadership of `__consumer_offsets` partitions (`partition_loader` does);
it must never speak the Kafka wire protocol or HTTP, nor import
`group_coordinator`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Callable, TypedDict, Unpack

from kelp.errors import ErrorCode

from .coordinator_config import Scheduler, TimerHandle
from .group import Group, GroupState, JoinResult, Member, SyncResult
from .group_metadata_manager import GroupMetadataManager

__all__ = ["GroupMembership", "JoinResult", "SyncResult"]

log = logging.getLogger("kelp.broker.groups")


class MemberFields(TypedDict):
    """What a JoinGroup says about the member joining (passed on as keyword arguments)."""

    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]


class GroupMembership:
    def __init__(self, manager: GroupMetadataManager, *, scheduler: Scheduler) -> None:
        self.manager = manager
        self.config = manager.config
        self.clock_ms = manager.clock_ms
        self.scheduler = scheduler
        self._timers: dict[tuple[str, str], TimerHandle] = {}  # (group, key) -> handle

    @property
    def groups(self) -> dict[str, Group]:
        return self.manager.groups

    # -- loading and unloading --------------------------------------------
    def on_group_loaded(self, group: Group) -> None:
        """A load restored the group with its members (`partition_loader.restore_group`): each member's session
        starts now, as Kafka's onLoaded reschedules every member's heartbeat, so members that go on heartbeating
        keep their generation and one that does not is expired a session timeout from now. A group bigger than
        group.max.size (lowered meanwhile) rebalances at once, as Kafka's does."""
        for m in group.members.values():
            self.schedule_heartbeat(group, m)
        if group.members:
            log.info("group '%s' loaded: %s at generation %d with %d member(s)", group.group_id, group.state.value,
                     group.generation, len(group.members))
        if len(group.members) > self.config.max_group_size:
            self._prepare_rebalance(group, f"freshly loaded with {len(group.members)} members, over group.max.size "
                                           f"{self.config.max_group_size}")

    def on_group_unloaded(self, group: Group) -> None:
        """The group left this coordinator: stop its timers; its parked requests answer NOT_COORDINATOR."""
        gid = group.group_id
        for key in [k for k in self._timers if k[0] == gid]:
            self._timers.pop(key).cancel()
        for m in group.members.values():
            m.answer_join(JoinResult(ErrorCode.NOT_COORDINATOR, member_id=m.member_id))
            m.answer_sync(SyncResult(ErrorCode.NOT_COORDINATOR))

    def stop(self) -> None:
        """Cancel every timer and answer every parked request NOT_COORDINATOR (the coordinator stops)."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for group in self.groups.values():
            for m in group.members.values():
                m.answer_join(JoinResult(ErrorCode.NOT_COORDINATOR))
                m.answer_sync(SyncResult(ErrorCode.NOT_COORDINATOR))

    # -- online migration (consumer.migration) ---------------------------
    def detach(self, group: Group) -> None:
        """An online upgrade is writing the group as a consumer group: its timers stop and its parked JoinGroup
        and SyncGroup requests answer REBALANCE_IN_PROGRESS (Kafka's convertToConsumerGroup), so its members
        rejoin; the coordinator holds or answers their other requests until the write is done."""
        for key in [k for k in self._timers if k[0] == group.group_id]:
            self._timers.pop(key).cancel()
        for m in group.members.values():
            m.answer_join(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=m.member_id))
            m.answer_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            m.join_future = m.sync_future = None
        group.pending_members.clear()

    def reattach(self, group: Group) -> None:
        """The upgrade's write failed: the group goes on as a classic group, rebalancing (its members were told
        to rejoin)."""
        for m in group.members.values():
            self.schedule_heartbeat(group, m)
        if group.is_(GroupState.PREPARING_REBALANCE):
            group.initial_delay_active = False
            self._timer(group, "join", group.max_rebalance_timeout_ms(), lambda: self._on_join_timeout(group))
        else:
            self._prepare_rebalance(group, "its online upgrade to a consumer group failed")

    def hand_over(self, group: Group) -> None:
        """The upgrade is written: the members are the consumer group's now; this group keeps the offsets."""
        group.members.clear()
        group.static_members.clear()
        group.leader_id = group.protocol_name = None
        group.initial_delay_active = False
        group.state, group.state_timestamp_ms = GroupState.EMPTY, self.clock_ms()

    def take_over(self, group: Group, fresh: Group, *, rebalance: bool = True) -> None:
        """A consumer group was downgraded to `fresh` (Stable, with its members and assignments): `group` (the one
        holding the offsets) takes its state, and rebalances unless told not to (Kafka's convertToClassicGroup:
        not when a static member's replacement downgraded it)."""
        group.members, group.static_members = fresh.members, fresh.static_members
        group.generation, group.leader_id = fresh.generation, fresh.leader_id
        group.protocol_type, group.protocol_name = fresh.protocol_type, fresh.protocol_name
        group.state, group.state_timestamp_ms = GroupState.STABLE, self.clock_ms()
        for m in group.members.values():
            self.schedule_heartbeat(group, m)
        if rebalance:
            self._prepare_rebalance(group, "downgraded from a consumer group")

    # -- timers ---------------------------------------------------------
    def _timer(self, group: Group, key: str, delay_ms: int, fn: Callable[[], None]) -> None:
        self._cancel(group, key)
        self._timers[(group.group_id, key)] = self.scheduler.call_later(delay_ms, fn)

    def _cancel(self, group: Group, key: str) -> None:
        handle = self._timers.pop((group.group_id, key), None)
        if handle is not None:
            handle.cancel()

    def schedule_heartbeat(self, group: Group, member: Member) -> None:
        """Kafka's completeAndScheduleNextHeartbeatExpiration."""
        member.heartbeat_deadline_ms = self.clock_ms() + member.session_timeout_ms
        member_id = member.member_id

        def expire() -> None:
            self._timers.pop((group.group_id, "hb:" + member_id), None)
            self._on_session_expired(group, member_id)

        self._timer(group, "hb:" + member_id, member.session_timeout_ms, expire)

    def _persist_group_soon(self, group: Group) -> None:
        asyncio.ensure_future(self.manager.store_group(group))

    # -- JoinGroup ------------------------------------------------------
    async def join_group(
        self,
        group_id: str,
        member_id: str,
        *,
        group_instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        session_timeout_ms: int,
        rebalance_timeout_ms: int = -1,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool = False,
    ) -> JoinResult:
        err = self.manager.check_group(group_id)
        if err:
            return JoinResult(err, member_id=member_id)
        if not (self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms):
            log.info(
                "group '%s': session timeout %d ms outside [%d, %d] (group.min/max.session.timeout.ms)",
                group_id, session_timeout_ms, self.config.min_session_timeout_ms, self.config.max_session_timeout_ms,
            )
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        if rebalance_timeout_ms is None or rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        protocols = [(n, bytes(m or b"")) for n, m in protocols]
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            group = self.groups[group_id] = Group(group_id, state_timestamp_ms=self.clock_ms())
        if group.is_(GroupState.DEAD):
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        loop = asyncio.get_running_loop()
        kw = MemberFields(client_id=client_id, client_host=client_host, session_timeout_ms=session_timeout_ms,
                          rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type, protocols=protocols)
        if not member_id:
            if group_instance_id:
                return await self._join_unknown_static(group, group_instance_id, loop, **kw)
            if len(group.members) + len(group.pending_members) >= self.config.max_group_size:
                return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED)
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member_id:
                group.pending_members.add(new_id)
                self._timer(group, "pending:" + new_id, session_timeout_ms,
                            lambda: self._expire_pending(group, new_id))
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
            return await self._add_member_and_rebalance(group, new_id, None, loop, **kw)
        # Known member id.
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._cancel(group, "pending:" + member_id)
            return await self._add_member_and_rebalance(group, member_id, group_instance_id, loop, **kw)
        member = group.members.get(member_id)
        if group_instance_id:
            known = group.static_member_id(group_instance_id)
            if known is not None and known != member_id:
                return JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=member_id)
        if member is None:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return await self._update_member_and_rebalance(group, member, loop, protocols, rebalance_timeout_ms,
                                                           session_timeout_ms)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            if member.same_protocols(protocols):
                # A retried join after the group moved on: answer with the current generation.
                return self._current_join_result(group, member)
            return await self._update_member_and_rebalance(group, member, loop, protocols, rebalance_timeout_ms,
                                                           session_timeout_ms)
        if group.is_(GroupState.STABLE):
            if member.member_id == group.leader_id or not member.same_protocols(protocols):
                return await self._update_member_and_rebalance(group, member, loop, protocols, rebalance_timeout_ms,
                                                               session_timeout_ms)
            return self._current_join_result(group, member)
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)

    def _current_join_result(self, group: Group, member: Member) -> JoinResult:
        self.schedule_heartbeat(group, member)
        is_leader = member.member_id == group.leader_id
        return JoinResult(
            ErrorCode.NONE, generation=group.generation, protocol_type=group.protocol_type,
            protocol_name=group.protocol_name, leader=group.leader_id or "", member_id=member.member_id,
            members=self._member_list(group) if is_leader else [],
        )

    def _member_list(self, group: Group) -> list[tuple[str, str | None, bytes]]:
        proto = group.protocol_name or ""
        return [(m.member_id, m.group_instance_id, m.metadata_for(proto)) for m in group.members.values()]

    async def _join_unknown_static(self, group: Group, instance_id: str,
                                   loop: asyncio.AbstractEventLoop, **kw: Unpack[MemberFields]) -> JoinResult:
        old_id = group.static_member_id(instance_id)
        new_id = f"{instance_id}-{uuid.uuid4()}"
        if old_id is None:
            return await self._add_member_and_rebalance(group, new_id, instance_id, loop, **kw)
        old = group.members[old_id]
        # Fence the old incarnation's parked requests.
        old.answer_join(JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id))
        old.answer_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        self._cancel(group, "hb:" + old_id)
        member = group.replace_static_member(instance_id, old_id, new_id)
        before = (member.client_id, member.client_host, member.session_timeout_ms, member.rebalance_timeout_ms,
                  member.protocols)
        member.client_id = kw["client_id"]
        member.client_host = kw["client_host"]
        member.session_timeout_ms = kw["session_timeout_ms"]
        member.rebalance_timeout_ms = kw["rebalance_timeout_ms"]
        member.protocols = kw["protocols"]
        log.info("group '%s': static member %s rejoined as %s (was %s)", group.group_id, instance_id, new_id, old_id)
        if group.is_(GroupState.STABLE) and group.protocol_name in group.candidate_protocols() \
                and group.select_protocol() == group.protocol_name:
            # Kafka's updateStaticMemberThenRebalanceOrCompleteJoin: the protocol the next generation would select
            # is the group's -> keep the generation and the assignment, no rebalance (also after a coordinator
            # move, where the restored member knows only the selected protocol and the client sends its list).
            # The new member id is answered only once it is durable: a coordinator that loads the group must know
            # it, or it would fence the member (FENCED_INSTANCE_ID). A failed write reverts to the old id.
            self.schedule_heartbeat(group, member)
            err = await self.manager.store_group(group)
            if err:
                if group.static_member_id(instance_id) == new_id and not group.is_(GroupState.DEAD):
                    (member.client_id, member.client_host, member.session_timeout_ms, member.rebalance_timeout_ms,
                     member.protocols) = before
                    self._cancel(group, "hb:" + new_id)
                    self.schedule_heartbeat(group, group.replace_static_member(instance_id, new_id, old_id))
                log.info("group '%s': static member %s stays %s: writing its new member id failed (error %d)",
                         group.group_id, instance_id, old_id, err)
                return JoinResult(err, generation=group.generation, protocol_type=group.protocol_type,
                                  protocol_name=group.protocol_name, leader=group.leader_id or "")
            return JoinResult(
                ErrorCode.NONE, generation=group.generation, protocol_type=group.protocol_type,
                protocol_name=group.protocol_name, leader=group.leader_id or "", member_id=new_id,
                members=self._member_list(group) if new_id == group.leader_id else [],
                skip_assignment=False,
            )
        return await self._update_member_and_rebalance(
            group, member, loop, kw["protocols"], kw["rebalance_timeout_ms"], kw["session_timeout_ms"]
        )

    async def _add_member_and_rebalance(
        self, group: Group, member_id: str, instance_id: str | None, loop: asyncio.AbstractEventLoop, *,
        client_id: str, client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        member = Member(member_id, instance_id, client_id, client_host, session_timeout_ms,
                        rebalance_timeout_ms, protocol_type, protocols)
        member.join_future = loop.create_future()
        group.add(member)
        fut = member.join_future
        self._maybe_prepare_rebalance(group, f"member {member_id} joined")
        self._try_complete_join(group)
        return await fut

    async def _update_member_and_rebalance(
        self, group: Group, member: Member, loop: asyncio.AbstractEventLoop,
        protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int, session_timeout_ms: int,
    ) -> JoinResult:
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        # A duplicate join from the same member replaces the parked one.
        member.answer_join(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.join_future = loop.create_future()
        fut = member.join_future
        self._cancel(group, "hb:" + member.member_id)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")
        self._try_complete_join(group)
        return await fut

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE) and group.initial_delay_active:
            self._extend_initial_delay(group)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            for m in group.members.values():
                m.assignment = b""
                m.answer_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        was_empty = group.is_(GroupState.EMPTY)
        group.transition(GroupState.PREPARING_REBALANCE, now_ms=self.clock_ms())
        log.info("group '%s': preparing rebalance at generation %d (%s)", group.group_id, group.generation, reason)
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            group.initial_delay_active = True
            budget = group.max_rebalance_timeout_ms()
            delay = min(self.config.initial_rebalance_delay_ms, budget)
            self._start_initial_delay(group, delay, budget - delay)
        else:
            group.initial_delay_active = False
            self._timer(group, "join", group.max_rebalance_timeout_ms(), lambda: self._on_join_timeout(group))
            # Like Kafka's tryCompleteElseWatch: completes at once when everyone (or no one) is in.
            self._try_complete_join(group)

    def _start_initial_delay(self, group: Group, delay_ms: int, remaining_ms: int) -> None:
        generation = group.generation

        def fire() -> None:
            self._timers.pop((group.group_id, "join"), None)
            if group.generation != generation or not group.is_(GroupState.PREPARING_REBALANCE):
                return
            if group.initial_delay_active and group.initial_delay_extend and remaining_ms > 0:
                group.initial_delay_extend = False
                step = min(self.config.initial_rebalance_delay_ms, remaining_ms)
                self._start_initial_delay(group, step, remaining_ms - step)
                return
            group.initial_delay_active = False
            self._on_join_timeout(group)

        group.initial_delay_extend = False
        self._timer(group, "join", delay_ms, fire)

    def _extend_initial_delay(self, group: Group) -> None:
        # Kafka's InitialDelayedJoin: a member arriving during the delay extends it once more.
        group.initial_delay_extend = True

    def _try_complete_join(self, group: Group) -> None:
        if group.is_(GroupState.PREPARING_REBALANCE) and not group.initial_delay_active and group.all_members_joined():
            self._cancel(group, "join")
            self._complete_join(group)

    def _on_join_timeout(self, group: Group) -> None:
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        for m in [m for m in group.members.values() if not m.awaiting_join]:
            log.info("group '%s': member %s did not rejoin within the rebalance timeout; removed", group.group_id,
                     m.member_id)
            self._remove_member(group, m, notify=False)
        for pid in list(group.pending_members):
            group.pending_members.discard(pid)
            self._cancel(group, "pending:" + pid)
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        now = self.clock_ms()
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.protocol_type = group.protocol_type if group.offsets else None
            group.leader_id = None
            group.transition(GroupState.EMPTY, now_ms=now)
            log.info("group '%s': generation %d with no members (Empty)", group.group_id, group.generation)
            self._persist_group_soon(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms=now)
        log.info(
            "group '%s': generation %d, protocol %s, leader %s, %d member(s)",
            group.group_id, group.generation, group.protocol_name, group.leader_id, len(group.members),
        )
        members = self._member_list(group)
        for m in group.members.values():
            is_leader = m.member_id == group.leader_id
            result = JoinResult(
                ErrorCode.NONE, generation=group.generation, protocol_type=group.protocol_type,
                protocol_name=group.protocol_name, leader=group.leader_id or "", member_id=m.member_id,
                members=members if is_leader else [],
            )
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(result)
            m.join_future = None
            m.is_new = False
            self.schedule_heartbeat(group, m)

    def _expire_pending(self, group: Group, member_id: str) -> None:
        self._timers.pop((group.group_id, "pending:" + member_id), None)
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            log.info("group '%s': pending member %s never joined; dropped", group.group_id, member_id)
            self._try_complete_join(group)

    # -- member removal -------------------------------------------------
    def _on_session_expired(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or member.awaiting_join:
            return
        log.info("group '%s': member %s session expired after %d ms; removing it",
                 group.group_id, member_id, member.session_timeout_ms)
        self._remove_member(group, member, notify=True)

    def _remove_member(self, group: Group, member: Member, *, notify: bool) -> None:
        self._cancel(group, "hb:" + member.member_id)
        member.answer_join(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        member.answer_sync(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if not notify:
            return
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} left")
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # -- SyncGroup ------------------------------------------------------
    async def sync_group(
        self, group_id: str, generation: int, member_id: str, *,
        group_instance_id: str | None = None, protocol_type: str | None = None,
        protocol_name: str | None = None, assignments: dict[str, bytes] | None = None,
    ) -> SyncResult:
        err = self.manager.check_group(group_id)
        if err:
            return SyncResult(err)
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group_instance_id:
            known = group.static_member_id(group_instance_id)
            if known is not None and known != member_id:
                return SyncResult(ErrorCode.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation != group.generation:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type and group.protocol_type and protocol_type != group.protocol_type) or (
            protocol_name and group.protocol_name and protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.is_(GroupState.STABLE):
            self.schedule_heartbeat(group, member)
            return SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment)
        if not group.is_(GroupState.COMPLETING_REBALANCE):
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        loop = asyncio.get_running_loop()
        member.answer_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        fut: asyncio.Future[SyncResult] = loop.create_future()
        member.sync_future = fut
        self.schedule_heartbeat(group, member)
        if member_id == group.leader_id:
            assignments = assignments or {}
            for m in group.members.values():
                m.assignment = bytes(assignments.get(m.member_id, b""))
            gen = group.generation
            err = await self.manager.store_group(group)
            if group.is_(GroupState.COMPLETING_REBALANCE) and group.generation == gen:
                if err:
                    # Kafka's resetAndPropagateAssignmentError: nobody gets an assignment that is not
                    # durable; every waiting member gets the error and the group rebalances again.
                    for m in group.members.values():
                        m.assignment = b""
                        m.answer_sync(SyncResult(err))
                        m.sync_future = None
                    self._prepare_rebalance(group, f"error {err} writing the generation {gen} assignment")
                else:
                    for m in group.members.values():
                        m.answer_sync(
                            SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, m.assignment))
                        m.sync_future = None
                    group.transition(GroupState.STABLE, now_ms=self.clock_ms())
                    log.info("group '%s': Stable at generation %d", group.group_id, gen)
        return await fut

    # -- Heartbeat / LeaveGroup ----------------------------------------
    def heartbeat(self, group_id: str, generation: int, member_id: str, *, group_instance_id: str | None = None) -> int:
        err = self.manager.check_group(group_id)
        if err:
            return err
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD, GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group_instance_id:
            known = group.static_member_id(group_instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.PREPARING_REBALANCE):
            self.schedule_heartbeat(group, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        self.schedule_heartbeat(group, member)
        return ErrorCode.NONE

    def leave_group(self, group_id: str,
                    members: list[tuple[str, str | None]]) -> tuple[int, list[tuple[str, str | None, int]]]:
        """Remove members; returns (top-level error, per-member errors)."""
        err = self.manager.check_group(group_id)
        if err:
            return err, []
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.UNKNOWN_MEMBER_ID, [(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i in members]
        out: list[tuple[str, str | None, int]] = []
        for member_id, instance_id in members:
            if instance_id:
                known = group.static_member_id(instance_id)
                if known is None:
                    out.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                    continue
                if member_id and known != member_id:
                    out.append((member_id, instance_id, ErrorCode.FENCED_INSTANCE_ID))
                    continue
                member_id = known
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._cancel(group, "pending:" + member_id)
                self._try_complete_join(group)
                out.append((member_id, instance_id, ErrorCode.NONE))
                continue
            member = group.members.get(member_id)
            if member is None:
                out.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                continue
            log.info("group '%s': member %s left", group_id, member_id)
            self._remove_member(group, member, notify=True)
            out.append((member_id, instance_id, ErrorCode.NONE))
        return ErrorCode.NONE, out
