"""A confluent-kafka (librdkafka) transactional producer against Kelp's transaction coordinator.

A broker runs in this process so its marker sender can be replaced by a double (`RecordingSender`): the
partition leader's side of markers (WriteTxnMarkers, API 27, and the control batches it writes) belongs to
the log slice of issue 21. The double answers as a leader would and, for `__consumer_offsets` partitions,
calls the group coordinator's `handle_txn_completion` as that leader's handler does. What a consumer sees
under read_committed goes through the real sender and the leader's WriteTxnMarkers handler.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kelp.broker.app import Broker
from kelp.broker.groups.placement import OFFSETS_TOPIC
from kelp.broker.transactions.markers import TxnMarker
from kelp.broker.transactions.metadata import TxnState
from kelp.config.broker import BrokerConfig
from tests.broker.helpers import create_topic_wire
from tests.transactions.harness import RecordingSender, until

TIMEOUT_S = 30


def _config(directory: Path) -> BrokerConfig:
    return BrokerConfig.load(env={}, overrides={
        "log.dirs": str(directory), "port": 0, "http.port": 0, "host": "127.0.0.1",
        "offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 2,
        "group.initial.rebalance.delay.ms": 0})


class Running:
    def __init__(self, broker: Broker, sender: RecordingSender) -> None:
        self.broker = broker
        self.sender = sender
        assert broker.kafka_server is not None
        self.bootstrap = f"127.0.0.1:{broker.kafka_server.port}"

    @property
    def txn(self):
        assert self.broker.transactions is not None
        return self.broker.transactions


async def start(directory: Path) -> Running:
    broker = Broker(_config(directory))
    await broker.start()
    sender = RecordingSender()
    assert broker.transactions is not None and broker.groups is not None
    broker.transactions.markers.sender = sender
    groups = broker.groups

    def leader_side(marker: TxnMarker) -> None:
        offsets = [p for t, p in marker.partitions if t == OFFSETS_TOPIC]
        if offsets:
            groups.handle_txn_completion(marker.producer_id, offsets, marker.commit)

    sender.on_marker = leader_side
    return Running(broker, sender)


@pytest.fixture
async def kelp(tmp_path: Path):
    running = await start(tmp_path)
    try:
        assert await asyncio.to_thread(create_topic_wire, running.bootstrap, "out", 2) == 0
        yield running
    finally:
        await running.broker.stop()


def producer(bootstrap: str, tid: str = "tx-app") -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 20000,
                     "socket.timeout.ms": 10000})


def run(fn):
    return asyncio.wait_for(asyncio.to_thread(fn), TIMEOUT_S + 15)


async def test_commit_and_abort_send_markers_to_the_partition_leader(kelp: Running) -> None:
    def work() -> None:
        p = producer(kelp.bootstrap)
        p.init_transactions(TIMEOUT_S)
        p.begin_transaction()
        p.produce("out", b"committed", partition=0)
        p.produce("out", b"committed", partition=1)
        p.commit_transaction(TIMEOUT_S)
        p.begin_transaction()
        p.produce("out", b"aborted", partition=0)
        p.flush(TIMEOUT_S)
        p.abort_transaction(TIMEOUT_S)

    await run(work)
    await until(lambda: kelp.txn.txns["tx-app"].state is TxnState.COMPLETE_ABORT, TIMEOUT_S)
    markers = [m for _, m in kelp.sender.sent]
    assert [m.commit for m in markers] == [True, False]
    assert set(markers[0].partitions) == {("out", 0), ("out", 1)} and markers[1].partitions == (("out", 0),)
    meta = kelp.txn.txns["tx-app"]
    assert all((m.producer_id, m.producer_epoch) == (meta.producer_id, meta.producer_epoch) for m in markers)
    assert {b for b, _ in kelp.sender.sent} == {kelp.broker.config.broker_id}


async def test_a_second_producer_fences_the_first(kelp: Running) -> None:
    zombie = producer(kelp.bootstrap)

    def first() -> None:
        zombie.init_transactions(TIMEOUT_S)
        zombie.begin_transaction()
        zombie.produce("out", b"zombie", partition=0)
        zombie.flush(TIMEOUT_S)

    await run(first)
    epoch = kelp.txn.txns["tx-app"].producer_epoch

    def second() -> None:
        p = producer(kelp.bootstrap)
        p.init_transactions(TIMEOUT_S)  # aborts the zombie's transaction first (CONCURRENT_TRANSACTIONS, retried)
        p.begin_transaction()
        p.produce("out", b"new", partition=1)
        p.commit_transaction(TIMEOUT_S)

    await run(second)
    assert kelp.txn.txns["tx-app"].producer_epoch == epoch + 2
    with pytest.raises(KafkaException) as caught:
        await run(lambda: zombie.commit_transaction(TIMEOUT_S))
    err = caught.value.args[0]
    assert err.fatal() and "fenced" in err.str().lower()
    aborted = [m for _, m in kelp.sender.sent if not m.commit]
    assert aborted and aborted[0].producer_epoch == epoch + 1


async def test_offsets_sent_to_a_transaction_appear_when_it_commits(kelp: Running) -> None:
    def work() -> int | None:
        c = Consumer({"bootstrap.servers": kelp.bootstrap, "group.id": "copier", "enable.auto.commit": False})
        p = producer(kelp.bootstrap, "tx-copier")
        p.init_transactions(TIMEOUT_S)
        p.begin_transaction()
        p.produce("out", b"x", partition=0)
        p.send_offsets_to_transaction([TopicPartition("out", 0, 17)], c.consumer_group_metadata(), TIMEOUT_S)
        p.abort_transaction(TIMEOUT_S)
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition("out", 0, 23)], c.consumer_group_metadata(), TIMEOUT_S)
        p.commit_transaction(TIMEOUT_S)
        committed = c.committed([TopicPartition("out", 0)], TIMEOUT_S)[0].offset
        c.close()
        return committed

    assert await run(work) == 23


async def test_restarted_coordinator_reloads_and_aborts_the_open_transaction(tmp_path: Path) -> None:
    running = await start(tmp_path)
    try:
        assert await asyncio.to_thread(create_topic_wire, running.bootstrap, "out", 1) == 0

        def open_one() -> None:
            p = producer(running.bootstrap)
            p.init_transactions(TIMEOUT_S)
            p.begin_transaction()
            p.produce("out", b"left open", partition=0)
            p.flush(TIMEOUT_S)

        await run(open_one)
        before = running.txn.txns["tx-app"]
        pid, epoch = before.producer_id, before.producer_epoch
    finally:
        await running.broker.stop()
    running = await start(tmp_path)
    try:
        await until(lambda: "tx-app" in running.txn.txns, TIMEOUT_S)
        meta = running.txn.txns["tx-app"]
        assert (meta.state, meta.producer_id, meta.producer_epoch) == (TxnState.ONGOING, pid, epoch)
        assert meta.partitions == {("out", 0)}

        def again() -> None:
            p = producer(running.bootstrap)
            p.init_transactions(TIMEOUT_S)

        await run(again)
        assert running.txn.txns["tx-app"].producer_epoch == epoch + 2
        (_, marker), = running.sender.sent
        assert not marker.commit and marker.partitions == (("out", 0),) and marker.producer_epoch == epoch + 1
    finally:
        await running.broker.stop()


async def test_read_committed_consumer_sees_committed_records_only(tmp_path: Path) -> None:
    broker = Broker(_config(tmp_path))  # the real KafkaMarkerSender: markers reach the leader's handler
    await broker.start()
    try:
        assert broker.kafka_server is not None
        bootstrap = f"127.0.0.1:{broker.kafka_server.port}"
        assert await asyncio.to_thread(create_topic_wire, bootstrap, "out", 1) == 0

        def work() -> list[bytes]:
            p = producer(bootstrap)
            p.init_transactions(TIMEOUT_S)
            p.begin_transaction()
            p.produce("out", b"aborted", partition=0)
            p.flush(TIMEOUT_S)
            p.abort_transaction(TIMEOUT_S)
            p.begin_transaction()
            p.produce("out", b"committed", partition=0)
            p.commit_transaction(TIMEOUT_S)
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "isolation.level": "read_committed",
                          "auto.offset.reset": "earliest", "enable.partition.eof": True})
            c.assign([TopicPartition("out", 0, 0)])
            seen: list[bytes] = []
            for _ in range(100):
                msg = c.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    break
                seen.append(msg.value())
            c.close()
            return seen

        assert await run(work) == [b"committed"]
    finally:
        await broker.stop()
