"""KIP-848's mixed groups: classic members (JoinGroup/SyncGroup) inside a consumer group, and the online upgrade
and downgrade of a group between the two protocols (`group.consumer.migration.policy`).

Why: Kafka 4 lets a group of classic consumers be rolled one by one to `group.protocol=consumer` without stopping
it (and back). Kafka's GroupMetadataManager does it this way, and so does this module:

- upgrade (`upgrade`, Kafka's convertToConsumerGroup): the first ConsumerGroupHeartbeat on a classic group with
  members (policy upgrade or bidirectional, protocol type `consumer`, no more members than group.consumer.max.size)
  turns it into a consumer group whose members are classic members at the classic generation, each subscribed to
  the topics of its ConsumerProtocolSubscription, holding (current and target assignment) its last classic
  assignment. Written as Kafka's records (ConsumerGroupMemberMetadataValue with ClassicMemberMetadata, the
  classic group's metadata tombstoned, the offsets untouched), so it survives a coordinator move. While the write
  is under way the classic group is frozen (`membership.detach`): its timers stop, its parked joins and syncs
  answer REBALANCE_IN_PROGRESS, its heartbeats too, and its syncs, leaves and joins wait for the group's lock.
- classic members of a consumer group (`join`, `sync`, `heartbeat`, `leave`; Kafka's classicGroup*ToConsumerGroup):
  a JoinGroup is one reconciliation step of the member (`ConsumerGroups._step`, with the owned partitions of its
  subscription), answered at its member epoch as the generation, without a leader; SyncGroup answers its assigned
  partitions as a ConsumerProtocolAssignment; Heartbeat answers REBALANCE_IN_PROGRESS when the member must rejoin
  (the group epoch moved, it must revoke, or the partitions it waits for are free). Revocation is the consumer
  protocol's: a partition reaches its new owner only once the old one rejoined without it. Deadlines: the
  member's own session timeout, a SyncGroup within its rebalance timeout after the join, a JoinGroup within it
  after being told to rejoin.
  A JoinGroup naming a consumer-protocol member switches it to the classic protocol, as Kafka's (the consumer
  heartbeat switches a classic member back: `ConsumerGroups._step` drops its ClassicMetadata); its deadlines
  here apply only while it is classic.
- downgrade (`downgrade`, Kafka's convertToClassicGroup): when a member is fenced or leaves (consumer protocol)
  and only classic members remain (policy downgrade or bidirectional, at most group.max.size of them), the group
  becomes a classic group at the group epoch with their assignments and rebalances; the consumer group's records
  are tombstoned and the classic group's metadata written in the same append. A classic static member replacing
  the last consumer-protocol member downgrades it at once, Stable (validateOnlineDowngradeWithReplacedMemberId).

This module must never speak the wire protocol.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from kelp.errors import ErrorCode

from ..coordinator_config import TimerHandle
from ..group import Group, GroupState, JoinResult, Member, SyncResult
from ..membership import GroupMembership
from ..offsets_log import encode_group_key
from . import records
from .assignors import Assignment
from .heartbeat import HeartbeatRequest, HeartbeatResult
from .model import ClassicMetadata, ConsumerGroup, ConsumerMember, MemberState, flatten

if TYPE_CHECKING:
    from .coordinator import ConsumerGroups

__all__ = ["ClassicBridge"]

log = logging.getLogger("kelp.broker.groups")

PROTOCOL_TYPE = "consumer"


class ClassicBridge:
    def __init__(self, consumer: ConsumerGroups, membership: GroupMembership) -> None:
        self.cg = consumer
        self.gm = consumer.gm
        self.config = consumer.config
        self.membership = membership
        self.converting: set[str] = set()  # classic groups whose upgrade is being written
        self._deadlines: dict[tuple[str, str], TimerHandle] = {}  # (group, member) -> join or sync deadline
        consumer.upgrade = self.upgrade
        consumer.downgrade = self.downgrade

    def _policy(self, direction: str) -> bool:
        return self.config.consumer_migration_policy in (direction, "bidirectional")

    # -- upgrade ---------------------------------------------------------------------------------------------
    async def upgrade(self, group_id: str) -> HeartbeatResult | None:
        """Convert the classic group `group_id` (with members) into a consumer group: None when done, else the
        heartbeat's answer (GROUP_ID_NOT_FOUND as Kafka when it may not be converted). The caller holds the
        consumer group's lock."""
        classic = self.gm.groups[group_id]
        if not self._policy("upgrade"):
            log.info("group '%s': not upgraded to a consumer group, group.consumer.migration.policy is %s", group_id,
                     self.config.consumer_migration_policy)
            return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if classic.protocol_type != PROTOCOL_TYPE or len(classic.members) > self.config.consumer_max_size:
            return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        try:
            group = self._from_classic(classic)
        except Exception as exc:  # a member's subscription or assignment does not decode
            log.warning("group '%s': not upgraded, its embedded consumer protocol is malformed: %s", group_id, exc)
            return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND,
                                   f"Cannot upgrade the classic group {group_id} to consumer group because the "
                                   "embedded consumer protocol is malformed.")
        recs: list[records.Record] = [(encode_group_key(group_id), None)]
        recs += [records.member_record(group_id, m) for m in group.members.values()]
        recs += [records.subscription_record(group_id, group.subscribed_topics),
                 records.group_epoch_record(group_id, group.group_epoch)]
        recs += [records.target_member_record(group_id, mid, a) for mid, a in sorted(group.target.items())]
        recs.append(records.target_epoch_record(group_id, group.assignment_epoch))
        recs += [records.current_assignment_record(group_id, m) for m in group.members.values()]
        self.converting.add(group_id)
        self.membership.detach(classic)
        try:
            err = await self.cg._write(group_id, recs)
        finally:
            self.converting.discard(group_id)
        if err:
            if self.gm.groups.get(group_id) is classic and not classic.is_(GroupState.DEAD):
                self.membership.reattach(classic)
            return HeartbeatResult(err)
        self.membership.hand_over(classic)
        self.cg.groups[group_id] = group
        for mid in group.members:
            self.cg._restart_session(group, mid)
        log.info("group '%s': upgraded from a classic group to a consumer group at epoch %d with %d classic "
                 "member(s)", group_id, group.group_epoch, len(group.members))
        return None

    def _from_classic(self, classic: Group) -> ConsumerGroup:
        """Kafka's ConsumerGroup.fromClassicGroup: every member Stable at the generation, holding and targeted at
        its last classic assignment (raises when a subscription or an assignment does not decode)."""
        epoch = classic.generation
        group = ConsumerGroup(classic.group_id, group_epoch=epoch, assignment_epoch=epoch)
        for m in classic.members.values():
            name = classic.protocol_name if classic.protocol_name in m.protocol_names() else m.protocols[0][0]
            sub = ConsumerProtocolSubscription.decode(m.metadata_for(name))
            assigned = self._ids([(t, ps) for t, ps in ConsumerProtocolAssignment.decode(m.assignment)
                                  .assigned_partitions or []] if m.assignment else [])
            member = ConsumerMember(
                m.member_id, member_epoch=epoch, previous_member_epoch=epoch, instance_id=m.group_instance_id,
                rack_id=getattr(sub, "rack_id", None), client_id=m.client_id, client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                subscribed_topic_names=tuple(sorted({t for t in sub.topics or [] if t})),
                assigned=assigned, assigned_at={tp: epoch for tp in flatten(assigned)},
                classic=ClassicMetadata(m.session_timeout_ms, tuple((n, bytes(b)) for n, b in m.protocols)))
            group.put_member(member)
            group.target[m.member_id] = assigned
        group.subscribed_topics = self.cg._subscribed_topics(group.members.values(), {})
        group.assignor = self.cg._preferred_assignor(group.members.values())
        return group

    def _ids(self, parts: list[Any]) -> Assignment:
        """Topic name -> partitions as topic id -> partitions (topics that do not exist are left out)."""
        out: dict[str, frozenset[int]] = {}
        for name, ps in parts:
            topic = self.cg.topics.get(name)
            if topic is not None and ps:
                out[topic.topic_id] = out.get(topic.topic_id, frozenset()) | frozenset(ps)
        return out

    def _assignment_bytes(self, member: ConsumerMember) -> bytes:
        """The member's assigned partitions as a ConsumerProtocolAssignment, at the version of its subscription."""
        assert member.classic is not None
        meta = member.classic.protocols[0][1]
        version = min(int.from_bytes(meta[:2], "big", signed=True), 3) if len(meta) >= 2 else 0
        TP = ConsumerProtocolAssignment.TopicPartition
        parts = sorted((name, sorted(ps)) for tid, ps in member.assigned.items()
                       if (name := self.cg.topics.name_of(tid)) is not None)
        return bytes(ConsumerProtocolAssignment(version=max(version, 0), user_data=None, assigned_partitions=[
            TP(topic=t, partitions=ps) for t, ps in parts]).encode())

    # -- classic requests to a consumer group -----------------------------------------------------------------
    async def join(self, group_id: str, member_id: str, *, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool) -> JoinResult | None:
        """Kafka's classicGroupJoinToConsumerGroup; None when `group_id` is no consumer group with members (the
        caller then serves it as a classic group, with nothing in between)."""
        async with self.cg._lock(group_id):
            err = self.gm.check_group(group_id)
            if err:
                return JoinResult(err, member_id=member_id)
            group = self.cg.groups.get(group_id)
            if group is None or not group.members:
                return None
            return await self._join(group, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                                    rebalance_timeout_ms, protocol_type, protocols, require_known_member_id)

    async def _join(self, group: ConsumerGroup, member_id: str, instance_id: str | None, client_id: str,
                    client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                    protocols: list[tuple[str, bytes]], require_known_member_id: bool) -> JoinResult:
        gid = group.group_id
        cfg = self.config
        if not (cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms):
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        unknown = not member_id
        mid = member_id or str(uuid.uuid4())
        holder = group.static_members.get(instance_id) if instance_id is not None else None
        if mid not in group.members and holder is None and len(group.members) >= cfg.consumer_max_size:
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=mid)
        if protocol_type != PROTOCOL_TYPE or not protocols or not self._supports(group, protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=mid)
        if unknown and require_known_member_id and instance_id is None:
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=mid)
        replaced: str | None = None
        if holder is not None and holder != mid:
            if not unknown:
                return JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=mid)
            replaced, member = holder, replace(group.members[holder], member_id=mid)
        else:
            # A consumer-protocol member named by a JoinGroup goes on as a classic member (Kafka's
            # classicGroupJoinToConsumerGroup: no protocol check on a join, unlike SyncGroup/Heartbeat/LeaveGroup).
            member = group.members.get(mid) or ConsumerMember(mid)
        try:
            sub = ConsumerProtocolSubscription.decode(protocols[0][1])
        except Exception:
            log.info("group '%s': JoinGroup of %s refused, its consumer protocol subscription is malformed", gid, mid)
            return JoinResult(ErrorCode.UNKNOWN_SERVER_ERROR, member_id=mid)
        owned = self._ids([(tp.topic, tp.partitions) for tp in getattr(sub, "owned_partitions", None) or []])
        timeout = rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms
        req = HeartbeatRequest(gid, mid, member.member_epoch, instance_id=instance_id,
                               rack_id=getattr(sub, "rack_id", None) or None, rebalance_timeout_ms=timeout,
                               subscribed_topic_names=tuple(t for t in sub.topics or [] if t), owned=owned,
                               client_id=client_id, client_host=client_host,
                               classic=ClassicMetadata(session_timeout_ms, tuple((n, bytes(b)) for n, b in protocols)))
        res = await self.cg._step(group, req, member, replaced)
        if res.error:
            return JoinResult(res.error, member_id=mid)
        # Kafka's validateOnlineDowngradeWithReplacedMemberId: a static member rejoining (or replacing the member
        # of its instance id) may leave only classic members, and the group becomes a classic group at once,
        # Stable, the joiner holding what it was just given (no rebalance). A failed write leaves the consumer
        # group as it is, the joiner in it (the next leave or fencing tries again).
        if instance_id is not None and holder is not None and await self.downgrade(
                group, replaced or "", f"static member {instance_id} rejoined as {mid}", rebalance=False) == 0:
            return JoinResult(ErrorCode.NONE, generation=res.member_epoch, protocol_type=PROTOCOL_TYPE,
                              protocol_name=protocols[0][0], leader="", member_id=mid, members=[])
        self._set_deadline(group, mid, timeout, "did not send SyncGroup in time")
        return JoinResult(ErrorCode.NONE, generation=res.member_epoch, protocol_type=PROTOCOL_TYPE,
                          protocol_name=protocols[0][0], leader="", member_id=mid, members=[])

    def _supports(self, group: ConsumerGroup, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's ConsumerGroup.supportsClassicProtocols: one of the protocols is supported by every classic
        member already in the group."""
        names = {n for n, _ in protocols}
        for m in group.members.values():
            if m.classic is not None:
                names &= {n for n, _ in m.classic.protocols}
        return bool(names)

    def _member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember | int:
        """Kafka's validateConsumerGroupMember then throwIfMemberDoesNotUseClassicProtocol: the member or the error."""
        if instance_id is not None:
            holder = group.static_members.get(instance_id)
            if holder is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if holder != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return member

    async def sync(self, group_id: str, generation: int, member_id: str, *, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None) -> SyncResult | None:
        """Kafka's classicGroupSyncToConsumerGroup; None when `group_id` is not a consumer group (after an upgrade
        under way, if one is)."""
        async with self.cg._lock(group_id):
            group = self.cg.groups.get(group_id)
            if group is None:
                return None
            member = self._member(group, member_id, group_instance_id)
            if isinstance(member, int):
                return SyncResult(member)
            assert member.classic is not None
            if generation != member.member_epoch:
                return SyncResult(ErrorCode.ILLEGAL_GENERATION)
            name = member.classic.protocols[0][0]
            if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
                    protocol_name is not None and protocol_name != name):
                return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
                self._join_deadline(group, member)
                return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
            self._cancel_deadline(group_id, member_id)
            self.cg._restart_session(group, member_id)
            return SyncResult(ErrorCode.NONE, PROTOCOL_TYPE, name, self._assignment_bytes(member))

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int | None:
        """Kafka's classicGroupHeartbeatToConsumerGroup; None when `group_id` is not a consumer group."""
        if group_id in self.converting:
            return ErrorCode.REBALANCE_IN_PROGRESS  # the group is being upgraded: rejoin (into the consumer group)
        group = self.cg.groups.get(group_id)
        if group is None:
            return None
        member = self._member(group, member_id, instance_id)
        if isinstance(member, int):
            return member
        if generation != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        self.cg._restart_session(group, member_id)
        if member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS or (
                member.state is MemberState.UNRELEASED_PARTITIONS and not self._waiting(group, member)):
            self._join_deadline(group, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    @staticmethod
    def _waiting(group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Kafka's waitingOnUnreleasedPartition: a partition of its target is still held by another member."""
        wanted = flatten(group.target.get(member.member_id, {})) - flatten(member.assigned)
        return any(group.owners.get(tp, member.member_id) != member.member_id for tp in wanted)

    async def leave(self, group_id: str,
                    members: list[tuple[str, str | None]]) -> tuple[int, list[tuple[str, str | None, int]]] | None:
        """Kafka's classicGroupLeaveToConsumerGroup; None when `group_id` is not a consumer group."""
        async with self.cg._lock(group_id):
            group = self.cg.groups.get(group_id)
            if group is None:
                return None
            out: list[tuple[str, str | None, int]] = []
            for member_id, instance_id in members:
                mid = member_id
                if instance_id is not None and not member_id:  # an admin removing a static member
                    mid = group.static_members.get(instance_id, "")
                found = self._member(group, mid, instance_id)
                if isinstance(found, int):
                    out.append((member_id, instance_id, found))
                    continue
                self._cancel_deadline(group_id, mid)
                err = await self.cg._fence(group, mid, "left the group (LeaveGroup)", may_downgrade=False)
                out.append((mid, instance_id, err))
            return ErrorCode.NONE, out

    # -- deadlines -------------------------------------------------------------------------------------------
    def _set_deadline(self, group: ConsumerGroup, member_id: str, delay_ms: int, why: str) -> None:
        self._cancel_deadline(group.group_id, member_id)
        self._deadlines[(group.group_id, member_id)] = self.cg.scheduler.call_later(
            delay_ms, self.cg._expiry(group, member_id, self._deadlines, why, lambda m: m.classic is not None))

    def _join_deadline(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """Told to rejoin: it must, within its rebalance timeout (Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent)."""
        if (group.group_id, member.member_id) not in self._deadlines:
            self._set_deadline(group, member.member_id, member.rebalance_timeout_ms, "did not rejoin in time")

    def _cancel_deadline(self, group_id: str, member_id: str) -> None:
        handle = self._deadlines.pop((group_id, member_id), None)
        if handle is not None:
            handle.cancel()

    def stop(self) -> None:
        for handle in self._deadlines.values():
            handle.cancel()
        self._deadlines.clear()

    # -- downgrade -------------------------------------------------------------------------------------------
    async def downgrade(self, group: ConsumerGroup, leaving: str, why: str = "", *,
                        rebalance: bool = True) -> int | None:
        """Kafka's validateOnlineDowngradeWithFencedMember then convertToClassicGroup: when `leaving` goes and only
        classic members remain, the group becomes a classic group (NONE, or the write's error); None when it
        stays a consumer group. The caller holds the group's lock. `rebalance`: the classic group rebalances (a
        member left), else it stays Stable (a static member was replaced: `_join`)."""
        gid = group.group_id
        rest = [m for mid, m in group.members.items() if mid != leaving]
        if not rest or any(m.classic is None for m in rest):
            return None
        if not self._policy("downgrade") or len(rest) > self.config.max_group_size:
            log.info("consumer group '%s': not downgraded to a classic group (policy %s, %d member(s))", gid,
                     self.config.consumer_migration_policy, len(rest))
            return None
        fresh = Group(gid, state=GroupState.STABLE, generation=group.group_epoch, protocol_type=PROTOCOL_TYPE)
        for m in rest:
            assert m.classic is not None
            fresh.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.classic.session_timeout_ms,
                             m.rebalance_timeout_ms, PROTOCOL_TYPE, list(m.classic.protocols),
                             assignment=self._assignment_bytes(m), is_new=False))
        fresh.protocol_name = fresh.select_protocol() if fresh.candidate_protocols() else None
        recs: list[records.Record] = []
        for mid in group.members:
            recs += records.member_tombstones(gid, mid)
        recs += records.group_tombstones(gid)
        recs.append(self.gm.group_metadata_record(fresh))
        err = await self.cg._write(gid, recs)
        if err:
            return err
        for mid in list(group.members):
            self.cg._cancel_timers(gid, mid)
            self._cancel_deadline(gid, mid)
        self.cg.groups.pop(gid, None)
        self.cg._regex_filters.pop(gid, None)
        holder = self.gm.groups.get(gid)
        if holder is None or holder.is_(GroupState.DEAD):
            holder = self.gm.groups[gid] = Group(gid)
        self.membership.take_over(holder, fresh, rebalance=rebalance)
        log.info("consumer group '%s': %s, only classic members remain; downgraded to a classic group at "
                 "generation %d", gid, why or f"member {leaving} left", fresh.generation)
        return ErrorCode.NONE
