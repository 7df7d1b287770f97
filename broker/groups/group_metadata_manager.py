"""The store of groups and committed offsets, backed by `__consumer_offsets` (Kafka's GroupMetadataManager).

Why: the groups this broker coordinates live in a cache (`groups`) that is
only ever changed after the matching record is durable in `__consumer_offsets`
(or, on load, rebuilt from it). Every write captures the leadership term of
the group's partition (`ownership`) before its append and checks it after:
a write that outlived its term answers NOT_COORDINATOR and leaves the cache
alone, because the next coordinator replays the log instead. Keeping the
writes, the cache and the group-to-partition mapping here, apart from the
rebalance rules, lets other writers (offset expiry, deleted topics, and
transactional offset commits later) use the store without the state machine.

This module must never decide membership (who may join, commit or is fenced:
that is `group_coordinator`), start timers, or interpret records beyond
`offsets_log`'s codecs. It must never import `group_coordinator`.
"""

from __future__ import annotations

import itertools
import logging
from typing import Callable, Iterable, Protocol

from kelp.clock import WallClockMs
from kelp.errors import ErrorCode

from ..loop_budget import LoopBudget
from .append_errors import commit_error_code, group_write_error_code
from .coordinator_config import CoordinatorConfig
from .group import CommittedOffset, Group, GroupState
from .offsets_log import (
    GroupValue,
    MemberValue,
    OffsetValue,
    ReplayItem,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from .ownership import PartitionOwnership, PartitionState
from .placement import OFFSETS_TOPIC, partition_for_group

__all__ = ["GroupMetadataManager", "OffsetStore", "MAX_METADATA_CHARS"]

log = logging.getLogger("kelp.broker.groups")

MAX_METADATA_CHARS = 4096  # Kafka's offset.metadata.max.bytes default


class OffsetStore(Protocol):
    """Where `__consumer_offsets` records go (one partition per call); `offsets_store.BrokerOffsetStore` on a broker.

    `append_transactional` writes TxnOffsetCommit's records as one transactional batch of the producer;
    `replay` yields the partition's records in log order, transactional ones as `TxnRecord`s and each
    control batch as a `TxnMarker`.
    """

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None: ...

    async def append_transactional(self, partition: int, records: list[tuple[bytes, bytes | None]], *,
                                   producer_id: int, producer_epoch: int) -> None: ...

    def replay(self, partition: int) -> Iterable[ReplayItem]: ...


class GroupMetadataManager:
    def __init__(
        self,
        config: CoordinatorConfig,
        *,
        store: OffsetStore,
        clock_ms: WallClockMs,
        topic_partitions: Callable[[str], int | None],
    ) -> None:
        self.config = config
        self.store = store
        self.clock_ms = clock_ms
        # topic -> partition count, None when the topic does not exist (commit validation).
        self.topic_partitions = topic_partitions
        self.groups: dict[str, Group] = {}
        # Which __consumer_offsets partitions this broker leads (loading / owned), per leadership term.
        self.ownership = PartitionOwnership()
        self._order = itertools.count(1 << 40)  # above any replay position (`offset_order`)

    def next_order(self) -> int:
        """An append order for offsets written now: after every offset replayed or written before."""
        return next(self._order)

    # -- which groups are here ------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.config.num_partitions)

    def check_group(self, group_id: str | None) -> int:
        """NONE when this broker coordinates `group_id` now; else the Kafka error a request gets."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        state = self.ownership.state(self.partition_for(group_id))
        if state is PartitionState.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if state is not PartitionState.OWNED:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    def owns_partition(self, partition: int) -> bool:
        return self.ownership.state(partition) is PartitionState.OWNED

    def adopt_partition_count(self, count: int) -> None:
        """Follow the actual partition count of `__consumer_offsets` (it wins over the config)."""
        if count <= 0 or count == self.config.num_partitions:
            return
        if self.ownership.owned() or self.ownership.loading():
            log.error(
                "%s has %d partitions but this coordinator already maps groups onto %d; "
                "keeping %d (never change the partition count of %s)",
                OFFSETS_TOPIC, count, self.config.num_partitions, self.config.num_partitions, OFFSETS_TOPIC,
            )
            return
        log.warning("%s has %d partitions; offsets.topic.num.partitions is %d; using %d",
                    OFFSETS_TOPIC, count, self.config.num_partitions, count)
        self.config.num_partitions = count

    def remove_groups_for_partition(self, partition: int, on_unloaded: Callable[[Group], None]) -> int:
        """Drop the cached groups of `partition` (no longer led here); `on_unloaded` fails their parked requests."""
        dropped = [gid for gid in self.groups if self.partition_for(gid) == partition]
        for gid in dropped:
            group = self.groups.pop(gid)
            on_unloaded(group)
            # Requests still awaiting a write on this group see it Dead and stop there.
            group.transition(GroupState.DEAD, now_ms=self.clock_ms())
        return len(dropped)

    # -- group metadata -------------------------------------------------
    def group_metadata_record(self, group: Group) -> tuple[bytes, bytes]:
        value = GroupValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=self.clock_ms(),
            members=[
                MemberValue(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.rebalance_timeout_ms, m.session_timeout_ms,
                    m.metadata_for(group.protocol_name) if group.protocol_name
                    and group.protocol_name in m.protocol_names() else b"",
                    m.assignment,
                )
                for m in group.members.values()
            ],
        )
        return encode_group_key(group.group_id), encode_group_value(value)

    async def store_group(self, group: Group) -> int:
        """Write the group's metadata record; the Kafka error a client gets if that failed (NONE if not)."""
        partition = self.partition_for(group.group_id)
        token = self.ownership.token(partition)
        try:
            await self.store.append(partition, [self.group_metadata_record(group)])
        except Exception as exc:
            moved = self.ownership.token(partition) != token
            code = ErrorCode.NOT_COORDINATOR if moved else group_write_error_code(exc)
            log.warning("writing group metadata of '%s' to %s-%d failed (answering error %d): %s",
                        group.group_id, OFFSETS_TOPIC, partition, code, exc,
                        exc_info=getattr(exc, "code", None) is None)
            return code
        return ErrorCode.NONE

    async def remove_group(self, group: Group) -> int:
        """Tombstone the group and its offsets, then forget it; the Kafka error if the write failed."""
        gid = group.group_id
        records: list[tuple[bytes, bytes | None]] = [(encode_offset_key(gid, t, p), None) for t, p in group.offsets]
        records.append((encode_group_key(gid), None))
        partition = self.partition_for(gid)
        token = self.ownership.token(partition)
        try:
            await self.store.append(partition, records)
        except Exception as exc:
            code = (ErrorCode.NOT_COORDINATOR if self.ownership.token(partition) != token
                    else group_write_error_code(exc))
            log.warning("deleting group '%s' failed (answering error %d): %s", gid, code, exc)
            return code
        if group.is_(GroupState.DEAD):  # unloaded while the tombstones were written
            return ErrorCode.NONE
        group.transition(GroupState.DEAD, now_ms=self.clock_ms())
        self.groups.pop(gid, None)
        log.info("group '%s' deleted with %d committed offset(s)", gid, len(records) - 1)
        return ErrorCode.NONE

    # -- offsets --------------------------------------------------------
    async def offset_records(
        self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset],
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], CommittedOffset], list[tuple[bytes, bytes | None]]]:
        """Check each partition of a commit (plain or transactional): (the refused ones' codes, the accepted
        offsets stamped with now where the client gave no time, their `__consumer_offsets` records). A commit of
        thousands of partitions gives the loop a turn every few milliseconds."""
        results: dict[tuple[str, int], int] = {}
        records: list[tuple[bytes, bytes | None]] = []
        accepted: dict[tuple[str, int], CommittedOffset] = {}
        now = self.clock_ms()
        budget = LoopBudget()
        for (topic, partition), co in offsets.items():
            await budget.tick()
            count = self.topic_partitions(topic)
            if count is None or not 0 <= partition < count:
                results[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if co.metadata and len(co.metadata) > MAX_METADATA_CHARS:
                results[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            co = CommittedOffset(co.offset, co.leader_epoch, co.metadata or "",
                                 now if co.commit_timestamp_ms < 0 else co.commit_timestamp_ms)
            accepted[(topic, partition)] = co
            records.append((encode_offset_key(group_id, topic, partition),
                            encode_offset_value(OffsetValue(co.offset, co.leader_epoch, co.metadata,
                                                            co.commit_timestamp_ms))))
        return results, accepted, records

    async def store_offsets(
        self, group: Group, offsets: dict[tuple[str, int], CommittedOffset],
    ) -> dict[tuple[str, int], int]:
        """Validate each partition, append to `__consumer_offsets`, then update the cache; per-partition codes.

        The caller has already decided that the committer may commit for `group`.
        """
        group_id = group.group_id
        results, accepted, records = await self.offset_records(group_id, offsets)
        if records:
            partition = self.partition_for(group_id)
            token = self.ownership.token(partition)
            try:
                await self.store.append(partition, records)
            except Exception as exc:
                moved = self.ownership.token(partition) != token
                code = ErrorCode.NOT_COORDINATOR if moved else commit_error_code(exc)
                log.warning("commit of %d offset(s) for group '%s' to %s-%d failed (answering error %d): %s",
                            len(records), group_id, OFFSETS_TOPIC, partition, code, exc,
                            exc_info=getattr(exc, "code", None) is None)
                for tp in accepted:
                    results[tp] = code
                return results
            # Durable on the in-sync replicas: acknowledged even if leadership moved meanwhile (the next
            # coordinator replays it); the cache is only this term's.
            if self.ownership.token(partition) == token:
                group.offsets.update(accepted)
                order = self.next_order()
                for tp in accepted:
                    group.offset_order[tp] = order
            for tp in accepted:
                results[tp] = ErrorCode.NONE
        return results

    def get_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], CommittedOffset | None]:
        """The cached offsets of `partitions` (None: every committed partition of the group)."""
        group = self.groups.get(group_id)
        stored = group.offsets if group is not None and not group.is_(GroupState.DEAD) else {}
        if partitions is None:
            return dict(stored)
        return {tp: stored.get(tp) for tp in partitions}

    async def remove_offsets(self, group: Group, partitions: list[tuple[str, int]]) -> int:
        """Tombstone these committed offsets, then drop them from the cache; the Kafka error if the write failed."""
        if not partitions:
            return ErrorCode.NONE
        group_id = group.group_id
        partition = self.partition_for(group_id)
        token = self.ownership.token(partition)
        try:
            await self.store.append(partition, [(encode_offset_key(group_id, t, p), None) for t, p in partitions])
        except Exception as exc:
            code = (ErrorCode.NOT_COORDINATOR if self.ownership.token(partition) != token
                    else group_write_error_code(exc))
            log.warning("deleting %d offset(s) of group '%s' failed (answering error %d): %s",
                        len(partitions), group_id, code, exc)
            return code
        for tp in partitions:
            group.offsets.pop(tp, None)
        return ErrorCode.NONE
