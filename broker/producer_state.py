"""Idempotent-producer state: per partition, per producer id.

Why: a producer with `enable.idempotence` retries a batch whose response was
lost; the broker must recognise the retry (same producer id, epoch and
sequence range as one of the last five batches) and answer with the offset the
batch got the first time instead of storing it again, refuse gaps in the
sequence (OUT_OF_ORDER_SEQUENCE_NUMBER) and refuse a stale epoch
(INVALID_PRODUCER_EPOCH). The state is complete: rebuilt (by
`producer_recovery`, in a worker thread) from the newest producer snapshot at
or below the log end plus every batch header after it — from the log start
when there is no snapshot — per batch, never per record. A producer that has
not written for `producer.id.expiration.ms` is forgotten (`expire`, run
periodically by the broker, as Kafka's `removeExpiredProducers`), so the
state of producers long gone does not grow without bound.

The sequence rules, as Kafka's `ProducerAppendInfo.checkSequence` (since
KIP-360): a known producer at its epoch must continue its sequence (or repeat
one of its last five batches: a duplicate); a known producer at a newer epoch
must start at sequence 0; an older epoch is refused. An *unknown* producer —
never seen here, or every batch of it removed by retention or DeleteRecords,
or expired — is accepted at any sequence: because the state is complete, no
batch of it is in the log, so nothing it sends can be a duplicate of a stored
one, and refusing would wedge a producer whose records merely aged out.

This module must never write to the log or do I/O: the replica manager asks
`check` before appending and calls `update` after the append succeeded.
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
    batches: deque[_CachedBatch] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))

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
            return None  # unknown producer: any sequence (Kafka's rule, see the module docstring)
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

    def entries(self) -> list[tuple[int, int, tuple[tuple[int, int, int, int, int], ...]]]:
        """A copy of the state for a snapshot file: (producer id, epoch, cached batches oldest first)."""
        return [
            (pid, entry.epoch, tuple((b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
                                     for b in entry.batches))
            for pid, entry in self._producers.items()
        ]

    def load_entries(self, entries: list[tuple[int, int, tuple[tuple[int, int, int, int, int], ...]]]) -> None:
        """Replace the state with a snapshot's `entries` (see `entries`)."""
        self._producers.clear()
        for pid, epoch, batches in entries:
            entry = _ProducerEntry(epoch=epoch)
            for b in batches:
                entry.batches.append(_CachedBatch(*b))
            self._producers[pid] = entry

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
        """Forget producers whose last batch's timestamp is `expiration_ms` or more before `now_ms`; returns
        how many."""
        horizon = now_ms - expiration_ms
        doomed = [pid for pid, entry in self._producers.items()
                  if not entry.batches or entry.batches[-1].timestamp <= horizon]
        for pid in doomed:
            del self._producers[pid]
        return len(doomed)

    def truncate(self) -> None:
        self._producers.clear()
