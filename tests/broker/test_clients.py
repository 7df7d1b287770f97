"""Real Kafka clients against a broker process: every field round-trips, compression is kept.

kafka-python, aiokafka and confluent-kafka each create a topic, produce keyed
and unkeyed records with headers (uncompressed, gzip, lz4), read them back
with assign/seek, and the batches served over the wire keep the codec the
producer chose. kcat produces, consumes and lists.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest

from tests.broker.helpers import advertised_api_keys, batch_headers, fetch_all_batches

pytestmark = pytest.mark.clients

CODECS = {"none": 0, "gzip": 1, "lz4": 3}
PARTITIONS = 3


def expected_records(codec: str) -> list[dict]:
    """Keyed (5 keys, 4 values each) and unkeyed records with headers and fixed timestamps."""
    out = []
    base_ts = 1_700_000_000_000
    for i in range(20):
        key = f"key-{i % 5}".encode()
        out.append({"key": key, "value": f"{codec}-value-{i}-".encode() * 40, "ts": base_ts + i,
                    "headers": [("h1", f"v{i}".encode()), ("empty", b"")]})
    for i in range(5):
        out.append({"key": None, "value": f"{codec}-unkeyed-{i}".encode(), "ts": base_ts + 100 + i,
                    "headers": [("only", b"\x00\x01")]})
    return out


def check_roundtrip(sent: list[dict], got: list[dict]) -> None:
    """Same multiset of records; records of one key in one partition, in send order."""
    def ident(r: dict) -> tuple:
        return (r["key"], r["value"], r["ts"], tuple((k, bytes(v)) for k, v in r["headers"]))

    assert sorted(map(ident, got), key=repr) == sorted(map(ident, sent), key=repr)
    by_key: dict[bytes, set[int]] = {}
    for r in got:
        if r["key"] is not None:
            by_key.setdefault(r["key"], set()).add(r["partition"])
    assert all(len(p) == 1 for p in by_key.values()), by_key
    for key in by_key:
        values_sent = [r["value"] for r in sent if r["key"] == key]
        values_got = [r["value"] for r in sorted((r for r in got if r["key"] == key), key=lambda r: r["offset"])]
        assert values_got == values_sent


def check_codec_on_wire(bootstrap: str, topic: str, codec: str) -> None:
    seen = set()
    for p in range(PARTITIONS):
        for _base, attrs, _lod, _count in batch_headers(fetch_all_batches(bootstrap, topic, p)):
            seen.add(attrs & 0x07)
    assert seen == {CODECS[codec]}, f"stored batches use codecs {seen}, producer used {codec}"


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4"])
def test_kafka_python_roundtrip(broker, codec: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"kp-{codec}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec,
                             linger_ms=20, acks="all")
    sent = expected_records(codec)
    for r in sent:
        producer.send(topic, key=r["key"], value=r["value"], headers=r["headers"], timestamp_ms=r["ts"])
    producer.flush(15)
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000, fetch_max_wait_ms=100)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    got = []
    for msg in consumer:
        got.append({"key": msg.key, "value": msg.value, "ts": msg.timestamp, "headers": list(msg.headers),
                    "partition": msg.partition, "offset": msg.offset})
        if len(got) == len(sent):
            break
    consumer.close()
    check_roundtrip(sent, got)
    check_codec_on_wire(broker.bootstrap, topic, codec)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4"])
def test_aiokafka_roundtrip(broker, codec: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = f"aio-{codec}"
    sent = expected_records(codec)

    async def run() -> list[dict]:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                    compression_type=None if codec == "none" else codec, linger_ms=20)
        await producer.start()
        try:
            futs = [await producer.send(topic, key=r["key"], value=r["value"], headers=r["headers"],
                                        timestamp_ms=r["ts"]) for r in sent]
            await asyncio.gather(*futs)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                    fetch_max_wait_ms=100)
        await consumer.start()
        got: list[dict] = []
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            async def collect() -> None:
                while len(got) < len(sent):
                    batch = await consumer.getmany(timeout_ms=500)
                    for _tp, msgs in batch.items():
                        for m in msgs:
                            got.append({"key": m.key, "value": m.value, "ts": m.timestamp,
                                        "headers": list(m.headers), "partition": m.partition, "offset": m.offset})
            await asyncio.wait_for(collect(), 20)
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(run())
    check_roundtrip(sent, got)
    check_codec_on_wire(broker.bootstrap, topic, codec)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4"])
def test_confluent_kafka_roundtrip(broker, codec: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"ck-{codec}"
    if codec == "lz4" and 10 not in advertised_api_keys(broker.bootstrap):
        # librdkafka enables LZ4 only when the broker serves FindCoordinator v0 (rdkafka_feature.c)
        pytest.skip("librdkafka uses lz4 only once FindCoordinator (groups part) is served")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)],
                                  operation_timeout=10)
    for f in futures.values():
        f.result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20,
                         "enable.idempotence": True, "partitioner": "murmur2_random"})
    sent = expected_records(codec)
    errors = []
    for r in sent:
        producer.produce(topic, key=r["key"], value=r["value"], headers=r["headers"], timestamp=r["ts"],
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(20) == 0
    assert not errors, errors
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = []
    try:
        import time

        deadline = time.monotonic() + 20
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append({"key": msg.key(), "value": msg.value(), "ts": msg.timestamp()[1],
                        "headers": list(msg.headers() or []), "partition": msg.partition(), "offset": msg.offset()})
    finally:
        consumer.close()
    check_roundtrip(sent, got)
    check_codec_on_wire(broker.bootstrap, topic, codec)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_produce_consume_list(broker) -> None:
    topic = "kcat-topic"
    lines = [f"line-{i}" for i in range(50)]
    subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-K", ":"],
                   input="".join(f"k{i % 3}:{line}\n" for i, line in enumerate(lines)),
                   text=True, check=True, timeout=30)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e",
                          "-f", "%k=%s\n"], capture_output=True, text=True, check=True, timeout=30)
    got = out.stdout.splitlines()
    assert sorted(got) == sorted(f"k{i % 3}={line}" for i, line in enumerate(lines))
    listing = subprocess.run(["kcat", "-b", broker.bootstrap, "-L"], capture_output=True, text=True,
                             check=True, timeout=30)
    assert f'topic "{topic}"' in listing.stdout
    assert f"broker 0 at {broker.bootstrap}" in listing.stdout
