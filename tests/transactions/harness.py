"""In-memory parts for the transaction coordinator's tests: a list-backed `__transaction_state`, a marker
sender double, a manual clock.

Why: the state machine's rules (fencing, CONCURRENT_TRANSACTIONS, timeouts, expiry, reload) must be tested
without a broker and without sleeping: `MemoryTxnStore` keeps appended records so a second coordinator can
replay them, `RecordingSender` answers markers as a partition leader would (and can hold or fail them),
`Clock.now` is moved by hand.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Callable

from kelp.broker.transactions.coordinator import TransactionCoordinator
from kelp.broker.transactions.markers import TxnMarker
from kelp.broker.transactions.txn_config import TxnConfig
from kelp.errors import ErrorCode


class MemoryTxnStore:
    def __init__(self) -> None:
        self.partitions: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.fail_with: BaseException | None = None
        self.gate: asyncio.Event | None = None

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        self.partitions.setdefault(partition, []).extend(records)

    def replay(self, partition: int) -> Any:
        return list(self.partitions.get(partition, []))


class RecordingSender:
    """Answers every marker NONE (or `codes[(topic, p)]` while set); `gate` holds sends; `on_marker` sees each."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, TxnMarker]] = []
        self.codes: dict[tuple[str, int], int] = {}
        self.gate: asyncio.Event | None = None
        self.on_marker: Callable[[TxnMarker], None] | None = None
        self.sent_event = asyncio.Event()

    async def send(self, broker_id: int, marker: TxnMarker) -> dict[tuple[str, int], int]:
        if self.gate is not None:
            await self.gate.wait()
        self.sent.append((broker_id, marker))
        self.sent_event.set()
        out = {tp: self.codes.get(tp, ErrorCode.NONE) for tp in marker.partitions}
        if self.on_marker is not None and all(c == 0 for c in out.values()):
            self.on_marker(marker)
        return out


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def coordinator(store: MemoryTxnStore | None = None, sender: RecordingSender | None = None,
                clock: Clock | None = None, **settings: Any) -> tuple[TransactionCoordinator, MemoryTxnStore,
                                                                      RecordingSender, Clock]:
    store = store or MemoryTxnStore()
    sender = sender or RecordingSender()
    clock = clock or Clock()
    pids = itertools.count(1000)

    async def next_pid() -> int:
        return next(pids)

    config = TxnConfig(num_partitions=settings.pop("num_partitions", 3), marker_backoff_ms=1,
                       marker_max_backoff_ms=5, **settings)
    coord = TransactionCoordinator(config, store=store, sender=sender, next_producer_id=next_pid,
                                   leader_of=lambda topic, p: 7, topic_exists=lambda topic: True, clock_ms=clock)
    return coord, store, sender, clock


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait (bounded) for `condition`, yielding to the loop between checks."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.001)
