"""The one door to partition data, for the Kafka handlers and the HTTP API alike.

Why: appends must pass the same checks (partition exists, acks legal,
idempotent-producer sequence) and fetches the same limits (fetch.min.bytes,
max wait, partition and response max bytes with KIP-74's "first batch even
if too large") whichever protocol asked. `ReplicaManager` composes the parts
that do it, each an object of its own: the partition table (`table`), the
leader's write path (`leader`) with the transaction markers (`txn_markers`)
and the purgatory of acks=all waits (`purgatory`), the read path with its
long-poll (`fetch`: a fetch that found too little parks a future on each
partition it reads, and an append resolves them — no polling), the
follower's path (`follower`), the leader's ISR proposals (`isr_changes`) and
the worker-thread jobs on a replica's log (`jobs`; rolls and producer
snapshots, which both paths make, in `rolls`). It keeps the decisions about
the replicas themselves: which exist, and their roles. Callers use only its
methods; the types it hands in and out are in `results`.

Design: single-threaded asyncio, no locks. `Log.append_as_leader` is
synchronous, so the producer-state check, the append and the state update for
one partition run without an `await` between them and cannot interleave.
Replication: each replica on this broker is a `Partition` (leader or
follower, ISR, follower progress, high watermark). Consumers read below the
high watermark, followers (`replica_id` >= 0) up to the log end; a follower's
fetch is how the leader learns its progress. `acks=all` waits until the high
watermark passes the batch — a duplicate (a retried idempotent batch) waits
for its original offsets the same way — and only while this broker still
leads at the epoch of the append (Kafka's DelayedProduce). Leadership comes
from the topic's partition states (`apply_topic`), which the cluster layer
keeps current; taking it records the new leader epoch in the epoch cache at
once, on the loop (its checkpoint file follows in a worker thread).

This module must never parse or touch individual records: it works per batch.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Mapping, Sequence

from kelp.clock import WallClockMs, monotonic_ms, wall_clock_ms
from kelp.config.broker import BrokerConfig
from kelp.errors import (
    KelpError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RequestTimedOutError,
)

from ..metadata.model import PartitionState
from ..metrics import BrokerMetrics
from ..storage import Log, LogManager
from ..topic_manager import TopicManager
from .fetch import READ_COMMITTED, FetchPath
from .fetch_sessions import SWEEP_MS, FetchSessionCache
from .follower import FollowerPath
from .interfaces import AlterPartition, ReplicaFetchers
from .isr_changes import IsrChanges
from .jobs import ReplicaJobs
from .leader import LeaderPath
from .partition import LogStartWaker, Partition
from .producer_state import ActiveProducer, VerificationGuard
from .purgatory import ProducePurgatory
from .replication_quota import ReplicationQuotas
from .results import (
    FetchPartition,
    FetchPartitionResult,
    PartitionInfo,
    ProduceResult,
    SegmentSlice,
    close_results,
)
from .table import PartitionTable
from .txn_markers import TxnMarker, TxnMarkerPath

__all__ = [
    "ReplicaManager",
    "TxnMarker",
    "SegmentSlice",
    "close_results",
    "ProduceResult",
    "FetchPartition",
    "FetchPartitionResult",
    "PartitionInfo",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "EARLIEST_LOCAL_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
]

log = logging.getLogger("kelp.broker.replica")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: the first offset on local disk (= the log start: Kelp does not tier)
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: the last offset in remote storage (none: -1, as Kafka without tiering)

LeadershipListener = Callable[[str, int, bool, int], None]


def _configs_of(topics: TopicManager, name: str) -> Mapping[str, str] | None:
    state = topics.get(name)
    return None if state is None else state.configs


class ReplicaManager:
    """This broker's replicas: which exist and their roles, and every door to their data (composed parts)."""

    def __init__(self, config: BrokerConfig, logs: LogManager, topics: TopicManager, *,
                 clock_ms: WallClockMs = wall_clock_ms, lag_clock_ms: WallClockMs = monotonic_ms,
                 metrics: BrokerMetrics | None = None) -> None:
        self.config = config
        self.logs = logs
        self.topics = topics
        self.broker_id = config.broker_id
        self._now_ms = clock_ms  # wall-clock ms: producer-state expiry, marker timestamps (stored in data)
        # Monotonic ms: follower fetch times and ISR lag. On the wall clock a forward step of the clock (NTP, a VM
        # resumed) made every follower look lagging and shrank every ISR to its leader (issue 31 item 6).
        self._lag_clock_ms = lag_clock_ms
        self._listeners: list[LeadershipListener] = []
        self._start_moved = LogStartWaker()  # one callable handed to every log: wakes its replica on the loop
        # Set by the cluster layer: follower fetching (ReplicaFetcherManager).
        self.fetchers: ReplicaFetchers | None = None
        # The parts. They read the clocks through this manager at each call (a test may swap a clock).
        self.table = PartitionTable(self.broker_id, topics)
        self.table.on_missing = self.apply_topic
        self._partitions = self.table.parts
        self.jobs = ReplicaJobs(self.table, logs)
        self.jobs.finish_leader = self._finish_leader
        self._tasks = self.jobs.tasks
        self.purgatory = ProducePurgatory(self.table)
        metrics = metrics or BrokerMetrics()  # the broker's traffic counters (a manager built alone: its own)
        self.leader_path = LeaderPath(self.table, self.jobs, bytes_in=metrics.bytes_in, records_in=metrics.records_in)
        self.txn_markers = TxnMarkerPath(self.table, self.jobs, self.purgatory, lambda: self._now_ms())
        self.follower_path = FollowerPath(self.table, self.jobs)
        self.isr_changes = IsrChanges(self.table, self.jobs, lambda: self._lag_clock_ms(),
                                      int(config["replica.lag.time.max.ms"]))
        # KIP-73: the bytes replicas out of the ISR may move, as leader and as follower (replication_quota.py).
        self.fetch_path = FetchPath(self.table, self.isr_changes,
                                    ReplicationQuotas(config, lambda name: _configs_of(topics, name)),
                                    lag_clock_ms=lambda: self._lag_clock_ms(), bytes_out=metrics.bytes_out,
                                    records_out=metrics.records_out)
        # KIP-227: the Fetch handler's incremental fetch sessions (fetch_sessions.py). Each reads all its partitions
        # at least every min(1 s, replica.lag.time.max.ms / 4): its caught-up followers keep their ISR places.
        cache = self.fetch_sessions = FetchSessionCache(
            int(config["max.incremental.fetch.session.cache.slots"]), partitions_known=lambda: len(self._partitions),
            clock_ms=lambda: self._lag_clock_ms(), sweep_ms=max(1, min(SWEEP_MS, self.isr_changes.lag_ms // 4)))
        metrics.fetch_sessions.set_function(lambda: len(cache))
        metrics.fetch_session_partitions.set_function(lambda: cache.partitions)
        metrics.fetch_session_evictions.set_function(lambda: cache.evictions)
        topics.add_listener(self._on_topic_change)

    # -- what the cluster layer sets ---------------------------------------
    @property
    def alter_partition(self) -> AlterPartition | None:
        """Asks the controller to change a partition's ISR (set by the cluster layer; its answer is applied by the
        metadata it is committed in)."""
        return self.isr_changes.alter_partition

    @alter_partition.setter
    def alter_partition(self, value: AlterPartition | None) -> None:
        self.isr_changes.alter_partition = value

    @property
    def alter_partition_backoff_s(self) -> tuple[float, float]:
        """AlterPartition with an unknown outcome is sent again after this backoff (seconds: first, cap)."""
        return self.isr_changes.backoff_s

    @alter_partition_backoff_s.setter
    def alter_partition_backoff_s(self, value: tuple[float, float]) -> None:
        self.isr_changes.backoff_s = value

    @property
    def replication_quotas(self) -> ReplicationQuotas:
        """KIP-73: this broker's leader and follower replication quotas."""
        return self.fetch_path.quotas

    @replication_quotas.setter
    def replication_quotas(self, value: ReplicationQuotas) -> None:
        self.fetch_path.quotas = value

    # -- the doors, each its part's ----------------------------------------
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
        result = await self.leader_path.append_local(topic, partition, data, acks=acks,
                                                     internal_allowed=internal_allowed, timeout_ms=timeout_ms)
        return await self.purgatory.wait_for_isr(result, acks=acks, timeout_ms=timeout_ms)

    async def append_local(
        self, topic: str, partition: int, data: bytes | bytearray | memoryview, *, acks: int = 1,
        internal_allowed: bool = False, timeout_ms: int = 30000, verify_txn: bool = False,
        txn_guard: VerificationGuard | None = None,
    ) -> ProduceResult:
        """Append to the leader's log, without waiting for followers (`wait_for_isr` does): `LeaderPath`."""
        return await self.leader_path.append_local(topic, partition, data, acks=acks,
                                                   internal_allowed=internal_allowed, timeout_ms=timeout_ms,
                                                   verify_txn=verify_txn, txn_guard=txn_guard)

    def append_sync(
        self, topic: str, partition: int, data: bytes | bytearray | memoryview, *, acks: int = 1,
        internal_allowed: bool = False, verify_txn: bool = False, txn_guard: VerificationGuard | None = None,
    ) -> ProduceResult:
        """Append as the leader, on the loop with no `await` (`LeaderPath.append_sync`)."""
        return self.leader_path.append_sync(topic, partition, data, acks=acks, internal_allowed=internal_allowed,
                                            verify_txn=verify_txn, txn_guard=txn_guard)

    async def wait_for_isr(self, result: ProduceResult, *, acks: int, timeout_ms: int,
                           deadline: float | None = None) -> ProduceResult:
        """acks=-1: wait until the ISR has `result`'s offsets (`ProducePurgatory.wait_for_isr`)."""
        return await self.purgatory.wait_for_isr(result, acks=acks, timeout_ms=timeout_ms, deadline=deadline)

    async def wait_all_for_isr(self, results: Sequence[ProduceResult], *,
                               timeout_ms: int) -> list[ProduceResult | KelpError]:
        """acks=-1 for a request's appends, within one `timeout_ms` (`ProducePurgatory.wait_all_for_isr`)."""
        return await self.purgatory.wait_all_for_isr(results, timeout_ms=timeout_ms)

    async def append_txn_markers(
        self, markers: Sequence[TxnMarker], *, timeout_ms: int = 30000,
    ) -> list[dict[tuple[str, int], KelpError | None]]:
        """WriteTxnMarkers: each marker on each of its partitions, acks=all (`TxnMarkerPath`)."""
        return await self.txn_markers.append_txn_markers(markers, timeout_ms=timeout_ms)

    def append_marker_sync(self, topic: str, partition: int, marker: TxnMarker) -> ProduceResult:
        """Check and append one marker as the leader, no wait (`TxnMarkerPath.append_marker_sync`)."""
        return self.txn_markers.append_marker_sync(topic, partition, marker)

    async def fetch(self, requests: Sequence[FetchPartition], *, max_wait_ms: int, min_bytes: int, max_bytes: int,
                    isolation: int = 0, replica_id: int = -1, zero_copy: bool = False,
                    min_one: bool = True) -> list[FetchPartitionResult]:
        """Read whole batches; wait up to `max_wait_ms` until `min_bytes` are available (`FetchPath.fetch`)."""
        return await self.fetch_path.fetch(requests, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                           max_bytes=max_bytes, isolation=isolation, replica_id=replica_id,
                                           zero_copy=zero_copy, min_one=min_one)

    def follower_ready(self, topic: str, partition: int, leader_epoch: int) -> bool:
        """True when this replica follows at `leader_epoch` and no job is changing its log (the fetcher asks)."""
        return self.follower_path.follower_ready(topic, partition, leader_epoch)

    def append_as_follower(self, topic: str, partition: int, data: bytes | memoryview, *, leader_epoch: int,
                           leader_high_watermark: int) -> int:
        """Append what the leader sent; follow its high watermark (`FollowerPath`). Returns the new log end."""
        return self.follower_path.append_as_follower(topic, partition, data, leader_epoch=leader_epoch,
                                                     leader_high_watermark=leader_high_watermark)

    async def flush_followers(self) -> None:
        """fsync the follower logs whose appends reached flush.messages, in a worker thread."""
        await self.follower_path.flush_followers()

    def follow_log_start(self, topic: str, partition: int, leader_log_start_offset: int) -> int:
        """A follower raises its log start to the leader's (file work: the fetcher calls it in a worker thread)."""
        return self.follower_path.follow_log_start(topic, partition, leader_log_start_offset)

    async def truncate_follower(self, topic: str, partition: int, offset: int, *, leader_epoch: int) -> bool:
        """Truncate a follower's log to `offset` and rebuild its producer state, in a worker thread."""
        return await self.follower_path.truncate_follower(topic, partition, offset, leader_epoch=leader_epoch)

    async def truncate_follower_fully(self, topic: str, partition: int, offset: int, *, leader_epoch: int) -> bool:
        """Empty a follower's log and restart it at `offset` (it fell below the leader's log start)."""
        return await self.follower_path.truncate_follower_fully(topic, partition, offset, leader_epoch=leader_epoch)

    def delete_log_later(self, topic: str, partition: int, topic_id: str | None = None) -> Awaitable[None] | None:
        """Delete a replica's log with no file work on the event loop (`ReplicaJobs.delete_log_later`)."""
        return self.jobs.delete_log_later(topic, partition, topic_id)

    def check_isr(self) -> None:
        """Shrink the ISR of led partitions whose followers lag (periodic; `IsrChanges.check_isr`)."""
        self.isr_changes.check_isr()

    # -- leadership listeners -------------------------------------------
    def add_leadership_listener(self, callback: LeadershipListener) -> None:
        """`callback(topic, partition, is_leader, leader_epoch)` on the loop whenever this broker starts or stops
        leading.

        Partitions led already when the listener registers are reported at once.
        """
        self._listeners.append(callback)
        for part in list(self._partitions.values()):
            if part.is_leader:
                self._call(callback, part, True)

    def _notify(self, part: Partition, is_leader: bool) -> None:
        for cb in list(self._listeners):
            self._call(cb, part, is_leader)

    @staticmethod
    def _call(cb: LeadershipListener, part: Partition, is_leader: bool) -> None:
        try:
            cb(part.topic, part.partition, is_leader, part.leader_epoch)
        except Exception:  # a listener must never break a leadership change
            log.exception("leadership listener failed for %s (leader=%s)", part.name, is_leader)

    # -- partitions -----------------------------------------------------
    def _on_topic_change(self, event: str, topic: str) -> None:
        if event == "altered":
            for (name, _p), part in self._partitions.items():
                if name == topic:
                    part.min_insync_replicas = self._min_isr(topic)
        elif event in ("deleted", "forgotten"):  # the TopicManager deletes a deleted topic's logs itself
            for key in [k for k in self._partitions if k[0] == topic]:
                self._drop(self._partitions[key], delete_log=False)
        elif event in ("created", "partitions", "state"):
            self.apply_topic(topic)

    def apply_topic(self, topic: str) -> None:
        """Bring this broker's replicas of `topic` in line with the topic's partition states.

        Creates the logs of replicas placed here, becomes leader or follower
        when the leader or its epoch changed, takes ISR/replica changes of the
        same epoch, and stops replicas no longer placed here.
        """
        info = self.topics.get(topic)
        if info is None:
            return
        now = self._lag_clock_ms()
        partitions = self._partitions
        for p, state in enumerate(info.partition_states):
            key = (topic, p)
            part = partitions.get(key)
            if part is not None and part.applied is state:
                # Unchanged since it was applied (the image keeps the same object): each of 3,000 ISR changes
                # was one push applying the whole topic again, O(n^2) that starved the fetchers (issue 23).
                continue
            if self.broker_id not in state.replicas:
                # A reassignment moved this replica away. The metadata log is applied in order, so this state
                # is newer than the one the replica was made from; the epochs are compared all the same
                # before its log is deleted (never on an older or equal view).
                if part is not None:
                    if (state.leader_epoch, state.partition_epoch) > (part.leader_epoch, part.partition_epoch):
                        self._drop(part, delete_log=True)
                    else:
                        log.error("%s: not in replicas %s at leader/partition epoch %d/%d, not newer than this "
                                  "replica's %d/%d: the log is kept", part.name, list(state.replicas),
                                  state.leader_epoch, state.partition_epoch, part.leader_epoch, part.partition_epoch)
                continue
            if part is None:
                part = self._open(topic, p)
                self._transition(part, state, now, new=True)
            elif state.leader_epoch > part.leader_epoch or (
                    state.leader_epoch == part.leader_epoch and state.leader != part.leader):
                self._transition(part, state, now, new=False)
            elif state.leader_epoch == part.leader_epoch and state.partition_epoch > part.partition_epoch:
                part.update_state(state, now)
                if part.is_leader and part.maybe_advance_high_watermark():
                    part.wake()
            # An older epoch than ours is a stale push: ignored.

    def _open(self, topic: str, p: int) -> Partition:
        info = self.topics.get(topic)
        topic_id = info.topic_id if info is not None else None
        lg = self.logs.get(topic, p)
        if lg is None or (topic_id is not None and lg.topic_id != topic_id):
            # Deliveries make logs ready in a worker thread first (TopicManager.prepare_logs); only a caller that
            # applies metadata by hand gets here. Never a log of another topic id (LogManager.get_or_create).
            lg = self.logs.get_or_create(topic, p, self.topics.log_config(topic), topic_id=topic_id,
                                         removed_ids=self.topics.removed_ids())
        part = Partition(topic, p, lg, broker_id=self.broker_id, min_insync_replicas=self._min_isr(topic))
        self._start_moved.take_loop()
        lg.on_log_start_moved(self._start_moved, part)
        self._partitions[(topic, p)] = part
        self.jobs.load_producer_state(part)  # a worker-thread job when the log holds batches: appends wait for it
        return part

    def _transition(self, part: Partition, state: PartitionState, now: int, *, new: bool) -> None:
        was_leader = part.is_leader and not new
        if state.leader == self.broker_id:
            if self.fetchers is not None:
                self.fetchers.remove(part.topic, part.partition)
            part.become_leader(state, now)
            if not part.truncations:
                self._finish_leader(part)  # (appends still wait for a producer-state load in flight)
            else:  # a truncation in a worker thread is moving the log end: the epoch starts where it lands
                log.info("%s: leader at epoch %d once the truncation of its log in flight completes",
                         part.name, state.leader_epoch)
        else:
            part.become_follower(state, NotLeaderOrFollowerError(
                f"topic '{part.topic}' partition {part.partition}: leadership moved to broker {state.leader} "
                f"(leader epoch {state.leader_epoch}) before the batch was replicated"))
            part.wake()
            if was_leader or new:
                if was_leader:
                    self._notify(part, False)
            if self.fetchers is not None:
                if state.leader >= 0:
                    self.fetchers.add(part.topic, part.partition, leader=state.leader, leader_epoch=state.leader_epoch)
                else:
                    self.fetchers.remove(part.topic, part.partition)
            log.info("%s: follower of broker %d at epoch %d", part.name, state.leader, state.leader_epoch)

    def _finish_leader(self, part: Partition) -> None:
        """Leadership takes effect: the epoch starts at today's log end, recorded in the epoch cache now.

        In memory and on the loop, so an OffsetForLeaderEpoch that arrives next is answered with this
        epoch (KIP-101 case 1: answered "unknown", followers would cut to their high watermarks); only the
        checkpoint file's fsync goes to a worker thread.
        """
        lg = part.log
        leo = lg.log_end_offset
        part.start_epoch(leo)
        try:
            lg.assign_leader_epoch(part.leader_epoch, leo)
        except KelpError as exc:  # an offline log: every request to it answers KAFKA_STORAGE_ERROR anyway
            log.error("%s: leader epoch %d not recorded: %s", part.name, part.leader_epoch, exc)
        else:
            self.jobs.background(asyncio.to_thread(lg.flush_leader_epochs),
                             f"writing the leader-epoch checkpoint of {part.name}")
        part.maybe_advance_high_watermark()
        log.info("%s: leader at epoch %d, ISR %s, log end %d, high watermark %d",
                 part.name, part.leader_epoch, list(part.isr), leo, part.high_watermark)
        part.wake()
        self._notify(part, True)

    def _drop(self, part: Partition, *, delete_log: bool) -> None:
        key = (part.topic, part.partition)
        self._partitions.pop(key, None)
        if self.fetchers is not None:
            self.fetchers.remove(part.topic, part.partition)
        was_leader = part.is_leader
        part.leader = -1
        part.fail_acks(NotLeaderOrFollowerError(f"topic '{part.topic}' partition {part.partition} is no longer on "
                                                f"broker {self.broker_id}"))
        part.wake()
        if was_leader:
            self._notify(part, False)
        if delete_log:
            log.info("%s: replica removed from broker %d; deleting its log", part.name, self.broker_id)
            self.delete_log_later(part.topic, part.partition, part.log.topic_id)  # file work in a worker thread

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def _min_isr(self, topic: str) -> int:
        try:
            return int(self.topics.effective_configs(topic)["min.insync.replicas"][0])
        except (KelpError, KeyError, ValueError):
            return 1

    def expire_producers(self) -> int:
        """Forget idempotent producers idle for producer.id.expiration.ms on every replica (periodic, on the loop).

        As Kafka, "idle" is judged by the timestamp of the producer's last batch. A forgotten producer's
        next batch is accepted as from a new one (its sequence is not checked against the old state).
        """
        now, expiration = self._now_ms(), int(self.config["producer.id.expiration.ms"])
        expired = 0
        for part in list(self._partitions.values()):
            expired += part.producers.expire(now, expiration)
        if expired:
            log.info("expired the state of %d idempotent producer(s) idle for %d ms or more", expired, expiration)
        return expired

    def partition_roles(self, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
        info = self.topics.check_partition(topic, partition)
        state = info.partition_states[partition]
        return state.leader, list(state.replicas), list(state.isr)

    # -- offsets --------------------------------------------------------
    def list_offset(self, topic: str, partition: int, timestamp: int, *,
                    current_leader_epoch: int = -1, isolation_level: int = 0) -> tuple[int, int]:
        """(offset, timestamp) for earliest (-2), latest (-1), max-timestamp (-3), earliest-local (-4),
        latest-tiered (-5) or a time (leader only).

        With `isolation_level` 1 (read_committed) "latest" is the last stable offset and a lookup by time
        finds only offsets below it, as Kafka's `Partition.fetchOffsetForTimestamp`."""
        part = self.table.leader(topic, partition, current_leader_epoch)
        lg = part.log
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return lg.log_start_offset, -1
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1
        part.require_end_offset_known()
        committed = isolation_level == READ_COMMITTED
        if timestamp == LATEST_TIMESTAMP:
            return (part.last_stable_offset if committed else part.high_watermark), -1
        if timestamp == MAX_TIMESTAMP:
            found = lg.max_timestamp_and_offset()
        else:
            found = lg.offset_for_timestamp(timestamp)
        if found is None or (committed and found[0] >= part.last_stable_offset):
            return -1, -1
        return found[0], found[1]

    async def delete_records(self, topic: str, partition: int, offset: int, *, timeout_ms: int = 30000) -> int:
        """DeleteRecords on the leader: raise the log start to `offset` (-1: the high watermark).

        Refused with OFFSET_OUT_OF_RANGE beyond the high watermark and POLICY_VIOLATION on a log that is
        not `cleanup.policy=delete` (as Kafka). Followers follow the log start in Fetch responses and report
        theirs in their next fetch; as Kafka's DelayedDeleteRecords this answers once the low watermark
        (the lowest log start over the ISR) reached `offset`, with it, or REQUEST_TIMED_OUT after
        `timeout_ms`. The segments wholly below the log start go at the next retention check.
        """
        part = self.table.leader(topic, partition)
        lg = part.log
        if not lg.config.delete:
            raise PolicyViolationError(
                f"records of topic '{topic}' partition {partition} cannot be deleted: its cleanup.policy is "
                f"{lg.config.cleanup_policy!r}, not delete")
        hw = part.high_watermark
        target = hw if offset == -1 else offset
        if target < 0 or target > hw:
            raise OffsetOutOfRangeError(
                f"cannot delete records of topic '{topic}' partition {partition} before offset {offset}: "
                f"it must be between 0 and the high watermark {hw} (or -1 for the high watermark)")
        if target > lg.log_start_offset:
            await asyncio.to_thread(lg.advance_log_start_offset, target)
            self.table.mark_dirty(topic, partition)
            part.wake()  # the followers' fetch sessions tell them the new log start at their next fetch
            log.info("%s: records before offset %d deleted (DeleteRecords); log start is %d",
                     part.name, target, lg.log_start_offset)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000.0
        while (low := part.low_watermark()) < target:
            if not part.is_leader:
                raise NotLeaderOrFollowerError(f"{part.name}: leadership moved while deleting records before {target}")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RequestTimedOutError(
                    f"{part.name}: records before {target} are deleted on the leader, but in-sync replicas still "
                    f"start at {low} after {timeout_ms} ms")
            fut: asyncio.Future[None] = loop.create_future()
            part.low_watermark_waiters.add(fut)
            try:  # woken by a follower's fetch; the bounded wait also notices an ISR shrink or a lost leadership
                await asyncio.wait_for(fut, min(remaining, 0.5))
            except asyncio.TimeoutError:
                pass
            finally:
                part.low_watermark_waiters.discard(fut)
        return low

    def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        part = self.table.replica(topic, partition)
        lg = part.log
        return PartitionInfo(
            topic, partition, lg.log_start_offset, lg.log_end_offset, part.high_watermark, lg.size_bytes
        )

    def active_producers(self, topic: str, partition: int) -> tuple[list[ActiveProducer], int, int]:
        """(the producers of this replica, its last stable offset, its high watermark) for DescribeProducers,
        which Kafka serves on any replica (`kafka-transactions describe-producers --broker-id`)."""
        part = self.table.replica(topic, partition)
        return part.producers.active_producers(), part.last_stable_offset, part.high_watermark

    def end_offset_for_epoch(self, topic: str, partition: int, epoch: int, *,
                             current_leader_epoch: int = -1) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch (KIP-101/320); (-1, -1) when unknown (leader only)."""
        part = self.table.leader(topic, partition, current_leader_epoch)
        return part.log.end_offset_for_epoch(epoch)

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.table.replica(topic, partition).leader_epoch

    def checkpoint_dirty(self) -> int:
        """Persist high watermark / log start of partitions appended to since the last call."""
        return self.write_checkpoints(self.take_dirty())

    def take_dirty(self) -> list[Log]:
        """The logs appended to since the last call (call on the event loop; cheap)."""
        return self.table.take_dirty()

    @staticmethod
    def write_checkpoints(logs: Sequence[Log]) -> int:
        """Write each log's checkpoint (fsync'd file work: the broker runs this in a thread)."""
        done = 0
        for lg in logs:
            try:
                lg.write_checkpoint()  # nothing for a closed or deleted log
                done += 1
            except Exception as exc:  # a full or failing disk: the file is named in the message
                log.error("checkpoint of %s not written (the next start rescans from the last one): %s", lg.name, exc)
        return done

    def close(self) -> None:
        """Stop: fail waiting produces, and hand each log its producer state to snapshot when it closes
        (the broker closes logs in a worker thread), so the next start replays nothing."""
        for task in list(self._tasks):
            task.cancel()
        for part in list(self._partitions.values()):
            lg = part.log
            if part.busy is None:
                lg.set_close_snapshot(lg.log_end_offset, part.producers.entries(), generation=lg.truncation_generation)
            part.fail_acks(NotLeaderOrFollowerError(f"broker {self.broker_id} is shutting down"))
            part.wake()
            if part.is_leader:
                self._notify(part, False)
        self._partitions.clear()
