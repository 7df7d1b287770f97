"""The transactional ids this broker coordinates: their cache, its loading, and every write of their state.

Why: a broker coordinates the transactional ids of the `__transaction_state` partitions it leads (Kafka's
TransactionStateManager). When elected it rebuilds their state by replaying the partition — in a worker
thread, requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS — and when it resigns it forgets them (requests
get NOT_COORDINATOR and the client finds the new coordinator). Every state change is a record appended
with acks=all (the topic's min.insync.replicas is transaction.state.log.min.isr) before it takes effect;
a write that outlived its leadership term answers NOT_COORDINATOR and changes nothing here, because the
next coordinator replays the log. The leadership term's leader epoch is the coordinator epoch that
markers carry, so a partition leader can refuse markers of a deposed coordinator.

This module must never decide a transition (that is `metadata` and `coordinator`) or send markers.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol

from kelp.clock import WallClockMs
from kelp.errors import ErrorCode
from kelp.records.build import build_batch

from ..groups.append_errors import group_write_error_code
from ..groups.offsets_store import replay_log
from ..groups.ownership import PartitionOwnership, PartitionState
from ..groups.ownership_changes import OwnershipChanges
from ..replica.manager import ReplicaManager
from ..storage import LogManager
from .metadata import TransactionMetadata, TxnState, TxnTransit
from .txn_config import TXN_TOPIC, TxnConfig
from .txn_log import decode_txn_key, decode_txn_value, encode_txn_key, encode_txn_value

__all__ = ["TxnStore", "BrokerTxnStore", "TxnStateManager", "LoadedTxns", "decode_txn_partition"]

log = logging.getLogger("kelp.broker.transactions")


class TxnStore(Protocol):
    """Where `__transaction_state` records go (one partition per call); `BrokerTxnStore` on a broker."""

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None: ...

    def replay(self, partition: int) -> Iterable[tuple[bytes | None, bytes | None]]: ...


class BrokerTxnStore:
    """`__transaction_state` on this broker's logs: acks=all appends through `replicas`, replays from `logs`."""

    def __init__(self, replicas: ReplicaManager, logs: LogManager, *, write_timeout_ms: int) -> None:
        self.replicas = replicas
        self.logs = logs
        self.write_timeout_ms = write_timeout_ms

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        await self.replicas.append(TXN_TOPIC, partition, build_batch(list(records)), acks=-1,
                                   timeout_ms=self.write_timeout_ms, internal_allowed=True)

    def replay(self, partition: int) -> Iterator[tuple[bytes | None, bytes | None]]:
        """Reads segment files: never iterate it on the event loop."""
        lg = self.logs.get(TXN_TOPIC, partition)
        if lg is None:
            return
        for info, records in replay_log(lg):
            if not info.is_control:
                for rec in records:
                    yield rec.key, rec.value


@dataclass
class LoadedTxns:
    partition: int
    records: int = 0
    txns: dict[str, TransactionMetadata] = field(default_factory=dict)


def decode_txn_partition(partition: int, records: Iterable[tuple[bytes | None, bytes | None]]) -> LoadedTxns:
    """The newest state per transactional id (a tombstone removes it); runs in a worker thread."""
    out = LoadedTxns(partition)
    for key, value in records:
        out.records += 1
        if key is None:
            continue
        try:
            txn_id = decode_txn_key(key)
            if value is None:
                out.txns.pop(txn_id, None)
            else:
                out.txns[txn_id] = TransactionMetadata.from_log(txn_id, decode_txn_value(value))
        except ValueError as exc:
            log.warning("skipping unreadable record in %s-%d: %s", TXN_TOPIC, partition, exc)
    return out


