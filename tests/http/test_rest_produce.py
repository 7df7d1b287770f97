"""Producing over the Confluent REST Proxy v2 API: partitioning, formats, refusals."""

from __future__ import annotations

import base64
import json

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.http.httpcall import call, create_topic, log_end_offsets

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
KEYS = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"foxtrot", b"golf", b"hotel"]


def _kafka_partitions(bootstrap: str, topic: str, keys: list[bytes]) -> dict[bytes, int]:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        return {k: producer.send(topic, key=k, value=b"via-kafka").get(timeout=10).partition for k in keys}
    finally:
        producer.close(timeout=5)


def _consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out = []
        for rec in consumer:
            out.append(rec)
            if len(out) >= expected:
                break
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize("fmt", ["json", "binary"])
def test_keyed_records_land_where_kafka_clients_put_them(kelp, fmt: str) -> None:
    topic = f"keyed-{fmt}"
    create_topic(kelp.http_url, topic, partitions=5)
    if fmt == "json":
        records = [{"key": k.decode(), "value": {"n": i}} for i, k in enumerate(KEYS)]
        ctype = JSON_V2
        stored_key = {k: json.dumps(k.decode()).encode() for k in KEYS}  # a JSON key is stored as JSON text
    else:
        records = [{"key": base64.b64encode(k).decode(), "value": base64.b64encode(b"v%d" % i).decode()}
                   for i, k in enumerate(KEYS)]
        ctype = BINARY_V2
        stored_key = {k: k for k in KEYS}
    reply = call("POST", f"{kelp.http_url}/topics/{topic}", body={"records": records}, content_type=ctype)
    assert reply.status == 200, reply
    body = reply.json()
    assert body["key_schema_id"] is None and body["value_schema_id"] is None
    offsets = body["offsets"]
    assert [o["error_code"] for o in offsets] == [None] * len(KEYS)

    expected = _kafka_partitions(kelp.bootstrap, topic, [stored_key[k] for k in KEYS])
    assert [o["partition"] for o in offsets] == [expected[stored_key[k]] for k in KEYS]
    assert len({o["partition"] for o in offsets}) > 1, "keys should spread over partitions"

    got = _consume_all(kelp.bootstrap, topic, 5, 2 * len(KEYS))
    from_http = {(r.partition, r.offset): r for r in got if r.value != b"via-kafka"}
    assert len(from_http) == len(KEYS)
    for i, (k, o) in enumerate(zip(KEYS, offsets, strict=True)):
        rec = from_http[(o["partition"], o["offset"])]
        assert rec.key == stored_key[k]
        assert rec.value == (json.dumps({"n": i}, separators=(",", ":")).encode() if fmt == "json" else b"v%d" % i)


def test_plain_json_content_type_and_partition_url(kelp) -> None:
    topic = "plain-json"
    create_topic(kelp.http_url, topic, partitions=3)
    reply = call("POST", f"{kelp.http_url}/topics/{topic}/partitions/2",
                 body={"records": [{"value": "a"}, {"value": None, "key": "k"}]})
    assert reply.status == 200, reply
    assert [(o["partition"], o["offset"]) for o in reply.json()["offsets"]] == [(2, 0), (2, 1)]
    assert log_end_offsets(kelp.http_url, topic) == [0, 0, 2]
    rec = _consume_all(kelp.bootstrap, topic, 3, 2)
    assert [(r.key, r.value) for r in rec] == [(None, b'"a"'), (b'"k"', None)]


def test_unkeyed_records_spread_and_explicit_partitions_are_kept(kelp) -> None:
    topic = "spread"
    create_topic(kelp.http_url, topic, partitions=3)
    reply = call("POST", f"{kelp.http_url}/topics/{topic}", content_type=JSON_V2,
                 body={"records": [{"value": i} for i in range(6)] + [{"value": "x", "partition": 1, "key": "z"}]})
    assert reply.status == 200, reply
    parts = [o["partition"] for o in reply.json()["offsets"]]
    assert set(parts[:6]) == {0, 1, 2}
    assert parts[6] == 1
    assert sum(log_end_offsets(kelp.http_url, topic)) == 7


def test_headers_and_timestamp_extension(kelp) -> None:
    topic = "with-headers"
    create_topic(kelp.http_url, topic)
    reply = call("POST", f"{kelp.http_url}/topics/{topic}", content_type=BINARY_V2, body={"records": [
        {"value": base64.b64encode(b"v").decode(), "timestamp": 1_700_000_000_000,
         "headers": [{"name": "trace", "value": base64.b64encode(b"abc").decode()}]}]})
    assert reply.status == 200, reply
    (rec,) = _consume_all(kelp.bootstrap, topic, 1, 1)
    assert rec.headers == [("trace", b"abc")]
    assert rec.timestamp == 1_700_000_000_000


