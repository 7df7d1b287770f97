"""An event loop whose clock moves only when nothing but timers is left to run.

Why: a bound such as "stopping takes at most controlled.shutdown.timeout.ms
+ 26 s" is checked exactly and at once, with no sleeps and no slack for a
loaded machine: whenever every task waits, the loop's `time()` jumps to the
next timer instead of waiting for it. Work in worker threads (`to_thread`,
`run_in_executor`) is the exception: while any is in flight the loop waits
for it in real time, so time cannot jump past a timer while a thread (a log
flush, say) is still running.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

__all__ = ["VirtualTimeLoop"]


class _Selector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None or self._loop.threads_in_flight:
            return super().select(timeout)  # woken by I/O or a finished thread (the loop's self-pipe)
        self._loop.now += timeout  # nothing can run before the next timer: go there at once
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """`loop.time()` is virtual (starts at 0); use with `run_until_complete` in a plain (sync) test."""

    def __init__(self) -> None:
        self.now = 0.0
        self.threads_in_flight = 0
        super().__init__(selector=_Selector(self))

    def time(self) -> float:
        return self.now

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> asyncio.Future:
        fut = super().run_in_executor(executor, func, *args)
        self.threads_in_flight += 1

        def done(_: asyncio.Future) -> None:
            self.threads_in_flight -= 1

        fut.add_done_callback(done)
        return fut
