"""Confluent REST Proxy answers that clients written against Confluent rely on (issue 37, item 9).

Each case is what Confluent's kafka-rest does (its `ConsumersResource`, `KafkaConsumerManager`,
`BrokersResource`, `TopicsResource` and the v3 OpenAPI document), sent to a broker process:
- a consumer instance reads in the one format it was created with; a read asking another embedded format
  is refused 406 with 40601, and the records stay for a read in the right format;
- `POST .../positions` seeks by `timestamps` (ISO-8601) as well as by `offsets`;
- `POST .../subscription` takes `topic_pattern` (matched by RE2, internal topics left out), and a topic
  created later that matches joins the subscription;
- `GET /brokers` lists the brokers' ids; `GET /topics` leaves out internal topics;
- v3: a broker's config is found under the name Kafka gives it (`log.retention.ms`); a lag entry of an
  assigned partition names the consumer and client that own it.
"""

from __future__ import annotations

import base64
import time
from datetime import datetime, timezone
from typing import Any, Iterator

import pytest
from kafka import KafkaConsumer, KafkaProducer

from tests.http.httpcall import Reply, call, create_topic, log_end_offsets
from tests.support.broker_process import BrokerProcess

V2 = "application/vnd.kafka.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"

SETTINGS = {
    "num.partitions": 1,
    "offsets.topic.num.partitions": 2,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 500,
}


@pytest.fixture(scope="module")
def kelp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-confluent-answers"), settings=SETTINGS)
    bp.start()
    try:
        yield bp
    finally:
        bp.kill()


def _consumer(base: str, group: str, name: str, fmt: str = "binary") -> str:
    reply = call("POST", f"{base}/consumers/{group}", content_type=V2,
                 body={"name": name, "format": fmt, "auto.offset.reset": "earliest", "auto.commit.enable": "false"})
    assert reply.status == 200, reply
    return str(reply.json()["base_uri"])


