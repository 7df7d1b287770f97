"""An in-memory harness for the group coordinator: manual clock and timers, a list-backed store.

Why: the state machine's timeouts (initial delay, rebalance, session) must be
tested without sleeping; `ManualScheduler.advance(ms)` fires due timers in
order, and `MemoryStore` keeps appended `__consumer_offsets` records so a
second coordinator can replay them.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any, Callable

from kelp.broker.groups.coordinator_config import CoordinatorConfig
from kelp.broker.groups.group_coordinator import GroupCoordinator
from kelp.broker.groups.offsets_log import TxnMarker, TxnRecord


class _Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    def __init__(self) -> None:
        self.now_ms = 1_000_000
        self._heap: list[tuple[int, int, _Handle, Callable[[], None]]] = []
        self._seq = itertools.count()

    def clock(self) -> int:
        return self.now_ms

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> _Handle:
        handle = _Handle()
        heapq.heappush(self._heap, (self.now_ms + max(delay_ms, 0), next(self._seq), handle, callback))
        return handle

    async def advance(self, ms: int) -> None:
        """Move time forward, firing every timer that falls due (and letting tasks run between)."""
        target = self.now_ms + ms
        await settle()
        while self._heap and self._heap[0][0] <= target:
            when, _, handle, cb = heapq.heappop(self._heap)
            if handle.cancelled:
                continue
            self.now_ms = when
            cb()
            await settle()
        self.now_ms = target
        await settle()


class MemoryStore:
    def __init__(self) -> None:
        self.partitions: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.appends = 0
        self.fail = False
        self.fail_with: BaseException | None = None  # raised by the next appends instead of succeeding
        self.gate: asyncio.Event | None = None  # when set: appends wait for it (a replication in flight)

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise OSError("disk full")
        if self.fail_with is not None:
            raise self.fail_with
        self.appends += 1
        self.partitions.setdefault(partition, []).extend(records)

    async def append_transactional(self, partition: int, records: list[tuple[bytes, bytes | None]], *,
                                   producer_id: int, producer_epoch: int) -> None:
        """TxnOffsetCommit's batch: kept as `TxnRecord`s, as the broker's store replays them."""
        if self.fail_with is not None:
            raise self.fail_with
        self.appends += 1
        self.partitions.setdefault(partition, []).extend(TxnRecord(producer_id, k, v) for k, v in records)

    def marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction's control batch on `partition`, as the partition leader writes it."""
        self.partitions.setdefault(partition, []).append(TxnMarker(producer_id, commit))

    def replay(self, partition: int) -> Any:
        return list(self.partitions.get(partition, []))


async def settle(rounds: int = 20) -> None:
    """Let ready tasks run (yields to the loop; no wall-clock waiting)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def make_coordinator(
    *, store: MemoryStore | None = None, scheduler: ManualScheduler | None = None,
    topics: dict[str, int] | None = None, owned: bool = True, **config: Any,
) -> tuple[GroupCoordinator, ManualScheduler, MemoryStore]:
    scheduler = scheduler or ManualScheduler()
    store = store or MemoryStore()
    cfg = CoordinatorConfig(
        num_partitions=config.pop("num_partitions", 4),
        initial_rebalance_delay_ms=config.pop("initial_rebalance_delay_ms", 50),
        min_session_timeout_ms=config.pop("min_session_timeout_ms", 100),
        max_session_timeout_ms=config.pop("max_session_timeout_ms", 60000),
        **config,
    )
    known = {"t": 6} if topics is None else topics
    coord = GroupCoordinator(cfg, store=store, clock_ms=scheduler.clock, scheduler=scheduler,
                             topic_partitions=known.get)
    if owned:
        # The single-broker case: this broker leads (and has loaded) every __consumer_offsets partition.
        coord.loader.load()
    return coord, scheduler, store
