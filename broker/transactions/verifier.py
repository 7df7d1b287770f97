"""The partition leader's question to the transaction coordinator before a transaction's first batch (KIP-890).

Why: without it a transactional batch can land on a partition its coordinator never heard of (a late
retry after an abort, a buggy client): no marker will ever end it, and the partition's last stable offset
hangs forever (KIP-664's hanging transaction). Kafka 3.6+ leaders therefore ask the coordinator, with the
broker form of AddPartitionsToTxn (v4+), before appending a producer's first transactional batch on a
partition (`transaction.partition.verification.enable`, default true): verify-only for clients of
transactions v1, and for transactions v2 (Produce v12+) the same request with verify-only false *adds* the
partition, which is how a TV2 producer joins partitions without AddPartitionsToTxn of its own. Once the
batch is appended the producer state has an open transaction there and later batches ask nothing: the cost
is one round trip per partition per transaction.

This is Kafka's `AddPartitionsToTxnManager`: asks for the same coordinator are coalesced into one request
while one is in flight (one connection per broker, one request at a time); two asks of one transactional id
at the same producer epoch are merged into one entry (Kafka answers the older NETWORK_EXCEPTION instead),
an older epoch is answered INVALID_PRODUCER_EPOCH at once. When this broker is the coordinator itself the
coordinator is called directly. `produce_error` maps the coordinator's answer to what a Produce of a given
version gets, as Kafka's ReplicaManager does.

This module must never change transaction or producer state itself (the coordinator and the replica layer
do), and never wait without a bound.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable, Protocol

from kafka.protocol.producer import AddPartitionsToTxnRequest

from kelp.errors import ErrorCode

from ..cluster.member import ClusterMember
from ..cluster.peer_connections import PeerConnections

__all__ = ["TxnVerifier", "VERIFY_VERSION"]

log = logging.getLogger("kelp.broker.transactions")

VERIFY_VERSION = 4  # AddPartitionsToTxn v4: the broker-batched form (v5 only adds TRANSACTION_ABORTABLE answers)
TopicPartition = tuple[str, int]


class LocalCoordinator(Protocol):
    """This broker's own transaction coordinator, asked directly (`coordinator.TransactionCoordinator`)."""

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], *, tv2: bool = False) -> Awaitable[int]: ...

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...


@dataclass
class _Ask:
    """One transactional id's entry in the next request to a coordinator."""

    producer_id: int
    producer_epoch: int
    add: bool
    partitions: set[TopicPartition] = field(default_factory=set)
    waiters: list["asyncio.Future[dict[TopicPartition, int]]"] = field(default_factory=list)


