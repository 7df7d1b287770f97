"""Writing a transaction's markers on every partition it touched (Kafka's TransactionMarkerChannelManager).

Why: after EndTxn's PrepareCommit/PrepareAbort is durable, the coordinator must get a COMMIT or ABORT
control batch written on each partition of the transaction, by that partition's leader, and only then
write CompleteCommit/CompleteAbort. Leaders move and brokers restart meanwhile, so each partition is
retried — its leader re-resolved from the metadata image every round — with a backoff that doubles up to
a bound, until its marker is written, its topic is gone (nothing left to mark, as Kafka skips it), or a
leader says this coordinator or epoch is stale (INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED:
someone newer owns the transaction). A dispatch stops when this broker stops coordinating the
transaction's `__transaction_state` partition; the next coordinator resumes it from the Prepare state it
loads.

How markers travel is injectable (`MarkerSender`): `KafkaMarkerSender` sends WriteTxnMarkers (API 27)
over the Kafka protocol to the leader's inter-broker listener with the inter-broker security, as the
replica fetcher connects; tests pass a double.

This module must never change transaction state: it reports completion through its callback.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol

from kafka.protocol.producer import WriteTxnMarkersRequest

from kelp.errors import ErrorCode

from ..cluster.member import ClusterMember
from ..cluster.peer_connections import PeerConnections

__all__ = ["TxnMarker", "MarkerSender", "KafkaMarkerSender", "MarkerDispatcher", "MARKERS_VERSION"]

log = logging.getLogger("kelp.broker.transactions")

MARKERS_VERSION = 2  # WriteTxnMarkers v2 (Kafka 4 serves 1-2; v2 adds each marker's transaction version)

# A leader answered that a newer coordinator or producer epoch exists: stop sending (Kafka's abortSending).
_STALE = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


@dataclass(frozen=True)
class TxnMarker:
    """One transaction's end, for the partitions of one leader."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]
    transaction_version: int = 0  # 2: a transactions v2 marker (its epoch bumped past the data's)


class MarkerSender(Protocol):
    async def send(self, broker_id: int, marker: TxnMarker) -> dict[tuple[str, int], int]:
        """Write `marker` on its partitions through broker `broker_id`, their leader: the error per partition.

        Raises (any exception) when the broker could not be asked; every partition is retried then."""
        ...


class KafkaMarkerSender:
    """WriteTxnMarkers to partition leaders over the Kafka protocol, one connection per broker."""

    def __init__(self, cluster: ClusterMember, *, broker_id: int, timeout_s: float = 10.0) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.timeout_s = timeout_s
        self._peers = PeerConnections(cluster, client_id=f"kelp-txn-markers-{broker_id}", timeout_s=timeout_s)

    async def send(self, broker_id: int, marker: TxnMarker) -> dict[tuple[str, int], int]:
        M = WriteTxnMarkersRequest.WritableTxnMarker
        by_topic: dict[str, list[int]] = {}
        for topic, partition in marker.partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = WriteTxnMarkersRequest(markers=[M(
            producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
            transaction_result=marker.commit, coordinator_epoch=marker.coordinator_epoch,
            transaction_version=marker.transaction_version,
            topics=[M.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()])])
        response = await self._peers.get(broker_id).request(request, MARKERS_VERSION)
        out: dict[tuple[str, int], int] = {}
        for result in getattr(response, "markers", None) or []:
            for topic in result.topics or []:
                for p in topic.partitions or []:
                    out[(topic.name, p.partition_index)] = p.error_code
        return out

    async def close(self) -> None:
        await self._peers.close()


