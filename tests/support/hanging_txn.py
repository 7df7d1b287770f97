"""A hanging transaction for tests of the transaction tools, as Kafka's find-hanging test makes one.

Why: a hanging transaction — data of an open transaction on a partition that no coordinator will ever end —
is what `kafka-transactions find-hanging`/`abort` and Kelp's own `kelp transactions producers` exist for.
It is made here below any client library: a transactional batch written straight to the partition by a
producer id no coordinator knows (`HANGING_PID`), its last write an hour ago. Also the reads the tests
check it with: the "latest" offset of either isolation level (the LSO for read_committed), a read_committed
consumer (confluent-kafka), and the rows of the tools' tables.
"""

from __future__ import annotations

import time

from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.producer import ProduceRequest

from kelp.records.build import build_batch
from kelp.records.record import Record
from tests.support.kafka_wire import WireClient

__all__ = ["HANGING_PID", "open_hanging_transaction", "produce_plain", "latest", "read_committed", "rows"]

HANGING_PID = 424242
HOUR_MS = 3_600_000


def _produce(bootstrap: str, topic: str, data: bytes, *, tid: str | None = None) -> int:
    T = ProduceRequest.TopicProduceData
    with WireClient(bootstrap) as c:
        resp = c.request(ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[
            T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=data)])]), 9)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0, resp
    return int(part.base_offset)


def produce_plain(bootstrap: str, topic: str, value: bytes) -> int:
    return _produce(bootstrap, topic, build_batch([Record(b"k", value)]))


def open_hanging_transaction(bootstrap: str, topic: str, *, pid: int = HANGING_PID) -> int:
    """Two records of a transaction of `pid` (epoch 0) on partition 0, written an hour ago; its first offset."""
    data = build_batch([Record(b"k", b"hung-1"), Record(b"k", b"hung-2")], producer_id=pid, producer_epoch=0,
                       base_sequence=0, is_transactional=True, now_ms=int(time.time() * 1000) - HOUR_MS)
    return _produce(bootstrap, topic, data, tid="lost-by-its-coordinator")


def latest(bootstrap: str, topic: str, *, read_committed: bool) -> int:
    """ListOffsets "latest" of partition 0: the last stable offset for read_committed, else the high watermark."""
    T = ListOffsetsRequest.ListOffsetsTopic
    with WireClient(bootstrap) as c:
        resp = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=int(read_committed), topics=[T(
            name=topic, partitions=[T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                           timestamp=-1)])]), 5)
    return int(resp.topics[0].partitions[0].offset)


def read_committed(bootstrap: str, topic: str, *, want: int, timeout_s: float = 20.0) -> list[bytes]:
    """Values of partition 0 a read_committed consumer gets (up to `want`, within `timeout_s`)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(got) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def rows(run: object) -> list[dict[str, str]]:
    """A table `kafka-transactions` or `kelp transactions` printed (a header line, then tab/space separated
    rows), as dicts by header."""
    text = getattr(run, "stdout", run)
    assert isinstance(text, str)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split()
    return [dict(zip(header, line.split(), strict=False)) for line in lines[1:]]