@pytest.mark.parametrize(
    ("data", "ctype", "status", "words"),
    [
        (b'{"records": [{"value": 1}', JSON_V2, 400, ["not valid JSON", "line 1"]),
        (b"", JSON_V2, 422, ["empty"]),  # Confluent: a missing body is 422 (a constraint violation)
        (b'{"values": []}', JSON_V2, 422, ["'records'"]),
        (b'{"records": {}}', JSON_V2, 422, ["'records' must be a list"]),
        (b'{"records": []}', JSON_V2, 422, ["empty"]),
        (b'{"records": [{"value": 1}, 5]}', JSON_V2, 422, ["records[1]"]),
        (b'{"records": [{"value": "aGk="}, {"value": "not base64!"}]}', BINARY_V2, 422, ["records[1].value", "base64"]),
        (b'{"records": [{"key": 7, "value": "aGk="}]}', BINARY_V2, 422, ["records[0].key", "base64"]),
        (b'{"records": [{"value": 1, "partition": 9}]}', JSON_V2, 404, ["partition 9", "it has 2"]),
        (b'{"records": [{"value": 1, "partition": "x"}]}', JSON_V2, 422, ["records[0].partition"]),
        (b'{"records": [{"value": 1, "valu": 2}]}', JSON_V2, 422, ["records[0]", "valu"]),
        (b'{"records": [{"value": 1}]}', "text/plain", 415, ["Content-Type", "text/plain"]),
    ],
)
def test_malformed_produce_is_refused_and_stores_nothing(kelp, data, ctype, status, words) -> None:
    topic = "refusals"
    if call("GET", f"{kelp.http_url}/admin/v1/topics/{topic}").status == 404:
        create_topic(kelp.http_url, topic, partitions=2)
        ok = call("POST", f"{kelp.http_url}/topics/{topic}", body={"records": [{"value": 1, "partition": 0}]})
        assert ok.status == 200
    before = log_end_offsets(kelp.http_url, topic)
    reply = call("POST", f"{kelp.http_url}/topics/{topic}", data=data, content_type=ctype)
    assert reply.status == status, reply
    body = reply.json()
    assert set(body) == {"error_code", "message"}
    for word in words:
        assert word in body["message"], body
    assert log_end_offsets(kelp.http_url, topic) == before
    # What was stored before is intact and readable.
    read = call("GET", f"{kelp.http_url}/topics/{topic}/partitions/0/records?offset=0&format=json")
    assert read.status == 200 and read.json()[0]["value"] == 1


def test_oversized_record_is_reported_per_record(kelp) -> None:
    topic = "small-max"
    create_topic(kelp.http_url, topic, **{"max.message.bytes": "1000"})
    reply = call("POST", f"{kelp.http_url}/topics/{topic}", content_type=BINARY_V2,
                 body={"records": [{"value": base64.b64encode(b"x" * 5000).decode()}]})
    assert reply.status == 200, reply
    (o,) = reply.json()["offsets"]
    assert o["offset"] is None and o["error_code"] == 10
    assert "small-max" in o["error"]
    assert log_end_offsets(kelp.http_url, topic) == [0]


def test_confluent_metadata_shapes(kelp) -> None:
    topic = "shapes"
    create_topic(kelp.http_url, topic, partitions=2, **{"retention.ms": "3600000"})
    names = call("GET", f"{kelp.http_url}/topics").json()
    assert topic in names
    d = call("GET", f"{kelp.http_url}/topics/{topic}").json()
    assert d["name"] == topic and d["configs"]["retention.ms"] == "3600000"
    assert [p["partition"] for p in d["partitions"]] == [0, 1]
    assert d["partitions"][0]["replicas"] == [{"broker": 0, "leader": True, "in_sync": True}]
    parts = call("GET", f"{kelp.http_url}/topics/{topic}/partitions").json()
    assert parts == d["partitions"]
    assert call("GET", f"{kelp.http_url}/topics/{topic}/partitions/1").json()["partition"] == 1
    missing = call("GET", f"{kelp.http_url}/topics/nope-{topic}")
    assert missing.status == 404 and missing.json()["error_code"] == 40401  # Confluent's TOPIC_NOT_FOUND
    assert "nope-shapes" in missing.json()["message"]
    absent = call("GET", f"{kelp.http_url}/topics/{topic}/partitions/9")
    assert absent.status == 404 and absent.json()["error_code"] == 40402, absent  # PARTITION_NOT_FOUND
