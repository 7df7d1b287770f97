"""Work on a replica off the event loop: worker-thread jobs on its log, background tasks, log deletion.

Why it exists: truncation, the producer-state rebuild, a deferred segment roll and deleting a log
read and write files (a rebuild walks batch headers: seconds on a large log), so they run in worker
threads. While a job runs on a replica it is *busy*: nothing appends to it, the replica fetcher
leaves it alone, and a leadership taken meanwhile waits for the job (its epoch must start at the
final log end) — Kafka gets the same by making leadership changes wait for the fetcher thread's
partition lock. The leader's path and the follower's both start jobs, so they live here, apart
from either; this module keeps every task it starts (`tasks`), which `ReplicaManager.close`
cancels. It must never parse records nor block the event loop on a file.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Coroutine, TypeVar

from kelp.errors import KelpError

from ..storage import LogManager
from .interfaces import Job
from .partition import Partition
from .producer_recovery import RebuiltState, rebuild_producer_state
from .table import PartitionTable

__all__ = ["ReplicaJobs"]

log = logging.getLogger("kelp.broker.replica")

T = TypeVar("T")


class ReplicaJobs:
    """Worker-thread jobs per replica (one after another on each), background tasks, log deletion."""

    def __init__(self, table: PartitionTable, logs: LogManager) -> None:
        self.table = table
        self.logs = logs
        self.tasks: set[asyncio.Task[object]] = set()
        # Set by the manager: a leadership taken while a truncation ran takes effect once the last one landed.
        self.finish_leader: Callable[[Partition], None] = lambda _part: None

    def background(self, coro: Coroutine[object, object, object], what: str) -> asyncio.Task[None] | None:
        """Run `coro` as a task kept until done; a failure is logged (`what` failed), never raised."""
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
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(lambda _t: coro.close())  # cancelled before it started (close): never awaited
        return task

    # -- jobs on a replica's log ------------------------------------------------
    def load_producer_state(self, part: Partition) -> None:
        """A replica opened on an existing log: its producer state is rebuilt in a worker thread (busy meanwhile)."""
        lg = part.log
        part.snapshot_base = lg.active_segment.base_offset
        if lg.log_end_offset <= lg.log_start_offset or lg.offline_reason:
            return  # nothing to replay, or an offline log: every request to it answers KAFKA_STORAGE_ERROR
        self.run_job(part, f"loading the producer state of {part.name}",
                     lambda: rebuild_producer_state(lg, part.topic, part.partition), self.install_producers)

    @staticmethod
    def install_producers(part: Partition, rebuilt: RebuiltState | None) -> None:
        if rebuilt is not None:
            part.producers = rebuilt.producers
        part.snapshot_base = part.log.active_segment.base_offset
        part.publish_unstable()

    def run_job(self, part: Partition, what: str, work: Callable[[], T],
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
            if install is not None and self.table.get(part.topic, part.partition) is part:
                install(part, result)
            return None
        task = loop.create_task(self._job(part, part.busy, what, work, install, truncates), name=what)
        part.busy = task
        part.truncations += truncates
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _job(self, part: Partition, previous: Job | None, what: str, work: Callable[[], T],
                   install: Callable[[Partition, T], None] | None, truncates: bool) -> BaseException | None:
        me = asyncio.current_task()
        try:
            if previous is not None and not previous.done():
                await asyncio.wait([previous])
            result = await asyncio.to_thread(work)
            if install is not None and self.table.get(part.topic, part.partition) is part:
                install(part, result)
            return None
        except Exception as exc:  # a full or failing disk: the partition stays as it is, the caller retries
            log.error("%s failed: %s", what, exc)
            return exc
        finally:
            part.truncations -= truncates
            if part.busy is me:
                part.busy = None
            if (part.truncations == 0 and part.is_leader and not part.leader_ready
                    and self.table.get(part.topic, part.partition) is part):
                self.finish_leader(part)
            part.wake()

    @staticmethod
    async def await_job(task: Job | None) -> None:
        """Wait for a job without cancelling it if the waiter is cancelled; re-raise what it failed with."""
        if task is None:
            return
        failure = await asyncio.shield(task)
        if failure is not None:
            raise failure

    @staticmethod
    async def await_not_busy(part: Partition, timeout_s: float) -> None:
        """Until no job runs on `part` (appends wait for a producer-state load or a truncation), bounded."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        while part.busy is not None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.wait([part.busy], timeout=remaining)

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
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task
