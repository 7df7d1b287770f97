"""Segment rolls and producer snapshots after an append, for the leader's path and the follower's alike.

Why it exists: every append on the loop defers a due roll (`defer_roll`: the new segment's files are
created in a worker thread, never on the event loop, issue 23), and a roll snapshots the producer state
at the new segment's base, as Kafka's roll does. The leader's produce, its transaction markers and the
follower's appends all need both, so they live here rather than in one path that the others pass
through. It must never write a file on the event loop (the snapshot and the roll are worker-thread work).
"""

from __future__ import annotations

import asyncio

from ..storage.segment import LogSegment
from .jobs import ReplicaJobs
from .partition import Partition

__all__ = ["maybe_snapshot_producers", "roll_later"]


def maybe_snapshot_producers(jobs: ReplicaJobs, part: Partition, end_before_append: int) -> None:
    """After an append: if the log rolled a segment at `end_before_append`, snapshot the producer state
    there (the state in memory, before this append's batches are applied, is exactly that) — as
    Kafka's roll. The file is written in a worker thread; per roll, never per batch."""
    lg = part.log
    base = lg.active_segment.base_offset
    if base == part.snapshot_base:
        return
    part.snapshot_base = base
    if base != end_before_append:
        return  # rolled at some other point (cannot describe it from here); the next roll will do
    jobs.background(asyncio.to_thread(lg.write_producer_snapshot, base, part.producers.entries(),
                                      generation=lg.truncation_generation),
                    f"producer snapshot of {part.name} at offset {base}")


def roll_later(jobs: ReplicaJobs, part: Partition) -> None:
    """Make the roll an append deferred (`defer_roll`) as a job: the new segment's files are created in a
    worker thread while appends to `part` wait (busy), never on the event loop (issue 23); then, on the
    loop, the producer state — which no append changed meanwhile — is snapshotted at its base, as at
    any roll."""
    def install(part: Partition, segment: LogSegment | None) -> None:
        if segment is not None:
            maybe_snapshot_producers(jobs, part, segment.base_offset)

    jobs.run_job(part, f"rolling a segment of {part.name}", part.log.roll_when_due, install)
