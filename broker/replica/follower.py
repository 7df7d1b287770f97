"""The follower's path: appending what the leader sent, following its high watermark and log start, truncating.

Why: a follower appends what its leader sent (offsets and epochs kept), follows the leader's high
watermark and log start, and truncates when it finds its log diverged (KIP-101/279); the replica
fetcher (`kelp.broker.cluster.replica_fetcher`) calls these doors. Truncation and the producer-state
rebuild that follows it run as jobs on the replica's log (`jobs`: worker threads, the replica busy
meanwhile); a roll an append deferred and the producer snapshot at a roll are `rolls`, which the
leader's path uses too. `ReplicaManager` composes it with the partition table and the jobs. This
module must never parse records (per batch only) nor block the event loop on a file.
"""

from __future__ import annotations

import asyncio
import logging

from kelp.control_records import read_marker
from kelp.errors import KafkaStorageError, NotLeaderOrFollowerError

from ..storage import Log
from ..storage.indexes.txn_index import AbortedTxn
from .jobs import ReplicaJobs
from .producer_recovery import RebuiltState, rebuild_producer_state
from .producer_state import ProducerStateManager
from .rolls import maybe_snapshot_producers, roll_later
from .table import PartitionTable

__all__ = ["FollowerPath"]

log = logging.getLogger("kelp.broker.replica")


class FollowerPath:
    """Follower appends, log-start following and truncation, on the replicas this broker follows."""

    def __init__(self, table: PartitionTable, jobs: ReplicaJobs) -> None:
        self.table = table
        self.jobs = jobs
        self._flush_due: dict[tuple[str, int], Log] = {}  # follower logs past flush.messages: fsync before fetching

    # -- follower appends -------------------------------------------------
    def follower_ready(self, topic: str, partition: int, leader_epoch: int) -> bool:
        """True when this replica follows at `leader_epoch` and no job is changing its log (the fetcher asks)."""
        part = self.table.get(topic, partition)
        return part is not None and not part.is_leader and part.leader_epoch == leader_epoch and part.busy is None

    def append_as_follower(
        self, topic: str, partition: int, data: bytes | memoryview, *, leader_epoch: int,
        leader_high_watermark: int,
    ) -> int:
        """Append what the leader sent (offsets and epochs kept); follow its high watermark. Returns the new log end."""
        part = self.table.get(topic, partition)
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
                maybe_snapshot_producers(self.jobs, part, before)
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
                    roll_later(self.jobs, part)  # the fetcher leaves the replica alone until the new segment is in
                self.table.mark_dirty(topic, partition)
        if part.follow_high_watermark(leader_high_watermark) or data:
            self.table.mark_dirty(topic, partition)
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
        part = self.table.get(topic, partition)
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
        part = self.table.get(topic, partition)
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

        await self.jobs.await_job(self.jobs.run_job(part, f"truncating {part.name} to offset {offset}", work,
                                            self.jobs.install_producers, truncates=True))
        return True

    async def truncate_follower_fully(self, topic: str, partition: int, offset: int, *, leader_epoch: int) -> bool:
        """Empty a follower's log and restart it at `offset` (it fell below the leader's log start)."""
        part = self.table.get(topic, partition)
        if part is None or part.is_leader or part.leader_epoch != leader_epoch:
            return False
        lg = part.log

        def work() -> RebuiltState:
            lg.truncate_fully_and_start_at(offset)
            return RebuiltState(ProducerStateManager(topic, partition), None, 0, offset)

        await self.jobs.await_job(self.jobs.run_job(part, f"restarting {part.name} at offset {offset}", work,
                                            self.jobs.install_producers, truncates=True))
        return True
