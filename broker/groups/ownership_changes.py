"""A wake-up for whoever waits on a coordinator's partitions changing hands (elected, loaded, resigned).

Why: FindCoordinator and the coordinator lookups wait, bounded, for a partition of `__consumer_offsets` or
`__transaction_state` to finish loading here instead of answering "not yet" at once; the group and the
transaction coordinators both need the same one-shot signal, so it is one small type (ownership.py itself
must never await).
"""

from __future__ import annotations

import asyncio

__all__ = ["OwnershipChanges"]


class OwnershipChanges:
    """`notify()` wakes every current `wait()`; a later `wait()` waits for the next notify."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, timeout_s: float) -> bool:
        """Wait (bounded) for the next `notify()`; False on timeout."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, max(timeout_s, 0.0))
            return True
        except asyncio.TimeoutError:
            return False
