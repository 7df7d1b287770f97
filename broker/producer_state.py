"""Idempotent-producer state: per partition, per producer id.

Why: a producer with `enable.idempotence` retries a batch whose response was
lost; the broker must recognise the retry (same producer id, epoch and
sequence range as one of the last five batches) and answer with the offset the
batch got the first time instead of storing it again, refuse gaps in the
sequence (OUT_OF_ORDER_SEQUENCE_NUMBER) and refuse a stale epoch
(INVALID_PRODUCER_EPOCH). The state is rebuilt on start from batch headers of
the log's last segments — per batch, never per record. A producer that has
not written for `producer.id.expiration.ms` is forgotten (`expire`, run
periodically by the broker, as Kafka's `removeExpiredProducers`), so the
state of producers long gone does not grow without bound.

This module must never write to the log or do I/O: the replica manager asks
`check` before appending and calls `update` after the append succeeded.
Also here: `ProducerIdAllocator`, the persisted counter behind InitProducerId.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kelp.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from kelp.records import iter_headers

__all__ = ["ProducerStateManager", "Duplicate", "MAX_CACHED_BATCHES"]

MAX_CACHED_BATCHES = 5
INT32_MAX = 2**31 - 1
NO_PRODUCER_ID = -1

@dataclass(slots=True)
class _CachedBatch:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class _ProducerEntry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retried batch: answer with these offsets, store nothing."""

    first_offset: int
    last_offset: int
    timestamp: int


class ProducerStateManager:
    """Sequence bookkeeping for one partition."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._producers: dict[int, _ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def last_sequence(self, producer_id: int) -> int | None:
        entry = self._producers.get(producer_id)
        return None if entry is None else entry.last_seq

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> Duplicate | None:
        """Validate one batch before it is appended.

        Returns a `Duplicate` for a retry of one of the last five batches,
        None if the batch is next in sequence; raises otherwise.
        """
        if producer_id == NO_PRODUCER_ID or first_seq < 0:
            return None
        entry = self._producers.get(producer_id)
        where = f"topic '{self.topic}' partition {self.partition}"
        if entry is None:
            return None  # unknown producer (new, or its state expired): accept
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch} on {where}"
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} started epoch {epoch} with sequence {first_seq}, expected 0, on {where}"
                )
            return None
        for cached in entry.batches:
            if cached.first_seq == first_seq and cached.last_seq == last_seq:
                return Duplicate(cached.first_offset, cached.last_offset, cached.timestamp)
        expected = 0 if entry.last_seq == INT32_MAX else entry.last_seq + 1
        if first_seq != expected:
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch} sent sequence {first_seq} on {where}, expected {expected} "
                f"(last acknowledged sequence {entry.last_seq})"
            )
        return None

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
    ) -> None:
        if producer_id == NO_PRODUCER_ID or first_seq < 0:
            return
        entry = self._producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = _ProducerEntry(epoch=epoch)
            self._producers[producer_id] = entry
        elif epoch < entry.epoch:
            return
        entry.batches.append(_CachedBatch(first_seq, last_seq, first_offset, last_offset, timestamp))

    def load_batches(self, data: bytes | bytearray | memoryview) -> int:
        """Rebuild from stored batches (oldest first); returns batches seen."""
        seen = 0
        for h in iter_headers(data):
            seen += 1
            if h.producer_id == NO_PRODUCER_ID or h.base_sequence < 0 or h.is_control:
                continue
            self.update(
                h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                h.base_offset, h.last_offset, h.max_timestamp,
            )
        return seen

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch's timestamp is `expiration_ms` or more before `now_ms`; returns how many."""
        horizon = now_ms - expiration_ms
        doomed = [pid for pid, entry in self._producers.items()
                  if not entry.batches or entry.batches[-1].timestamp <= horizon]
        for pid in doomed:
            del self._producers[pid]
        return len(doomed)

    def truncate(self) -> None:
        self._producers.clear()
