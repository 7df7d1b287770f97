"""The leader's write path: produce checks and the leader's append (the acks=all wait is the purgatory's).

Why: an append must pass the same checks (internal topic, acks legal, leader and its epoch, ISR size
for acks=all, idempotent-producer sequence and transaction state) whichever protocol asked — Kafka's
`ReplicaManager.appendRecords`; `purgatory` then holds an acks=all answer until the ISR has the batch
(Kafka's `DelayedProduce`), as `fetch` is the read side with its delayed fetch. `ReplicaManager`
composes it with the partition table, the jobs on a replica's log (an append waits for a producer-state
load or a truncation) and the roll and snapshot helpers the follower's path uses too (`rolls`).

It must never parse or touch individual records (per batch: headers only), never `await` between
the producer-state check, the log append and the state update of one partition (`append_sync` is
synchronous, so they cannot interleave — the KIP-890 verification guard is compared in that same step),
and never answer an acks=all append whose epoch moved.
"""

from __future__ import annotations

import asyncio
import logging

from kelp.errors import (
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
)
from kelp.records.build import needs_recompression, recompress
from kelp.records.header import BatchInfo

from ..metadata.model import INTERNAL_TOPICS
from .interfaces import TopicCounter
from .jobs import ReplicaJobs
from .partition import Partition
from .producer_state import Duplicate, VerificationGuard
from .results import ProduceResult
from .rolls import maybe_snapshot_producers, roll_later
from .table import PartitionTable

__all__ = ["LeaderPath"]

log = logging.getLogger("kelp.broker.replica")


