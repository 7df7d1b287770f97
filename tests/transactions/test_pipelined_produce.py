"""A connection's pipelined produce requests append in the order they arrived (issue 34's OutOfOrderSequence).

Kafka handles one request of a connection at a time, so a producer's pipelined batches (up to five in flight)
reach a partition in sequence order. Kelp handles each request in its own task; a produce may give the event
loop a turn before an append — its KIP-890 verification, a loop budget's slice running out, recompression in a
worker thread, a replica busy loading its producer state. Issue 34's rebalancing bench (three brokers, Java
client 4.3.1, transactions v2) failed on this: a transaction's first request (sequence 0 on partition 2 among
others) was verified and had started appending; the next request of the connection (sequence 1 on partition 2)
was verified meanwhile and checked first — `OUT_OF_ORDER_SEQUENCE_NUMBER: ... sent sequence 1 ... before its
earlier sequence 0 of the transaction` — and sequence 0 was then appended and acknowledged, so the client saw a
gap right after its last acknowledged batch: fatal for the application.

Here two requests go down one real connection back to back: R0 names several partitions, R1 the last of them
with the next sequence; R1 must be appended after R0, not refused. The turn of the loop R0 gives away before
that append is made certain twice: the replica manager's append of R0's batch there is held until R1 has been
appended or is seen waiting for its turn; and, with no hook, every loop budget slice runs out at once (as on
the loaded machine of the failing bench run, where a few milliseconds between two appends were enough).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest, ProduceResponse

from kelp.broker import loop_budget
from kelp.broker.kafka.append_order import Turn
from kelp.broker.transactions.metadata import TxnState
from kelp.records.build import build_batch
from tests.authorization.harness import ADMIN, InProcessBroker
from tests.transactions.test_verification import _coordinating

TID = "verified"  # the id the coordinating fixture made this broker the coordinator of
TOPIC = "out"
_SEQUENCE = struct.Struct(">i")  # a batch's base sequence, at byte 53 of RecordBatch v2
_correlation = itertools.count(1)


@pytest.fixture
async def b(tmp_path: Path):
    # connections from the wire are User:ANONYMOUS: a super user here, as on a broker without an authorizer
    async for broker in _coordinating(tmp_path, **{"super.users": f"{ADMIN};User:ANONYMOUS"}):
        yield broker


def _produce(pid: int, epoch: int, batches: dict[int, int], *, transactional: bool,
             topic: str = TOPIC) -> ProduceRequest:
    """One request with a batch of one record per partition: partition -> base sequence."""
    T = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=TID if transactional else None, acks=-1, timeout_ms=10_000, topic_data=[
        T(name=topic, partition_data=[
            T.PartitionProduceData(index=p, records=build_batch(
                [(b"k", f"seq {seq}".encode())], is_transactional=transactional, producer_id=pid,
                producer_epoch=epoch, base_sequence=seq))
            for p, seq in batches.items()])])


async def _send(writer: asyncio.StreamWriter, request: ProduceRequest, version: int) -> int:
    corr = next(_correlation)
    request.with_header(correlation_id=corr, client_id="pipelined")
    writer.write(bytes(request.encode(version=version, header=True, framed=True)))
    return corr


async def _answer(reader: asyncio.StreamReader, corr: int, version: int) -> dict[int, tuple[int, str | None]]:
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 15))[0]
    response = ProduceResponse.decode(await asyncio.wait_for(reader.readexactly(size), 15), version=version,
                                      header=True)
    assert response.header.correlation_id == corr
    return {p.index: (p.error_code, p.error_message) for t in response.responses for p in t.partition_responses}


@pytest.mark.parametrize("transactional", [True, False], ids=["transactions-v2", "idempotent"])
async def test_a_connections_pipelined_batches_append_in_sequence_order(b: InProcessBroker, transactional: bool,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    version = 12 if transactional else 9
    answer = await b.call(InitProducerIdRequest(transactional_id=TID if transactional else None,
                                                transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1), 4)
    assert answer.error_code == 0
    pid, epoch = answer.producer_id, answer.producer_epoch
    first = 0 if transactional else 1  # the idempotent producer is known on both partitions first
    server = b.broker.kafka_server
    assert server is not None
    replicas = b.parts.replicas
    real_append = replicas.append_local
    later_done = asyncio.Event()
    later_waits = asyncio.Event()  # a later produce request of the connection waits for its turn (none before the fix)
    real_wait = Turn.wait

    async def turn_wait(turn: Turn) -> None:
        if turn._before is not None and not turn._before.done():
            later_waits.set()
        await real_wait(turn)

    monkeypatch.setattr(Turn, "wait", turn_wait)

    def waiting() -> bool:
        return any(order.waiting for order in getattr(server, "_append_orders", {}).values())

    async def append_local(topic: str, partition: int, data: Any, **kw: Any) -> Any:
        seq = _SEQUENCE.unpack_from(data, 53)[0]
        if (topic, partition, seq) == (TOPIC, 1, first):
            # R0's batch on partition 1: the loop serves others here until R1 has been appended (or refused),
            # or waits for its turn behind R0
            events = [asyncio.ensure_future(later_done.wait()), asyncio.ensure_future(later_waits.wait())]
            done, pending = await asyncio.wait(events, timeout=5, return_when=asyncio.FIRST_COMPLETED)
            for event in pending:
                event.cancel()
            assert done, "R1 neither appended nor waited for R0 within 5 s"
        try:
            return await real_append(topic, partition, data, **kw)
        finally:
            if (topic, partition, seq) == (TOPIC, 1, first + 1):
                later_done.set()

    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        if not transactional:
            corr = await _send(writer, _produce(pid, epoch, {0: 0, 1: 0}, transactional=False), version)
            assert await _answer(reader, corr, version) == {0: (0, None), 1: (0, None)}
        replicas.append_local = append_local  # type: ignore[method-assign]
        r0 = await _send(writer, _produce(pid, epoch, {0: first, 1: first}, transactional=transactional), version)
        r1 = await _send(writer, _produce(pid, epoch, {1: first + 1}, transactional=transactional), version)
        await writer.drain()
        answers = [await _answer(reader, r0, version), await _answer(reader, r1, version)]
    finally:
        replicas.append_local = real_append  # type: ignore[method-assign]
        writer.close()
    assert answers == [{0: (0, None), 1: (0, None)}, {1: (0, None)}], answers
    part = replicas.get_partition(TOPIC, 1)
    assert part is not None
    assert part.producers.last_sequence(pid) == first + 1
    if transactional:  # both batches in the transaction R0's opened on partition 1
        assert part.producers.ongoing_transactions() == {pid: 0}
        assert b.parts.transactions.txns[TID].state is TxnState.ONGOING
        assert b.parts.transactions.txns[TID].partitions == {(TOPIC, 0), (TOPIC, 1)}
    assert not waiting()


async def test_a_loop_budget_turn_between_appends_lets_no_later_request_overtake(
        b: InProcessBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's failure as it happened: R0 (a transaction's first batches on 8 partitions) gives the loop a turn
    between its appends (`LoopBudget`, issue 33), and R1, verified meanwhile, reached the last partition first."""
    topic, n = "wide", 8
    await b.parts.topics.create_topic(topic, n, 1)
    for _ in range(250):
        if all((p := b.parts.replicas.get_partition(topic, i)) is not None and p.is_leader for i in range(n)):
            break
        await asyncio.sleep(0.02)
    monkeypatch.setattr(loop_budget, "SLICE_S", 0.0)  # every tick of a produce's partition loop yields
    answer = await b.call(InitProducerIdRequest(transactional_id=TID, transaction_timeout_ms=60_000, producer_id=-1,
                                                producer_epoch=-1), 4)
    assert answer.error_code == 0
    pid, epoch = answer.producer_id, answer.producer_epoch
    server = b.broker.kafka_server
    assert server is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        r0 = await _send(writer, _produce(pid, epoch, dict.fromkeys(range(n), 0), transactional=True, topic=topic), 12)
        r1 = await _send(writer, _produce(pid, epoch, {n - 1: 1}, transactional=True, topic=topic), 12)
        await writer.drain()
        answers = [await _answer(reader, r0, 12), await _answer(reader, r1, 12)]
    finally:
        writer.close()
    assert answers == [dict.fromkeys(range(n), (0, None)), {n - 1: (0, None)}], answers
    part = b.parts.replicas.get_partition(topic, n - 1)
    assert part is not None and part.producers.last_sequence(pid) == 1
