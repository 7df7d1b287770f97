"""Time in Kelp: one convention, and the clock types every component takes.

Why: the tree grew three conventions (float seconds in storage, int milliseconds in the group
coordinator, monotonic and wall clock mixed in the cluster layer), so a reader had to check each
call site's unit, and a test had to know which clock to fake. The convention:

- **Wall-clock time is int milliseconds since the epoch** (`WallClockMs`, `wall_clock_ms`): anything
  stored, sent on the wire or compared across processes — record timestamps, retention and roll
  deadlines, segment times, lease renew times, commit and expiry times, producer-state expiry. It is
  Kafka's own unit, so a value read from a config (`*.ms`) or a record is used as it is.
- **Monotonic time is float seconds** (`Monotonic`, `monotonic`): durations and deadlines inside one
  process — timeouts, backoffs, lease freshness, how long a broker has been silent, how long a
  follower has lagged. It is never stored, sent, or compared across processes (each process's
  monotonic clock has its own origin). On Linux it is `CLOCK_BOOTTIME`, which keeps counting while
  the host is suspended: `CLOCK_MONOTONIC` stops then, and a process that slept through its lease's
  expiry would judge the lease still fresh (issue 31). Neither steps when the wall clock is set.
- Configuration keeps Kafka's names and units (`*.ms`); a component converts once, where it builds
  the deadline, and names the variable for its unit (`timeout_s`, `deadline_ms`).

Every component whose behaviour depends on time takes its clock as a keyword argument — `clock_ms`
for wall-clock milliseconds, `monotonic` for monotonic seconds — defaulting to these, so tests drive
time without sleeping. This module must never hold state: it is the types and the real clocks only.
"""

from __future__ import annotations

import time
from typing import Callable

__all__ = ["WallClockMs", "Monotonic", "wall_clock_ms", "monotonic", "monotonic_ms"]

WallClockMs = Callable[[], int]
"""Returns wall-clock milliseconds since the epoch."""

Monotonic = Callable[[], float]
"""Returns monotonic seconds (arbitrary origin, one process only)."""


def wall_clock_ms() -> int:
    """The real wall clock, in integer milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def _boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


monotonic: Monotonic = _boottime if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic
"""Monotonic seconds that include time the host spent suspended (Linux `CLOCK_BOOTTIME`)."""


def monotonic_ms() -> int:
    """`monotonic` in integer milliseconds: for durations kept in Kafka's unit (ISR lag, session timeouts)."""
    return int(monotonic() * 1000)
