"""The follower's doors into the replica manager, and the worker-thread jobs on a replica's log.

Why: a follower appends what its leader sent (offsets and epochs kept),
follows the leader's high watermark and log start, and truncates when it
finds its log diverged (KIP-101/279). Truncation and the producer-state
rebuild that follows it read and write files, and a rebuild walks batch
headers (seconds on a large log): they run in worker threads, as jobs
(`_run_job`). While a job runs the replica is *busy*: nothing appends to it,
the replica fetcher leaves it alone, and a leadership taken meanwhile waits
for the job (its epoch must start at the final log end) — Kafka gets the same
by making leadership changes wait for the fetcher thread's partition lock.

Also here: segment rolls that appends on the loop deferred (`_roll_later`, a job
like the others), producer snapshots when a segment rolls, and deleting a log with
no file work on the event loop (`delete_log_later`). `ReplicaManager` mixes
this in (the state it uses is declared in `state`). This module must
never parse records (per batch only) nor block the event loop on a file.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, TypeVar

from kelp.control_records import read_marker
from kelp.errors import KafkaStorageError, KelpError, NotLeaderOrFollowerError

from ..storage.segment import LogSegment
from ..storage.txn_index import AbortedTxn
from .partition import Partition
from .producer_recovery import RebuiltState, rebuild_producer_state
from .producer_state import ProducerStateManager
from .state import Job, ReplicaState

__all__ = ["FollowerPath"]

log = logging.getLogger("kelp.broker.replica")

T = TypeVar("T")


class FollowerPath(ReplicaState):
    """Follower appends, truncation jobs, producer snapshots (mixed into ReplicaManager)."""

    # -- follower appends -------------------------------------------------
    def follower_ready(self, topic: str, partition: int, leader_epoch: int) -> bool:
        """True when this replica follows at `leader_epoch` and no job is changing its log (the fetcher asks)."""
        part = self._partitions.get((topic, partition))
        return part is not None and not part.is_leader and part.leader_epoch == leader_epoch and part.busy is None

    def append_as_follower(
        self, topic: str, partition: int, data: bytes | memoryview, *, leader_epoch: int,
        leader_high_watermark: int,
    ) -> int:
        """Append what the leader sent (offsets and epochs kept); follow its high watermark. Returns the new log end."""
        part = self._partitions.get((topic, partition))
        if part is None or part.is_leader or part.leader_epoch != leader_epoch:
            raise NotLeaderOrFollowerError(f"{topic}-{partition}: no longer following at epoch {leader_epoch}")
        if part.busy is not None:
            raise NotLeaderOrFollowerError(f"{topic}-{partition}: a truncation or producer-state load is in flight")
        lg = part.log
        if data:
            before = lg.log_end_offset
            result = lg.append_as_follower(data, defer_flush=True, defer_roll=True)
            if result is not None and result.flush_due:
                self._flush_due[(topic, partition)] = lg  # fsynced by `flush_followers` before the next fetch
            if result is not None:
                self._maybe_snapshot_producers(part, before)
                # Per batch: producer state follows the leader's (idempotence and open transactions survive
                # failover); a marker closes its transaction and indexes it if aborted, as on the leader.
                transactional = False
                for h in result.batches:
                    if h.producer_id < 0:
                        continue
                    transactional = transactional or h.is_transactional
                    marker = read_marker(data, h) if h.is_control else None
                    done = part.producers.apply_batch(h, marker)
                    if done is not None and done.aborted:
                        lg.append_aborted_txn(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                                         done.last_stable_offset))
                if transactional:
                    part.publish_unstable()
                if result.roll_due:
                    self._roll_later(part)  # the fetcher leaves the replica alone until the new segment is in
                self._dirty.add((topic, partition))
        if part.follow_high_watermark(leader_high_watermark) or data:
            self._dirty.add((topic, partition))
        return lg.log_end_offset

    async def flush_followers(self) -> None:
        """fsync the follower logs whose appends reached flush.messages, in a worker thread (never on the loop).

        The replica fetcher awaits this before it fetches again: its next fetch offset tells the leader what
        this replica holds, and with flush.messages that must mean fsynced, as Kafka's follower append does.
        """
        if not self._flush_due:
            return
        due = dict(self._flush_due)

        def flush_all() -> list[tuple[str, int]]:
            done = []
            for key, lg in due.items():
                try:
                    lg.flush()
                except KafkaStorageError:
                    if not lg.closed or lg.offline_reason:
                        raise  # a failed fsync: kept due, so the fetcher retries it before fetching again
                done.append(key)  # flushed, or moved or deleted meanwhile: nothing of it left to make durable
            return done
        for key in await asyncio.to_thread(flush_all):
            if self._flush_due.get(key) is due[key]:
                del self._flush_due[key]

    def follow_log_start(self, topic: str, partition: int, leader_log_start_offset: int) -> int:
        """A follower raises its log start to the leader's (DeleteRecords, retention), as Kafka's fetcher does.

        After the high watermark followed the leader's (the log start never passes it). It writes the
        log's checkpoint (fsync): the fetcher calls it in a worker thread, only when the leader's is ahead.
        """
        part = self._partitions.get((topic, partition))
        if part is None or part.is_leader:
            return -1
        lg = part.log
        target = min(leader_log_start_offset, lg.high_watermark)
        if target > lg.log_start_offset:
            lg.advance_log_start_offset(target)
        return lg.log_start_offset

    # -- truncation -------------------------------------------------------
    async def truncate_follower(self, topic: str, partition: int, offset: int, *, leader_epoch: int) -> bool:
        """Truncate a follower's log to `offset` and rebuild its producer state, in a worker thread.

        As Kafka's `truncateTo`, the leader-epoch cache is cut at the log end even when no record goes.
        False (nothing done) unless this replica still follows at `leader_epoch`; raises what the job
        raised. A leadership taken while it runs completes once it landed.
        """
        part = self._partitions.get((topic, partition))
        if part is None or part.is_leader or part.leader_epoch != leader_epoch:
            return False
        lg = part.log

        def work() -> RebuiltState | None:
            before = lg.log_end_offset
            if offset < before:
                log.warning("%s: truncating from log end %d to %d (records the leader does not have)",
                            part.name, before, offset)
            lg.truncate_to(offset)
            if lg.log_end_offset == before:
                return None  # no record went: the producer state stands
            return rebuild_producer_state(lg, topic, partition)

        await self._await_job(self._run_job(part, f"truncating {part.name} to offset {offset}", work,
                                            self._install_producers, truncates=True))
        return True

    async def truncate_follower_fully(self, topic: str, partition: int, offset: int, *, leader_epoch: int) -> bool:
        """Empty a follower's log and restart it at `offset` (it fell below the leader's log start)."""
        part = self._partitions.get((topic, partition))
        if part is None or part.is_leader or part.leader_epoch != leader_epoch:
            return False
        lg = part.log

        def work() -> RebuiltState:
            lg.truncate_fully_and_start_at(offset)
            return RebuiltState(ProducerStateManager(topic, partition), None, 0, offset)

        await self._await_job(self._run_job(part, f"restarting {part.name} at offset {offset}", work,
                                            self._install_producers, truncates=True))
        return True

    # -- jobs ---------------------------------------------------------------
    def _load_producer_state(self, part: Partition) -> None:
        """A replica opened on an existing log: its producer state is rebuilt in a worker thread (busy meanwhile)."""
        lg = part.log
        part.snapshot_base = lg.active_segment.base_offset
        if lg.log_end_offset <= lg.log_start_offset or lg.offline_reason:
            return  # nothing to replay, or an offline log: every request to it answers KAFKA_STORAGE_ERROR
        self._run_job(part, f"loading the producer state of {part.name}",
                      lambda: rebuild_producer_state(lg, part.topic, part.partition), self._install_producers)

    def _install_producers(self, part: Partition, rebuilt: RebuiltState | None) -> None:
        if rebuilt is not None:
            part.producers = rebuilt.producers
        part.snapshot_base = part.log.active_segment.base_offset
        part.publish_unstable()

    def _run_job(self, part: Partition, what: str, work: Callable[[], T],
                 install: Callable[[Partition, T], None] | None = None, *,
                 truncates: bool = False) -> Job | None:
        """Run `work()` in a worker thread with `part` busy; `install(part, result)` on the loop after, if
        `part` is still this broker's replica. Jobs on one replica run one after another. A job that
        `truncates` moves the log end: a leadership taken meanwhile completes only after it.

        Without a running loop (a synchronous caller: no loop to keep responsive) it runs inline.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            result = work()
            if install is not None and self._partitions.get((part.topic, part.partition)) is part:
                install(part, result)
            return None
        task = loop.create_task(self._job(part, part.busy, what, work, install, truncates), name=what)
        part.busy = task
        part.truncations += truncates
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _job(self, part: Partition, previous: Job | None, what: str, work: Callable[[], T],
                   install: Callable[[Partition, T], None] | None, truncates: bool) -> BaseException | None:
        me = asyncio.current_task()
        key = (part.topic, part.partition)
        try:
            if previous is not None and not previous.done():
                await asyncio.wait([previous])
            result = await asyncio.to_thread(work)
            if install is not None and self._partitions.get(key) is part:
                install(part, result)
            return None
        except Exception as exc:  # a full or failing disk: the partition stays as it is, the caller retries
            log.error("%s failed: %s", what, exc)
            return exc
        finally:
            part.truncations -= truncates
            if part.busy is me:
                part.busy = None
            if part.truncations == 0 and part.is_leader and not part.leader_ready and self._partitions.get(key) is part:
                self._finish_leader(part)
            part.wake()

    @staticmethod
    async def _await_job(task: Job | None) -> None:
        """Wait for a job without cancelling it if the waiter is cancelled; re-raise what it failed with."""
        if task is None:
            return
        failure = await asyncio.shield(task)
        if failure is not None:
            raise failure

    async def _await_not_busy(self, part: Partition, timeout_s: float) -> None:
        """Until no job runs on `part` (appends wait for a producer-state load or a truncation), bounded."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        while part.busy is not None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.wait([part.busy], timeout=remaining)

    # -- producer snapshots ---------------------------------------------------
    def _maybe_snapshot_producers(self, part: Partition, end_before_append: int) -> None:
        """After an append: if the log rolled a segment at `end_before_append`, snapshot the producer state
        there (the state in memory, before this append's batches are applied, is exactly that) — as
        Kafka's roll. The file is written in a worker thread; per roll, never per batch."""
        lg = part.log
        base = lg.active_segment.base_offset
        if base == part.snapshot_base:
            return
        part.snapshot_base = base
        if base != end_before_append:
            return  # rolled at some other point (cannot describe it from here); the next roll will do
        self._background(asyncio.to_thread(lg.write_producer_snapshot, base, part.producers.entries(),
                                           generation=lg.truncation_generation),
                         f"producer snapshot of {part.name} at offset {base}")

    def _roll_later(self, part: Partition) -> None:
        """Make the roll an append deferred (`defer_roll`) as a job: the new segment's files are created in a
        worker thread while appends to `part` wait (busy), never on the event loop (issue 23); then, on the
        loop, the producer state — which no append changed meanwhile — is snapshotted at its base, as at
        any roll."""
        def install(part: Partition, segment: LogSegment | None) -> None:
            if segment is not None:
                self._maybe_snapshot_producers(part, segment.base_offset)

        self._run_job(part, f"rolling a segment of {part.name}", part.log.roll_when_due, install)

    # -- log deletion -----------------------------------------------------------
    def delete_log_later(self, topic: str, partition: int, topic_id: str | None = None) -> Awaitable[None] | None:
        """Delete a replica's log (of `topic_id`'s topic, when given: a log already re-created under the name for
        another id is not this deletion's) with no file work on the event loop: forgotten now (a replica placed
        here again at once gets a fresh log), its files closed and removed in a worker thread. None if absent."""
        doomed = self.logs.detach(topic, partition, topic_id)
        if doomed is None:
            return None
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.logs.destroy(doomed)
            return None

        async def destroy() -> None:
            try:
                await asyncio.to_thread(self.logs.destroy, doomed)
                log.info("%s-%d: log deleted", topic, partition)
            except (OSError, KelpError) as exc:
                log.warning("deleting the log of %s-%d: %s", topic, partition, exc)

        task = asyncio.get_running_loop().create_task(destroy(), name=f"deleting {topic}-{partition}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
