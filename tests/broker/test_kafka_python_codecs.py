"""Every codec from kafka-python to a plain and a compacted topic, read back after a cleaner pass (issue 36).

kafka-python frames snappy the way snappy-java does (xerial) where librdkafka writes raw snappy
(`test_topic_compression.py` covers librdkafka); both go through the broker's check of the records on every
topic. On the compacted topic the cleaner then rewrites the segments (decompressing and recompressing each
batch in its codec) and a consumer reads the last value of every key, in the codec it was produced in.
"""

from __future__ import annotations

import time

import pytest

from tests.broker.helpers import create_topic_wire, fetch_all_batches
from tests.support.poison import CODECS

N = 300
KEYS = 30
CLEAN_TIMEOUT_S = 60.0


def _consume(bootstrap: str, topic: str, until: int) -> list[tuple[bytes, bytes]]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    got: list[tuple[bytes, bytes]] = []
    try:
        for message in consumer:  # ends after 5 s without a record at most
            got.append((message.key, message.value))
            if len(got) == until:
                break
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_kafka_python_writes_each_codec_and_reads_it_back_after_a_cleaner_pass(
        broker_factory, codec: str, policy: str) -> None:
    from kafka import KafkaProducer

    from kelp.records.header import iter_headers
    from kelp.records.record import iter_records

    broker = broker_factory(settings={"log.retention.check.interval.ms": 200})
    topic = f"kp-{policy}-{codec}"
    assert create_topic_wire(broker.bootstrap, topic, configs={
        "cleanup.policy": policy, "segment.bytes": 4096, "min.cleanable.dirty.ratio": 0.01}) == 0
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=5,
                             batch_size=4096, request_timeout_ms=15000)
    try:
        futures = [producer.send(topic, key=b"k%d" % (i % KEYS), value=b"v%d-" % i + b"x" * 1024, partition=0)
                   for i in range(N)]
        producer.flush(timeout=30)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(N))
    if policy == "delete":
        got = _consume(broker.bootstrap, topic, N)
        assert len(got) == N and got[0][1].startswith(b"v0-") and got[-1][1].startswith(b"v%d-" % (N - 1))
        assert {h.compression_name for h in iter_headers(fetch_all_batches(broker.bootstrap, topic, 0))} == {codec}
        return
    # compacted: the cleaner may run any time from now (every 200 ms), so only the cleaned log is asserted on
    deadline = time.monotonic() + CLEAN_TIMEOUT_S
    while True:  # bounded: the cleaner runs every 200 ms on segments this small
        stored = fetch_all_batches(broker.bootstrap, topic, 0)
        if sum(1 for _ in iter_records(stored)) < N:
            break
        assert time.monotonic() < deadline, f"no cleaner pass on {topic} within {CLEAN_TIMEOUT_S} s"
        time.sleep(0.2)
    assert {h.compression_name for h in iter_headers(stored)} == {codec}
    latest = {b"k%d" % (i % KEYS): b"v%d-" % i + b"x" * 1024 for i in range(N)}
    cleaned = _consume(broker.bootstrap, topic, sum(1 for _ in iter_records(stored)))
    assert dict(cleaned) == latest  # each key's last value survives, read by a client through the codec