class LeaderPath:
    """Produce for clients and the broker's own writers, on the replicas this broker leads."""

    def __init__(self, table: PartitionTable, jobs: ReplicaJobs, *, bytes_in: TopicCounter,
                 records_in: TopicCounter) -> None:
        self.table = table
        self.jobs = jobs
        self.bytes_in = bytes_in  # the process-wide traffic counters (kelp.broker.metrics)
        self.records_in = records_in

    async def append_local(
        self, topic: str, partition: int, data: bytes | bytearray | memoryview, *, acks: int = 1,
        internal_allowed: bool = False, timeout_ms: int = 30000, verify_txn: bool = False,
        txn_guard: VerificationGuard | None = None,
    ) -> ProduceResult:
        """Append to the leader's log, without waiting for followers (`wait_for_isr` does).

        A topic whose `compression.type` names a codec gets batches in another codec rebuilt in a
        worker thread first (gzip takes ~3 ms per 100-record batch: never on the event loop); the
        log's own check then finds nothing left to rewrite. While a job runs on the replica's log
        (its producer state loading, a truncation before leadership) the append waits for it, up
        to `timeout_ms`.
        """
        part = self.table.get(topic, partition)
        if part is not None and part.busy is not None:
            await self.jobs.await_not_busy(part, timeout_ms / 1000.0)
        part = self._leading(topic, partition, acks=acks, internal_allowed=internal_allowed)
        # The one walk over the batches' headers: everything after it (the rebuild, the producer-state checks,
        # the log's append) takes these `BatchInfo`s. With a codec to rebuild in, the size limit applies to the
        # rebuilt batches (the log checks it on them).
        codec = part.log.config.compression_type
        batches = part.log.validate(data, limit_size=codec == "producer")
        if codec != "producer" and needs_recompression(batches, codec):
            rebuilt = await asyncio.to_thread(recompress, data, batches, codec)
            if rebuilt is not None:
                data, batches = rebuilt
        result = self.append_sync(topic, partition, data, acks=acks, internal_allowed=internal_allowed,
                                  verify_txn=verify_txn, txn_guard=txn_guard, batches=batches)
        if result.flush_due and isinstance(result.appended_to, Partition):
            # flush.messages: the fsync comes before the answer (any acks), in a worker thread, never on the loop.
            await asyncio.to_thread(result.appended_to.log.flush)
        return result

    def append_sync(
        self, topic: str, partition: int, data: bytes | bytearray | memoryview, *, acks: int = 1,
        internal_allowed: bool = False, verify_txn: bool = False, txn_guard: VerificationGuard | None = None,
        batches: list[BatchInfo] | None = None,
    ) -> ProduceResult:
        """Append as the leader. `verify_txn` (a client's produce under transaction.partition.verification.enable):
        a transactional batch of a producer without its transaction open here must carry `txn_guard`, the
        verification the coordinator confirmed (`txn_verification`), else INVALID_TXN_STATE (KIP-890).

        `batches`: `Log.validate`'s headers of `data` when the caller walked them already (`append_local`);
        else that one walk happens here. Either way it comes before the producer-state checks (Kafka's order:
        the records' checks, then the producer state — a damaged retry is CORRUPT_MESSAGE, not a duplicate)."""
        part = self._leading(topic, partition, acks=acks, internal_allowed=internal_allowed)
        lg = part.log
        if batches is None:
            batches = lg.validate(data)
        dup: Duplicate | None = None
        idem = [h for h in batches if h.producer_id >= 0 and h.base_sequence >= 0]
        if idem:
            if len(batches) != 1:
                raise InvalidRequestError(
                    f"idempotent produce to topic '{topic}' partition {partition} must carry exactly one batch, "
                    f"got {len(batches)}"
                )
            h = idem[0]
            dup = part.producers.check(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                                       transactional=h.is_transactional, verify=verify_txn and h.is_transactional,
                                       guard=txn_guard)
            if dup is not None:
                log.info(
                    "duplicate batch from producer %d epoch %d sequence %d..%d on %s-%d: acknowledged with offset %d, "
                    "not stored again",
                    h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence, topic, partition,
                    dup.first_offset,
                )
                return ProduceResult(topic, partition, dup.first_offset, dup.last_offset, -1, lg.log_start_offset, 0,
                                     duplicate=True, leader_epoch=part.leader_epoch, appended_to=part)
        elif part.producers:
            for h in batches:  # a transactional batch without sequence (the group coordinator's offsets)
                if h.producer_id >= 0 and h.is_transactional and not h.is_control:
                    part.producers.check_epoch(h.producer_id, h.producer_epoch)
        before = lg.log_end_offset
        result = lg.append_as_leader(data, leader_epoch=part.leader_epoch, defer_flush=True, defer_roll=True,
                                     batches=batches)
        if lg.active_segment.base_offset != part.snapshot_base:  # rolled: snapshot the producer state (per roll)
            maybe_snapshot_producers(self.jobs, part, before)
        if idem:
            h = idem[0]
            part.producers.update(
                h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                result.first_offset, result.last_offset, result.max_timestamp, transactional=h.is_transactional,
            )
            if h.is_transactional:
                part.publish_unstable()
        if result.roll_due:
            roll_later(self.jobs, part)  # after the producer state caught up: it is snapshotted at the new segment
        part.maybe_advance_high_watermark()
        self.table.mark_dirty(topic, partition)
        part.wake()
        try:
            self.bytes_in.labels(topic=topic).inc(len(data))
            self.records_in.labels(topic=topic).inc(result.record_count)
        except Exception:  # metrics must never fail a produce
            pass
        return ProduceResult(
            topic,
            partition,
            result.first_offset,
            result.last_offset,
            result.log_append_time_ms if result.log_append_time_ms is not None else -1,
            lg.log_start_offset,
            result.record_count,
            leader_epoch=part.leader_epoch,
            appended_to=part,
            flush_due=result.flush_due,
        )

    def _leading(self, topic: str, partition: int, *, acks: int, internal_allowed: bool) -> Partition:
        """The replica to append to, once the checks that need no byte of the request passed (Kafka's
        `appendToLocalLog` and `appendRecordsToLeader`): the topic, acks, this broker leading it with its
        producer state loaded, and enough in-sync replicas for acks=all."""
        if topic in INTERNAL_TOPICS and not internal_allowed:
            raise InvalidTopicError(
                f"cannot write to internal topic '{topic}' (partition {partition}): only the broker's group "
                "coordinator writes there; commit offsets with OffsetCommit instead"
            )
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), got {acks}")
        part = self.table.leader(topic, partition)
        if part.busy is not None:
            raise NotLeaderOrFollowerError(
                f"topic '{topic}' partition {partition}: its producer state is loading on broker "
                f"{self.table.broker_id}; retry")
        if acks == -1 and len(part.isr) < part.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"topic '{topic}' partition {partition}: {len(part.isr)} in-sync replica(s) {list(part.isr)}, "
                f"min.insync.replicas is {part.min_insync_replicas} (acks=all)"
            )
        return part
