"""The one door to partition data, for the Kafka handlers and the HTTP API alike.

Why: appends must pass the same checks (partition exists, acks legal,
idempotent-producer sequence) and fetches the same limits (fetch.min.bytes,
max wait, partition and response max bytes with KIP-74's "first batch even
if too large") whichever protocol asked (the write side is `replica_produce`
with the transaction markers of `replica_txn`, the read side `replica_fetch`, all mixed in; the types are in
`replica_types`). It also owns the long-poll: a fetch that found too little
parks a future on each partition it reads, and an append resolves them — no
polling. The follower side and the worker-thread jobs on a replica's log
(truncation, producer-state rebuild, deletion) are `replica_follower`, the
leader's ISR changes `isr_changes`, mixed in too; the state they share is
declared in `replica_state`.

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
from typing import Callable, Coroutine, Mapping, Sequence

from kelp.clock import WallClockMs, monotonic_ms, wall_clock_ms
from kelp.errors import (
    FencedLeaderEpochError,
    KelpError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)

from . import metrics
from .config import BrokerConfig
from .isr_changes import IsrChanges
from .metadata.model import PartitionState
from .partition import Partition
from .producer_state import ActiveProducer
from .replica_fetch import READ_COMMITTED, FetchPath
from .replica_follower import FollowerPath
from .replica_state import AlterPartition, ReplicaFetchers
from .replica_txn import TxnMarker, TxnMarkerPath
from .replica_types import (
    FetchPartition,
    FetchPartitionResult,
    PartitionInfo,
    ProduceResult,
    SegmentSlice,
    close_results,
)
from .replication_quota import ReplicationQuotas
from .storage import Log, LogManager
from .topic_manager import TopicManager

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


class ReplicaManager(TxnMarkerPath, FetchPath, FollowerPath, IsrChanges):
    def __init__(self, config: BrokerConfig, logs: LogManager, topics: TopicManager, *,
                 clock_ms: WallClockMs = wall_clock_ms, lag_clock_ms: WallClockMs = monotonic_ms) -> None:
        self.config = config
        self.logs = logs
        self.topics = topics
        self.broker_id = config.broker_id
        self._now_ms = clock_ms  # wall-clock ms: producer-state expiry, marker timestamps (stored in data)
        # Monotonic ms: follower fetch times and ISR lag. On the wall clock a forward step of the clock (NTP, a VM
        # resumed) made every follower look lagging and shrank every ISR to its leader (issue 31 item 6).
        self._lag_clock_ms = lag_clock_ms
        self._partitions = {}
        self._dirty = set()
        self._flush_due = {}
        self._listeners: list[LeadershipListener] = []
        self._tasks = set()
        # Set by the cluster layer: asks the controller to change a partition's ISR (its answer is applied by the
        # metadata it is committed in).
        self.alter_partition: AlterPartition | None = None
        # Set by the cluster layer: follower fetching (ReplicaFetcherManager).
        self.fetchers: ReplicaFetchers | None = None
        self._lag_ms = int(config["replica.lag.time.max.ms"])
        # AlterPartition with an unknown outcome is sent again after this backoff (seconds: first, cap).
        self.alter_partition_backoff_s = (0.05, 2.0)
        # The process-wide traffic counters (kelp.broker.metrics): a broken metrics module fails the import.
        self._bytes_in = metrics.BYTES_IN
        self._bytes_out = metrics.BYTES_OUT
        self._records_in = metrics.RECORDS_IN
        self._records_out = metrics.RECORDS_OUT
        # KIP-73: the bytes replicas out of the ISR may move, as leader and as follower (replication_quota.py).
        self.replication_quotas = ReplicationQuotas(config, lambda name: _configs_of(topics, name))
        topics.add_listener(self._on_topic_change)

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
        self._partitions[(topic, p)] = part
        self._load_producer_state(part)  # a worker-thread job when the log holds batches: appends wait for it
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
            self._background(asyncio.to_thread(lg.flush_leader_epochs),
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

    def _partition(self, topic: str, partition: int) -> Partition:
        part = self._partitions.get((topic, partition))
        if part is not None:
            return part
        info = self.topics.check_partition(topic, partition)
        state = info.partition_states[partition]
        if self.broker_id in state.replicas:
            self.apply_topic(topic)
            part = self._partitions.get((topic, partition))
            if part is not None:
                return part
        raise NotLeaderOrFollowerError(
            f"topic '{topic}' partition {partition} has no replica on broker {self.broker_id} "
            f"(leader is broker {state.leader}); refresh metadata"
        )

    def _leader(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        part = self._partition(topic, partition)
        if current_leader_epoch >= 0:
            self._check_epoch(part, current_leader_epoch)
        if not part.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of topic '{topic}' partition {partition} "
                f"(leader is broker {part.leader}, epoch {part.leader_epoch}); refresh metadata"
            )
        if not part.leader_ready:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} takes the leadership of topic '{topic}' partition {partition} "
                f"(epoch {part.leader_epoch}) once the truncation of its log in flight completes; retry")
        return part

    @staticmethod
    def _check_epoch(part: Partition, requested: int) -> None:
        if requested < part.leader_epoch:
            raise FencedLeaderEpochError(
                f"topic '{part.topic}' partition {part.partition}: request for leader epoch {requested}, "
                f"current is {part.leader_epoch}; refresh metadata"
            )
        if requested > part.leader_epoch:
            raise UnknownLeaderEpochError(
                f"topic '{part.topic}' partition {part.partition}: request for leader epoch {requested}, "
                f"broker {part.broker_id} knows only up to {part.leader_epoch} yet; retry"
            )

    def _min_isr(self, topic: str) -> int:
        try:
            return int(self.topics.effective_configs(topic)["min.insync.replicas"][0])
        except (KelpError, KeyError, ValueError):
            return 1

    def _background(self, coro: Coroutine[object, object, object], what: str) -> asyncio.Task[None] | None:
        async def run() -> None:
            try:
                await coro
            except Exception as exc:
                log.warning("%s failed: %s", what, exc)

        try:
            task = asyncio.get_running_loop().create_task(run())
        except RuntimeError:  # no loop (unit tests driving the manager synchronously)
            coro.close()
            return None
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _t: coro.close())  # cancelled before it started (close): never awaited
        return task

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
        part = self._leader(topic, partition, current_leader_epoch)
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
        part = self._leader(topic, partition)
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
            self._dirty.add((topic, partition))
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
        part = self._partition(topic, partition)
        lg = part.log
        return PartitionInfo(
            topic, partition, lg.log_start_offset, lg.log_end_offset, part.high_watermark, lg.size_bytes
        )

    def active_producers(self, topic: str, partition: int) -> tuple[list[ActiveProducer], int, int]:
        """(the producers of this replica, its last stable offset, its high watermark) for DescribeProducers,
        which Kafka serves on any replica (`kafka-transactions describe-producers --broker-id`)."""
        part = self._partition(topic, partition)
        return part.producers.active_producers(), part.last_stable_offset, part.high_watermark

    def end_offset_for_epoch(self, topic: str, partition: int, epoch: int, *,
                             current_leader_epoch: int = -1) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch (KIP-101/320); (-1, -1) when unknown (leader only)."""
        part = self._leader(topic, partition, current_leader_epoch)
        return part.log.end_offset_for_epoch(epoch)

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self._partition(topic, partition).leader_epoch

    def checkpoint_dirty(self) -> int:
        """Persist high watermark / log start of partitions appended to since the last call."""
        return self.write_checkpoints(self.take_dirty())

    def take_dirty(self) -> list[Log]:
        """The logs appended to since the last call (call on the event loop; cheap)."""
        dirty, self._dirty = self._dirty, set()
        logs = []
        for key in dirty:
            part = self._partitions.get(key)
            if part is not None:
                logs.append(part.log)
        return logs

    @staticmethod
    def write_checkpoints(logs: Sequence[Log]) -> int:
        """Write each log's checkpoint (fsync'd file work: the broker runs this in a thread)."""
        done = 0
        for lg in logs:
            try:
                lg.write_checkpoint()  # nothing for a closed or deleted log
                done += 1
            except Exception as exc:  # a full or failing disk: the file is named in the message
                log.error("checkpoint of %s not written (the next start rescans from the last one): %s",
                          lg.name, exc)
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