class MarkerDispatcher:
    """One task per transaction being completed; `done(txn_id, token)` is awaited once all partitions are marked."""

    def __init__(self, sender: MarkerSender, *, leader_of: Callable[[str, int], int | None],
                 topic_exists: Callable[[str], bool], backoff_ms: int, max_backoff_ms: int) -> None:
        self.sender = sender
        self.leader_of = leader_of
        self.topic_exists = topic_exists
        self.backoff_ms = backoff_ms
        self.max_backoff_ms = max_backoff_ms
        # transactional id -> (its __transaction_state partition, the task writing its markers)
        self._tasks: dict[str, tuple[int, asyncio.Task[None]]] = {}

    def pending(self, transactional_id: str) -> bool:
        entry = self._tasks.get(transactional_id)
        return entry is not None and not entry[1].done()

    def dispatch(self, transactional_id: str, txn_partition: int, marker: TxnMarker, *,
                 still_owned: Callable[[], bool], done: Callable[[], Awaitable[None]]) -> None:
        """Start writing `marker` (its partitions all); `done()` once every partition is marked."""
        old = self._tasks.pop(transactional_id, None)
        if old is not None and not old[1].done():
            old[1].cancel()
        task = asyncio.get_running_loop().create_task(
            self._run(transactional_id, marker, still_owned, done), name=f"txn-markers-{transactional_id}")
        self._tasks[transactional_id] = (txn_partition, task)
        task.add_done_callback(functools.partial(self._finished, transactional_id))

    def _finished(self, transactional_id: str, task: "asyncio.Task[None]") -> None:
        entry = self._tasks.get(transactional_id)
        if entry is not None and entry[1] is task:
            del self._tasks[transactional_id]
        if not task.cancelled() and task.exception() is not None:
            log.error("writing the markers of transactional id '%s' failed", transactional_id,
                      exc_info=task.exception())

    async def _run(self, transactional_id: str, marker: TxnMarker, still_owned: Callable[[], bool],
                   done: Callable[[], Awaitable[None]]) -> None:
        left = set(marker.partitions)
        backoff = self.backoff_ms
        kind = "COMMIT" if marker.commit else "ABORT"
        while left:
            if not still_owned():
                log.info("transactional id '%s': no longer its coordinator; %d marker(s) left to the next one",
                         transactional_id, len(left))
                return
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in sorted(left):
                if not self.topic_exists(tp[0]):
                    left.discard(tp)  # deleted: there is nothing to mark
                    continue
                leader = self.leader_of(*tp)
                if leader is not None and leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            results = await asyncio.gather(*(
                self._send(b, TxnMarker(marker.producer_id, marker.producer_epoch, marker.commit,
                                        marker.coordinator_epoch, tuple(tps), marker.transaction_version))
                for b, tps in by_leader.items()))
            for codes in results:
                for tp, code in codes.items():
                    if code == ErrorCode.NONE:
                        left.discard(tp)
                    elif code in _STALE:
                        log.warning("transactional id '%s': %s marker on %s-%d refused with error %d (a newer "
                                    "coordinator or epoch); stopping", transactional_id, kind, tp[0], tp[1], code)
                        return
            if left:
                log.debug("transactional id '%s': %d %s marker(s) left; retrying in %d ms", transactional_id,
                          len(left), kind, backoff)
                await asyncio.sleep(backoff / 1000.0)
                backoff = min(backoff * 2, self.max_backoff_ms)
        await done()

    async def _send(self, broker_id: int, marker: TxnMarker) -> dict[tuple[str, int], int]:
        try:
            codes = await self.sender.send(broker_id, marker)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("sending transaction markers of producer %d to broker %d failed: %s; retrying",
                        marker.producer_id, broker_id, exc)
            return {}
        return {tp: codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in marker.partitions}

    def stop_partition(self, txn_partition: int) -> None:
        """This broker no longer coordinates `txn_partition`: its dispatches stop."""
        for tid, (p, task) in list(self._tasks.items()):
            if p == txn_partition:
                task.cancel()
                del self._tasks[tid]

    async def stop(self) -> None:
        tasks = [t for _, t in self._tasks.values()]
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        close = getattr(self.sender, "close", None)
        if close is not None:
            await close()
