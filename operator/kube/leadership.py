"""The active operator replica's claim on the Lease `kelp-operator`, checked before every write.

Why: a Lease proves leadership only at the instant it was written. An
operator that stalls (a long GC pause, a throttled CPU, a lost network) and
resumes believes it still leads while a stand-by has already taken over;
two operators deleting pods or submitting reassignments at once can take a
partition below min.insync.replicas. So:

- `check()` — a local test before every write to the API server: the last
  successful renewal is younger than the lease duration minus a margin,
  measured on this process's monotonic clock from the moment the renewal was
  *sent* (a stand-by may take over only after watching the Lease unchanged
  for a whole duration, so until then no one else can hold it). Past that,
  leadership is in doubt and nothing is written.
- `fence()` — before an action that costs availability or data (deleting a
  broker pod or Service, shrinking the StatefulSet, submitting or cancelling
  a reassignment, electing leaders) and before every other write to the
  brokers' admin API (dynamic broker config, topic create/grow/alter/delete,
  offset resets): renew
  the Lease with the `resourceVersion` this replica last wrote as the
  precondition. If anything else wrote the Lease since (a stand-by took
  over, someone deleted it), the API server answers 409 and leadership is
  lost for good: `LeadershipLost` is raised and the process stops acting.

The renew loop (`run.py`) and fences share one lock, so they never race
each other's preconditions.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from kelp.clock import Monotonic, monotonic

if TYPE_CHECKING:
    from kelp.leases import LeaseElector

__all__ = ["Leadership", "LeadershipLost", "Unfenced"]


class LeadershipLost(Exception):
    """This replica no longer holds, or cannot prove it holds, the operator Lease: it must not act."""


class Leadership:
    """`monotonic` (seconds, kelp.clock) times the renewals: how long ago the last one was sent."""

    def __init__(self, elector: LeaseElector, *, duration_s: float, margin_s: float,
                 monotonic: Monotonic = monotonic) -> None:
        self.elector = elector
        self.duration_s = duration_s
        self.margin_s = margin_s
        self.monotonic = monotonic
        self.renewed_at: float | None = None
        self.lost: str | None = None
        self._lock = asyncio.Lock()

    @property
    def identity(self) -> str:
        return str(self.elector.identity)

    async def acquire_or_renew(self) -> bool:
        """One election round (the run loop's): True while this replica holds the Lease."""
        async with self._lock:
            if self.lost:
                return False
            sent = self.monotonic()
            record = await self.elector.try_acquire_or_renew()
            if record is None:
                if self.renewed_at is not None:
                    holder = self.elector.record.holder if self.elector.record else None
                    self.lost = f"the Lease is held by {holder or 'nobody'} now"
                return False
            self.renewed_at = sent
            return True

    def check(self) -> None:
        """Raise LeadershipLost unless the last renewal is recent enough to be sure no one else holds the Lease."""
        if self.lost:
            raise LeadershipLost(f"operator {self.identity} lost the Lease: {self.lost}")
        if self.renewed_at is None:
            raise LeadershipLost(f"operator {self.identity} has not acquired the Lease")
        age = self.monotonic() - self.renewed_at
        if age > self.duration_s - self.margin_s:
            raise LeadershipLost(f"operator {self.identity}: leadership in doubt, the Lease was last renewed "
                                 f"{age:.1f}s ago (duration {self.duration_s:.0f}s)")

    async def fence(self) -> None:
        """Renew the Lease on the resourceVersion this replica last wrote; any other writer since loses us it."""
        from kelp.leases import LeaseConflict

        self.check()
        async with self._lock:
            self.check()
            record = self.elector.record
            if record is None:  # check() passed, so a renewal succeeded: the elector holds its record
                raise LeadershipLost(f"operator {self.identity}: cannot confirm the Lease (no record); not acting")
            sent = self.monotonic()
            try:
                self.elector.record = await self.elector.backend.update(
                    replace(record, renew_time_ms=self.elector.clock_ms()))
            except LeaseConflict:
                self.lost = (f"the Lease changed since this replica last wrote it (resourceVersion "
                             f"{record.version}): another writer took it")
                raise LeadershipLost(f"operator {self.identity} lost the Lease: {self.lost}") from None
            except Exception as exc:
                raise LeadershipLost(f"operator {self.identity}: cannot confirm the Lease ({exc}); "
                                     "not acting") from None
            self.renewed_at = sent


class Unfenced:
    """The guard of an operator run without election (tests, one-off tools): always allowed."""

    identity = "unfenced"

    def check(self) -> None:
        return None

    async def fence(self) -> None:
        return None
