"""The one door to partition data, for the Kafka handlers and the HTTP API alike.

Why: appends must pass the same checks (partition exists, acks legal,
idempotent-producer sequence) and fetches the same limits (fetch.min.bytes,
max wait, partition and response max bytes with KIP-74's "first batch even
if too large") whichever protocol asked. It also owns the long-poll: a fetch
that found too little parks a future on each partition it reads, and an
append resolves them — no polling.

Design: single-threaded asyncio, no locks. `Log.append_as_leader` is
synchronous, so the producer-state check, the append and the state update for
one partition run without an `await` between them and cannot interleave.
The high watermark is an explicit value per partition (today: log end offset,
as there is one replica; replication will move it to min LEO over the ISR).

This module must never parse or touch individual records: it works per batch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from kelp.errors import (
    InvalidRequestError,
    InvalidRequiredAcksError,
    KelpError,
    NotEnoughReplicasError,
    OffsetOutOfRangeError,
)

from .config import BrokerConfig
from kelp.records import iter_headers

from .producer_state import Duplicate, ProducerStateManager

__all__ = [
    "ReplicaManager",
    "SegmentSlice",
    "close_results",
    "ProduceResult",
    "FetchPartition",
    "FetchPartitionResult",
    "PartitionInfo",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
]

log = logging.getLogger("kelp.broker.replica")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
PRODUCER_STATE_SEGMENTS = 2
# Below this a fetch copies the bytes (one pread) instead of sendfile's extra round trips.
ZERO_COPY_MIN_BYTES = 64 * 1024

try:  # metrics land with the HTTP part; the core works without them
    from kelp.broker import metrics as _metrics  # type: ignore[attr-defined]
except Exception:  # pragma: no cover - depends on another part being present
    _metrics = None


def _metric(name: str) -> Any:
    return getattr(_metrics, name, None) if _metrics is not None else None


@dataclass(slots=True)
class ProduceResult:
    """Outcome of one partition's append (also for acknowledged duplicates)."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_count: int = 0
    duplicate: bool = False


@dataclass(slots=True)
class FetchPartition:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1


