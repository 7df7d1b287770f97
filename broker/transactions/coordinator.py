"""The transaction coordinator: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, and their timers.

Why: the Kafka handlers (`kafka/handlers/transactions.py`, and InitProducerId in `producer_ids.py`) talk to
one object, `broker.transactions`, as Kafka's KafkaApis talks to its TransactionCoordinator. It answers with
Kafka's rules and error codes (transactions "v1", as librdkafka and kafka-python use them: the client adds
its partitions itself and the epoch is bumped only by InitProducerId and by fencing):

- InitProducerId gives a transactional id a producer id (from the cluster's producer-id blocks) and the
  next epoch, which fences every older producer of the id (PRODUCER_FENCED); a transaction of the previous
  producer still Ongoing is aborted first, under a bumped epoch, while the caller gets
  CONCURRENT_TRANSACTIONS and retries.
- AddPartitionsToTxn / AddOffsetsToTxn make the transaction Ongoing with those partitions.
- EndTxn writes PrepareCommit/PrepareAbort, answers, has the markers written on every partition
  (`markers.MarkerDispatcher`), then writes CompleteCommit/CompleteAbort. Until then requests for the id get
  CONCURRENT_TRANSACTIONS — AddPartitionsToTxn/AddOffsetsToTxn and a leader's add for a transactions v2
  client (the producer's next transaction) after waiting up to `completion_wait_ms` for the completion,
  and for another request's transition of the id being written (two leaders adding partitions of one
  transaction at once), which saves the client a retry backoff many times the few ms waited (Kafka's leader
  retries a v2 add every 20 ms for up to 100 ms). A coordinator that loads a Prepare state resumes its
  markers.
- Every `transaction.abort.timed.out.transaction.cleanup.interval.ms` a sweep aborts the Ongoing
  transactions older than their `transaction.timeout.ms`, fencing their producer (epoch + 1, as Kafka);
  every `transaction.remove.expired.transaction.cleanup.interval.ms` ids idle for
  `transactional.id.expiration.ms` are removed (a tombstone in `__transaction_state`).

Each change is durable in `__transaction_state` (acks=all) before it is answered (`state_manager`).
Time (`clock_ms`), producer ids, the store and the marker sender are injected, so unit tests run the state
machine on a manual clock and an in-memory log.

This module must never speak the Kafka wire protocol: handlers translate requests into these calls.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable

from kelp.clock import WallClockMs, wall_clock_ms
from kelp.errors import ErrorCode, KelpError

from ..loop_budget import LoopBudget
from .markers import MarkerDispatcher, MarkerSender, TxnMarker
from .metadata import (
    EXPIRATION_ALLOWED,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnState,
    epoch_exhausted,
)
from .state_manager import TxnStateManager, TxnStore
from .stats import TxnStats
from .txn_config import TxnConfig
from .verifier import TxnVerifier

__all__ = ["TransactionCoordinator", "InitResult", "EndResult", "TxnDescription"]

log = logging.getLogger("kelp.broker.transactions")

_RETRY_COMPLETE = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.UNKNOWN_SERVER_ERROR})


@dataclass(frozen=True)
class InitResult:
    error: int
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True)
class EndResult:
    """EndTxn v5's answer: the producer id and epoch the client's next transaction uses (transactions v2)."""

    error: int
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True)
class TxnDescription:
    transactional_id: str
    error: int
    state: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    timeout_ms: int = 0
    start_ms: int = -1
    partitions: tuple[tuple[str, int], ...] = ()


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, *, store: TxnStore, sender: MarkerSender,
                 next_producer_id: Callable[[], Awaitable[int]], leader_of: Callable[[str, int], int | None],
                 topic_exists: Callable[[str], bool], clock_ms: WallClockMs = wall_clock_ms) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.next_producer_id = next_producer_id
        self.state = TxnStateManager(config, store=store, clock_ms=clock_ms)
        self.markers = MarkerDispatcher(sender, leader_of=leader_of, topic_exists=topic_exists,
                                        backoff_ms=config.marker_backoff_ms,
                                        max_backoff_ms=config.marker_max_backoff_ms)
        self.state.on_loaded = self._resume
        self.state.on_unloaded = self.markers.stop_partition
        self._sweeper: asyncio.Task[None] | None = None
        self.stats = TxnStats()  # read by /metrics
        # Per-broker objects kept with the coordinator by the modules that use it (the FindCoordinator locator).
        self.extensions: dict[str, object] = {}
        # The partition-leader side of KIP-890 (`verifier.TxnVerifier`), set by `attach`; None: not verifying.
        self.verifier: TxnVerifier | None = None

    # -- the cache, as handlers and the leadership listener reach it ---------------------------------------------
    @property
    def txns(self) -> dict[str, TransactionMetadata]:
        return self.state.txns

    def on_become_leader(self, partition: int, epoch: int) -> "asyncio.Future[None]":
        return self.state.on_become_leader(partition, epoch)

    def on_resign(self, partition: int, epoch: int) -> None:
        self.state.on_resign(partition, epoch)

    def check(self, transactional_id: str) -> int:
        return self.state.check(transactional_id)

    # -- InitProducerId -----------------------------------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, timeout_ms: int, *,
                               expected: tuple[int, int] | None = None) -> InitResult:
        """A producer id and epoch for `transactional_id`; `expected` is (producer id, epoch) of KIP-360's
        re-initialisation (InitProducerId v3+), None for a fresh producer."""
        if not transactional_id:
            return InitResult(ErrorCode.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        err = self.check(transactional_id)
        if err:
            return InitResult(err)
        meta = self.txns.get(transactional_id)
        if meta is None:
            try:
                pid = await self.next_producer_id()
            except KelpError as exc:
                return InitResult(exc.code)
            err = self.check(transactional_id)
            if err:
                return InitResult(err)
            meta = self.txns.setdefault(transactional_id, TransactionMetadata(
                transactional_id, pid, NO_PRODUCER_EPOCH, timeout_ms, TxnState.EMPTY, update_ms=self.clock_ms()))
        if meta.pending is not None or self.markers.pending(transactional_id):
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected is not None and not (
                meta.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == meta.producer_id
                or (expected[0] == meta.last_producer_id and epoch_exhausted(expected[1]))):
            return InitResult(ErrorCode.PRODUCER_FENCED)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state is TxnState.ONGOING:
            # Fence the producer of the Ongoing transaction and abort it; the caller retries and bumps again.
            code = await self._fence_and_abort(meta)
            return InitResult(code or ErrorCode.CONCURRENT_TRANSACTIONS)
        now = self.clock_ms()
        if epoch_exhausted(meta.producer_epoch) and (expected is None or expected[1] == meta.producer_epoch):
            try:
                new_pid = await self.next_producer_id()
            except KelpError as exc:
                return InitResult(exc.code)
            if meta.pending is not None:
                return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
            transit = meta.prepare_rotation(new_pid, timeout_ms, now, record_last_epoch=expected is not None)
        else:
            prepared = meta.prepare_increment_epoch(timeout_ms, None if expected is None else expected[1], now)
            if prepared is None:
                return InitResult(ErrorCode.PRODUCER_FENCED)
            transit = prepared
        code = await self.state.write(meta, transit)
        if code:
            return InitResult(code)
        log.info("transactional id '%s': producer id %d epoch %d (partition %d of the transaction state)",
                 transactional_id, meta.producer_id, meta.producer_epoch, self.state.partition_for(transactional_id))
        return InitResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------------------------
    def _validate(self, transactional_id: str, producer_id: int, producer_epoch: int
                  ) -> tuple[int, TransactionMetadata | None]:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        err = self.check(transactional_id)
        if err:
            return err, None
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED, None
        return ErrorCode.NONE, meta

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[tuple[str, int]], *, tv2: bool = False) -> int:
        """Add `partitions` to the transaction (it becomes Ongoing); the error for all of them. `tv2`: added by a
        partition leader for a transactions v2 client (Produce v12+, TxnOffsetCommit v5+), which is recorded."""
        err, meta = self._validate(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return err
        wanted = set(partitions)
        deadline = asyncio.get_running_loop().time() + self.config.completion_wait_ms / 1000.0
        while meta.pending is not None or meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            # The previous transaction is completing (its markers), or another request's transition of the id is
            # being written: wait for it (bounded), then judge again — the world may have moved.
            if not await self._await_write(meta, deadline):
                return ErrorCode.CONCURRENT_TRANSACTIONS
            err, meta = self._validate(transactional_id, producer_id, producer_epoch)
            if meta is None:
                return err
        if meta.state is TxnState.ONGOING and wanted <= meta.partitions and (meta.tv2 or not tv2):
            return ErrorCode.NONE
        starts = meta.state is not TxnState.ONGOING
        code = await self.state.write(meta, meta.prepare_add_partitions(wanted, self.clock_ms(),
                                                                         client_tv=2 if tv2 else None))
        if starts and code == ErrorCode.NONE:
            self.stats.started += 1
        return code

    async def _await_write(self, meta: TransactionMetadata, deadline: float) -> bool:
        """Wait until the id's next state write ends (a Prepare state's completion, another request's
        transition), at most until `deadline` (loop time): True when one did (the caller judges again), False
        at the bound (CONCURRENT_TRANSACTIONS)."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return False
        try:
            await asyncio.wait_for(self.state.changed(meta.transactional_id).wait(), remaining)
        except asyncio.TimeoutError:
            return False
        return True

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn v4+ verify-only (a partition leader asking, KIP-890): NONE for each partition in
        the transaction, TRANSACTION_ABORTABLE for the others, or the error for all."""
        wanted = list(partitions)
        err, meta = self._validate(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return {tp: err for tp in wanted}
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return {tp: ErrorCode.CONCURRENT_TRANSACTIONS for tp in wanted}
        return {tp: ErrorCode.NONE if tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE for tp in wanted}

    # -- EndTxn -------------------------------------------------------------------------------------------------
    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> int:
        """Commit or abort: NONE once the Prepare state is durable (the markers follow)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        err = self.check(transactional_id)
        if err:
            return err
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        return await self._end(meta, commit)

    async def end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         commit: bool) -> EndResult:
        """EndTxn v5 (transactions v2, Kafka's endTransaction for TV2): every commit or abort bumps the epoch
        (at an exhausted epoch the producer id rolls over); the answer carries the producer id and epoch of
        the client's next transaction. A retry of an answered EndTxn (its epoch one below the current) gets the
        same answer; an abort needs no partitions (from Empty or a completed transaction).

        While the previous transaction completes (a Prepare state: its markers are being written) every request
        of the producer id is CONCURRENT_TRANSACTIONS before its epoch is judged, as Kafka, whose Prepare
        state carries the pending Complete state for the whole marker phase (KAFKA-18464). A commit at the
        current epoch of a transaction with nothing added is CONCURRENT_TRANSACTIONS too, where Kafka answers
        INVALID_TXN_STATE: the Java producer (4.x) can send a transaction's EndTxn before its first batch (its
        Sender reads "no incomplete batches" before the application appends and commits), and holds that batch
        until the EndTxn is answered; the retriable answer lets the batch add its partition first, where
        Kafka's answer is fatal to the producer (a Connect exactly-once task dies). A Java producer never sends
        EndTxn for a transaction it sent nothing in, so the retries are bounded by the client's own timeout.
        A commit at the retry epoch of a transaction the coordinator aborted (a timeout) is PRODUCER_FENCED, as
        Kafka since KAFKA-20785 (INVALID_TXN_STATE is fatal to clients; a fenced producer recovers)."""
        if not transactional_id:
            return EndResult(ErrorCode.INVALID_REQUEST)
        err = self.check(transactional_id)
        if err:
            return EndResult(err)
        meta = self.txns.get(transactional_id)
        if meta is None:
            return EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        state = meta.state
        retry_overflow = (meta.last_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                          and meta.producer_epoch == 0)
        retry_bump = meta.producer_epoch == producer_epoch + 1
        if meta.producer_id != producer_id and not retry_overflow:
            return EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if meta.pending is not None or state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        retry = retry_bump or retry_overflow
        if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry or producer_epoch == meta.producer_epoch
        else:
            valid = producer_epoch == meta.producer_epoch
        if not valid:
            return EndResult(ErrorCode.PRODUCER_FENCED)
        current = EndResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
        if state is TxnState.COMPLETE_COMMIT:
            if commit:
                return current if retry else EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
            if retry:
                return EndResult(ErrorCode.INVALID_TXN_STATE)
        elif state is TxnState.COMPLETE_ABORT:
            if not commit:
                if retry:
                    return current
            else:
                return EndResult(ErrorCode.PRODUCER_FENCED if retry else ErrorCode.CONCURRENT_TRANSACTIONS)
        elif state is TxnState.EMPTY:
            if commit:
                return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        elif state is not TxnState.ONGOING:
            return EndResult(ErrorCode.INVALID_TXN_STATE)
        code = await self._end(meta, commit, tv2=True)
        if code:
            return EndResult(code)
        if meta.next_producer_id != NO_PRODUCER_ID:
            return EndResult(ErrorCode.NONE, meta.next_producer_id, 0)
        return EndResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)

    async def _end(self, meta: TransactionMetadata, commit: bool, *, fence: bool = False, tv2: bool = False) -> int:
        if meta.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = meta.state
        if tv2:
            if state not in (TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) \
                    or (commit and state is not TxnState.ONGOING):
                return ErrorCode.INVALID_TXN_STATE
            return await self._prepare_end(meta, commit, fence=fence, tv2=True)
        if state is TxnState.ONGOING:
            pass
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            # A retry of an EndTxn that completed: the same outcome is fine, the other one is not.
            return ErrorCode.NONE if (state is TxnState.COMPLETE_COMMIT) == commit else ErrorCode.INVALID_TXN_STATE
        elif state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS if (state is TxnState.PREPARE_COMMIT) == commit \
                else ErrorCode.INVALID_TXN_STATE
        else:
            return ErrorCode.INVALID_TXN_STATE
        return await self._prepare_end(meta, commit, fence=fence, tv2=False)

    async def _prepare_end(self, meta: TransactionMetadata, commit: bool, *, fence: bool, tv2: bool) -> int:
        """Write PrepareCommit/PrepareAbort, then have the markers written (none for a v2 abort with nothing
        added: it completes at once)."""
        next_pid = NO_PRODUCER_ID
        if tv2 and epoch_exhausted(meta.producer_epoch):
            try:
                next_pid = await self.next_producer_id()
            except KelpError as exc:
                return exc.code
            if meta.pending is not None:
                return ErrorCode.CONCURRENT_TRANSACTIONS
        token = self.state.token(meta.transactional_id)
        code = await self.state.write(meta, meta.prepare_end(commit, self.clock_ms(), tv2=tv2,
                                                             next_producer_id=next_pid))
        if code:
            if fence:
                meta.failed_epoch_fence = True
            return code
        if self.state.token(meta.transactional_id) != token:
            return ErrorCode.NOT_COORDINATOR
        self._send_markers(meta)
        return ErrorCode.NONE

    async def _fence_and_abort(self, meta: TransactionMetadata) -> int:
        """Bump the epoch of an Ongoing transaction (its producer is fenced) and abort it under the new epoch.
        A transactions v2 abort bumps the epoch itself: that bump is the fence."""
        if meta.tv2:
            log.info("transactional id '%s': fencing producer %d at epoch %d by aborting its transaction",
                     meta.transactional_id, meta.producer_id, meta.producer_epoch)
            return await self._end(meta, False, fence=True, tv2=True)
        meta.fence_epoch()
        log.info("transactional id '%s': fencing producer %d at epoch %d and aborting its transaction",
                 meta.transactional_id, meta.producer_id, meta.producer_epoch)
        return await self._end(meta, False, fence=True)

    def _send_markers(self, meta: TransactionMetadata) -> None:
        tid = meta.transactional_id
        token = self.state.token(tid)
        commit = meta.state is TxnState.PREPARE_COMMIT
        marker = TxnMarker(meta.producer_id, meta.producer_epoch, commit, self.state.coordinator_epoch(tid),
                           tuple(sorted(meta.partitions)), transaction_version=2 if meta.tv2 else 0)

        def still_owned() -> bool:
            return self.state.token(tid) == token and self.txns.get(tid) is meta

        async def done() -> None:
            await self._complete(meta, token)

        self.markers.dispatch(tid, self.state.partition_for(tid), marker, still_owned=still_owned, done=done)

    async def _complete(self, meta: TransactionMetadata, token: int | None) -> None:
        """Every marker is written: CompleteCommit/CompleteAbort, retried while this broker coordinates the id."""
        tid = meta.transactional_id
        backoff = self.config.marker_backoff_ms
        while self.state.token(tid) == token and self.txns.get(tid) is meta:
            if meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) or meta.pending is not None:
                return
            transit = meta.prepare_complete(self.clock_ms())
            code = await self.state.write(meta, transit)
            if code == ErrorCode.NONE:  # written and applied: meta.state is now transit.state
                if transit.state is TxnState.COMPLETE_COMMIT:
                    self.stats.committed += 1
                else:
                    self.stats.aborted += 1
                log.info("transactional id '%s': %s (producer %d epoch %d)", tid, meta.state.kafka_name,
                         meta.producer_id, meta.producer_epoch)
                return
            if code not in _RETRY_COMPLETE:
                return
            await asyncio.sleep(backoff / 1000.0)
            backoff = min(backoff * 2, self.config.marker_max_backoff_ms)

    def _resume(self, partition: int, epoch: int, loaded: list[TransactionMetadata]) -> None:
        """A loaded partition's transactions in a Prepare state: their markers are (re)sent by this coordinator."""
        for meta in loaded:
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) \
                    and self.txns.get(meta.transactional_id) is meta:
                log.info("transactional id '%s': loaded in %s; sending its markers", meta.transactional_id,
                         meta.state.kafka_name)
                self._send_markers(meta)

    # -- timers -------------------------------------------------------------------------------------------------
    async def abort_timed_out(self) -> int:
        """Abort (and fence) every Ongoing transaction older than its timeout; returns how many were started."""
        now = self.clock_ms()
        due = [m for m in list(self.txns.values())
               if m.state is TxnState.ONGOING and m.pending is None and m.start_ms + m.timeout_ms < now
               and self.check(m.transactional_id) == ErrorCode.NONE]
        started = 0
        for meta in due:
            if meta.state is not TxnState.ONGOING or meta.pending is not None:
                continue
            log.info("transactional id '%s': transaction of producer %d timed out after %d ms; aborting it",
                     meta.transactional_id, meta.producer_id, meta.timeout_ms)
            code = await self._fence_and_abort(meta)
            started += code == ErrorCode.NONE
        self.stats.timed_out += started
        return started

    async def expire_ids(self) -> int:
        """Remove the ids idle longer than transactional.id.expiration.ms (a tombstone each); returns how many."""
        now = self.clock_ms()
        due = [m for m in list(self.txns.values())
               if m.state in EXPIRATION_ALLOWED and m.pending is None
               and m.update_ms + self.config.id_expiration_ms <= now
               and not self.markers.pending(m.transactional_id) and self.check(m.transactional_id) == ErrorCode.NONE]
        removed = 0
        for meta in due:
            if meta.pending is not None or meta.state not in EXPIRATION_ALLOWED:
                continue
            if await self.state.write(meta, meta.prepare_dead(now)) == ErrorCode.NONE:
                if self.txns.get(meta.transactional_id) is meta:
                    del self.txns[meta.transactional_id]
                removed += 1
        if removed:
            log.info("expired %d transactional id(s) idle for %d ms", removed, self.config.id_expiration_ms)
        return removed

    def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="txn-coordinator-sweeps")

    async def _sweep(self) -> None:
        interval = self.config.abort_interval_ms / 1000.0
        next_expiry = self.clock_ms() + self.config.expire_interval_ms
        while True:
            await asyncio.sleep(interval)
            try:
                await self.abort_timed_out()
                if self.clock_ms() >= next_expiry:
                    next_expiry = self.clock_ms() + self.config.expire_interval_ms
                    await self.expire_ids()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the transaction coordinator's sweep failed; next in %g s", interval)

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        self.state.stop()
        await self.markers.stop()
        if self.verifier is not None:
            await self.verifier.close()

    # -- DescribeTransactions / ListTransactions -----------------------------------------------------------------
    def describe(self, transactional_id: str) -> TxnDescription:
        if not transactional_id:
            return TxnDescription(transactional_id, ErrorCode.INVALID_REQUEST)
        err = self.check(transactional_id)
        if err:
            return TxnDescription(transactional_id, err)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is TxnState.DEAD:
            return TxnDescription(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        return TxnDescription(transactional_id, ErrorCode.NONE, meta.state.kafka_name, meta.producer_id,
                              meta.producer_epoch, meta.timeout_ms, meta.start_ms, tuple(sorted(meta.partitions)))

    async def list_transactions(self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                                duration_ms: int = -1) -> tuple[list[str], list[tuple[str, int, str]]]:
        """(unknown state filters, [(transactional id, producer id, state)]) of the ids coordinated here;
        `duration_ms` >= 0 keeps transactions running longer than that (KIP-994). KIP-1152's id pattern is the
        callers' (after the ACLs, by RE2 off the loop: `kelp.broker.client_patterns`). Every id is walked, giving
        the loop a turn every few milliseconds (10,000 ids were over half a second of one step)."""
        wanted_states = set(states)
        unknown = sorted(s for s in wanted_states if TxnState.from_kafka_name(s) is None)
        pids = set(producer_ids)
        now = self.clock_ms()
        out = []
        owned = self.state.ownership.owned()
        budget = LoopBudget()
        for tid, meta in list(self.txns.items()):  # a copy: the dict may change while the loop has its turn
            await budget.tick()
            if meta.state is TxnState.DEAD or self.state.partition_for(tid) not in owned:
                continue
            if wanted_states and meta.state.kafka_name not in wanted_states:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if duration_ms >= 0 and (meta.start_ms < 0 or now - meta.start_ms <= duration_ms):
                continue
            out.append((tid, meta.producer_id, meta.state.kafka_name))
        out.sort()
        return unknown, out
