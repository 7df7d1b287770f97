"""A bounded worker pool for CPU work a client can cause: the event loop hands it over and waits.

Why: a broker is one asyncio loop; a request that computes for a second on it (a client's regular expression
against every transactional id, PBKDF2 for an HTTP Basic password) stops every other connection for that
second (issue 33). Such work runs here instead, on `WORKERS` threads of its own: the request waits, the loop
serves everyone else. The pool is small on purpose, so a flood of expensive requests costs the broker at most
`WORKERS` cores and queues behind them instead of taking the machine. Work that releases the GIL for its heavy
part (RE2 matching, hashlib's PBKDF2) costs the loop nothing; pure-Python work (kafka-python's codecs, a schema
parse) shares the GIL with the loop a switch interval (5 ms) at a time: the loop is slowed, never held.

This module must never be given I/O (files and sockets have `asyncio.to_thread` and the storage's own threads):
a blocked worker would hold back every client's CPU work behind it.

A request under a `request_percentage` quota (KIP-124) is charged the CPU time its work took here, as Kafka charges
a request the time of its handler thread: `charge_to(account)` in the request's task makes each `run_cpu` of that
task (and of tasks it starts) add the worker thread's CPU seconds to `account[0]`.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import Callable, TypeVar

from kelp.thread_pools import LazyPool

__all__ = ["run_cpu", "WORKERS", "charge_to"]

T = TypeVar("T")

# Threads for client-caused CPU work: two leave the loop's own core free on a small machine.
WORKERS = 2

_POOL = LazyPool(WORKERS, "kelp-cpu")  # made again in a forked child (kelp/thread_pools.py)
# The request whose task runs: its account of seconds (a one-element list), or None when nothing is charged.
_account: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("kelp_cpu_account", default=None)



async def run_cpu(fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` on the pool; the caller waits, the loop does not (cancelling the caller leaves a started call
    to finish on its thread)."""
    account = _account.get()
    if account is None:
        return await asyncio.get_running_loop().run_in_executor(_POOL.executor(), fn, *args)

    def charged() -> tuple[T | None, BaseException | None, float]:
        start = time.thread_time()
        try:
            return fn(*args), None, time.thread_time() - start
        except BaseException as exc:  # raised again on the loop, once the time is charged
            return None, exc, time.thread_time() - start

    value, error, spent = await asyncio.get_running_loop().run_in_executor(_POOL.executor(), charged)
    account[0] += spent  # on the loop's thread: no race with the request's own steps
    if error is not None:
        raise error
    return value  # type: ignore[return-value]  # fn returned it: a T


def charge_to(account: list[float] | None) -> None:
    """From now on, in the current task (and the tasks it starts), `run_cpu` adds its CPU seconds to
    `account[0]`; None stops charging."""
    _account.set(account)