class TxnVerifier:
    """Asks transaction coordinators whether (or, for transactions v2, makes) partitions part of a transaction."""

    def __init__(self, cluster: ClusterMember | None, *, broker_id: int,
                 coordinator_of: Callable[[str], int | None], local: LocalCoordinator | None = None,
                 timeout_s: float = 10.0) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.coordinator_of = coordinator_of  # transactional id -> broker id of its coordinator, None if none
        self.local = local
        self.timeout_s = timeout_s
        self._peers = PeerConnections(cluster, client_id=f"kelp-txn-verify-{broker_id}", timeout_s=timeout_s)
        self._pending: dict[int, dict[str, _Ask]] = {}  # broker id -> transactional id -> next ask
        self._senders: dict[int, asyncio.Task[None]] = {}
        self.asked = 0  # requests sent (or local calls): tests read it
        # /metrics (Kafka's AddPartitionsToTxnManager VerificationFailureRate): partitions asked, and refused
        self.partitions_verified = 0
        self.partitions_refused = 0

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], *, add: bool = False) -> dict[TopicPartition, int]:
        """The coordinator's error code per partition (NONE: in the transaction). `add` (transactions v2)
        adds partitions not yet in it instead of answering TRANSACTION_ABORTABLE."""
        codes = await self._verify(transactional_id, producer_id, producer_epoch, partitions, add)
        self.partitions_verified += len(partitions)
        self.partitions_refused += sum(1 for code in codes.values() if code != ErrorCode.NONE)
        return codes

    async def _verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      partitions: list[TopicPartition], add: bool) -> dict[TopicPartition, int]:
        node = self.coordinator_of(transactional_id)
        if node is None or node < 0:
            return {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in partitions}
        if node == self.broker_id and self.local is not None:
            self.asked += 1
            return await self._ask_local(transactional_id, producer_id, producer_epoch, partitions, add)
        pending = self._pending.setdefault(node, {})
        ask = pending.get(transactional_id)
        if ask is not None and (ask.producer_id, ask.producer_epoch) != (producer_id, producer_epoch):
            if producer_id == ask.producer_id and producer_epoch < ask.producer_epoch:
                return {tp: ErrorCode.INVALID_PRODUCER_EPOCH for tp in partitions}  # fenced by the queued one
            # a newer epoch (or another producer id: the coordinator judges it) replaces the queued ask
            self._answer(ask, {tp: ErrorCode.INVALID_PRODUCER_EPOCH for tp in ask.partitions})
            ask = None
        if ask is None:
            ask = pending[transactional_id] = _Ask(producer_id, producer_epoch, add)
        ask.add = ask.add or add
        ask.partitions.update(partitions)
        fut: asyncio.Future[dict[TopicPartition, int]] = asyncio.get_running_loop().create_future()
        ask.waiters.append(fut)
        sender = self._senders.get(node)
        if sender is None or sender.done():
            self._senders[node] = asyncio.get_running_loop().create_task(self._send_loop(node),
                                                                        name=f"txn-verify-{node}")
        try:
            answer = await asyncio.wait_for(fut, self.timeout_s * 2)
        except asyncio.TimeoutError:  # queued behind a coordinator that does not answer: retriable for the client
            return {tp: ErrorCode.NETWORK_EXCEPTION for tp in partitions}
        return {tp: answer.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in partitions}

    async def _ask_local(self, tid: str, pid: int, epoch: int, partitions: list[TopicPartition],
                         add: bool) -> dict[TopicPartition, int]:
        assert self.local is not None
        if add:
            code = await self.local.add_partitions(tid, pid, epoch, partitions, tv2=True)
            return {tp: code for tp in partitions}
        return self.local.verify_partitions(tid, pid, epoch, partitions)

    @staticmethod
    def _answer(ask: _Ask, codes: dict[TopicPartition, int]) -> None:
        for fut in ask.waiters:
            if not fut.done():
                fut.set_result(codes)

    async def _send_loop(self, node: int) -> None:
        """Send what is pending for `node`, one request at a time, until nothing is."""
        while True:
            batch = self._pending.pop(node, None)
            if not batch:
                return
            self.asked += 1
            try:
                answers = await self._request(node, batch)
            except asyncio.CancelledError:
                for ask in batch.values():
                    self._answer(ask, {tp: ErrorCode.NETWORK_EXCEPTION for tp in ask.partitions})
                raise
            except Exception as exc:
                log.warning("verifying %d transaction(s) with coordinator broker %d failed: %s", len(batch), node, exc)
                answers = {tid: {tp: ErrorCode.NETWORK_EXCEPTION for tp in ask.partitions}
                           for tid, ask in batch.items()}
            for tid, ask in batch.items():
                self._answer(ask, answers.get(tid, {tp: ErrorCode.UNKNOWN_SERVER_ERROR for tp in ask.partitions}))

    async def _request(self, node: int, batch: dict[str, _Ask]) -> dict[str, dict[TopicPartition, int]]:
        R = AddPartitionsToTxnRequest
        txns = []
        for tid, ask in batch.items():
            by_topic: dict[str, list[int]] = {}
            for topic, p in sorted(ask.partitions):
                by_topic.setdefault(topic, []).append(p)
            txns.append(R.AddPartitionsToTxnTransaction(
                transactional_id=tid, producer_id=ask.producer_id, producer_epoch=ask.producer_epoch,
                verify_only=not ask.add,
                topics=[R.AddPartitionsToTxnTransaction.AddPartitionsToTxnTopic(name=t, partitions=ps)
                        for t, ps in by_topic.items()]))
        response = await self._peers.get(node).request(R(transactions=txns), VERIFY_VERSION,
                                                        timeout_s=self.timeout_s)
        top = getattr(response, "error_code", 0) or 0
        if top:
            return {tid: {tp: top for tp in ask.partitions} for tid, ask in batch.items()}
        out: dict[str, dict[TopicPartition, int]] = {}
        for result in getattr(response, "results_by_transaction", None) or []:
            codes = out.setdefault(result.transactional_id, {})
            for topic in result.topic_results or []:
                for p in topic.results_by_partition or []:
                    codes[(topic.name, p.partition_index)] = p.partition_error_code
        return {tid: {tp: out.get(tid, {}).get(tp, ErrorCode.NONE) for tp in ask.partitions}
                for tid, ask in batch.items()}

    async def close(self) -> None:
        senders, self._senders = list(self._senders.values()), {}
        for task in senders:
            task.cancel()
        if senders:
            await asyncio.gather(*senders, return_exceptions=True)
        await self._peers.close()
