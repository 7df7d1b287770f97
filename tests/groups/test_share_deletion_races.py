"""A share-partition's state replaced (deleted, or reset) while other work on it is under way (issue 36).

`SharePartitions` with a state log whose writes the test holds open: the adversary's interleavings are an
acknowledgement waiting for the share-partition's write lock while a delete (or a reset) holds it, a lock
expiry's write queued behind it, and a fetch recovering the share-partition from its old snapshot while the
delete writes its tombstone. In each, nothing of the old state may be written after what replaced it, and the
acknowledgement is refused (its records are gone). On the code before, a reset raced by an acknowledgement
wrote the old window back over the reset (the reset was lost).
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine

from kelp.broker.groups.share.manager import ShareConfig, SharePartitions
from kelp.broker.groups.share.partition import AckBatch, StateBatch
from kelp.errors import ErrorCode

from .harness import ManualScheduler, settle

KEY = ("g", "ab" * 16, 0)
ACCEPT = 1


class HeldState:
    """A state log keeping what was written, in order; `hold()` makes the next writes wait for `release()`."""

    def __init__(self, snapshot: tuple[int, list[StateBatch]] | None = None) -> None:
        self.snapshot = snapshot
        self.ops: list[tuple[str, Any]] = []  # ("write", start) / ("delete", None), in the order they landed
        self.gate: asyncio.Event | None = None
        self.reading: asyncio.Event | None = None

    def hold(self) -> None:
        self.gate = asyncio.Event()

    def release(self) -> None:
        assert self.gate is not None
        self.gate.set()
        self.gate = None

    async def _wait(self) -> None:
        if self.gate is not None:
            await self.gate.wait()

    async def read(self, key: Any) -> tuple[int, list[StateBatch]] | None:
        snap = self.snapshot
        if self.reading is not None:
            await self.reading.wait()  # the old snapshot is already read: the recovery is under way
        return snap

    async def write(self, key: Any, start: int, batches: list[StateBatch]) -> None:
        await self._wait()
        self.ops.append(("write", start))
        self.snapshot = (start, list(batches))

    async def delete(self, key: Any) -> None:
        await self._wait()
        self.ops.append(("delete", None))
        self.snapshot = None


def _partitions(state: HeldState) -> tuple[SharePartitions, ManualScheduler]:
    sched = ManualScheduler()
    sp = SharePartitions(state, ShareConfig(lock_duration_ms=1000), scheduler=sched,  # type: ignore[arg-type]
                         clock_ms=sched.clock)
    return sp, sched


async def _loaded_with_one_acquired(state: HeldState) -> tuple[SharePartitions, ManualScheduler]:
    parts, sched = _partitions(state)
    await parts.get(KEY, log_start=0, log_end=0)
    assert parts.acquire(KEY, "m", [(0, 4, False)], high_watermark=5, max_records=10)
    return parts, sched


async def _ack_behind(state: HeldState, parts: SharePartitions, replacing: Coroutine[Any, Any, None]
                      ) -> tuple[int, str | None]:
    """`replacing` (a delete or reset) holds the write lock, its write held open; an acknowledgement of the
    member's records then waits for the lock; the write lands; what the acknowledgement was answered."""
    state.hold()
    task = asyncio.create_task(replacing)
    await settle()
    acking = asyncio.create_task(parts.acknowledge(KEY, "m", [AckBatch(0, 4, (ACCEPT,))]))
    await settle()
    state.release()
    await task
    return await acking


async def test_an_acknowledgement_waiting_behind_a_delete_is_refused_and_writes_nothing() -> None:
    state = HeldState()
    parts, _ = await _loaded_with_one_acquired(state)
    assert await _ack_behind(state, parts, parts.delete(KEY)) == (
        ErrorCode.INVALID_RECORD_STATE, "the share-partition was reset or deleted")
    assert state.ops[-1] == ("delete", None) and state.snapshot is None
    assert parts.peek(KEY) is None


async def test_an_acknowledgement_waiting_behind_a_reset_does_not_write_the_old_window_back() -> None:
    state = HeldState()
    parts, _ = await _loaded_with_one_acquired(state)
    assert (await _ack_behind(state, parts, parts.reset(KEY, 3)))[0] == ErrorCode.INVALID_RECORD_STATE
    assert state.ops[-1] == ("write", 3) and state.snapshot == (3, [])  # the reset stands


async def test_a_lock_expiry_queued_behind_a_delete_writes_nothing() -> None:
    state = HeldState()
    parts, sched = await _loaded_with_one_acquired(state)
    state.hold()
    deleting = asyncio.create_task(parts.delete(KEY))
    await settle()
    await sched.advance(1500)  # the acquisition lock runs out: its release is queued for the write lock
    state.release()
    await deleting
    await settle()
    assert state.ops[-1] == ("delete", None) and state.snapshot is None


async def test_a_fetch_recovering_the_old_state_while_the_delete_writes_is_deleted_too() -> None:
    state = HeldState(snapshot=(2, [StateBatch(2, 3, 2, 1)]))
    parts, _ = _partitions(state)
    state.reading = asyncio.Event()
    fetching = asyncio.create_task(parts.get(KEY, log_start=0, log_end=10))
    await settle()  # the recovery holds the old snapshot and waits
    deleting = asyncio.create_task(parts.delete(KEY))
    await settle()
    state.reading.set()
    recovered = await fetching  # the fetch got the old state...
    assert recovered.start == 4  # its acknowledged records 2-3 are behind the start
    await deleting
    assert parts.peek(KEY) is None and state.snapshot is None  # ...which the delete then removed, in memory too
    fresh = await parts.get(KEY, log_start=0, log_end=10)
    assert fresh.start == 10 and state.ops[-1] == ("write", 10)  # a later fetch starts anew (latest)
