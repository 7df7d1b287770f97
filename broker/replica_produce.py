"""The write side of the replica manager: produce checks, the leader's append, and the acks=all wait.

Why: an append must pass the same checks (internal topic, acks legal, leader and its epoch, ISR size
for acks=all, idempotent-producer sequence and transaction state) whichever protocol asked, and
`acks=all` must answer only once the high watermark passed the batch, under the leader epoch of the append — Kafka's
`ReplicaManager.appendRecords` with its `DelayedProduce`, as `replica_fetch` is the read side with
its delayed fetch. `ReplicaManager` mixes this in; it uses the manager's partitions, leadership
checks, follower jobs and metrics (declared in `replica_state`).

It must never parse or touch individual records (per batch: headers only), never `await` between
the producer-state check, the log append and the state update of one partition (`append_sync` is
synchronous, so they cannot interleave — the KIP-890 verification guard is compared in that same step),
and never answer an acks=all append whose epoch moved.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from kelp.errors import (
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KelpError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from kelp.records import iter_headers, needs_recompression, parse_batches, recompress

from .loop_budget import LoopBudget
from .metadata.model import INTERNAL_TOPICS
from .partition import Partition
from .producer_state import Duplicate, VerificationGuard
from .replica_state import ReplicaState
from .replica_types import ProduceResult

__all__ = ["ProducePath"]

log = logging.getLogger("kelp.broker.replica")


class ProducePath(ReplicaState):
    """Produce for clients and the broker's own writers (mixed into ReplicaManager)."""

    async def append(
        self,
        topic: str,
        partition: int,
        data: bytes | bytearray | memoryview,
        *,
        acks: int = 1,
        timeout_ms: int = 30000,
        internal_allowed: bool = False,
    ) -> ProduceResult:
        """Append a produce request's batches for one partition; with acks=-1 wait until the ISR has them.

        Internal topics take only the broker's own writes (`internal_allowed`, the group coordinator's),
        as Kafka's `appendToLocalLog` does: a client's batch there could forge any group's commits.
        """
        result = await self.append_local(topic, partition, data, acks=acks, internal_allowed=internal_allowed,
                                         timeout_ms=timeout_ms)
        return await self.wait_for_isr(result, acks=acks, timeout_ms=timeout_ms)

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
        part = self._partitions.get((topic, partition))
        if part is not None and part.busy is not None:
            await self._await_not_busy(part, timeout_ms / 1000.0)
            part = self._partitions.get((topic, partition))
        codec = part.log.config.compression_type if part is not None and part.log is not None else "producer"
        if codec != "producer" and needs_recompression(data, codec):
            rebuilt = await asyncio.to_thread(recompress, data, parse_batches(data), codec)
            if rebuilt is not None:
                data = rebuilt[0]
        result = self.append_sync(topic, partition, data, acks=acks, internal_allowed=internal_allowed,
                                  verify_txn=verify_txn, txn_guard=txn_guard)
        if result.flush_due and isinstance(result.appended_to, Partition):
            # flush.messages: the fsync comes before the answer (any acks), in a worker thread, never on the loop.
            await asyncio.to_thread(result.appended_to.log.flush)
        return result

    async def wait_all_for_isr(self, results: Sequence[ProduceResult], *,
                               timeout_ms: int) -> list[ProduceResult | KelpError]:
        """acks=-1 for a request's appends: each result, or its error, once the ISR has it, all within one
        `timeout_ms` from now (Kafka's one DelayedProduce for the request).

        One after another rather than a task each: thousands of partitions would be as many tasks made in one
        step of the loop (tens of milliseconds), while waiting in turn takes no longer (every append replicates
        meanwhile: the request waits one replication round trip) and the loop gets a turn every few ms."""
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000.0
        out: list[ProduceResult | KelpError] = []
        budget = LoopBudget()
        for result in results:
            await budget.tick()
            try:
                out.append(await self.wait_for_isr(result, acks=-1, timeout_ms=timeout_ms, deadline=deadline))
            except KelpError as exc:
                out.append(exc)
        return out

    async def wait_for_isr(self, result: ProduceResult, *, acks: int, timeout_ms: int,
                           deadline: float | None = None) -> ProduceResult:
        """acks=-1: wait until the ISR has `result`'s offsets (or time out); other acks return at once.

        As Kafka's DelayedProduce: a duplicate waits for its original offsets like a fresh append;
        the wait completes only while this broker leads at the leader epoch of the append (checked
        when it is registered — the handler awaits between append and wait — and on every
        leadership change: NOT_LEADER_OR_FOLLOWER, the batch may have been truncated); then
        min.insync.replicas is checked against the (maximal) ISR. `deadline` (time.monotonic()) ends the wait
        instead of `timeout_ms` from now, when a request's earlier waits took part of its time.
        """
        if acks != -1:
            return result
        topic, partition = result.topic, result.partition
        part = self._partitions.get((topic, partition))
        if part is None or (result.appended_to is not None and part is not result.appended_to):
            raise NotLeaderOrFollowerError(f"topic '{topic}' partition {partition} left broker {self.broker_id} "
                                           "during the produce")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        needed = result.last_offset + 1
        if (part.is_leader and part.leader_ready and part.leader_epoch == result.leader_epoch
                and part.high_watermark >= needed):
            fut.set_result(None)  # replicated already (a duplicate of a committed batch, or a fast ISR)
        else:
            part.add_ack_waiter(needed, result.leader_epoch, fut)  # fails at once if the epoch moved
        if not fut.done():
            try:
                wait_s = max(timeout_ms, 0) / 1000.0 if deadline is None else max(0.0, deadline - time.monotonic())
                await asyncio.wait_for(fut, wait_s)
            except asyncio.TimeoutError:
                part.discard_ack_waiter(fut)
                raise RequestTimedOutError(
                    f"topic '{topic}' partition {partition}: offsets {result.base_offset}..{result.last_offset} "
                    f"not replicated to the ISR {list(part.isr)} within {timeout_ms} ms (high watermark "
                    f"{part.high_watermark})"
                ) from None
        fut.result()  # NOT_LEADER_OR_FOLLOWER when leadership or its epoch moved
        isr = part.maximal_isr
        if len(isr) < part.min_insync_replicas:
            raise NotEnoughReplicasAfterAppendError(
                f"topic '{topic}' partition {partition}: written at offset {result.base_offset}, but the ISR "
                f"shrank to {list(isr)}, below min.insync.replicas={part.min_insync_replicas}"
            )
        return result

    def append_sync(
        self, topic: str, partition: int, data: bytes | bytearray | memoryview, *, acks: int = 1,
        internal_allowed: bool = False, verify_txn: bool = False, txn_guard: VerificationGuard | None = None,
    ) -> ProduceResult:
        """Append as the leader. `verify_txn` (a client's produce under transaction.partition.verification.enable):
        a transactional batch of a producer without its transaction open here must carry `txn_guard`, the
        verification the coordinator confirmed (`txn_verification`), else INVALID_TXN_STATE (KIP-890)."""
        if topic in INTERNAL_TOPICS and not internal_allowed:
            raise InvalidTopicError(
                f"cannot write to internal topic '{topic}' (partition {partition}): only the broker's group "
                "coordinator writes there; commit offsets with OffsetCommit instead"
            )
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), got {acks}")
        part = self._leader(topic, partition)
        if part.busy is not None:
            raise NotLeaderOrFollowerError(
                f"topic '{topic}' partition {partition}: its producer state is loading on broker "
                f"{self.broker_id}; retry")
        if acks == -1 and len(part.isr) < part.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"topic '{topic}' partition {partition}: {len(part.isr)} in-sync replica(s) {list(part.isr)}, "
                f"min.insync.replicas is {part.min_insync_replicas} (acks=all)"
            )
        lg = part.log
        headers = list(iter_headers(data))
        dup: Duplicate | None = None
        idem = [h for h in headers if h.producer_id >= 0 and h.base_sequence >= 0]
        if idem:
            if len(headers) != 1:
                raise InvalidRequestError(
                    f"idempotent produce to topic '{topic}' partition {partition} must carry exactly one batch, "
                    f"got {len(headers)}"
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
            for h in headers:  # a transactional batch without sequence (the group coordinator's offsets)
                if h.producer_id >= 0 and h.is_transactional and not h.is_control:
                    part.producers.check_epoch(h.producer_id, h.producer_epoch)
        before = lg.log_end_offset
        result = lg.append_as_leader(data, leader_epoch=part.leader_epoch, defer_flush=True, defer_roll=True)
        if lg.active_segment.base_offset != part.snapshot_base:  # rolled: snapshot the producer state (per roll)
            self._maybe_snapshot_producers(part, before)
        if idem:
            h = idem[0]
            part.producers.update(
                h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                result.first_offset, result.last_offset, result.max_timestamp, transactional=h.is_transactional,
            )
            if h.is_transactional:
                part.publish_unstable()
        if result.roll_due:
            self._roll_later(part)  # after the producer state caught up: it is snapshotted at the new segment
        part.maybe_advance_high_watermark()
        self._dirty.add((topic, partition))
        part.wake()
        try:
            self._bytes_in.labels(topic=topic).inc(len(data))
            self._records_in.labels(topic=topic).inc(result.record_count)
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