def _read(uri: str, accept: str, *, want: int, timeout_s: float = 20.0) -> list[dict[str, Any]]:
    """Reads until `want` records came (bounded); fails naming what came."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want:
        assert time.monotonic() < deadline, f"read {len(got)} of {want} records in {timeout_s}s: {got}"
        reply = call("GET", f"{uri}/records?timeout=500", accept=accept)
        assert reply.status == 200, reply
        got.extend(reply.json())
    return got


def _produce(kelp: BrokerProcess, topic: str, values: list[bytes], timestamps: list[int] | None = None) -> None:
    producer = KafkaProducer(bootstrap_servers=kelp.bootstrap, acks="all")
    try:
        for i, value in enumerate(values):
            producer.send(topic, value, partition=0, timestamp_ms=timestamps[i] if timestamps else None)
        producer.flush(timeout=20)
    finally:
        producer.close(timeout=5)


def _problem(reply: Reply, status: int, code: int) -> str:
    assert reply.status == status, reply
    body = reply.json()
    assert body["error_code"] == code, body
    return str(body["message"])


def test_a_read_in_another_embedded_format_is_406_40601_and_loses_nothing(kelp: BrokerProcess) -> None:
    base = kelp.http_url
    create_topic(base, "fmt-mismatch")
    _produce(kelp, "fmt-mismatch", [b'{"n": 1}', b'{"n": 2}'])
    uri = _consumer(base, "fmt-g", "fmt-c", fmt="binary")
    assert call("POST", f"{uri}/assignments", content_type=V2,
                body={"partitions": [{"topic": "fmt-mismatch", "partition": 0}]}).status == 204

    message = _problem(call("GET", f"{uri}/records?timeout=200", accept=JSON_V2), 406, 40601)
    assert "binary" in message and "json" in message, message
    # Accept lists that include the instance's own format, or take anything, are served.
    # The Accept prefers the highest q: JSON first is JSON (refused), binary first is binary (served).
    _problem(call("GET", f"{uri}/records?timeout=200", accept=f"{JSON_V2}, {BINARY_V2};q=0.5"), 406, 40601)
    records = _read(uri, f"{JSON_V2};q=0.5, {BINARY_V2}", want=2)
    assert [base64.b64decode(r["value"]) for r in records] == [b'{"n": 1}', b'{"n": 2}']
    assert call("GET", f"{uri}/records?timeout=0", accept="*/*").status == 200


def test_seek_by_timestamp_moves_each_partition_to_its_first_record_at_or_after_it(kelp: BrokerProcess) -> None:
    base = kelp.http_url
    create_topic(base, "seek-ts")
    t0 = 1_700_000_000_000
    _produce(kelp, "seek-ts", [b"a", b"b", b"c", b"d"], timestamps=[t0, t0 + 1000, t0 + 2000, t0 + 3000])
    uri = _consumer(base, "seek-g", "seek-c")
    assert call("POST", f"{uri}/assignments", content_type=V2,
                body={"partitions": [{"topic": "seek-ts", "partition": 0}]}).status == 204

    at = datetime.fromtimestamp((t0 + 1500) / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    reply = call("POST", f"{uri}/positions", content_type=V2,
                 body={"timestamps": [{"topic": "seek-ts", "partition": 0, "timestamp": at}]})
    assert reply.status == 204, reply
    assert [base64.b64decode(r["value"]) for r in _read(uri, BINARY_V2, want=2)] == [b"c", b"d"]

    # A time after the last record: the position is the end (nothing to read until a newer record comes).
    later = datetime.fromtimestamp((t0 + 60_000) / 1000, tz=timezone.utc).isoformat()
    reply = call("POST", f"{uri}/positions", content_type=V2,
                 body={"timestamps": [{"topic": "seek-ts", "partition": 0, "timestamp": later}]})
    assert reply.status == 204, reply
    assert call("GET", f"{uri}/records?timeout=200", accept=BINARY_V2).json() == []
    _produce(kelp, "seek-ts", [b"e"])
    assert [base64.b64decode(r["value"]) for r in _read(uri, BINARY_V2, want=1)] == [b"e"]

    # Bad timestamps are named, and nothing moved.
    for bad in ("yesterday", 12, None):
        reply = call("POST", f"{uri}/positions", content_type=V2,
                     body={"timestamps": [{"topic": "seek-ts", "partition": 0, "timestamp": bad}]})
        assert reply.status == 422 and "timestamp" in reply.json()["message"], reply
    reply = call("POST", f"{uri}/positions", content_type=V2,
                 body={"timestamps": [{"topic": "seek-ts", "partition": 7, "timestamp": at}]})
    assert reply.status == 409, reply


def test_topic_pattern_subscription_follows_new_topics_and_leaves_internal_ones_out(kelp: BrokerProcess) -> None:
    base = kelp.http_url
    create_topic(base, "pat-orders-1")
    create_topic(base, "pat-other")
    _produce(kelp, "pat-orders-1", [b"o1"])
    _produce(kelp, "pat-other", [b"x"])
    uri = _consumer(base, "pat-g", "pat-c")

    reply = call("POST", f"{uri}/subscription", content_type=V2, body={"topic_pattern": "(a+)+\\1"})
    assert "topic_pattern" in _problem(reply, 422, 42204)  # RE2 has no backreferences: refused, named
    reply = call("POST", f"{uri}/subscription", content_type=V2, body={"topic_pattern": "pat-orders-.*|__.*"})
    assert reply.status == 204, reply
    got = _read(uri, BINARY_V2, want=1)
    assert [(r["topic"], base64.b64decode(r["value"])) for r in got] == [("pat-orders-1", b"o1")]
    assert call("GET", f"{uri}/subscription").json() == {"topics": ["pat-orders-1"]}

    create_topic(base, "pat-orders-2")
    _produce(kelp, "pat-orders-2", [b"o2"])
    got = _read(uri, BINARY_V2, want=1, timeout_s=30)
    assert [(r["topic"], base64.b64decode(r["value"])) for r in got] == [("pat-orders-2", b"o2")]
    assert call("GET", f"{uri}/subscription").json() == {"topics": ["pat-orders-1", "pat-orders-2"]}


def test_brokers_are_listed_and_internal_topics_are_not(kelp: BrokerProcess) -> None:
    base = kelp.http_url
    create_topic(base, "listed-topic")
    consumer = KafkaConsumer(bootstrap_servers=kelp.bootstrap, group_id="make-offsets-topic")
    try:
        consumer.subscribe(["listed-topic"])
        consumer.poll(timeout_ms=2000)
        consumer.commit({})  # nothing to commit; joining is enough to create __consumer_offsets
    finally:
        consumer.close()
    names = [t["name"] for t in call("GET", f"{base}/admin/v1/topics").json()["topics"]]
    assert "__consumer_offsets" in names  # the internal topic exists …
    reply = call("GET", f"{base}/topics", accept=V2)
    assert reply.status == 200 and "listed-topic" in reply.json(), reply
    assert not [t for t in reply.json() if t.startswith("__")], reply.json()  # … and v2 leaves it out
    reply = call("GET", f"{base}/brokers", accept=V2)
    assert reply.status == 200 and reply.json() == {"brokers": [0]}, reply


def test_v3_broker_config_by_kafka_name_and_lag_owners(kelp: BrokerProcess) -> None:
    base = kelp.http_url
    cluster = call("GET", f"{base}/v3/clusters").json()["data"][0]["cluster_id"]
    reply = call("GET", f"{base}/v3/clusters/{cluster}/brokers/0/configs/log.retention.ms")
    assert reply.status == 200, reply
    assert reply.json()["name"] == "log.retention.ms"

    create_topic(base, "lag-topic")
    _produce(kelp, "lag-topic", [b"1", b"2", b"3"])
    consumer = KafkaConsumer("lag-topic", bootstrap_servers=kelp.bootstrap, group_id="lag-g", client_id="lag-client",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        seen = 0
        deadline = time.monotonic() + 20
        while seen < 1 and time.monotonic() < deadline:
            seen += sum(len(v) for v in consumer.poll(timeout_ms=500, max_records=1).values())
        consumer.commit()
        lags = call("GET", f"{base}/v3/clusters/{cluster}/consumer-groups/lag-g/lags").json()["data"]
        assert [(lag["topic_name"], lag["partition_id"], lag["lag"]) for lag in lags] == [("lag-topic", 0, 2)]
        assert lags[0]["client_id"] == "lag-client" and lags[0]["consumer_id"], lags[0]
    finally:
        consumer.close()


def test_an_empty_body_on_a_rest_proxy_route_is_422_and_stores_nothing(kelp: BrokerProcess) -> None:
    """Confluent validates a missing body as a constraint violation: 422, error_code 422 (its v3 OpenAPI's
    `produce_record_empty_request_body`); Kelp's own /admin/v1 keeps answering 400 for it."""
    base = kelp.http_url
    create_topic(base, "empty-body")
    cluster = call("GET", f"{base}/v3/clusters").json()["data"][0]["cluster_id"]
    for url, content_type in ((f"{base}/topics/empty-body", "application/vnd.kafka.binary.v2+json"),
                              (f"{base}/topics/empty-body/partitions/0", "application/vnd.kafka.binary.v2+json"),
                              (f"{base}/v3/clusters/{cluster}/topics/empty-body/records", "application/json"),
                              (f"{base}/v3/clusters/{cluster}/topics", "application/json")):
        message = _problem(call("POST", url, data=b"", content_type=content_type), 422, 422)
        assert "Request body is empty" in message, (url, message)
    assert call("POST", f"{base}/admin/v1/topics", data=b" ", content_type="application/json").status == 400
    assert log_end_offsets(base, "empty-body") == [0]

