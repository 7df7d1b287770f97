"""The control plane's blocking calls on threads of their own: lease renewals and the metadata log.

Why: `asyncio.to_thread` runs on the loop's default executor (min(32, CPUs + 4) threads, first come first
served), which the data plane fills with file work: a broker that takes the leadership of thousands of
partitions at once writes each one's leader-epoch checkpoint there (an fsync each). A lease renewal queued
behind 2,700 of them waited seconds, past the lease (3 s): the broker was fenced, the partitions it alone held
went offline, it rejoined, took them all again at a new epoch and was fenced again — every 8 s, the churn
under which acks=all records were not acknowledged within 30 s at 3,000 partitions RF 3 (issue 38,
docs/performance.md). Here a renewal or a metadata write waits only for other control-plane calls, as
Kafka's broker heartbeats do not wait for its log I/O.

`WORKERS` threads, made on first use (again in a forked child): a metadata log load of thousands of entries
may hold one for a while, the leases keep the others. Shared by the broker (file and Kubernetes leases, the
metadata log) and the operator (its `kelp-operator` lease), which import nothing of each other (tests/layout).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Callable, TypeVar

from .thread_pools import LazyPool

__all__ = ["run_control", "WORKERS"]

T = TypeVar("T")

WORKERS = 4

_POOL = LazyPool(WORKERS, "kelp-control")


async def run_control(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """`fn(*args, **kwargs)` on the control plane's threads; the caller waits, the loop does not (a cancelled
    caller leaves a started call to finish on its thread, as `asyncio.to_thread` does)."""
    return await asyncio.get_running_loop().run_in_executor(_POOL.executor(), functools.partial(fn, *args, **kwargs))
