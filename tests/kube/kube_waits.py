"""Bounded polling for the kube tier's tests.

Why this exists: controllers in kube-controller-manager act asynchronously, so
tests wait for a condition to hold, always with a deadline and a message that
says what was awaited and what was last seen. It must never wait unbounded.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.2) -> T:
    """Call ``probe`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        last = probe()
        if last:
            return last  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)
