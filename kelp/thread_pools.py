"""A thread pool made on first use, and made again in a forked child.

Why: the broker keeps pools of its own beside the loop's default executor — client-caused CPU work
(`broker/cpu_work.py`) and the control plane's blocking calls (`kelp/control_io.py`) — so neither waits behind
the other's or the data plane's file work. Each is made on first use (a process that never needs it holds no
threads), and a forked child (multi-process tests, tools that fork) has none of its parent's threads: a pool
copied from the parent would take work and never run it, so the child's first call makes its own. One helper
for both, not two copies of the lock-and-create dance.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading

__all__ = ["LazyPool"]


class LazyPool:
    """`executor()`: the pool of `workers` threads named `prefix-N`, made at the first call in this process."""

    def __init__(self, workers: int, prefix: str) -> None:
        self.workers = workers
        self.prefix = prefix
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        os.register_at_fork(after_in_child=self._forget)

    def executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.workers,
                                                                   thread_name_prefix=self.prefix)
            return self._pool

    def _forget(self) -> None:
        """In a forked child: no pool yet, and a new lock (the parent's may have been held at the fork)."""
        self._pool, self._lock = None, threading.Lock()
