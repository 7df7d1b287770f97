"""Cooperative slicing of long per-partition loops: yield to the event loop every few milliseconds.

Why: a request naming thousands of partitions (a Produce, a ListOffsets, a batch of transaction markers) does a
little work per partition, but all of it in one step of the event loop unless the loop gets a turn in between;
at a thousand partitions that is a hundred milliseconds during which no other connection is served (issue 33's
loop-lag guard, `tests/broker/test_loop_lag_guard.py`). A handler ticks a `LoopBudget` once per partition; the
tick costs one clock read and, once `SLICE_S` has passed since the last turn, lets the loop run everything else
that is ready before the handler goes on. The request takes as long as before; the others stop waiting for it.

This module must never sleep longer than a turn of the loop.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["LoopBudget", "SLICE_S"]

SLICE_S = 0.005  # the longest a handler computes before the loop gets a turn


class LoopBudget:
    """`await budget.tick()` in a long loop: gives the event loop a turn once SLICE_S passed since the last."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter()

    async def tick(self) -> None:
        if time.perf_counter() - self._since >= SLICE_S:
            await asyncio.sleep(0)
            self._since = time.perf_counter()
