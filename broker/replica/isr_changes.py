"""The leader's ISR changes: ask the controller to shrink or expand a partition's ISR (AlterPartition, KIP-497).

Why: only the controller changes an ISR; the leader proposes. A follower that
caught up is proposed for the ISR, one that lagged more than
`replica.lag.time.max.ms` for removal. Until the outcome is known the high
watermark respects the larger of the old and the proposed ISR
(`Partition.maximal_isr`): an expansion the controller committed while its
answer was lost must never let the high watermark pass a record the new
member lacks (it could be elected). An unknown outcome is asked again; only
a definite refusal or newer metadata ends the pending change — as Kafka's
`Partition.submitAlterPartition` / `AlterPartitionManager`. `ReplicaManager`
composes it (the read path proposes followers that caught up); it must
never change an ISR itself.
"""

from __future__ import annotations

import asyncio
import logging

from kelp.clock import WallClockMs
from kelp.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)

from .interfaces import AlterPartition
from .jobs import ReplicaJobs
from .partition import Partition
from .table import PartitionTable

__all__ = ["IsrChanges"]

log = logging.getLogger("kelp.broker.replica")

# AlterPartition answers that settle nothing: our view is stale and the controller may even have applied the
# change already (a retry after a lost answer). As Kafka, the pending (larger) ISR stays until metadata settles it.
_STALE_VIEW = (FencedLeaderEpochError, NotLeaderOrFollowerError, InvalidUpdateVersionError, InvalidRequestError,
               UnknownTopicOrPartitionError)


class IsrChanges:
    """Leader-side ISR proposals."""

    def __init__(self, table: PartitionTable, jobs: ReplicaJobs, lag_clock_ms: WallClockMs, lag_ms: int) -> None:
        self.table = table
        self.jobs = jobs
        self.lag_clock_ms = lag_clock_ms  # monotonic ms: follower progress and ISR lag
        self.lag_ms = lag_ms  # replica.lag.time.max.ms
        # Set by the cluster layer: asks the controller to change a partition's ISR (its answer is applied by the
        # metadata it is committed in).
        self.alter_partition: AlterPartition | None = None
        # AlterPartition with an unknown outcome is sent again after this backoff (seconds: first, cap).
        self.backoff_s = (0.05, 2.0)

    def request_isr(self, part: Partition, new_isr: tuple[int, ...], reason: str) -> None:
        if self.alter_partition is None or part.pending_isr is not None:
            return
        part.pending_isr = new_isr
        self.jobs.background(self._alter_isr(part, new_isr, reason), f"ISR change of {part.name}")

    async def _alter_isr(self, part: Partition, new_isr: tuple[int, ...], reason: str) -> None:
        """Ask the controller for `new_isr` until the outcome is known (KIP-497, as Kafka's AlterPartitionManager).

        Meanwhile the high watermark respects the larger of the two ISRs (`Partition.maximal_isr`). The
        request is (topic, partition, leader, leader_epoch, partition_epoch, isr) — the same one on every
        retry. Outcomes: success (the answer's state is applied by the caller and clears the pending
        change); INELIGIBLE_REPLICA, a definite refusal (pending change dropped); an answer saying our view
        is stale (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, ...: the change may even have been applied by
        an earlier attempt), so the pending change stays until the metadata that settles it arrives;
        anything else (timeout, no controller, a lost connection) is unknown and the request is sent again
        with backoff, for as long as this leadership and partition epoch last.
        """
        epoch, pepoch, old = part.leader_epoch, part.partition_epoch, list(part.isr)
        key = (part.topic, part.partition)
        delay, cap = self.backoff_s

        def still_pending() -> bool:
            return (part.pending_isr == new_isr and part.is_leader and self.table.parts.get(key) is part
                    and (part.leader_epoch, part.partition_epoch) == (epoch, pepoch))

        try:
            while still_pending():
                try:
                    assert self.alter_partition is not None
                    await self.alter_partition(part.topic, part.partition, leader_epoch=epoch,
                                               partition_epoch=pepoch, isr=list(new_isr))
                except IneligibleReplicaError as exc:
                    log.warning("%s: ISR change %s -> %s (%s) refused: %s", part.name, old, list(new_isr), reason, exc)
                    if still_pending():
                        part.pending_isr = None
                except _STALE_VIEW as exc:
                    log.info("%s: ISR change %s -> %s (%s) answered %s; keeping ISR %s for the high watermark "
                             "until the metadata that settles it arrives", part.name, old, list(new_isr), reason,
                             type(exc).__name__, list(part.maximal_isr))
                except Exception as exc:  # the outcome is unknown: the same request again
                    log.warning("%s: ISR change %s -> %s (%s): outcome unknown (%s); asking again in %.2fs",
                                part.name, old, list(new_isr), reason, exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, cap)
                    continue
                else:
                    log.info("%s: ISR %s -> %s (%s)", part.name, old, list(new_isr), reason)
                break
        finally:
            if part.maybe_advance_high_watermark():
                part.wake()

    def check_isr(self) -> None:
        """Shrink the ISR of led partitions whose followers lag more than replica.lag.time.max.ms (periodic); lag is
        measured on the monotonic clock."""
        now = self.lag_clock_ms()
        for part in self.table.values():
            if not part.is_leader or len(part.isr) <= 1:
                continue
            lagging = part.out_of_sync(now, self.lag_ms)
            if lagging:
                self.request_isr(part, tuple(r for r in part.isr if r not in lagging),
                                  f"broker(s) {list(lagging)} not caught up within {self.lag_ms} ms")
