"""The group coordinator: where every consumer-group request lands, and how its parts fit together.

Why: the Kafka handlers (`kafka/handlers/groups.py`), the HTTP APIs
(`http/admin/groups.py`, the REST consumers) and the broker's leadership and
topic events all talk to one object, `broker.groups`, as they would to
Kafka's GroupCoordinator. It answers the group and offset requests with
Kafka's rules and error codes (`kelp.errors.ErrorCode`) by driving its parts:

- `membership.GroupMembership`: JoinGroup/SyncGroup/Heartbeat/LeaveGroup, the
  rebalance state machine and its timers;
- `group_metadata_manager.GroupMetadataManager`: the cache of groups and
  offsets, and every write to `__consumer_offsets` (Kafka's GroupMetadataManager);
- `partition_loader.PartitionLoader`: loading and unloading the
  `__consumer_offsets` partitions this broker gains and loses the leadership of;
- `offsets_expiry.OffsetExpiry`: offsets.retention.minutes;
- `txn_offsets.TxnOffsets`: TxnOffsetCommit's pending offsets and the transaction markers that end them
  (`handle_txn_completion`, called by the WriteTxnMarkers handler on the partition's leader);
- `consumer.ConsumerGroups` (`consumer`): KIP-848 consumer-protocol groups (ConsumerGroupHeartbeat,
  ConsumerGroupDescribe); their offsets live in the same store, committed with member epochs.

The parts are attributes of the coordinator, and what only concerns one part is called on it (the
offsets' expiry on `expiry`, a synchronous load or waiting for an ownership change on `loader`, the
partition count on `group_manager`); the coordinator keeps the requests and the leadership events.

It coordinates only the groups of the `__consumer_offsets` partitions this
broker leads: `on_become_leader(p, epoch)` loads a partition (requests for its
groups get COORDINATOR_LOAD_IN_PROGRESS meanwhile), `on_resign(p, epoch)`
drops its groups; every other group gets NOT_COORDINATOR.

Time is injected (`clock_ms`, wall-clock milliseconds as `kelp.clock` says; `scheduler.call_later(delay_ms, fn)`)
so the unit tests drive timeouts without sleeping. Persistence is injected
(`store`: append records to / replay a partition of `__consumer_offsets`).

This module must never speak the Kafka wire protocol or HTTP (handlers
translate requests into these calls and results back into responses), and
must never grow the parts' logic back: it validates who may commit or delete
and delegates the rest.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable

from kelp.clock import WallClockMs, wall_clock_ms
from kelp.errors import ErrorCode

from .consumer.coordinator import ConsumerGroups
from .consumer.migration import ClassicBridge
from .consumer.model import TopicLike, TopicView
from .coordinator_config import CoordinatorConfig, LoopScheduler, Scheduler
from .group import CommittedOffset, Group, GroupState, Member
from .group_metadata_manager import GroupMetadataManager, OffsetStore
from .membership import GroupMembership, JoinResult, SyncResult
from .offsets_expiry import OffsetExpiry
from .ownership import PartitionOwnership
from .partition_loader import PartitionLoader
from .txn_offsets import TxnOffsets

__all__ = ["GroupCoordinator", "GroupDescription"]


class _NoTopics:
    """The topics a coordinator without a broker (unit tests of classic groups) sees: none."""

    def get(self, name: str) -> TopicLike | None:
        return None

    def name_of(self, topic_id: str) -> str | None:
        return None

    def list_topics(self) -> list[TopicLike]:
        return []

log = logging.getLogger("kelp.broker.groups")


@dataclass
class GroupDescription:
    group_id: str
    error: int
    state: str
    protocol_type: str
    protocol: str
    generation: int
    leader: str | None
    members: list[Member]


# The OffsetCommit version the consumer-protocol rules are judged at for a TxnOffsetCommit: Kafka applies no
# version rule to transactional commits (the v9 rule is OffsetCommit's), so any version from v9 on.
TXN_COMMIT_CHECK = 9

class GroupCoordinator:
    def __init__(
        self,
        config: CoordinatorConfig,
        *,
        store: OffsetStore,
        clock_ms: WallClockMs = wall_clock_ms,
        scheduler: Scheduler | None = None,
        topic_partitions: Callable[[str], int | None] | None = None,
        topics: TopicView | None = None,
    ) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.scheduler = scheduler or LoopScheduler()
        self.group_manager = GroupMetadataManager(config, store=store, clock_ms=clock_ms,
                                                  topic_partitions=topic_partitions or (lambda topic: None))
        self.membership = GroupMembership(self.group_manager, scheduler=self.scheduler)
        self.loader = PartitionLoader(self.group_manager, scheduler=self.scheduler,
                                      on_group_unloaded=self.membership.on_group_unloaded,
                                      on_group_loaded=self.membership.on_group_loaded)
        self.expiry = OffsetExpiry(self.group_manager, scheduler=self.scheduler)
        self.txn_offsets = TxnOffsets(self.group_manager)
        self.loader.on_partition_loaded = self.txn_offsets.after_load
        self.consumer = ConsumerGroups(self.group_manager, config=config, scheduler=self.scheduler,
                                       topics=topics or _NoTopics())
        self.loader.on_consumer_groups = self.consumer.adopt
        # KIP-932 share groups replayed by a load, kept until the share groups are built (`share_groups_of`), which
        # then takes the loads itself; and who drops them when this broker resigns a partition
        self.share_loaded: dict[str, Any] = {}
        self.loader.on_share_groups = self.share_loaded.update
        self.resign_hooks: list[Callable[[int], None]] = []
        self.mixed = ClassicBridge(self.consumer, self.membership)  # classic members in consumer groups
        self.expiry.in_use = lambda gid: bool((cg := self.consumer.groups.get(gid)) is not None and cg.members)
        self._stopped = False
        # Parts living on top of the coordinator (the REST proxy's HTTP consumers) stop with it.
        self.stop_hooks: list[Callable[[], Awaitable[None]]] = []
        # Per-broker objects kept with the coordinator by the modules that use it (the coordinator locator, the
        # REST consumer registry), keyed by role; each reader checks that it finds the type it keeps there.
        self.extensions: dict[str, object] = {}

    # -- the store's state, as handlers and HTTP APIs read it -----------
    @property
    def stopped(self) -> bool:
        """`stop()` has begun: nothing new starts (loads, expiry checks, deleted-topic cleanups)."""
        return self._stopped

    @property
    def groups(self) -> dict[str, Group]:
        return self.group_manager.groups

    @property
    def ownership(self) -> PartitionOwnership:
        return self.group_manager.ownership

    def partition_for(self, group_id: str) -> int:
        return self.group_manager.partition_for(group_id)

    def check_group(self, group_id: str | None) -> int:
        """NONE when this broker coordinates `group_id` now; else the Kafka error a request gets."""
        return self.group_manager.check_group(group_id)

    # -- leadership of __consumer_offsets partitions (partition_loader) --
    def on_become_leader(self, partition: int, epoch: int) -> "asyncio.Future[None]":
        """This broker now leads `partition` at `epoch`: load its groups (await the result to wait for it)."""
        return self.loader.on_become_leader(partition, epoch)

    def on_resign(self, partition: int, epoch: int) -> None:
        """This broker no longer leads `partition`: drop its groups, answer their parked requests."""
        self.loader.on_resign(partition, epoch)
        if self.ownership.token(partition) is None:
            self.txn_offsets.forget(partition)
            self.consumer.on_resign(partition)
            for gid in [g for g in self.share_loaded if self.partition_for(g) == partition]:
                del self.share_loaded[gid]
            for hook in self.resign_hooks:
                hook(partition)

    async def stop(self) -> None:
        self._stopped = True
        # No expiry check and no load starts or completes from here on.
        self.expiry.stop()
        self.loader.stop()
        for hook in self.stop_hooks:
            try:
                await hook()
            except Exception:
                log.exception("a group-coordinator stop hook failed")
        self.membership.stop()
        self.mixed.stop()
        self.consumer.stop()

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup (membership) -----
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
        if not self.group_manager.check_group(group_id):
            # A consumer-protocol group (KIP-848) with members takes the classic member (Kafka 4's mixed groups,
            # `consumer.migration`); an empty one is replaced by the classic group, its records tombstoned and its
            # offsets kept (Kafka's classicGroupJoinToClassicGroup). `delete` waits for a heartbeat (or an upgrade)
            # of the group under way, and nothing yields between an answer that the group is no consumer group with
            # members and the classic member's admission (`membership.join_group` adds it before it waits).
            err = await self.consumer.delete(group_id)
            if err == ErrorCode.NON_EMPTY_GROUP:
                mixed = await self.mixed.join(
                    group_id, member_id, group_instance_id=group_instance_id, client_id=client_id,
                    client_host=client_host, session_timeout_ms=session_timeout_ms,
                    rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type, protocols=protocols,
                    require_known_member_id=require_known_member_id)
                if mixed is not None:
                    return mixed
            elif err not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
                return JoinResult(err, member_id=member_id)
            elif err == ErrorCode.NONE:
                log.info("group '%s': the empty consumer-protocol group became a classic group", group_id)
        return await self.membership.join_group(
            group_id, member_id, group_instance_id=group_instance_id, client_id=client_id, client_host=client_host,
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type, protocols=protocols, require_known_member_id=require_known_member_id,
        )

    async def sync_group(
        self, group_id: str, generation: int, member_id: str, *,
        group_instance_id: str | None = None, protocol_type: str | None = None,
        protocol_name: str | None = None, assignments: dict[str, bytes] | None = None,
    ) -> SyncResult:
        if group_id in self.consumer.groups or group_id in self.mixed.converting:
            mixed = await self.mixed.sync(group_id, generation, member_id, group_instance_id=group_instance_id,
                                          protocol_type=protocol_type, protocol_name=protocol_name)
            if mixed is not None:
                return mixed
        return await self.membership.sync_group(
            group_id, generation, member_id, group_instance_id=group_instance_id, protocol_type=protocol_type,
            protocol_name=protocol_name, assignments=assignments,
        )

    def heartbeat(self, group_id: str, generation: int, member_id: str, *, group_instance_id: str | None = None) -> int:
        if not self.check_group(group_id):
            mixed = self.mixed.heartbeat(group_id, generation, member_id, group_instance_id)
            if mixed is not None:
                return mixed
        return self.membership.heartbeat(group_id, generation, member_id, group_instance_id=group_instance_id)

    async def leave_group(self, group_id: str,
                          members: list[tuple[str, str | None]]) -> tuple[int, list[tuple[str, str | None, int]]]:
        """Remove members; returns (top-level error, per-member errors)."""
        if not self.check_group(group_id) and (group_id in self.consumer.groups or group_id in self.mixed.converting):
            mixed = await self.mixed.leave(group_id, members)
            if mixed is not None:
                return mixed
        return self.membership.leave_group(group_id, members)

    # -- offsets --------------------------------------------------------
    async def commit_offsets(
        self, group_id: str, *, member_id: str = "", generation: int = -1,
        group_instance_id: str | None = None,
        offsets: dict[tuple[str, int], CommittedOffset], api_version: int = 9,
    ) -> dict[tuple[str, int], int]:
        """Validate the committer, then append to `__consumer_offsets` and update the cache; per-partition codes.
        For a consumer-protocol group `generation` is the member epoch (OffsetCommit v9+)."""
        def all_(code: int) -> dict[tuple[str, int], int]:
            return {tp: code for tp in offsets}

        err = self.check_group(group_id)
        if err:
            return all_(err)
        group = self.groups.get(group_id)
        consumer_error = self.consumer.commit_error(group_id, member_id, generation, api_version, offsets)
        if consumer_error is not None:
            stale: dict[tuple[str, int], int] = {}
            if isinstance(consumer_error, dict):  # an older member epoch: decided per partition (KIP-1251)
                stale = {tp: code for tp, code in consumer_error.items() if code}
                offsets = {tp: o for tp, o in offsets.items() if tp not in stale}
            elif consumer_error:
                return all_(consumer_error)
            if not offsets:
                return stale
            if group is None:  # the consumer group's offsets are kept as a classic group's, without members
                group = self.groups[group_id] = Group(group_id, state_timestamp_ms=self.clock_ms())
            return {**await self.group_manager.store_offsets(group, offsets), **stale}
        if group is None:
            if generation >= 0:
                return all_(ErrorCode.ILLEGAL_GENERATION)
            group = self.groups[group_id] = Group(group_id, state_timestamp_ms=self.clock_ms())
        elif group.is_(GroupState.DEAD):
            return all_(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        elif not (generation < 0 and group.is_(GroupState.EMPTY)):
            if group_instance_id:
                known = group.static_member_id(group_instance_id)
                if known is not None and known != member_id:
                    return all_(ErrorCode.FENCED_INSTANCE_ID)
            if group.is_(GroupState.COMPLETING_REBALANCE) and member_id in group.members:
                return all_(ErrorCode.REBALANCE_IN_PROGRESS)
            if member_id not in group.members:
                return all_(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation != group.generation:
                return all_(ErrorCode.ILLEGAL_GENERATION)
            self.membership.schedule_heartbeat(group, group.members[member_id])
        return await self.group_manager.store_offsets(group, offsets)

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None, *,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> tuple[int, dict[tuple[str, int], CommittedOffset | None]]:
        """(error, offsets); `partitions=None` means every committed partition of the group. A consumer-protocol
        member fetches at its member epoch (OffsetFetch v9+: STALE_MEMBER_EPOCH otherwise).

        Offsets a transaction committed (TxnOffsetCommit) appear once its marker is written."""
        err = self.check_group(group_id) or self.consumer.fetch_error(group_id, member_id, member_epoch)
        if err:
            return err, {}
        return ErrorCode.NONE, self.group_manager.get_offsets(group_id, partitions)

    def unstable_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """The partitions among `partitions` whose offset an open transaction still holds (OffsetFetch with
        require_stable answers them UNSTABLE_OFFSET_COMMIT, KIP-447)."""
        group = self.groups.get(group_id)
        if group is None or not group.pending_txn_offsets:
            return set()
        return {tp for tp in partitions if TxnOffsets.has_pending(group, tp)}

    # -- transactional offsets (txn_offsets) ------------------------------
    async def txn_commit_offsets(
        self, group_id: str, *, producer_id: int, producer_epoch: int, member_id: str = "",
        generation: int = -1, group_instance_id: str | None = None,
        offsets: dict[tuple[str, int], CommittedOffset],
    ) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets): the offsets are written as the producer's
        transactional batch and become visible when its transaction commits; per-partition codes."""
        def all_(code: int) -> dict[tuple[str, int], int]:
            return {tp: code for tp in offsets}

        err = self.check_group(group_id)
        if err:
            return all_(err)
        # A consumer-protocol group (KIP-848): its member and member epoch, as Kafka's
        # ConsumerGroup.validateOffsetCommit with isTransactional (no OffsetCommit version rule).
        consumer_error = self.consumer.commit_error(group_id, member_id, generation, TXN_COMMIT_CHECK, offsets)
        stale: dict[tuple[str, int], int] = {}
        if isinstance(consumer_error, dict):
            stale = {tp: code for tp, code in consumer_error.items() if code}
            offsets = {tp: o for tp, o in offsets.items() if tp not in stale}
        elif consumer_error:
            return all_(consumer_error)
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_timestamp_ms=self.clock_ms())
        if consumer_error is not None:
            if not offsets:
                return stale
            return {**await self.txn_offsets.commit(group, producer_id=producer_id, producer_epoch=producer_epoch,
                                                    offsets=offsets), **stale}
        if group.is_(GroupState.DEAD):
            return all_(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if generation >= 0 or member_id or group_instance_id:
            if group_instance_id:
                known = group.static_member_id(group_instance_id)
                if known is not None and known != member_id:
                    return all_(ErrorCode.FENCED_INSTANCE_ID)
            if member_id not in group.members:
                return all_(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation != group.generation:
                return all_(ErrorCode.ILLEGAL_GENERATION)
        return await self.txn_offsets.commit(group, producer_id=producer_id, producer_epoch=producer_epoch,
                                             offsets=offsets)

    def handle_txn_completion(self, producer_id: int, offsets_partitions: list[int], commit: bool) -> None:
        """The transaction of `producer_id` ended and its marker is written on these `__consumer_offsets`
        partitions (called by the partition leader's WriteTxnMarkers handler): its pending offsets become
        committed (commit) or are dropped (abort). A partition still loading applies it after its load."""
        self.txn_offsets.complete(producer_id, offsets_partitions, commit)

    async def delete_offsets(self, group_id: str,
                             partitions: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        err = self.check_group(group_id)
        if err:
            return err, {}
        group = self.groups.get(group_id)
        if group is not None and group.is_(GroupState.DEAD):
            group = None
        # A consumer-protocol (or mixed) group: its members' topics, names and regex matches alike, as Kafka's
        # ConsumerGroup.isSubscribedToTopic; its offsets are kept in a memberless classic Group, if it has any.
        consumer = self.consumer.groups.get(group_id)
        if consumer is None and group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if consumer is not None:
            subscribed: set[str] | None = consumer.subscribed_topic_names()
        else:
            assert group is not None
            subscribed = group.subscribed_topics() if group.members else set()
        results: dict[tuple[str, int], int] = {}
        tombstones = []
        for tp in partitions:
            if subscribed and tp[0] in subscribed:
                results[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            results[tp] = ErrorCode.NONE
            if group is not None and tp in group.offsets:
                tombstones.append(tp)
        code = await self.group_manager.remove_offsets(group, tombstones) if group is not None else ErrorCode.NONE
        if code:
            return code, {}
        return ErrorCode.NONE, results

    # -- admin ----------------------------------------------------------
    def describe_group(self, group_id: str) -> GroupDescription:
        err = self.check_group(group_id)
        group = self.groups.get(group_id) if not err else None
        if err or group is None:
            state = "Dead"
            return GroupDescription(group_id, err, state, "", "", -1, None, [])
        stable_protocol = group.protocol_name or "" if group.is_(GroupState.STABLE,
                                                                 GroupState.COMPLETING_REBALANCE) else ""
        return GroupDescription(
            group_id, ErrorCode.NONE, group.state.value, group.protocol_type or "", stable_protocol,
            group.generation, group.leader_id, list(group.members.values()),
        )

    def list_groups(self, *, states: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
        wanted = {s.lower() for s in states} if states else None
        out = []
        owned = self.ownership.owned()
        for gid, g in sorted(self.groups.items()):
            if g.is_(GroupState.DEAD) or self.partition_for(gid) not in owned or gid in self.consumer.groups:
                continue
            if wanted is not None and g.state.value.lower() not in wanted:
                continue
            out.append((gid, g.protocol_type or "", g.state.value))
        for gid, cg in sorted(self.consumer.groups.items()):
            if self.partition_for(gid) in owned and (wanted is None or cg.state.value.lower() in wanted):
                out.append((gid, "consumer", cg.state.value))
        return sorted(out)

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for gid in group_ids:
            err = self.check_group(gid)
            if err:
                out[gid] = err
                continue
            group = self.groups.get(gid)
            if gid in self.consumer.groups:  # KIP-848: its records go, then its offsets (a memberless Group)
                out[gid] = await self.consumer.delete(gid)
                if out[gid] == ErrorCode.NONE and group is not None and not group.is_(GroupState.DEAD):
                    out[gid] = await self.group_manager.remove_group(group)
                continue
            if group is None or group.is_(GroupState.DEAD):
                out[gid] = ErrorCode.GROUP_ID_NOT_FOUND
                continue
            if group.members or not group.is_(GroupState.EMPTY):
                out[gid] = ErrorCode.NON_EMPTY_GROUP
                continue
            out[gid] = await self.group_manager.remove_group(group)
        return out
