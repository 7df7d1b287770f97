"""What every part of the `ReplicaManager` shares, declared once: its state, its helpers, what it is handed.

Why it exists: the replica manager is split by role into mixins — the write side (`produce`),
the read side (`fetch`), the follower side and its worker-thread jobs (`follower`),
the leader's ISR proposals (`isr_changes`) — around the partition states in `manager`. Each
part works on the same fields, which `ReplicaManager.__init__` sets, and calls helpers another part
defines. Declaring them here once gives every part, and a type checker, one picture of them: a call
to a helper is checked against its real signature (mypy checks each definition against this one), as
storage's `LogState` does for the log's parts.

Also here, the narrow interfaces the manager is handed: the follower fetching (`ReplicaFetchers`, the
cluster layer's `ReplicaFetcherManager`), the controller's AlterPartition (`AlterPartition`) and the
traffic counters (`TopicCounter`). This module must never hold logic or set a value.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Awaitable, Coroutine, Protocol

from kelp.clock import WallClockMs

from ..config import BrokerConfig
from ..storage import Log, LogManager
from ..topic_manager import TopicManager
from .partition import Partition
from .replication_quota import ReplicationQuotas

__all__ = ["ReplicaState", "ReplicaFetchers", "AlterPartition", "TopicCounter", "Job"]

Job = asyncio.Task[BaseException | None]
"""A worker-thread job on a replica's log: done with None, or with what it failed with."""


class ReplicaFetchers(Protocol):
    """Follower fetching, one fetch state per partition this broker follows (`ReplicaFetcherManager`)."""

    def add(self, topic: str, partition: int, *, leader: int, leader_epoch: int) -> None: ...

    def remove(self, topic: str, partition: int) -> None: ...


class AlterPartition(Protocol):
    """Asks the controller for a partition's new ISR (`LeaderRouting.alter_partition`); raises its refusal."""

    def __call__(self, topic: str, partition: int, *, leader_epoch: int, partition_epoch: int,
                 isr: list[int]) -> Awaitable[object]: ...


class _Incrementable(Protocol):
    def inc(self, amount: float = ...) -> None: ...


class TopicCounter(Protocol):
    """A counter labelled by topic (prometheus_client's `Counter` with `["topic"]`)."""

    def labels(self, *, topic: str) -> _Incrementable: ...


class ReplicaState:
    """The fields and helpers of `ReplicaManager` its parts use (set by `ReplicaManager.__init__`, defined by
    the parts)."""

    config: BrokerConfig
    logs: LogManager
    topics: TopicManager
    broker_id: int
    _now_ms: WallClockMs  # wall clock: what is stored in data (producer-state expiry, marker timestamps)
    _lag_clock_ms: WallClockMs  # monotonic ms: follower progress and ISR lag (never steps with the wall clock)
    _partitions: dict[tuple[str, int], Partition]
    _dirty: set[tuple[str, int]]  # appended since the last checkpoint
    _flush_due: dict[tuple[str, int], Log]  # follower logs past flush.messages: fsync before fetching
    _tasks: set[asyncio.Task[object]]
    alter_partition: AlterPartition | None  # set by the cluster layer
    alter_partition_backoff_s: tuple[float, float]  # first and last backoff of an AlterPartition asked again
    fetchers: ReplicaFetchers | None  # set by the cluster layer
    _lag_ms: int
    _bytes_in: TopicCounter
    _bytes_out: TopicCounter
    replication_quotas: ReplicationQuotas
    _records_in: TopicCounter
    _records_out: TopicCounter

    if TYPE_CHECKING:  # defined by `ReplicaManager` and its parts; declared for the type checker alone, never here
        # -- manager.py --
        def _leader(self, topic: str, partition: int, current_leader_epoch: int = ...) -> Partition: ...

        def _finish_leader(self, part: Partition) -> None: ...

        def _background(self, coro: Coroutine[object, object, object], what: str) -> asyncio.Task[None] | None: ...

        # -- follower.py --
        async def _await_not_busy(self, part: Partition, timeout_s: float) -> None: ...

        def _maybe_snapshot_producers(self, part: Partition, end_before_append: int) -> None: ...

        def _roll_later(self, part: Partition) -> None: ...

        def _load_producer_state(self, part: Partition) -> None: ...

        def delete_log_later(self, topic: str, partition: int, topic_id: str | None = None
                             ) -> Awaitable[None] | None: ...

        # -- isr_changes.py --
        def _request_isr(self, part: Partition, new_isr: tuple[int, ...], reason: str) -> None: ...
