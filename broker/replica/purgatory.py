"""The purgatory for delayed produce: an acks=all append answers once the ISR has it (Kafka's DelayedProduce).

Why it exists: the Kafka Produce handler, the group coordinator's and the transaction coordinator's
writes, the Schema Registry and the transaction markers all wait the same way: until the high
watermark passes the batch, under the leader epoch of the append, and then with min.insync.replicas
checked against the (maximal) ISR. The waits themselves are futures each `Partition` keeps
(`add_ack_waiter`), completed as its high watermark moves and failed when its leadership moves; this
module registers them, bounds them in time and turns their outcome into the answer. It must never
append nor answer an acks=all append whose epoch moved.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from kelp.errors import KelpError, NotEnoughReplicasAfterAppendError, NotLeaderOrFollowerError, RequestTimedOutError

from ..loop_budget import LoopBudget
from .results import ProduceResult
from .table import PartitionTable

__all__ = ["ProducePurgatory"]


class ProducePurgatory:
    """acks=-1 waits on the replicas of one broker."""

    def __init__(self, table: PartitionTable) -> None:
        self.table = table

    async def wait_all_for_isr(self, results: Sequence[ProduceResult], *,
                               timeout_ms: int) -> list[ProduceResult | KelpError]:
        """acks=-1 for a request's appends: each result, or its error, once the ISR has it, all within one
        `timeout_ms` from now (Kafka's one DelayedProduce for the request).

        One after another rather than a task each: thousands of partitions would be as many tasks made in one
        step of the loop (tens of milliseconds), while waiting in turn takes no longer (every append replicates
        meanwhile: the request waits one replication round trip) and the loop gets a turn every few ms."""
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000.0
        out: list[ProduceResult | KelpError] = []
        budget = LoopBudget()
        for result in results:
            await budget.tick()
            try:
                out.append(await self.wait_for_isr(result, acks=-1, timeout_ms=timeout_ms, deadline=deadline))
            except KelpError as exc:
                out.append(exc)
        return out

    async def wait_for_isr(self, result: ProduceResult, *, acks: int, timeout_ms: int,
                           deadline: float | None = None) -> ProduceResult:
        """acks=-1: wait until the ISR has `result`'s offsets (or time out); other acks return at once.

        As Kafka's DelayedProduce: a duplicate waits for its original offsets like a fresh append;
        the wait completes only while this broker leads at the leader epoch of the append (checked
        when it is registered — the handler awaits between append and wait — and on every
        leadership change: NOT_LEADER_OR_FOLLOWER, the batch may have been truncated); then
        min.insync.replicas is checked against the (maximal) ISR. `deadline` (time.monotonic()) ends the wait
        instead of `timeout_ms` from now, when a request's earlier waits took part of its time.
        """
        if acks != -1:
            return result
        topic, partition = result.topic, result.partition
        part = self.table.get(topic, partition)
        if part is None or (result.appended_to is not None and part is not result.appended_to):
            raise NotLeaderOrFollowerError(f"topic '{topic}' partition {partition} left broker "
                                           f"{self.table.broker_id} during the produce")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        needed = result.last_offset + 1
        if (part.is_leader and part.leader_ready and part.leader_epoch == result.leader_epoch
                and part.high_watermark >= needed):
            fut.set_result(None)  # replicated already (a duplicate of a committed batch, or a fast ISR)
        else:
            part.add_ack_waiter(needed, result.leader_epoch, fut)  # fails at once if the epoch moved
        if not fut.done():
            try:
                wait_s = max(timeout_ms, 0) / 1000.0 if deadline is None else max(0.0, deadline - time.monotonic())
                await asyncio.wait_for(fut, wait_s)
            except asyncio.TimeoutError:
                part.discard_ack_waiter(fut)
                raise RequestTimedOutError(
                    f"topic '{topic}' partition {partition}: offsets {result.base_offset}..{result.last_offset} "
                    f"not replicated to the ISR {list(part.isr)} within {timeout_ms} ms (high watermark "
                    f"{part.high_watermark})"
                ) from None
        fut.result()  # NOT_LEADER_OR_FOLLOWER when leadership or its epoch moved
        isr = part.maximal_isr
        if len(isr) < part.min_insync_replicas:
            raise NotEnoughReplicasAfterAppendError(
                f"topic '{topic}' partition {partition}: written at offset {result.base_offset}, but the ISR "
                f"shrank to {list(isr)}, below min.insync.replicas={part.min_insync_replicas}"
            )
        return result
