"""One transactional id's state and the transitions between states (Kafka's TransactionMetadata).

Why: every coordinator request is a transition of one id's state — InitProducerId bumps the epoch,
AddPartitionsToTxn makes it Ongoing, EndTxn prepares a commit or abort and, once the markers are written,
completes it — and each transition must be durable in `__transaction_state` before it takes effect. So a
transition is prepared here as a `TxnTransit` (the state to write), marked pending on the id (a second
request meanwhile gets CONCURRENT_TRANSACTIONS), written by the coordinator, and only then applied
(`complete`) or dropped (`abort_pending`). Kafka's rules: which previous states a state may follow
(`VALID_PREVIOUS`), an epoch never reaching 32767 (Short.MaxValue is kept for fencing; at 32766 the
producer id rotates), and Empty holding no partitions.

PrepareEpochFence is Kafka's transient state for fencing a producer whose transaction is Ongoing; it is
never written (the epoch bump is written as part of PrepareAbort) and Kelp folds it into the coordinator's
fence-then-abort step, so here it only exists as a state id a log written by Kafka could not contain.

This module must never do I/O, await, or read the clock: callers pass `now_ms`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .txn_log import TxnLogValue

__all__ = ["TxnState", "TxnTransit", "TransactionMetadata", "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH",
           "epoch_exhausted", "TransitionError"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767


class TxnState(enum.IntEnum):
    """Kafka's TransactionState ids (the log's `transaction_status`); `kafka_name` is what DescribeTransactions says."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, name: str) -> "TxnState | None":
        return next((s for s in cls if s.kafka_name == name), None)


