"""Idempotent producers: retries are stored once, gaps and stale epochs refused.

A raw batch with the same producer id, epoch and sequence sent twice is
acknowledged twice with the same offset and stored once; a gap in sequences
gets OUT_OF_ORDER_SEQUENCE_NUMBER (45); an older epoch INVALID_PRODUCER_EPOCH
(47). kafka-python's default producer (idempotence on) works end to end.
"""

from __future__ import annotations

import pytest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from tests.broker.helpers import batch_headers, create_topic_wire, fetch_all_batches
from tests.support.kafka_wire import WireClient, make_batch

pytestmark = pytest.mark.clients


def produce(client: WireClient, topic: str, batch: bytes, *, version: int = 7) -> tuple[int, int]:
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=batch)])])
    resp = client.request(req, version)
    p = resp.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def init_pid(client: WireClient) -> tuple[int, int]:
    resp = client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 1)
    assert resp.error_code == 0
    return resp.producer_id, resp.producer_epoch


def test_retried_batch_acked_twice_stored_once(broker) -> None:
    assert create_topic_wire(broker.bootstrap, "idem") == 0
    with WireClient(broker.bootstrap) as c:
        pid, epoch = init_pid(c)
        first = make_batch([(b"k", b"a"), (b"k", b"b")], producer_id=pid, producer_epoch=epoch, base_sequence=0)
        second = make_batch([(b"k", b"c")], producer_id=pid, producer_epoch=epoch, base_sequence=2)
        assert produce(c, "idem", first) == (0, 0)
        assert produce(c, "idem", first) == (0, 0)  # retry: same offset, not stored again
        assert produce(c, "idem", second) == (0, 2)
        assert produce(c, "idem", first) == (0, 0)  # still among the last five
        gap = make_batch([(b"k", b"x")], producer_id=pid, producer_epoch=epoch, base_sequence=7)
        assert produce(c, "idem", gap)[0] == 45
        assert produce(c, "idem", make_batch([(b"k", b"d")], producer_id=pid, producer_epoch=epoch + 1,
                                             base_sequence=0)) == (0, 3)
        stale = make_batch([(b"k", b"e")], producer_id=pid, producer_epoch=epoch, base_sequence=3)
        assert produce(c, "idem", stale)[0] == 47
    headers = batch_headers(fetch_all_batches(broker.bootstrap, "idem", 0))
    assert [(h[0], h[3]) for h in headers] == [(0, 2), (2, 1), (3, 1)]
    assert "OUT_OF_ORDER" in broker.log_text() or "expected 3" in broker.log_text()


def test_producer_state_survives_restart(broker) -> None:
    assert create_topic_wire(broker.bootstrap, "idem-restart") == 0
    with WireClient(broker.bootstrap) as c:
        pid, epoch = init_pid(c)
        batch = make_batch([(None, b"v0")], producer_id=pid, producer_epoch=epoch, base_sequence=0)
        assert produce(c, "idem-restart", batch) == (0, 0)
    broker.restart(kill=True)
    with WireClient(broker.bootstrap) as c:
        assert produce(c, "idem-restart", batch) == (0, 0)  # recognised after restart
        nxt = make_batch([(None, b"v1")], producer_id=pid, producer_epoch=epoch, base_sequence=1)
        assert produce(c, "idem-restart", nxt) == (0, 1)
        pid2, _ = init_pid(c)
        assert pid2 != pid  # the id counter is persisted
    assert len(batch_headers(fetch_all_batches(broker.bootstrap, "idem-restart", 0))) == 2


def test_kafka_python_default_idempotent_producer(broker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)  # kafka-python 3 defaults: idempotence on
    for i in range(200):
        producer.send("idem-kp", key=str(i % 7).encode(), value=f"v{i}".encode())
    producer.flush(15)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    tp = TopicPartition("idem-kp", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    values = [m.value for m in consumer]
    consumer.close()
    assert values == [f"v{i}".encode() for i in range(200)]
    from kelp.records.header import iter_headers

    stored = list(iter_headers(fetch_all_batches(broker.bootstrap, "idem-kp", 0)))
    assert stored and all(h.producer_id >= 0 and h.base_sequence >= 0 for h in stored), "producer was not idempotent"
    assert [h.base_sequence for h in stored] == [h.base_offset for h in stored]


def test_idle_producer_state_expires_after_producer_id_expiration_ms(broker_factory) -> None:
    import time

    broker = broker_factory(settings={"producer.id.expiration.ms": 2000,
                                      "producer.id.expiration.check.interval.ms": 1000})
    assert create_topic_wire(broker.bootstrap, "idem-expire") == 0
    with WireClient(broker.bootstrap) as c:
        pid, epoch = init_pid(c)
        old = int(time.time() * 1000) - 3000  # its last batch is already past the expiration
        first = make_batch([(None, b"a")], producer_id=pid, producer_epoch=epoch, base_sequence=0, timestamp_ms=old)
        assert produce(c, "idem-expire", first) == (0, 0)
        other_pid, _ = init_pid(c)
        live = make_batch([(None, b"b")], producer_id=other_pid, producer_epoch=0, base_sequence=0,
                          timestamp_ms=int(time.time() * 1000) + 60_000)
        assert produce(c, "idem-expire", live) == (0, 1)
        broker.wait_for_log("expired the state of 1 idempotent producer(s)", timeout=15)
        # Forgotten: its next batch is taken as from a new producer (no sequence check, no duplicate).
        assert produce(c, "idem-expire", first) == (0, 2)
        # Still known: a retry is recognised, a gap refused.
        assert produce(c, "idem-expire", live) == (0, 1)
        gap = make_batch([(None, b"c")], producer_id=other_pid, producer_epoch=0, base_sequence=5)
        assert produce(c, "idem-expire", gap)[0] == 45
