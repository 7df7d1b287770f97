"""Transaction markers on the partition leader: Kafka's WriteTxnMarkers append, and the last stable offset.

Why it exists: a transaction coordinator ends a transaction by asking the leader of every partition the
producer wrote to append an end-transaction marker (a control batch, `kelp.control_records`). The leader
must check it against the producer's state (a stale producer epoch is INVALID_PRODUCER_EPOCH, a zombie
coordinator TRANSACTION_COORDINATOR_FENCED), append it, close the producer's transaction, index it if it
was aborted (the segment's `.txnindex`, which read_committed fetches read), and answer only once the ISR
has it — Kafka appends markers with requiredAcks=-1 — within a bound. Followers replicate markers like
any batch (`follower` applies them to their producer state and index the same way).
`ReplicaManager` composes it with the partition table, the jobs on a replica's log and the purgatory.

It must never parse records other than the marker it builds, never `await` between the marker's check,
its append and the producer-state update of one partition, and never answer before the ISR wait.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Sequence

from kelp.clock import WallClockMs
from kelp.control_records import build_marker_batch
from kelp.errors import KelpError, NotEnoughReplicasError, NotLeaderOrFollowerError

from ..loop_budget import LoopBudget
from ..storage.indexes.txn_index import AbortedTxn
from .jobs import ReplicaJobs
from .partition import Partition
from .purgatory import ProducePurgatory
from .results import ProduceResult
from .rolls import maybe_snapshot_producers, roll_later
from .table import PartitionTable

__all__ = ["TxnMarker", "TxnMarkerPath"]

log = logging.getLogger("kelp.broker.replica")


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One WriteTxnMarkers entry: end `producer_id`'s transaction on each of `partitions`."""

    producer_id: int
    producer_epoch: int
    commit: bool  # True: COMMIT, False: ABORT
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]  # (topic, partition)


class TxnMarkerPath:
    """The leader's marker appends."""

    def __init__(self, table: PartitionTable, jobs: ReplicaJobs, purgatory: ProducePurgatory,
                 now_ms: WallClockMs) -> None:
        self.table = table
        self.jobs = jobs
        self.purgatory = purgatory
        self.now_ms = now_ms  # wall clock: the markers' timestamps

    async def append_txn_markers(
        self, markers: Sequence[TxnMarker], *, timeout_ms: int = 30000,
    ) -> list[dict[tuple[str, int], KelpError | None]]:
        """Append each marker to each of its partitions as the leader and wait until the ISR has it.

        One answer per marker, in order: (topic, partition) -> None when the marker is written and
        replicated, else the error Kafka answers for that partition (UNKNOWN_TOPIC_OR_PARTITION,
        NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED,
        NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT after `timeout_ms`, KAFKA_STORAGE_ERROR...).
        """
        answers: list[dict[tuple[str, int], KelpError | None]] = []
        waits: list[tuple[dict[tuple[str, int], KelpError | None], tuple[str, int], ProduceResult]] = []
        budget = LoopBudget()  # a request may carry thousands of markers: the loop gets a turn every few ms
        for marker in markers:
            answer: dict[tuple[str, int], KelpError | None] = {}
            answers.append(answer)
            for topic, partition in marker.partitions:
                key = (topic, partition)
                await budget.tick()
                try:
                    part = self.table.parts.get(key)
                    if part is not None and part.busy is not None:
                        await self.jobs.await_not_busy(part, timeout_ms / 1000.0)
                    result = self.append_marker_sync(topic, partition, marker)
                    if result.flush_due and isinstance(result.appended_to, Partition):
                        await asyncio.to_thread(result.appended_to.log.flush)  # flush.messages, never on the loop
                except KelpError as exc:
                    answer[key] = exc
                    continue
                answer[key] = None
                waits.append((answer, key, result))

        waited = await self.purgatory.wait_all_for_isr([r for _, _, r in waits], timeout_ms=timeout_ms)
        for (answer, key, _), outcome in zip(waits, waited, strict=True):
            if isinstance(outcome, KelpError):
                answer[key] = outcome
        return answers

    def append_marker_sync(self, topic: str, partition: int, marker: TxnMarker) -> ProduceResult:
        """Check and append one marker as the leader (no wait); Kafka's appendRecords for the COORDINATOR
        origin: internal topics allowed, min.insync.replicas checked as for acks=all."""
        part = self.table.leader(topic, partition)
        if part.busy is not None:
            raise NotLeaderOrFollowerError(
                f"topic '{topic}' partition {partition}: its producer state is loading on broker "
                f"{self.table.broker_id}; retry")
        if len(part.isr) < part.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"topic '{topic}' partition {partition}: {len(part.isr)} in-sync replica(s) {list(part.isr)}, "
                f"min.insync.replicas is {part.min_insync_replicas} (transaction markers are written with acks=all)")
        producers = part.producers
        producers.check_marker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch)
        lg = part.log
        batch = build_marker_batch(marker.producer_id, marker.producer_epoch, commit=marker.commit,
                                   coordinator_epoch=marker.coordinator_epoch, timestamp_ms=self.now_ms())
        before = lg.log_end_offset
        result = lg.append_as_leader(batch, leader_epoch=part.leader_epoch, origin="coordinator", defer_flush=True,
                                     defer_roll=True)
        if lg.active_segment.base_offset != part.snapshot_base:
            maybe_snapshot_producers(self.jobs, part, before)
        done = producers.apply_marker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                                      result.first_offset, commit=marker.commit, timestamp=result.max_timestamp)
        if done is not None and done.aborted:
            lg.append_aborted_txn(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                             done.last_stable_offset))
        part.publish_unstable()
        if result.roll_due:
            roll_later(self.jobs, part)
        part.maybe_advance_high_watermark()
        self.table.mark_dirty(topic, partition)
        part.wake()
        log.debug("%s: %s marker of producer %d epoch %d at offset %d", part.name,
                  "COMMIT" if marker.commit else "ABORT", marker.producer_id, marker.producer_epoch,
                  result.first_offset)
        return ProduceResult(topic, partition, result.first_offset, result.last_offset, -1, lg.log_start_offset,
                             result.record_count, leader_epoch=part.leader_epoch, appended_to=part,
                             flush_due=result.flush_due)
