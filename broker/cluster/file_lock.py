"""An exclusive flock with a bounded wait, for the file backends of leases and of the metadata store.

Why: brokers of one machine share a cluster directory and serialise their
compare-and-swap writes with flock. A broker stopped (SIGSTOP, a hung
process) while holding the lock must not hang every other broker's lease
renewal and the controller's writes forever: a waiter gives up after
`timeout_s` with `LockTimeout` (a TimeoutError), its round fails, is logged
and retried. The lock is held only around read-compare-rename, never across
an fsync, so such a window is short.
"""

from __future__ import annotations

import fcntl
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kelp import clock
from kelp.clock import Monotonic

__all__ = ["LockTimeout", "exclusive"]


class LockTimeout(TimeoutError):
    """Another process held the lock for longer than the wait allows."""


@contextmanager
def exclusive(path: Path, *, timeout_s: float = 5.0, monotonic: Monotonic = clock.monotonic) -> Iterator[None]:
    with open(path, "a") as fh:
        deadline = monotonic() + timeout_s
        delay = 0.001
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if monotonic() >= deadline:
                    raise LockTimeout(f"{path} stayed locked by another process for {timeout_s:.0f}s") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.02)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
