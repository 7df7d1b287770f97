"""The read side of the replica manager: fetch limits, the long-poll and zero-copy reads.

Why: a fetch must apply the same limits (fetch.min.bytes, max wait, partition
and response max bytes with KIP-74's "first batch even if too large")
whichever protocol asked, and a follower's fetch is how the leader learns its
progress (ISR expansion, high watermark) — once its fetch offset is known to
lie in the leader's log. A read_committed consumer (isolation level 1) reads
below the last stable offset instead of the high watermark and is told the
aborted transactions overlapping what it got (from the segments'
aborted-transaction indexes, in memory). A follower out of the ISR gets
nothing for partitions its topic lists in `leader.replication.throttled.replicas`
while this broker's leader replication quota is over its rate (KIP-73,
`replication_quota`). `ReplicaManager` composes it with the
partition table and the leader's ISR proposals (`isr_changes`).
"""

from __future__ import annotations

import asyncio
import os
from typing import Sequence

from kelp.clock import WallClockMs
from kelp.errors import KelpError, NotLeaderOrFollowerError, OffsetOutOfRangeError
from kelp.records.header import iter_headers

from ..storage import Log
from .interfaces import TopicCounter
from .isr_changes import IsrChanges
from .partition import Partition
from .replication_quota import ReplicationQuotas
from .results import FetchPartition, FetchPartitionResult, SegmentSlice, close_results
from .table import PartitionTable

__all__ = ["FetchPath", "ZERO_COPY_MIN_BYTES", "READ_COMMITTED"]

# Below this a fetch copies the bytes (one pread) instead of sendfile's extra round trips.
ZERO_COPY_MIN_BYTES = 64 * 1024
READ_COMMITTED = 1  # Fetch / ListOffsets isolation_level: read below the last stable offset