class TxnStateManager:
    def __init__(self, config: TxnConfig, *, store: TxnStore, clock_ms: WallClockMs) -> None:
        self.config = config
        self.store = store
        self.clock_ms = clock_ms
        self.txns: dict[str, TransactionMetadata] = {}
        self.ownership = PartitionOwnership()
        # Called with a partition's transactions once loaded (the coordinator resumes their markers) and with
        # a partition whose leadership ended (it stops them).
        self.on_loaded: Callable[[int, int, list[TransactionMetadata]], None] = lambda p, epoch, txns: None
        self.on_unloaded: Callable[[int], None] = lambda p: None
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        self._changes = OwnershipChanges()
        self._stopped = False
        # Transactional id -> set once its next write ends (`changed`); created only by a waiter.
        self._written: dict[str, asyncio.Event] = {}

    # -- which ids are here ------------------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return self.config.partition_for(transactional_id)

    def check(self, transactional_id: str) -> int:
        """NONE when this broker coordinates `transactional_id` now; else the error a request gets."""
        state = self.ownership.state(self.partition_for(transactional_id))
        if state is PartitionState.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if state is not PartitionState.OWNED:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    def coordinator_epoch(self, transactional_id: str) -> int:
        return self.ownership.epoch(self.partition_for(transactional_id)) or 0

    def token(self, transactional_id: str) -> int | None:
        return self.ownership.token(self.partition_for(transactional_id))

    def adopt_partition_count(self, count: int) -> None:
        if count > 0 and count != self.config.num_partitions:
            if self.ownership.owned() or self.ownership.loading():
                log.error("%s has %d partitions but this coordinator maps ids onto %d; keeping %d",
                          TXN_TOPIC, count, self.config.num_partitions, self.config.num_partitions)
                return
            log.warning("%s has %d partitions; transaction.state.log.num.partitions is %d; using %d",
                        TXN_TOPIC, count, self.config.num_partitions, count)
            self.config.num_partitions = count

    # -- writes ----------------------------------------------------------------------------------------------
    def changed(self, transactional_id: str) -> asyncio.Event:
        """An event set when the id's next write ends, applied or not (and then forgotten): what a request
        waits on for the id's pending transition, or its transaction's completion, to be written."""
        return self._written.setdefault(transactional_id, asyncio.Event())

    async def write(self, meta: TransactionMetadata, transit: TxnTransit) -> int:
        """Append `transit` (acks=all), then apply it to `meta`; the Kafka error the request gets otherwise.

        A failed write leaves `meta` as it was. A write that outlived this broker's leadership term answers
        NOT_COORDINATOR (whether or not it is durable: the next coordinator replays the log)."""
        try:
            return await self._write(meta, transit)
        finally:
            written = self._written.pop(meta.transactional_id, None)
            if written is not None:
                written.set()

    async def _write(self, meta: TransactionMetadata, transit: TxnTransit) -> int:
        partition = self.partition_for(meta.transactional_id)
        token = self.ownership.token(partition)
        value = None if transit.state is TxnState.DEAD else encode_txn_value(
            transit.log_value(), version=1 if self.config.transaction_version >= 1 else 0)
        try:
            await self.store.append(partition, [(encode_txn_key(meta.transactional_id), value)])
        except Exception as exc:
            meta.abort_pending()
            code = ErrorCode.NOT_COORDINATOR if self.ownership.token(partition) != token \
                else group_write_error_code(exc)
            log.warning("writing %s of transactional id '%s' to %s-%d failed (error %d): %s",
                        transit.state.kafka_name, meta.transactional_id, TXN_TOPIC, partition, code, exc,
                        exc_info=getattr(exc, "code", None) is None)
            return code
        if self.ownership.token(partition) != token or self.txns.get(meta.transactional_id) is not meta:
            meta.abort_pending()
            return ErrorCode.NOT_COORDINATOR
        meta.complete(transit)
        return ErrorCode.NONE

    # -- leadership of __transaction_state partitions ----------------------------------------------------------
    def on_become_leader(self, partition: int, epoch: int) -> "asyncio.Future[None]":
        """This broker now leads `partition` at `epoch`: load its transactions (await the result to wait)."""
        token = self.ownership.begin_load(partition, epoch)
        if token is None:
            running = self._load_tasks.get(partition)
            if running is not None and not running.done():
                return running
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        log.info("%s-%d: leader at epoch %d; loading its transactions", TXN_TOPIC, partition, epoch)
        self._changes.notify()
        task = asyncio.get_running_loop().create_task(self._load(partition, token),
                                                      name=f"load-{TXN_TOPIC}-{partition}")
        self._load_tasks[partition] = task
        return task

    def on_resign(self, partition: int, epoch: int) -> None:
        if not self.ownership.resign(partition, epoch):
            return
        task = self._load_tasks.pop(partition, None)
        if task is not None and not task.done():
            task.cancel()
        dropped = [t for t in self.txns if self.partition_for(t) == partition]
        for t in dropped:
            del self.txns[t]
        self.on_unloaded(partition)
        log.info("%s-%d: no longer leader (epoch %d); unloaded %d transactional id(s)", TXN_TOPIC, partition,
                 epoch, len(dropped))
        self._changes.notify()

    async def _load(self, partition: int, token: int) -> None:
        while True:
            try:
                loaded = await asyncio.to_thread(lambda: decode_txn_partition(partition, self.store.replay(partition)))
                break
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("loading %s-%d failed; retrying in %d ms", TXN_TOPIC, partition,
                              self.config.load_retry_ms)
                await asyncio.sleep(self.config.load_retry_ms / 1000.0)
                if self.ownership.token(partition) != token:
                    return
        if self.ownership.token(partition) != token or self._stopped:
            return
        self._apply(loaded, token)

    def _apply(self, loaded: LoadedTxns, token: int) -> None:
        partition = loaded.partition
        for txn_id, meta in loaded.txns.items():
            if meta.state is not TxnState.DEAD:
                self.txns[txn_id] = meta
        self.ownership.finish_load(partition, token)
        if self._load_tasks.get(partition) is asyncio.current_task():
            del self._load_tasks[partition]
        log.info("%s-%d: loaded %d record(s), %d transactional id(s); coordinating", TXN_TOPIC, partition,
                 loaded.records, len(loaded.txns))
        self.on_loaded(partition, self.ownership.epoch(partition) or 0, list(loaded.txns.values()))
        self._changes.notify()

    def load(self, partitions: Iterable[int], *, epoch: int = 0) -> None:
        """Own and replay `partitions` on the calling thread: for stores that replay from memory (unit tests)."""
        for p in partitions:
            token = self.ownership.begin_load(p, epoch)
            if token is not None:
                self._apply(decode_txn_partition(p, self.store.replay(p)), token)

    async def wait_ownership_change(self, timeout_s: float) -> bool:
        """Wait (bounded) until a partition is elected, loaded or resigned; False on timeout."""
        return await self._changes.wait(timeout_s)

    def stop(self) -> None:
        self._stopped = True
        for task in self._load_tasks.values():
            task.cancel()
        self._load_tasks.clear()