S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # Transactions v2 may abort with nothing added (Empty, or after a completed transaction).
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
EXPIRATION_ALLOWED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps Short.MaxValue for fencing: at 32766 a producer id is used up."""
    return epoch >= MAX_EPOCH - 1


class TransitionError(Exception):
    """A transition Kafka's state machine forbids: a bug in the caller, never a client's error."""


@dataclass(frozen=True)
class TxnTransit:
    """The state a transition writes to `__transaction_state` and applies once it is durable."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    update_ms: int
    next_producer_id: int = NO_PRODUCER_ID  # transactions v2: the producer id after an epoch rollover
    client_tv: int = 0  # the transaction version the client uses (2: an epoch bump per transaction)

    def log_value(self) -> TxnLogValue:
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, int(self.state),
                           tuple(sorted(self.partitions)), self.update_ms, self.start_ms,
                           previous_producer_id=self.last_producer_id, next_producer_id=self.next_producer_id,
                           client_transaction_version=self.client_tv)


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    pending: TxnState | None = None  # a transition being written
    failed_epoch_fence: bool = False  # a fence's PrepareAbort write failed: the next fence must not bump again
    # Transactions v2 (KIP-890 part 2), written in TransactionLogValue v1's tagged fields:
    next_producer_id: int = NO_PRODUCER_ID  # a Prepare state's producer id for after an epoch rollover
    client_tv: int = 0  # 2 once the client ran a transaction the v2 way (EndTxn v5, partitions added by leaders)

    @classmethod
    def from_log(cls, transactional_id: str, value: TxnLogValue) -> "TransactionMetadata":
        state = TxnState(value.status)
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms, state,
                   last_producer_id=value.previous_producer_id,
                   partitions=set(value.partitions) if state is not TxnState.EMPTY else set(),
                   start_ms=value.start_ms, update_ms=value.last_update_ms,
                   next_producer_id=value.next_producer_id, client_tv=value.client_transaction_version)

    @property
    def tv2(self) -> bool:
        return self.client_tv >= 2

    # -- preparing transitions -------------------------------------------------------------------------------
    def _prepare(self, state: TxnState, *, producer_id: int | None = None, epoch: int | None = None,
                 last_epoch: int | None = None, timeout_ms: int | None = None,
                 partitions: frozenset[tuple[str, int]] | None = None, start_ms: int | None = None,
                 next_producer_id: int = NO_PRODUCER_ID, client_tv: int | None = None,
                 now_ms: int) -> TxnTransit:
        if self.pending is not None:
            raise TransitionError(f"transactional id '{self.transactional_id}': preparing {state.kafka_name} while "
                                  f"{self.pending.kafka_name} is pending")
        if self.state not in VALID_PREVIOUS[state]:
            raise TransitionError(f"transactional id '{self.transactional_id}': {self.state.kafka_name} cannot "
                                  f"become {state.kafka_name}")
        transit = TxnTransit(
            producer_id=self.producer_id if producer_id is None else producer_id,
            last_producer_id=self.producer_id if producer_id is not None and producer_id != self.producer_id
            else self.last_producer_id,
            producer_epoch=self.producer_epoch if epoch is None else epoch,
            last_producer_epoch=self.last_producer_epoch if last_epoch is None else last_epoch,
            timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms,
            state=state,
            partitions=frozenset(self.partitions) if partitions is None else partitions,
            start_ms=self.start_ms if start_ms is None else start_ms,
            update_ms=now_ms,
            next_producer_id=next_producer_id,
            client_tv=self.client_tv if client_tv is None else client_tv,
        )
        if transit.state is not TxnState.DEAD and transit.producer_epoch < 0:
            raise TransitionError(f"transactional id '{self.transactional_id}': epoch {transit.producer_epoch}")
        self.pending = state
        return transit

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now_ms: int) -> TxnTransit | None:
        """InitProducerId: Empty with the next epoch; None when `expected_epoch` is neither the current epoch nor
        the one before it (the producer is fenced). A retry with the previous epoch gets the current one again."""
        if epoch_exhausted(self.producer_epoch):
            raise TransitionError(f"transactional id '{self.transactional_id}': epochs of producer "
                                  f"{self.producer_id} exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(TxnState.EMPTY, epoch=epoch, last_epoch=last, timeout_ms=timeout_ms,
                             partitions=frozenset(), start_ms=-1, now_ms=now_ms)

    def prepare_rotation(self, new_producer_id: int, timeout_ms: int, now_ms: int, *,
                         record_last_epoch: bool) -> TxnTransit:
        """InitProducerId with the epochs used up: a new producer id at epoch 0."""
        return self._prepare(TxnState.EMPTY, producer_id=new_producer_id, epoch=0,
                             last_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, now_ms=now_ms)

    def prepare_add_partitions(self, added: set[tuple[str, int]], now_ms: int, *,
                               client_tv: int | None = None) -> TxnTransit:
        starts = self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        return self._prepare(TxnState.ONGOING, partitions=frozenset(self.partitions | added),
                             start_ms=now_ms if starts else self.start_ms, client_tv=client_tv, now_ms=now_ms)

    def fence_epoch(self) -> None:
        """Kafka's prepareFenceProducerEpoch folded with endTransaction's fence step: the epoch goes up by one
        (unless a fence already bumped it and failed to be written) so the Ongoing transaction's producer is
        fenced; the abort that follows writes the new epoch."""
        if self.producer_epoch >= MAX_EPOCH:
            raise TransitionError(f"transactional id '{self.transactional_id}': cannot fence past epoch {MAX_EPOCH}")
        if not self.failed_epoch_fence:
            self.producer_epoch += 1
        self.last_producer_epoch = NO_PRODUCER_EPOCH

    def prepare_end(self, commit: bool, now_ms: int, *, tv2: bool = False,
                    next_producer_id: int = NO_PRODUCER_ID) -> TxnTransit:
        """PrepareCommit / PrepareAbort. With transactions v2 (Kafka's prepareAbortOrCommit for TV2) the epoch
        goes up by one — the markers carry it and the producer's next transaction uses it — and an abort may
        come from Empty or a Complete state (nothing added: no partitions, the start time now); at an
        exhausted epoch `next_producer_id` is the producer id the Complete state rolls over to."""
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if not tv2:
            return self._prepare(state, now_ms=now_ms)
        if self.producer_epoch >= MAX_EPOCH:
            raise TransitionError(f"transactional id '{self.transactional_id}': cannot bump past epoch {MAX_EPOCH}")
        nothing_added = self.state is not TxnState.ONGOING
        return self._prepare(state, epoch=self.producer_epoch + 1, last_epoch=self.producer_epoch,
                             start_ms=now_ms if nothing_added else None, next_producer_id=next_producer_id,
                             client_tv=2, now_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        state = TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        self.failed_epoch_fence = False
        if self.tv2:
            # Kafka's prepareComplete: after a rollover the new producer id starts at epoch 0; the last epoch stays
            # the one the client last used.
            if self.next_producer_id != NO_PRODUCER_ID:
                return self._prepare(state, producer_id=self.next_producer_id, epoch=0, partitions=frozenset(),
                                     now_ms=now_ms)
            return self._prepare(state, partitions=frozenset(), now_ms=now_ms)
        return self._prepare(state, last_epoch=self.producer_epoch, partitions=frozenset(), now_ms=now_ms)

    def prepare_dead(self, now_ms: int) -> TxnTransit:
        return self._prepare(TxnState.DEAD, partitions=frozenset(), now_ms=self.update_ms if self.update_ms >= 0
                             else now_ms)

    # -- finishing them --------------------------------------------------------------------------------------
    def complete(self, transit: TxnTransit) -> None:
        """The transit is durable: it becomes the state."""
        if self.pending is not transit.state:
            raise TransitionError(f"transactional id '{self.transactional_id}': completing {transit.state.kafka_name}"
                                  f" but {self.pending.kafka_name if self.pending else 'nothing'} is pending")
        self.pending = None
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.timeout_ms = transit.timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.start_ms = transit.start_ms
        self.update_ms = transit.update_ms
        self.next_producer_id = transit.next_producer_id
        self.client_tv = transit.client_tv

    def abort_pending(self) -> None:
        """The transit could not be written: the state stays as it was."""
        self.pending = None

    @property
    def in_transaction(self) -> bool:
        return self.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