class FetchPath:
    """Fetch for consumers and followers."""

    def __init__(self, table: PartitionTable, isr_changes: IsrChanges, quotas: ReplicationQuotas, *,
                 lag_clock_ms: WallClockMs, bytes_out: TopicCounter, records_out: TopicCounter) -> None:
        self.table = table
        self.isr_changes = isr_changes
        self.quotas = quotas  # KIP-73: the leader's replication quota
        self.lag_clock_ms = lag_clock_ms  # monotonic ms: when a follower fetched
        self.bytes_out = bytes_out  # the process-wide traffic counters (kelp.broker.metrics)
        self.records_out = records_out

    def _read(
        self, requests: Sequence[FetchPartition], *, max_bytes: int, replica_id: int = -1, zero_copy: bool = False,
        isolation: int = 0, min_one: bool = True, record_progress: bool = True,
    ) -> tuple[list[FetchPartitionResult], int]:
        results: list[FetchPartitionResult] = []
        remaining = max_bytes
        total = 0
        now = self.lag_clock_ms() if replica_id >= 0 else 0
        quotas = self.quotas
        quota = quotas.leader
        for req in requests:
            res = FetchPartitionResult(req.topic, req.partition)
            results.append(res)
            try:
                part = self.table.leader(req.topic, req.partition, req.current_leader_epoch)
            except KelpError as exc:
                res.error = exc
                continue
            lg = part.log
            res.replica = part
            res.high_watermark = part.high_watermark
            res.last_stable_offset = part.last_stable_offset
            res.log_start_offset = lg.log_start_offset
            committed = isolation == READ_COMMITTED and replica_id < 0
            if committed:
                res.aborted_transactions = []
            if replica_id >= 0 and record_progress:
                try:  # as Kafka's Partition.fetchRecords: the read is checked first, progress recorded after
                    self._follower_fetched(part, replica_id, req.offset, now, req.log_start_offset)
                except KelpError as exc:
                    res.error = exc
                    continue
            throttled = replica_id >= 0 and replica_id not in part.isr and quota.is_throttled(req.topic, req.partition)
            if throttled and quota.exceeded():
                quotas.leader.skipped += 1  # KIP-73: a replica catching up waits while the move is over its rate
                continue
            limit = min(req.max_bytes, remaining)
            if limit <= 0 and not min_one:
                continue
            upper = None if replica_id >= 0 else res.last_stable_offset if committed else res.high_watermark
            if req.offset == (upper if upper is not None else lg.log_end_offset) and req.offset >= lg.log_start_offset:
                res.caught_up = True
                continue
            try:
                data = self._read_one(lg, req.offset, max(limit, 0), upper, min_one, zero_copy)
            except KelpError as exc:
                if isinstance(exc, OffsetOutOfRangeError):
                    exc = OffsetOutOfRangeError(
                        f"fetch offset {req.offset} is out of range for topic '{req.topic}' partition {req.partition} "
                        f"(log start {lg.log_start_offset}, high watermark {res.high_watermark})"
                    )
                res.error = exc
                continue
            if data:
                res.records = data
                if committed:
                    res.aborted_transactions = self._aborted_in(lg, req.offset, data)
                n = len(data)
                if throttled:
                    quota.record(n)
                total += n
                remaining -= n
                min_one = False
        return results, total

    def _follower_fetched(self, part: Partition, replica_id: int, offset: int,
                          now: int, log_start_offset: int = -1) -> None:
        """A follower's fetch from `offset` is its progress — only once the offset is known to be in the log.

        A fetch offset past this leader's log end (a follower whose log diverged, e.g. it kept records a
        deposed leader wrote) or below its log start answers OFFSET_OUT_OF_RANGE and counts for nothing:
        it must never advance the high watermark nor win the follower a place in the ISR.
        """
        if replica_id not in part.replicas:
            raise NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of topic '{part.topic}' partition {part.partition} "
                f"(replicas {list(part.replicas)})"
            )
        lg = part.log
        if offset > lg.log_end_offset or offset < lg.log_start_offset:
            raise OffsetOutOfRangeError(
                f"follower {replica_id} fetches topic '{part.topic}' partition {part.partition} from offset {offset}, "
                f"outside the leader's log [{lg.log_start_offset}, {lg.log_end_offset}] (broker {part.broker_id}, "
                f"epoch {part.leader_epoch}); it must truncate first")
        wanted = part.record_follower_fetch(replica_id, offset, now, log_start_offset)
        if wanted is not None:
            self.isr_changes.request_isr(part, wanted, f"broker {replica_id} caught up at offset {offset}")
        if part.maybe_advance_high_watermark():
            part.wake()

    @staticmethod
    def _aborted_in(lg: Log, offset: int, data: bytes | SegmentSlice) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping the fetched range (per batch
        header of the range when it was copied; the zero-copy range knows its end already)."""
        if isinstance(data, SegmentSlice):
            upper = data.next_offset
        else:
            upper = -1
            for h in iter_headers(data):
                upper = h.next_offset
        if upper <= offset:
            return []
        return [(t.producer_id, t.first_offset) for t in lg.collect_aborted_txns(offset, upper)]

    @staticmethod
    def _read_one(
        lg: Log, offset: int, limit: int, upper: int | None, min_one: bool, zero_copy: bool
    ) -> bytes | SegmentSlice:
        if zero_copy:
            found = lg.read_slice(offset, max_bytes=limit, max_offset=upper, min_one_batch=min_one)
            if found is None:
                return b""
            # `found.file` was opened under the log lock: it holds the bytes the range was cut
            # on even if the cleaner swaps a new file in under `found.path` right after.
            file = found.file
            if file is not None:
                if found.size >= ZERO_COPY_MIN_BYTES:
                    return SegmentSlice(file, found.position, found.size, found.records, found.next_offset)
                try:
                    data = os.pread(file.fileno(), found.size, found.position)
                finally:
                    file.close()
                if len(data) == found.size:
                    return data
            # No file (retention deleted the segment in between) or it came up short: copy under the lock.
        return lg.read(offset, max_bytes=limit, max_offset=upper, min_one_batch=min_one)

    async def fetch(
        self,
        requests: Sequence[FetchPartition],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation: int = 0,
        replica_id: int = -1,
        zero_copy: bool = False,
        min_one: bool = True,
    ) -> list[FetchPartitionResult]:
        """Read whole batches; wait up to `max_wait_ms` until `min_bytes` are available.

        With `zero_copy`, large reads come back as `SegmentSlice`s (open files the
        caller must send with sendfile and close, e.g. via `close_results`). Without `min_one` a first batch
        larger than the limits is not returned (a fetch adding to what an earlier read of it returned).
        """
        # What each read depends on, taken before it (a change during the read wakes the wait below); not needed
        # by a fetch that does not wait (an incremental session's: it waits on its session).
        views = [self._view(req, isolation) for req in requests] if max_wait_ms > 0 else []
        results, total = self._read(requests, max_bytes=max_bytes, replica_id=replica_id, zero_copy=zero_copy,
                                    isolation=isolation, min_one=min_one)
        if total >= max(min_bytes, 1) or max_wait_ms <= 0 or not requests or any(
            r.error is not None for r in results
        ):
            return self._account(results)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000.0
        while True:
            timeout = deadline - loop.time()
            if timeout <= 0:
                break
            fut: asyncio.Future[None] = loop.create_future()
            parts = []
            for req in requests:
                part = self.table.get(req.topic, req.partition)
                if part is not None:
                    part.waiters.add(fut)
                    parts.append(part)
            if not parts:
                break
            try:
                await asyncio.wait_for(fut, timeout)
            except asyncio.TimeoutError:
                pass
            finally:
                for part in parts:
                    part.waiters.discard(fut)
            # Read again only what moved since it was read (a follower's fetch names 1,000s of partitions and
            # each append to one of them woke it: reading them all again per append was most of a leader's CPU
            # at 3,000 partitions, RF 3). The follower's progress was recorded by the first read.
            changed = [i for i, req in enumerate(requests) if self._view(req, isolation) != views[i]]
            if not changed:
                continue
            kept = total - sum(len(results[i].records) for i in changed)
            for i in changed:
                views[i] = self._view(requests[i], isolation)
            fresh, _ = self._read([requests[i] for i in changed], max_bytes=max_bytes - kept, replica_id=replica_id,
                                  zero_copy=zero_copy, isolation=isolation, min_one=kept == 0,
                                  record_progress=False)
            close_results([results[i] for i in changed])
            for i, res in zip(changed, fresh, strict=True):
                results[i] = res
            total = sum(len(r.records) for r in results)
            if total >= max(min_bytes, 1) or any(r.error is not None for r in results):
                break
        return self._account(results)

    def _view(self, req: FetchPartition, isolation: int) -> tuple[object, ...]:
        """What a read of `req` depends on, from a few attribute reads: when it is unchanged, so is the read."""
        part = self.table.get(req.topic, req.partition)
        if part is None:
            return (None,)
        lg = part.log
        lso = part.last_stable_offset if isolation == READ_COMMITTED else -1
        return (part, part.leader, part.leader_epoch, lg.log_end_offset, part.high_watermark, lg.log_start_offset, lso)

    def _account(self, results: list[FetchPartitionResult]) -> list[FetchPartitionResult]:
        try:
            for r in results:
                if r.records:
                    self.bytes_out.labels(topic=r.topic).inc(len(r.records))
                    if isinstance(r.records, SegmentSlice):
                        n = r.records.records  # counted from the headers when the range was cut
                    else:
                        n = sum(h.record_count for h in iter_headers(r.records))  # per batch
                    self.records_out.labels(topic=r.topic).inc(n)
        except Exception:  # metrics must never fail a fetch
            pass
        return results