class SegmentSlice:
    """A byte range of an open segment file, sent with `sendfile` (zero copy).

    The file is opened in the same synchronous step that computed the range,
    so the range is consistent with that file even if the segment is later
    deleted or replaced. `len()` is the byte count. Close it when done.
    """

    __slots__ = ("file", "position", "size", "records")

    def __init__(self, file: Any, position: int, size: int, records: int = 0) -> None:
        self.file = file
        self.position = position
        self.size = size
        self.records = records  # record count of the range's batches (from their headers)

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def read(self) -> bytes:
        return os.pread(self.file.fileno(), self.size, self.position)

    def close(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass


def close_results(results: Sequence["FetchPartitionResult"]) -> None:
    for r in results:
        if isinstance(r.records, SegmentSlice):
            r.records.close()


@dataclass(slots=True)
class FetchPartitionResult:
    topic: str
    partition: int
    error: KelpError | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview | SegmentSlice = b""


@dataclass(slots=True)
class PartitionInfo:
    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int


@dataclass(slots=True)
class _Partition:
    topic: str
    partition: int
    log: Any
    producers: ProducerStateManager
    waiters: set = field(default_factory=set)
    leader_epoch: int = 0
    min_insync_replicas: int = 1
    isr: tuple[int, ...] = (0,)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark


class ReplicaManager:
    def __init__(self, config: BrokerConfig, logs: Any, topics: Any) -> None:
        self.config = config
        self.logs = logs
        self.topics = topics
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._dirty: set[tuple[str, int]] = set()  # appended since the last checkpoint
        self._bytes_in = _metric("BYTES_IN")
        self._bytes_out = _metric("BYTES_OUT")
        self._records_in = _metric("RECORDS_IN")
        self._records_out = _metric("RECORDS_OUT")
        topics.add_listener(self._on_topic_change)

    # -- partitions -----------------------------------------------------
    def _on_topic_change(self, event: str, topic: str) -> None:
        if event == "altered":
            for (name, _p), part in self._partitions.items():
                if name == topic:
                    part.min_insync_replicas = self._min_isr(topic)
        if event == "deleted":
            for key in [k for k in self._partitions if k[0] == topic]:
                part = self._partitions.pop(key)
                for fut in part.waiters:
                    if not fut.done():
                        fut.set_result(None)

    def _partition(self, topic: str, partition: int) -> _Partition:
        part = self._partitions.get((topic, partition))
        if part is not None:
            return part
        self.topics.check_partition(topic, partition)
        lg = self.logs.get(topic, partition)
        if lg is None:
            lg = self.logs.get_or_create(topic, partition, self.topics.log_config(topic))
        producers = ProducerStateManager(topic, partition)
        self._rebuild_producer_state(lg, producers)
        part = _Partition(topic, partition, lg, producers, min_insync_replicas=self._min_isr(topic),
                          isr=(self.config.broker_id,))
        self._update_high_watermark(part)
        self._partitions[(topic, partition)] = part
        return part

    def _min_isr(self, topic: str) -> int:
        try:
            return int(self.topics.effective_configs(topic)["min.insync.replicas"][0])
        except (KelpError, KeyError, ValueError):
            return 1

    def _rebuild_producer_state(self, lg: Any, producers: ProducerStateManager) -> None:
        """Replay the batch headers of the last segments (per batch: one header read each)."""
        segments = list(getattr(lg, "segments", []) or [])
        if not segments or lg.log_end_offset <= lg.log_start_offset:
            return
        seen = 0
        for segment in segments[-PRODUCER_STATE_SEGMENTS:]:
            for h in segment.headers(0):
                seen += 1
                if h.producer_id < 0 or h.base_sequence < 0 or h.is_control or h.base_offset < lg.log_start_offset:
                    continue
                producers.update(
                    h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                    h.base_offset, h.last_offset, h.max_timestamp,
                )
        if len(producers):
            log.info(
                "rebuilt idempotent-producer state of %s-%d from %d batch header(s): %d producer(s)",
                producers.topic, producers.partition, seen, len(producers),
            )

    def _update_high_watermark(self, part: _Partition) -> None:
        # One replica: HW = LEO. Replication will replace this with min LEO over the ISR.
        lg = part.log
        leo = lg.log_end_offset
        if lg.high_watermark != leo:
            lg.high_watermark = leo

    def _wake(self, part: _Partition) -> None:
        if part.waiters:
            for fut in part.waiters:
                if not fut.done():
                    fut.set_result(None)
            part.waiters.clear()

    # -- produce --------------------------------------------------------
    async def append(
        self,
        topic: str,
        partition: int,
        data: bytes | bytearray | memoryview,
        *,
        acks: int = 1,
        timeout_ms: int = 30000,
    ) -> ProduceResult:
        """Append a produce request's batches for one partition."""
        return self.append_sync(topic, partition, data, acks=acks)

    def append_sync(
        self, topic: str, partition: int, data: bytes | bytearray | memoryview, *, acks: int = 1
    ) -> ProduceResult:
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), got {acks}")
        part = self._partition(topic, partition)
        if acks == -1 and len(part.isr) < part.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"topic '{topic}' partition {partition}: {len(part.isr)} in-sync replica(s), "
                f"min.insync.replicas is {part.min_insync_replicas} (acks=all)"
            )
        lg = part.log
        headers = list(iter_headers(data))
        dup: Duplicate | None = None
        idem = [h for h in headers if h.producer_id >= 0 and h.base_sequence >= 0]
        if idem:
            if len(headers) != 1:
                raise InvalidRequestError(
                    f"idempotent produce to topic '{topic}' partition {partition} must carry exactly one batch, got {len(headers)}"
                )
            h = idem[0]
            dup = part.producers.check(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence)
            if dup is not None:
                log.info(
                    "duplicate batch from producer %d epoch %d sequence %d..%d on %s-%d: acknowledged with offset %d, not stored again",
                    h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence, topic, partition, dup.first_offset,
                )
                return ProduceResult(
                    topic, partition, dup.first_offset, dup.last_offset, -1, lg.log_start_offset, 0, duplicate=True
                )
        result = lg.append_as_leader(data, leader_epoch=part.leader_epoch)
        if idem:
            h = idem[0]
            part.producers.update(
                h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                result.first_offset, result.last_offset, result.max_timestamp,
            )
        self._update_high_watermark(part)
        self._dirty.add((topic, partition))
        self._wake(part)
        if self._bytes_in is not None:
            try:
                self._bytes_in.labels(topic=topic).inc(len(data)) if hasattr(self._bytes_in, "labels") else self._bytes_in.inc(len(data))
                if self._records_in is not None:
                    (self._records_in.labels(topic=topic) if hasattr(self._records_in, "labels") else self._records_in).inc(result.record_count)
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
        )

    # -- fetch ----------------------------------------------------------
    def _read(
        self, requests: Sequence[FetchPartition], *, max_bytes: int, replica_id: int = -1, zero_copy: bool = False
    ) -> tuple[list[FetchPartitionResult], int]:
        results: list[FetchPartitionResult] = []
        remaining = max_bytes
        min_one = True
        total = 0
        for req in requests:
            res = FetchPartitionResult(req.topic, req.partition)
            results.append(res)
            try:
                part = self._partition(req.topic, req.partition)
            except KelpError as exc:
                res.error = exc
                continue
            lg = part.log
            res.high_watermark = part.high_watermark
            res.last_stable_offset = res.high_watermark
            res.log_start_offset = lg.log_start_offset
            limit = min(req.max_bytes, remaining)
            if limit <= 0 and not min_one:
                continue
            upper = None if replica_id >= 0 else res.high_watermark
            if req.offset == (upper if upper is not None else lg.log_end_offset) and req.offset >= lg.log_start_offset:
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
                n = len(data)
                total += n
                remaining -= n
                min_one = False
        return results, total

    @staticmethod
    def _read_one(
        lg: Any, offset: int, limit: int, upper: int | None, min_one: bool, zero_copy: bool
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
                    return SegmentSlice(file, found.position, found.size, found.records)
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
    ) -> list[FetchPartitionResult]:
        """Read whole batches; wait up to `max_wait_ms` until `min_bytes` are available.

        With `zero_copy`, large reads come back as `SegmentSlice`s (open files the
        caller must send with sendfile and close, e.g. via `close_results`).
        """
        results, total = self._read(requests, max_bytes=max_bytes, replica_id=replica_id, zero_copy=zero_copy)
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
            fut = loop.create_future()
            parts = []
            for req in requests:
                part = self._partitions.get((req.topic, req.partition))
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
            close_results(results)
            results, total = self._read(requests, max_bytes=max_bytes, replica_id=replica_id, zero_copy=zero_copy)
            if total >= max(min_bytes, 1) or any(r.error is not None for r in results):
                break
        return self._account(results)

    def _account(self, results: list[FetchPartitionResult]) -> list[FetchPartitionResult]:
        if self._bytes_out is not None:
            try:
                for r in results:
                    if r.records:
                        m = self._bytes_out
                        (m.labels(topic=r.topic) if hasattr(m, "labels") else m).inc(len(r.records))
                        if self._records_out is not None:
                            if isinstance(r.records, SegmentSlice):
                                n = r.records.records  # counted from the headers when the range was cut
                            else:
                                n = sum(h.record_count for h in iter_headers(r.records))  # per batch
                            m = self._records_out
                            (m.labels(topic=r.topic) if hasattr(m, "labels") else m).inc(n)
            except Exception:  # metrics must never fail a fetch
                pass
        return results

    # -- offsets --------------------------------------------------------
    def list_offset(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp) for earliest (-2), latest (-1), max-timestamp (-3) or a time."""
        part = self._partition(topic, partition)
        lg = part.log
        if timestamp == EARLIEST_TIMESTAMP:
            return lg.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return part.high_watermark, -1
        if timestamp == MAX_TIMESTAMP:
            found = None
            getter = getattr(lg, "max_timestamp_and_offset", None)
            if getter is not None:
                found = getter()
            if found is None:
                return -1, -1
            return found[0], found[1]
        found = lg.offset_for_timestamp(timestamp)
        if found is None:
            return -1, -1
        offset, ts = found
        return offset, ts

    def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        part = self._partition(topic, partition)
        lg = part.log
        return PartitionInfo(
            topic, partition, lg.log_start_offset, lg.log_end_offset, part.high_watermark, lg.size_bytes
        )

    def end_offset_for_epoch(self, topic: str, partition: int, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch (KIP-101/320); (-1, -1) when unknown."""
        part = self._partition(topic, partition)
        return part.log.end_offset_for_epoch(epoch)

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self._partition(topic, partition).leader_epoch

    def checkpoint_dirty(self) -> int:
        """Persist high watermark / log start of partitions appended to since the last call."""
        return self.write_checkpoints(self.take_dirty())

    def take_dirty(self) -> list[Any]:
        """The logs appended to since the last call (call on the event loop; cheap)."""
        dirty, self._dirty = self._dirty, set()
        logs = []
        for key in dirty:
            part = self._partitions.get(key)
            if part is not None:
                logs.append(part.log)
        return logs

    @staticmethod
    def write_checkpoints(logs: Sequence[Any]) -> int:
        """Write each log's checkpoint (fsync'd file work: the broker runs this in a thread)."""
        done = 0
        for lg in logs:
            try:
                lg.write_checkpoint()
                done += 1
            except Exception as exc:  # a closed or deleted log: nothing to keep
                log.debug("checkpoint of %s skipped: %s", getattr(lg, "name", lg), exc)
        return done

    def close(self) -> None:
        for part in self._partitions.values():
            self._wake(part)
        self._partitions.clear()


def now_ms() -> int:
    return int(time.time() * 1000)
