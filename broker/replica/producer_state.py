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

Transactions (issue 21), as Kafka's `ProducerAppendInfo` / `ProducerStateManager`:
a producer's first transactional batch after a marker opens its transaction
at that batch's offset (kept in the entry and in `_ongoing`, ordered by first
offset); a plain batch while it is open is refused (INVALID_TXN_STATE). A
marker (`check_marker` before the append, `apply_marker` after) with an older
producer epoch is refused (INVALID_PRODUCER_EPOCH), one from an older
coordinator epoch too (TRANSACTION_COORDINATOR_FENCED); it closes the
transaction and returns it (`CompletedTxn`, with the last stable offset right
after it, for the aborted-transaction index). A completed transaction stays
*unreplicated* until the high watermark passes its marker, so
`first_unstable_offset` — and with it the partition's last stable offset —
never exposes a transaction whose marker a new leader might not have.
Replication and recovery apply markers without the checks (Kafka's
REPLICATION origin). A producer with an open transaction is never expired.

Verification (KIP-890, Kafka's `VerificationStateEntry` / `VerificationGuard`): before a
producer's first transactional batch on this partition the leader asks the transaction coordinator
whether the partition is in the transaction (transactions v2: has it added); `start_verification` records
a unique guard for the producer (with the lowest sequence seen, its epoch, and whether the client runs
transactions v2) and `check_verified` admits the batch only with that same guard — so a verification
answered before an abort marker and a new transaction cannot let a stale batch in (Kafka's ABA case).
Applying the producer's transactional batch drops the entry; from then on the open transaction is the proof,
and later batches cost nothing. A marker drops it too, except the one case Kafka keeps it
(`UnifiedLog.updateProducers`, its `isV2NextTransactionStarted`): a transactions v2 guard whose epoch is the
marker's. EndTxn v5 bumps the epoch and writes the markers under the bumped one, and the client starts its
next transaction at that epoch as soon as EndTxn answers, so that transaction's first batch may reach this
leader — and start its verification — before the previous transaction's marker does; the coordinator
confirms it only once every marker is written, and the marker must not void it meanwhile. That marker
cannot be an ABA case: a transaction at the guard's epoch can only end under a later epoch.

This module must never write to the log or do I/O: the replica manager asks
`check` / `check_marker` before appending and calls `update` / `apply_marker`
after the append succeeded.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kelp.control_records import ControlMarker, read_marker
from kelp.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kelp.records.header import BatchInfo, iter_headers

from ..storage.producer_snapshot import ProducerEntry

__all__ = ["ProducerStateManager", "VerificationGuard", "Duplicate", "CompletedTxn", "ActiveProducer",
           "MAX_CACHED_BATCHES"]

MAX_CACHED_BATCHES = 5
INT32_MAX = 2**31 - 1
NO_PRODUCER_ID = -1


class _NoEntries(dict[Any, Any]):
    """The one empty map every idle partition's state starts with, in place of four empty dicts of its own (256 B
    a partition; issue 38). Reads, `pop(k, None)` and `clear` work as on any empty dict; a write raises, so a path
    that writes without making its own dict first (`ProducerStateManager._own`) fails loudly instead of writing
    into every partition's state."""

    __slots__ = ()

    def _refused(self, *_args: object, **_kwargs: object) -> None:
        raise TypeError("the shared empty producer map is read-only: make the partition's own dict first")

    __setitem__ = __delitem__ = setdefault = update = popitem = __ior__ = _refused  # type: ignore[assignment]  # why: every writer refused


_NONE: dict[Any, Any] = _NoEntries()

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
    coordinator_epoch: int = -1
    txn_first_offset: int = -1  # first offset of its open transaction; -1 when none is open
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(slots=True, eq=False)
class VerificationGuard:
    """A producer's pending verification on one partition (Kafka's VerificationStateEntry): compared by
    identity, each new verification a new object. `supports_epoch_bump`: asked for a transactions v2 client
    (Produce v12+), whose guard survives the previous transaction's marker at its epoch."""

    epoch: int
    lowest_seq: int
    timestamp_ms: int
    supports_epoch_bump: bool = False


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retried batch: answer with these offsets, store nothing."""

    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker closed: its offsets, whether it was aborted, and the last stable offset right
    after it (the first offset of the oldest transaction still open, else the marker's offset + 1)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """One producer as DescribeProducers answers it (Kafka's `UnifiedLog.activeProducers`): -1 for a last
    sequence, timestamp or coordinator epoch not known, `txn_start_offset` -1 when no transaction is open."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    txn_start_offset: int


class ProducerStateManager:
    """Sequence and transaction bookkeeping for one partition.

    Its four maps start as the shared read-only `_NONE` (most partitions never see an idempotent producer); each
    write site makes the partition's own dict first (`_own`)."""

    __slots__ = ("topic", "partition", "_producers", "_ongoing", "_unreplicated", "_verifying")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._producers: dict[int, _ProducerEntry] = _NONE
        # Open transactions: first offset -> producer id, in first-offset order (appends come in offset order).
        self._ongoing: dict[int, int] = _NONE
        # Closed transactions whose marker is not below the high watermark yet: first offset -> marker offset.
        self._unreplicated: dict[int, int] = _NONE
        # Producers whose first transactional batch here awaits (or passed) the coordinator's verification.
        self._verifying: dict[int, VerificationGuard] = _NONE

    def _own(self) -> None:
        """Give this partition dicts of its own in place of the shared empty one (before any write)."""
        if self._producers is _NONE:
            self._producers = {}
        if self._ongoing is _NONE:
            self._ongoing = {}
        if self._unreplicated is _NONE:
            self._unreplicated = {}
        if self._verifying is _NONE:
            self._verifying = {}

    def __len__(self) -> int:
        return len(self._producers)

    def last_sequence(self, producer_id: int) -> int | None:
        entry = self._producers.get(producer_id)
        return None if entry is None else entry.last_seq

    # -- verification (KIP-890 part 1) ------------------------------------------------------------------------
    def has_ongoing(self, producer_id: int, epoch: int) -> bool:
        """The producer has a transaction open here at `epoch` (a newer epoch may mean it already ended)."""
        entry = self._producers.get(producer_id)
        return entry is not None and entry.txn_first_offset >= 0 and entry.epoch == epoch

    def start_verification(self, producer_id: int, epoch: int, first_seq: int, now_ms: int, *,
                           supports_epoch_bump: bool = False) -> VerificationGuard | None:
        """Before the coordinator is asked about the producer's transactional batch: None when its
        transaction is open here already (nothing to ask), else its guard (created — for a transactions v2
        client when `supports_epoch_bump` — or the pending one updated with the lowest sequence at the newest
        epoch, as Kafka's maybeCreateVerificationStateEntry). An epoch older than the producer's is refused."""
        entry = self._producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch} on topic "
                f"'{self.topic}' partition {self.partition}")
        if self.has_ongoing(producer_id, epoch):
            return None
        guard = self._verifying.get(producer_id)
        if guard is None:
            self._own()
            guard = self._verifying[producer_id] = VerificationGuard(epoch, first_seq, now_ms, supports_epoch_bump)
        elif epoch > guard.epoch:
            guard.epoch, guard.lowest_seq = epoch, first_seq
        elif epoch == guard.epoch and first_seq < guard.lowest_seq:
            guard.lowest_seq = first_seq
        return guard

    def check_verified(self, producer_id: int, epoch: int, first_seq: int, guard: VerificationGuard | None) -> None:
        """Refuse a transactional batch of a producer whose transaction is not open here: from an epoch older
        than the producer's (INVALID_PRODUCER_EPOCH, checked first as Kafka does: a fenced batch is not a
        verification failure), unless `guard` is its current verification (INVALID_TXN_STATE), or one whose
        sequence is past the lowest the verification saw (OUT_OF_ORDER_SEQUENCE_NUMBER: an earlier batch must
        come first)."""
        if self.has_ongoing(producer_id, epoch):
            return
        entry = self._producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch} on topic "
                f"'{self.topic}' partition {self.partition}")
        current = self._verifying.get(producer_id)
        if guard is None or current is not guard:
            raise InvalidTxnStateError(
                f"producer {producer_id} epoch {epoch}: record was not part of an ongoing transaction on topic "
                f"'{self.topic}' partition {self.partition} (the partition was not verified in its transaction)")
        if first_seq > current.lowest_seq:
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch} sent sequence {first_seq} on topic '{self.topic}' partition "
                f"{self.partition} before its earlier sequence {current.lowest_seq} of the transaction")

    def check_epoch(self, producer_id: int, epoch: int) -> None:
        """A batch without sequence (a transactional offsets batch of the group coordinator) from an epoch older
        than the producer's is refused, as Kafka's checkProducerEpoch: after a transactions v2 marker moved the
        epoch on, a late commit of the ended transaction cannot open a new one."""
        entry = self._producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch} on topic "
                f"'{self.topic}' partition {self.partition}")

    def verification(self, producer_id: int) -> VerificationGuard | None:
        return self._verifying.get(producer_id)

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, *,
              transactional: bool = False, verify: bool = False,
              guard: VerificationGuard | None = None) -> Duplicate | None:
        """Validate one batch before it is appended, in Kafka's order (`UnifiedLog.analyzeAndValidateProducerState`
        then `ProducerAppendInfo`): a retry of one of the last five batches is a `Duplicate` (answered with its
        offsets, whatever happened since); then, with `verify` (a client's transactional batch under
        transaction.partition.verification.enable), `check_verified` against `guard`; then the sequence. Returns
        None if the batch is next in sequence; raises otherwise."""
        if producer_id == NO_PRODUCER_ID or first_seq < 0:
            return None
        entry = self._producers.get(producer_id)
        if entry is not None and epoch == entry.epoch:
            for cached in entry.batches:
                if cached.first_seq == first_seq and cached.last_seq == last_seq:
                    return Duplicate(cached.first_offset, cached.last_offset, cached.timestamp)
        if verify:
            self.check_verified(producer_id, epoch, first_seq, guard)
        if entry is None:
            return None  # unknown producer: any sequence (Kafka's rule, see the module docstring)
        self._check_sequence(entry, producer_id, epoch, first_seq)
        if entry.txn_first_offset >= 0 and not transactional:
            raise InvalidTxnStateError(
                f"producer {producer_id} sent a non-transactional batch to topic '{self.topic}' partition "
                f"{self.partition} while its transaction from offset {entry.txn_first_offset} is open")
        return None

    def _check_sequence(self, entry: _ProducerEntry, producer_id: int, epoch: int, first_seq: int) -> None:
        where = f"topic '{self.topic}' partition {self.partition}"
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch} on {where}"
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} started epoch {epoch} with sequence {first_seq}, expected 0, on {where}"
                )
            return
        expected = 0 if entry.last_seq == INT32_MAX else entry.last_seq + 1
        if first_seq != expected:
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch} sent sequence {first_seq} on {where}, expected {expected} "
                f"(last acknowledged sequence {entry.last_seq})"
            )

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        *,
        transactional: bool = False,
    ) -> None:
        if producer_id == NO_PRODUCER_ID or first_seq < 0:
            return
        entry = self._producers.get(producer_id)
        if entry is None:
            self._own()
            entry = self._producers[producer_id] = _ProducerEntry(epoch=epoch)
        elif epoch > entry.epoch:  # a new epoch forgets the batches, not the open transaction (as Kafka)
            entry.epoch = epoch
            entry.batches.clear()
        elif epoch < entry.epoch:
            return
        entry.batches.append(_CachedBatch(first_seq, last_seq, first_offset, last_offset, timestamp))
        entry.last_timestamp = timestamp
        if transactional and self._verifying:
            self._verifying.pop(producer_id, None)  # the open transaction is the proof from now on
        if transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = first_offset
            self._ongoing[first_offset] = producer_id

    # -- transactions ---------------------------------------------------------
    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Validate an end-transaction marker before the leader appends it (Kafka's appendEndTxnMarker)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        where = f"topic '{self.topic}' partition {self.partition}"
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"transaction marker for producer {producer_id} has epoch {epoch}, older than its current epoch "
                f"{entry.epoch} on {where}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"transaction marker for producer {producer_id} comes from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch} already seen on {where}")

    def apply_marker(self, producer_id: int, epoch: int, coordinator_epoch: int, offset: int, *, commit: bool,
                     timestamp: int) -> CompletedTxn | None:
        """A marker at `offset` was appended: close the producer's transaction. Returns it, None when no
        transaction was open (a marker without data changes neither the LSO nor the index)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            self._own()
            entry = self._producers[producer_id] = _ProducerEntry(epoch=epoch)
        elif epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        if self._verifying:
            guard = self._verifying.get(producer_id)
            # A verification from before the marker is stale — unless it is a transactions v2 client's next
            # transaction at the marker's (bumped) epoch (Kafka's isV2NextTransactionStarted).
            if guard is not None and not (guard.supports_epoch_bump and guard.epoch == epoch):
                del self._verifying[producer_id]
        completed = None
        first = entry.txn_first_offset
        if first >= 0:
            self._ongoing.pop(first, None)
            lso = next(iter(self._ongoing), offset + 1)
            completed = CompletedTxn(producer_id, first, offset, not commit, lso)
            self._unreplicated[first] = offset
        entry.txn_first_offset = -1
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        entry.last_timestamp = timestamp
        return completed

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an open transaction, or of a closed one whose marker is not below
        `high_watermark` yet (those below it are forgotten here); None when there is none."""
        if self._unreplicated:
            for first in [f for f, marker in self._unreplicated.items() if marker < high_watermark]:
                del self._unreplicated[first]
        first_open = next(iter(self._ongoing), None)
        if not self._unreplicated:
            return first_open
        oldest = min(self._unreplicated)
        return oldest if first_open is None else min(oldest, first_open)

    def ongoing_transactions(self) -> dict[int, int]:
        """Open transactions: producer id -> first offset."""
        return {pid: first for first, pid in self._ongoing.items()}

    def active_producers(self) -> list[ActiveProducer]:
        """Every producer known here, by producer id (DescribeProducers, `kafka-transactions find-hanging`)."""
        return [ActiveProducer(pid, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch, e.txn_first_offset)
                for pid, e in sorted(self._producers.items())]

    def entries(self) -> list[ProducerEntry]:
        """A copy of the state for a snapshot file (open transactions included)."""
        return [
            ProducerEntry(pid, entry.epoch,
                          tuple((b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
                                for b in entry.batches),
                          entry.coordinator_epoch, entry.txn_first_offset, entry.last_timestamp)
            for pid, entry in self._producers.items()
        ]

    def load_entries(self, entries: list[ProducerEntry]) -> None:
        """Replace the state with a snapshot's `entries` (see `entries`)."""
        self.truncate()
        self._own()
        for e in entries:
            entry = _ProducerEntry(epoch=e.epoch, coordinator_epoch=e.coordinator_epoch,
                                   txn_first_offset=e.txn_first_offset, last_timestamp=e.last_timestamp)
            for b in e.batches:
                entry.batches.append(_CachedBatch(*b))
            self._producers[e.producer_id] = entry
        for first, pid in sorted((e.txn_first_offset, e.producer_id) for e in entries if e.txn_first_offset >= 0):
            self._ongoing[first] = pid

    def apply_batch(self, h: BatchInfo, marker: ControlMarker | None = None) -> CompletedTxn | None:
        """Apply one stored batch without checks (a follower's append, a rebuild: Kafka's REPLICATION
        origin); `marker` is what a control batch says (`kelp.control_records.read_marker`). Returns the
        transaction a marker closed, if any."""
        if h.producer_id == NO_PRODUCER_ID:
            return None
        if h.is_control:
            if marker is None:
                return None
            return self.apply_marker(h.producer_id, h.producer_epoch, marker.coordinator_epoch, h.base_offset,
                                     commit=marker.commit, timestamp=h.max_timestamp)
        if h.base_sequence >= 0:
            self.update(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence, h.base_offset,
                        h.last_offset, h.max_timestamp, transactional=h.is_transactional)
        return None

    def load_batches(self, data: bytes | bytearray | memoryview) -> int:
        """Rebuild from stored batches (oldest first); returns batches seen."""
        seen = 0
        for h in iter_headers(data):
            seen += 1
            self.apply_batch(h, read_marker(data, h) if h.is_control and h.producer_id >= 0 else None)
        return seen

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch's timestamp is `expiration_ms` or more before `now_ms`; returns
        how many."""
        horizon = now_ms - expiration_ms
        doomed = [pid for pid, entry in self._producers.items()
                  if entry.txn_first_offset < 0 and entry.last_timestamp <= horizon]
        for pid in doomed:
            del self._producers[pid]
        for pid in [pid for pid, g in self._verifying.items() if g.timestamp_ms <= horizon]:
            del self._verifying[pid]
        return len(doomed)

    def truncate(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._verifying.clear()
