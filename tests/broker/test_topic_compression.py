"""compression.type as Kafka has it: a topic (or broker default) codec the leader stores batches in,
and every topic config value checked by the one validator.

Kafka's LogValidator rewrites a batch whose codec differs from the topic's `compression.type` (unless it
is `producer`), keeping offsets, timestamps and the producer's id/epoch/sequence; consumers read the same
records. An unknown value (`banana`) or a codec whose library is missing is refused with a message
naming the valid values or the library.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from kelp.broker.storage import Log
from kelp.config.broker import BrokerConfig, validate_topic_configs
from kelp.config.keys import TOPIC_CONFIG_KEYS
from kelp.config.log_config import LogConfig
from kelp.errors import ConfigError, ErrorCode
from kelp.records.build import build_batch
from kelp.records.compression import COMPRESSION_CODECS, COMPRESSION_LIBRARIES, available_compressions
from kelp.records.header import iter_headers
from kelp.records.record import Record, iter_records
from kelp.records.validation import parse_batches
from tests.broker.helpers import fetch_all_batches
from tests.storage.helpers import FakeClock

VALID = "producer, uncompressed, gzip, snappy, lz4, zstd"


def _records(n: int, base_ts: int = 1_700_000_000_000) -> list[Record]:
    return [Record(b"k%d" % i, b"value-%d " % i * 10, headers=(("h", b"%d" % i),), timestamp=base_ts + i)
            for i in range(n)]


def test_leader_rewrites_a_batch_into_the_topic_codec_keeping_offsets_timestamps_and_producer_state(tmp_path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(compression_type="gzip"), clock_ms=FakeClock())
    log.append_as_leader(build_batch(_records(2)), leader_epoch=3)
    sent = build_batch(_records(5, base_ts=1_700_000_001_000), producer_id=42, producer_epoch=7, base_sequence=10)
    result = log.append_as_leader(sent, leader_epoch=3)
    assert (result.first_offset, result.last_offset) == (2, 6)
    stored = log.read(0, max_bytes=1 << 20)
    headers = parse_batches(stored)  # the CRC of each rewritten batch is checked here
    assert [h.compression_name for h in headers] == ["gzip", "gzip"]
    h = headers[1]
    assert (h.base_offset, h.last_offset_delta, h.record_count) == (2, 4, 5)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (42, 7, 10, 3)
    assert h.max_timestamp == 1_700_000_001_004
    got = [r for r in iter_records(stored)]
    want = _records(2) + _records(5, base_ts=1_700_000_001_000)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (i, w.key, w.value, w.headers, w.timestamp) for i, w in enumerate(want)]


def test_uncompressed_topic_decompresses_and_producer_keeps_the_producers_codec(tmp_path) -> None:
    gz = build_batch(_records(3), compression="gzip")
    plain = Log.open(tmp_path / "u-0", LogConfig(compression_type="uncompressed"), clock_ms=FakeClock())
    plain.append_as_leader(gz, leader_epoch=0)
    assert [h.compression_name for h in iter_headers(plain.read(0, max_bytes=1 << 20))] == ["none"]
    kept = Log.open(tmp_path / "p-0", LogConfig(), clock_ms=FakeClock())  # compression.type=producer (the default)
    kept.append_as_leader(gz, leader_epoch=0)
    stored = kept.read(0, max_bytes=1 << 20)
    assert [h.compression_name for h in iter_headers(stored)] == ["gzip"]
    assert stored[16:] == gz[16:]  # producer: stored as sent from the magic byte on (only offset and leader epoch set)


def _http(method: str, url: str, body: object = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_topic_with_gzip_stores_gzip_for_an_uncompressed_producer_and_consumers_read_the_same(broker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    status, _ = _http("POST", broker.http_url + "/admin/v1/topics",
                      {"name": "zipped", "partitions": 1, "configs": {"compression.type": "gzip"}})
    assert status in (200, 201)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    values = [b"record-%03d " % i * 8 for i in range(50)]
    for i, v in enumerate(values):
        producer.send("zipped", key=b"%d" % i, value=v, partition=0)
    producer.flush(30)
    producer.close(5)
    stored = fetch_all_batches(broker.bootstrap, "zipped", 0)
    headers = list(iter_headers(stored))
    assert headers and {h.compression_name for h in headers} == {"gzip"}
    assert sum(h.record_count for h in headers) == 50
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    tp = TopicPartition("zipped", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for rec in consumer:
        got.append((rec.offset, rec.key, rec.value))
        if len(got) == 50:
            break
    consumer.close()
    assert got == [(i, b"%d" % i, v) for i, v in enumerate(values)]


def test_banana_is_refused_with_the_valid_values_listed(broker) -> None:
    status, body = _http("POST", broker.http_url + "/admin/v1/topics",
                         {"name": "fruit", "partitions": 1, "configs": {"compression.type": "banana"}})
    assert status == 400, body
    assert "compression.type" in body["message"] and "banana" in body["message"] and VALID in body["message"]
    status, body = _http("GET", broker.http_url + "/admin/v1/topics/fruit")
    assert status == 404  # nothing created


def test_broker_default_compression_type_applies_to_new_topics(broker_factory) -> None:
    from kafka import KafkaProducer

    b = broker_factory(settings={"compression.type": "gzip"})
    producer = KafkaProducer(bootstrap_servers=b.bootstrap)  # auto-creates the topic
    producer.send("auto", value=b"x" * 100, partition=0)
    producer.flush(30)
    producer.close(5)
    assert {h.compression_name for h in iter_headers(fetch_all_batches(b.bootstrap, "auto", 0))} == {"gzip"}


def test_broker_compression_type_banana_is_refused_at_start() -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(env={}, overrides={"compression.type": "banana"})
    assert "'compression.type'" in str(info.value) and "banana" in str(info.value) and VALID in str(info.value)


@pytest.mark.parametrize("codec", sorted(COMPRESSION_LIBRARIES))
def test_a_codec_is_accepted_only_when_its_library_is_installed(codec: str) -> None:
    if codec in available_compressions():
        assert validate_topic_configs({"compression.type": codec}) == {"compression.type": codec}
    else:
        with pytest.raises(ConfigError, match=COMPRESSION_LIBRARIES[codec]):
            validate_topic_configs({"compression.type": codec}, topic="t")


# One bad value per topic config key: a type error, a range error or a value outside the enum.
BAD_VALUES = {
    "retention.ms": "-2",
    "retention.bytes": "ten",
    "segment.bytes": "13",
    "segment.ms": "0",
    "segment.index.bytes": "4",
    "index.interval.bytes": "-1",
    "cleanup.policy": "shred",
    "delete.retention.ms": "-5",
    "min.cleanable.dirty.ratio": "1.5",
    "min.compaction.lag.ms": "soon",
    "max.message.bytes": "0",
    "min.insync.replicas": "0",
    "flush.messages": "0",
    "flush.ms": "-3",
    "message.timestamp.type": "WallClock",
    "compression.type": "banana",
    "unclean.leader.election.enable": "maybe",
    "leader.replication.throttled.replicas": "0-1",
    "follower.replication.throttled.replicas": "all",
}


def test_every_topic_config_key_refuses_a_bad_value() -> None:
    assert set(BAD_VALUES) == set(TOPIC_CONFIG_KEYS), "give every topic config key a bad value here"
    for key, bad in BAD_VALUES.items():
        with pytest.raises(ConfigError) as info:
            validate_topic_configs({key: bad}, topic="t")
        assert key in str(info.value) and bad in str(info.value), str(info.value)


def test_codec_names_are_kafkas() -> None:
    assert set(COMPRESSION_CODECS) - {"none"} <= set(VALID.split(", "))


def test_every_kafka_codec_is_readable_with_the_brokers_own_dependencies() -> None:
    """Issue 36: the broker's dependencies carried only lz4 (snappy and zstd came with the test extras, and not
    even there: the codec tests ran on what was installed), so a librdkafka producer with compression.type=zstd
    or snappy to a compacted topic had its connection closed on every request on `make run`. Every codec Kafka
    has must be readable from [project.dependencies] alone, and the image pins the same packages."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    runtime = {d.split("==")[0].lower() for d in tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "dependencies"]}
    image = {line.split("==")[0].lower() for line in (root / "images/requirements.txt").read_text().splitlines()
             if line and not line.startswith("#")}
    for codec, library in COMPRESSION_LIBRARIES.items():
        assert library in runtime, f"{codec}: {library} is not among the broker's dependencies"
        assert library in image, f"{codec}: {library} is not pinned in images/requirements.txt"
    assert available_compressions() == ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_writes_a_compacted_topic_with_each_codec(broker, codec: str) -> None:
    """The issue's reproduction: a confluent-kafka (librdkafka) producer with `compression.type` to a compacted
    topic (the broker decompresses to check every record has a key); every record is stored and read back."""
    from confluent_kafka import Consumer, Producer

    topic = f"compacted-{codec}"
    body = json.dumps({"name": topic, "partitions": 1, "configs": {"cleanup.policy": "compact"}}).encode()
    request = urllib.request.Request(f"{broker.http_url}/admin/v1/topics", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status in (200, 201)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5,
                         "enable.idempotence": True})
    errors: list[object] = []
    for i in range(500):
        producer.produce(topic, key=b"k%d" % (i % 50), value=b"v%d-" % i + b"x" * 200,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]
    batches = fetch_all_batches(broker.bootstrap, topic, 0)
    assert {h.compression_name for h in iter_headers(batches)} == {codec}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{codec}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(60):  # at most a minute
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                if msg.error() is None:
                    got.append(msg.value())
            if len(got) >= 500:
                break
    finally:
        consumer.close()
    assert len(got) == 500 and got[0].startswith(b"v0-") and got[-1].startswith(b"v499-")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_a_batch_whose_records_do_not_decompress_is_corrupt_message_not_a_closed_connection(
        tmp_path, codec: str) -> None:
    """Issue 36: a compacted topic decompresses every batch to check its keys; a batch whose compressed records
    are garbage raised the codec's own error (BadGzipFile, UncompressError, RuntimeError, ZstdError) out of the
    handler and the connection was closed. It is answered CORRUPT_MESSAGE naming the codec, and nothing is
    appended."""
    import struct

    from crc32c import crc32c
    from kafka.protocol.producer import ProduceRequest

    from tests.authorization.harness import InProcessBroker

    good = bytearray(build_batch([(b"k", b"v" * 50)], compression=codec))
    bad = good[:61] + b"\x28\xb5\x2f\xfd not a compressed stream at all"  # records start at byte 61
    struct.pack_into(">i", bad, 8, len(bad) - 12)  # the batch length
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))  # a valid CRC over the garbage
    async with InProcessBroker(tmp_path) as b:
        await b.parts.topics.create_topic("keyed", 1, 1, configs={"cleanup.policy": "compact"})
        T = ProduceRequest.TopicProduceData
        answer = await b.call(ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
            T(name="keyed", partition_data=[T.PartitionProduceData(index=0, records=bytes(bad))])]), 9)
        part = answer.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.CORRUPT_MESSAGE, part
        assert f"{codec} batch" in part.error_message and "decompress" in part.error_message
        assert b.parts.replicas.get_partition("keyed", 0).log.log_end_offset == 0
        answer = await b.call(ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
            T(name="keyed", partition_data=[T.PartitionProduceData(index=0, records=bytes(good))])]), 9)
        assert answer.responses[0].partition_responses[0].error_code == 0  # the same connection goes on
