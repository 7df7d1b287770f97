"""Every codec from kafka-python to a plain and a compacted topic, read back (issue 36's client matrix, in part).

kafka-python frames snappy the way snappy-java does (xerial) where librdkafka writes raw snappy
(`test_topic_compression.py` covers librdkafka on compacted topics); both go through the broker's check of
compressed records on every topic and are read back unchanged.
"""

from __future__ import annotations

import pytest

from tests.broker.helpers import create_topic_wire, fetch_all_batches
from tests.support.poison import CODECS

N = 300


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_kafka_python_writes_each_codec_and_reads_it_back(broker, codec: str, policy: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    from kelp.records.header import iter_headers

    topic = f"kp-{policy}-{codec}"
    assert create_topic_wire(broker.bootstrap, topic, configs={"cleanup.policy": policy}) == 0
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=5,
                             request_timeout_ms=15000)
    try:
        futures = [producer.send(topic, key=b"k%d" % (i % 30), value=b"v%d-" % i + b"x" * 1024, partition=0)
                   for i in range(N)]
        producer.flush(timeout=30)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(N))
    assert {h.compression_name for h in iter_headers(fetch_all_batches(broker.bootstrap, topic, 0))} == {codec}
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    got: list[bytes] = []
    try:
        for message in consumer:  # ends after 10 s without a record at most
            got.append(message.value)
            if len(got) == N:
                break
    finally:
        consumer.close()
    assert len(got) == N and got[0].startswith(b"v0-") and got[-1].startswith(b"v%d-" % (N - 1))
