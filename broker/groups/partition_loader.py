"""Loading and unloading `__consumer_offsets` partitions as this broker gains and loses their leadership.

Why: a broker coordinates exactly the groups of the `__consumer_offsets`
partitions it leads. When elected it must rebuild those groups by replaying
the partition (Kafka's GroupMetadataManager.loadGroupsAndOffsets) before
serving them, without blocking the event loop: the partition is marked
loading at once (its groups get COORDINATOR_LOAD_IN_PROGRESS), the log is
read and folded in a worker thread (`decode_partition`, pure), and the result
is applied on the loop only if the leadership term that started the load is
still current. When it resigns, the partition's groups leave the cache and
their parked requests are answered (through the coordinator's callback).

This module must never decide group membership or write `__consumer_offsets`;
it reads the log through the store and only fills or empties the cache of
`GroupMetadataManager`. It must never import `group_coordinator`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .consumer.model import ConsumerGroup
from .consumer.records import RecordKey, record_key_of
from .consumer.records import replay as replay_consumer_groups
from .coordinator_config import Scheduler
from .group import CommittedOffset, Group, GroupState, Member
from .group_metadata_manager import GroupMetadataManager
from .offsets_log import (
    GroupValue,
    OffsetKey,
    OffsetValue,
    ReplayItem,
    TxnMarker,
    TxnRecord,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from .ownership_changes import OwnershipChanges
from .placement import OFFSETS_TOPIC

__all__ = ["PartitionLoader", "LoadedPartition", "decode_partition", "restore_group"]

log = logging.getLogger("kelp.broker.groups")


@dataclass
class LoadedPartition:
    """What replaying one `__consumer_offsets` partition found: the newest record per key (None: tombstone)."""

    partition: int
    records: int = 0
    offsets: dict[OffsetKey, OffsetValue | None] = field(default_factory=dict)
    metas: dict[str, GroupValue | None] = field(default_factory=dict)
    # The replay position of each offset's newest record (a transaction's offsets win only if written later).
    order: dict[OffsetKey, int] = field(default_factory=dict)
    # TxnOffsetCommit records whose transaction has no marker yet: producer id -> key -> (value, position).
    pending: dict[int, dict[OffsetKey, tuple[OffsetValue, int]]] = field(default_factory=dict)
    # KIP-848 consumer groups rebuilt from their records (consumer.records), handed to `on_consumer_groups`.
    consumer_groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    # KIP-932 share groups rebuilt from their records (share.records), handed to `on_share_groups`.
    share_groups: dict[str, Any] = field(default_factory=dict)

    def group_ids(self) -> set[str]:
        return ({k.group for k, v in self.offsets.items() if v is not None}
                | {g for g, m in self.metas.items() if m is not None} | set(self.consumer_groups))


def restore_group(group_id: str, meta: GroupValue) -> Group:
    """The classic group a GroupMetadataValue describes, as Kafka's GroupMetadataManager.replay rebuilds it.

    Kafka writes the record when a generation's assignment is stored (the leader's SyncGroup), when a rebalance
    ends with no members, and when a static member is replaced: so it always holds a completed generation, and the
    group comes back Stable at it (Empty without members) with its leader, protocol and members. A member knows
    only the group's selected protocol (the record keeps that subscription alone), with its stored assignment and
    group.instance.id. Its session is not started here: the coordinator starts every member's afresh once the
    partition is loaded (`GroupMembership.on_group_loaded`, Kafka's onLoaded).
    """
    group = Group(group_id, generation=meta.generation, protocol_type=meta.protocol_type or None,
                  protocol_name=meta.protocol, state_timestamp_ms=meta.current_state_timestamp)
    if meta.members and not meta.protocol:
        log.warning("group '%s': its stored generation %d has %d member(s) but no protocol; loaded without them",
                    group_id, meta.generation, len(meta.members))
        return group
    for m in meta.members:
        group.add(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                         m.rebalance_timeout_ms, meta.protocol_type, [(meta.protocol or "", m.subscription)],
                         assignment=m.assignment, is_new=False))
    if group.members:
        group.protocol_type = meta.protocol_type or None
        if meta.leader in group.members:
            group.leader_id = meta.leader
        group.state = GroupState.STABLE
    return group


def decode_partition(partition: int, records: Iterable[ReplayItem]) -> LoadedPartition:
    """Fold a partition's records into the newest value per key (runs in a worker thread while reading the log).

    Transactional offset commits stay pending per producer id until a marker of the producer: COMMIT makes
    them the newest value of their keys unless a plain commit was written after them; ABORT drops them.
    """
    from .share.records import replay as replay_share_groups  # the share package imports the coordinator
    from .share.records import share_record_key_of

    out = LoadedPartition(partition)
    consumer: dict[RecordKey, bytes | None] = {}
    share: dict[RecordKey, bytes | None] = {}
    for position, item in enumerate(records):
        if isinstance(item, TxnMarker):
            pending = out.pending.pop(item.producer_id, {})
            if item.commit:
                for pending_key, (pending_value, at) in pending.items():
                    if at > out.order.get(pending_key, -1):
                        out.offsets[pending_key], out.order[pending_key] = pending_value, at
            continue
        out.records += 1
        producer_id = item.producer_id if isinstance(item, TxnRecord) else None
        key_bytes, value_bytes = (item.key, item.value) if isinstance(item, TxnRecord) else item
        if key_bytes is None:
            continue
        try:
            consumer_key = record_key_of(key_bytes)
            if consumer_key is not None:
                consumer[consumer_key] = value_bytes
                continue
            share_key = share_record_key_of(key_bytes)
            if share_key is not None:
                share[share_key] = value_bytes
                continue
            key = decode_key(key_bytes)
            if isinstance(key, OffsetKey):
                value = decode_offset_value(value_bytes) if value_bytes is not None else None
                if producer_id is not None:
                    if value is not None:
                        out.pending.setdefault(producer_id, {})[key] = (value, position)
                else:
                    out.offsets[key], out.order[key] = value, position
            else:
                out.metas[key.group] = decode_group_value(value_bytes) if value_bytes is not None else None
        except ValueError as exc:
            log.warning("skipping unreadable record in %s-%d: %s", OFFSETS_TOPIC, partition, exc)
    try:
        out.consumer_groups = replay_consumer_groups(consumer)
    except ValueError as exc:
        log.warning("skipping unreadable consumer-group records in %s-%d: %s", OFFSETS_TOPIC, partition, exc)
    try:
        out.share_groups = replay_share_groups(share)
    except ValueError as exc:
        log.warning("skipping unreadable share-group records in %s-%d: %s", OFFSETS_TOPIC, partition, exc)
    return out


class PartitionLoader:
    def __init__(
        self,
        manager: GroupMetadataManager,
        *,
        scheduler: Scheduler,
        on_group_unloaded: Callable[[Group], None],
        on_group_loaded: Callable[[Group], None] = lambda group: None,
    ) -> None:
        self.manager = manager
        self.config = manager.config
        self.scheduler = scheduler
        # Called for each group dropped on resignation (the coordinator stops its timers and parked requests).
        self.on_group_unloaded = on_group_unloaded
        # Called for each classic group a load restored (the coordinator starts its members' sessions).
        self.on_group_loaded = on_group_loaded
        # Called once a partition's replay is applied (transaction completions that waited for it take effect).
        self.on_partition_loaded: Callable[[int], None] = lambda partition: None
        # Takes the partition's KIP-848 consumer groups (the coordinator's `consumer.adopt`).
        self.on_consumer_groups: Callable[[dict[str, ConsumerGroup]], None] = lambda groups: None
        # Takes the partition's KIP-932 share groups (the share groups' `membership.adopt`, once built).
        self.on_share_groups: Callable[[dict[str, Any]], None] = lambda groups: None
        from .share import records  # noqa: F401  (imported on the loop's thread: a load's worker finds it loaded)
        self._changes = OwnershipChanges()
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        self._stopped = False

    def on_become_leader(self, partition: int, epoch: int) -> "asyncio.Future[None]":
        """This broker now leads `partition` at `epoch`: load its groups, then coordinate them.

        Synchronous up to the returned future: the partition is marked loading at
        once (its groups get COORDINATOR_LOAD_IN_PROGRESS, not NOT_COORDINATOR),
        the replay runs in a worker thread, its result is applied on the loop.
        Await the future to wait for the load. A stale or repeated election does
        nothing (the future is already done, or is the running load's).
        """
        token = self.manager.ownership.begin_load(partition, epoch)
        if token is None:
            running = self._load_tasks.get(partition)
            if running is not None and not running.done():
                return running
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        log.info("__consumer_offsets-%d: leader at epoch %d; loading its groups", partition, epoch)
        self._changes.notify()
        task = asyncio.get_running_loop().create_task(
            self._load_partition(partition, token), name=f"load-{OFFSETS_TOPIC}-{partition}"
        )
        self._load_tasks[partition] = task
        return task

    def on_resign(self, partition: int, epoch: int) -> None:
        """This broker no longer leads `partition` (epoch of the event): drop its groups.

        Their timers stop; parked JoinGroup/SyncGroup requests answer NOT_COORDINATOR
        so the clients find the new coordinator. A resignation older than the
        newest election seen is ignored.
        """
        if not self.manager.ownership.resign(partition, epoch):
            return
        task = self._load_tasks.pop(partition, None)
        if task is not None and not task.done():
            task.cancel()
        dropped = self.manager.remove_groups_for_partition(partition, self.on_group_unloaded)
        log.info("__consumer_offsets-%d: no longer leader (epoch %d); unloaded %d group(s)", partition, epoch, dropped)
        self._changes.notify()

    async def _load_partition(self, partition: int, token: int) -> None:
        ownership, store = self.manager.ownership, self.manager.store
        while True:
            try:
                loaded = await asyncio.to_thread(lambda: decode_partition(partition, store.replay(partition)))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("loading __consumer_offsets-%d failed; retrying in %d ms", partition,
                              self.config.load_retry_ms)
                retry: asyncio.Future[None] = asyncio.get_running_loop().create_future()

                def wake(retry: asyncio.Future[None] = retry) -> None:
                    if not retry.done():
                        retry.set_result(None)

                self.scheduler.call_later(self.config.load_retry_ms, wake)
                await retry
                if ownership.token(partition) != token:
                    return
                continue
            break
        if ownership.token(partition) != token or self._stopped:
            return  # resigned (or re-elected) while replaying: this result belongs to an ended term
        self._apply_loaded(loaded)
        ownership.finish_load(partition, token)
        if self._load_tasks.get(partition) is asyncio.current_task():
            del self._load_tasks[partition]
        log.info("__consumer_offsets-%d: loaded %d record(s), %d group(s); coordinating",
                 partition, loaded.records, len(loaded.group_ids()))
        self._changes.notify()

    async def wait_ownership_change(self, timeout_s: float) -> bool:
        """Wait (bounded) until a partition is elected, loaded or resigned; False on timeout."""
        return await self._changes.wait(timeout_s)

    def load(self, partitions: Iterable[int] | None = None, *, epoch: int = 0) -> int:
        """Own `partitions` (all by default) at once, replaying them on the calling thread.

        For stores that replay from memory (unit tests, tools); a broker uses
        `on_become_leader`, which keeps log reads off the event loop. A partition
        already owned is dropped and reloaded. Returns the records replayed.
        """
        ownership = self.manager.ownership
        parts = list(range(self.config.num_partitions)) if partitions is None else list(partitions)
        count = 0
        for p in parts:
            if ownership.token(p) is not None:
                ownership.resign(p, ownership.epoch(p) or 0)
                self.manager.remove_groups_for_partition(p, self.on_group_unloaded)
            token = ownership.begin_load(p, max(epoch, ownership.epoch(p) or 0))
            if token is None:
                continue
            loaded = decode_partition(p, self.manager.store.replay(p))
            self._apply_loaded(loaded)
            ownership.finish_load(p, token)
            count += loaded.records
        self._changes.notify()
        return count

    def _apply_loaded(self, loaded: LoadedPartition) -> None:
        groups = self.manager.groups
        restored: list[Group] = []
        for group_id, meta in loaded.metas.items():
            if meta is None:
                groups.pop(group_id, None)
                continue
            groups[group_id] = restore_group(group_id, meta)
            restored.append(groups[group_id])
        for key, value in loaded.offsets.items():
            if value is None:
                g = groups.get(key.group)
                if g is not None:
                    g.offsets.pop((key.topic, key.partition), None)
                continue
            g = groups.setdefault(key.group, Group(key.group))
            g.offsets[(key.topic, key.partition)] = CommittedOffset(
                value.offset, value.leader_epoch, value.metadata, value.commit_timestamp
            )
            g.offset_order[(key.topic, key.partition)] = loaded.order.get(key, -1)
        for producer_id, pending in loaded.pending.items():
            for key, (value, at) in pending.items():
                g = groups.setdefault(key.group, Group(key.group))
                g.pending_txn_offsets.setdefault(producer_id, {})[(key.topic, key.partition)] = (
                    CommittedOffset(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp), at)
        for group in restored:
            self.on_group_loaded(group)
        self.on_consumer_groups(loaded.consumer_groups)
        self.on_share_groups(loaded.share_groups)
        self.on_partition_loaded(loaded.partition)

    def stop(self) -> None:
        """No more loads: the running ones are cancelled and a replay finishing now is not applied."""
        self._stopped = True
        for task in self._load_tasks.values():
            task.cancel()
        self._load_tasks.clear()
