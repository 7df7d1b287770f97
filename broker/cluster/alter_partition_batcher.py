"""This broker's AlterPartition requests, batched: one request in flight, carrying every ISR change pending.

Why: a leader proposes one ISR change per partition (`replica.isr_changes`), and after a broker rejoins, or
is fenced out, thousands come at once; sent one by one, each was a controller call, a metadata entry and a
delivery of its own (3,000 partitions at RF 3: three and a half minutes of re-expansions, the tail of that
bench's latency). Kafka's `AlterPartitionManager` keeps one AlterPartition request per broker in flight and
sends everything queued meanwhile in the next; this does the same in front of the controller's
`alter_partitions`. Each caller still gets its own item's outcome — its partition's state, or its refusal
raised — and an unknown outcome of the whole request (a timeout, no controller) is raised to every caller in
it, each of which asks again with its own backoff, as for one item. A controller that predates
`alter_partitions` (a rolling upgrade with the controller not yet rolled) answers 404: the items then go one
by one. Pure asyncio; the sending is the caller's (`routing.LeaderRouting`).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from kelp.errors import KelpError

from ..metadata.controller_answers import AlterPartitionItem, AlterPartitionsAnswer, PartitionAnswer

__all__ = ["AlterPartitionBatcher", "MAX_ITEMS"]

MAX_ITEMS = 1000  # per request: about 100 bytes of JSON each, far below the control plane's body bound
UNKNOWN_OPERATION = 404  # what the controller's HTTP route answers for an operation it does not know

SendBatch = Callable[[list[AlterPartitionItem]], Awaitable[AlterPartitionsAnswer]]
SendOne = Callable[[AlterPartitionItem], Awaitable[PartitionAnswer]]
ErrorFor = Callable[[int, str], KelpError]

_Waiting = tuple[AlterPartitionItem, "asyncio.Future[PartitionAnswer]"]


class AlterPartitionBatcher:
    """`submit` an item, await its outcome; at most one request to the controller at a time."""

    def __init__(self, send_batch: SendBatch, send_one: SendOne, error_for: ErrorFor) -> None:
        self._send_batch = send_batch
        self._send_one = send_one
        self._error_for = error_for
        self._queue: list[_Waiting] = []
        self._task: asyncio.Task[None] | None = None
        self.requests = 0  # requests sent to the controller (batches, and single items after a 404)

    async def submit(self, item: AlterPartitionItem) -> PartitionAnswer:
        """The controller's answer for this one item once it is known; its refusal raised. A caller cancelled
        while its item waits takes it out of the next request (one already sent may still be applied)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PartitionAnswer] = loop.create_future()
        self._queue.append((item, fut))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain(), name="AlterPartition requests")
        return await fut

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = [(item, fut) for item, fut in self._queue[:MAX_ITEMS] if not fut.done()]
                del self._queue[:MAX_ITEMS]
                if batch:
                    await self._send(batch)
        except BaseException as exc:  # this task cancelled (the broker stops): nobody is left waiting forever
            for _, fut in self._queue:
                if not fut.done():
                    fut.cancel()
            self._queue.clear()
            if not isinstance(exc, Exception):
                raise

    async def _send(self, batch: list[_Waiting]) -> None:
        items = [item for item, _ in batch]
        self.requests += 1
        try:
            answer = await self._send_batch(items)
            results = answer["results"]
            if len(results) != len(items):
                raise KelpError(f"alter_partitions answered {len(results)} results for {len(items)} items")
        except KelpError as exc:
            if exc.code == UNKNOWN_OPERATION:
                await self._one_by_one(batch)
                return
            _fail(batch, exc)
            return
        except Exception as exc:  # a lost connection, a timeout: the outcome of every item is unknown
            _fail(batch, exc)
            return
        except asyncio.CancelledError:  # the broker stops mid-request: its callers are cancelled with it
            _fail(batch, asyncio.CancelledError())
            raise
        offset = answer["metadata_offset"]
        for (_, fut), result in zip(batch, results, strict=True):
            if fut.done():
                continue
            state = result.get("state")
            if result["error_code"] == 0 and state is not None:
                fut.set_result({**state, "metadata_offset": offset})
            else:
                fut.set_exception(self._error_for(result["error_code"], result.get("message", "")))

    async def _one_by_one(self, batch: list[_Waiting]) -> None:
        self.requests += len(batch)
        outcomes = await asyncio.gather(*(self._send_one(item) for item, _ in batch), return_exceptions=True)
        for (_, fut), outcome in zip(batch, outcomes, strict=True):
            if fut.done():
                continue
            if isinstance(outcome, BaseException):
                fut.set_exception(outcome)
            else:
                fut.set_result(outcome)


def _fail(batch: list[_Waiting], exc: BaseException) -> None:
    for _, fut in batch:
        if not fut.done():
            if isinstance(exc, asyncio.CancelledError):
                fut.cancel()
            else:
                fut.set_exception(exc)
