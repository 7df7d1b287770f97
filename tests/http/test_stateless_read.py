"""Stateless partition reads: records from an offset, long-polling, out-of-range errors."""

from __future__ import annotations

import base64
import threading
import time

from tests.http.httpcall import call, create_topic

JSON_V2 = "application/vnd.kafka.json.v2+json"


def _produce(base: str, topic: str, values: list, **extra) -> None:
    reply = call("POST", f"{base}/topics/{topic}/partitions/0", content_type=JSON_V2,
                 body={"records": [{"value": v, **extra} for v in values]})
    assert reply.status == 200, reply


def test_read_from_an_offset_in_both_formats(kelp) -> None:
    topic = "read-formats"
    create_topic(kelp.http_url, topic)
    _produce(kelp.http_url, topic, [{"i": 0}, {"i": 1}])
    _produce(kelp.http_url, topic, [{"i": 2}], key="k")
    base = f"{kelp.http_url}/topics/{topic}/partitions/0/records"

    as_json = call("GET", f"{base}?offset=1", accept=JSON_V2)
    assert as_json.status == 200 and as_json.headers["Content-Type"].startswith(JSON_V2)
    recs = as_json.json()
    assert [(r["offset"], r["key"], r["value"]) for r in recs] == [(1, None, {"i": 1}), (2, "k", {"i": 2})]
    assert all(r["topic"] == topic and r["partition"] == 0 and r["timestamp"] > 0 and r["headers"] == []
               for r in recs)

    as_binary = call("GET", f"{base}?offset=2").json()  # binary (base64) is the default
    assert base64.b64decode(as_binary[0]["value"]) == b'{"i":2}'
    assert base64.b64decode(as_binary[0]["key"]) == b'"k"'

    assert [r["offset"] for r in call("GET", f"{base}?offset=earliest&count=2&format=json").json()] == [0, 1]
    assert call("GET", f"{base}?offset=latest").json() == []


def test_long_poll_is_completed_by_a_produce(kelp) -> None:
    topic = "long-poll"
    create_topic(kelp.http_url, topic)
    url = f"{kelp.http_url}/topics/{topic}/partitions/0/records?offset=0&timeout=15000&format=json"
    result: dict = {}

    def reader() -> None:
        start = time.monotonic()
        result["reply"] = call("GET", url, timeout=30)
        result["elapsed"] = time.monotonic() - start

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.3)  # let the read park; correctness does not depend on it
    _produce(kelp.http_url, topic, ["wake"])
    t.join(20)
    assert not t.is_alive()
    reply = result["reply"]
    assert reply.status == 200, reply
    assert [r["value"] for r in reply.json()] == ["wake"]
    assert result["elapsed"] < 10


def test_an_empty_read_waits_for_its_timeout_then_returns_nothing(kelp) -> None:
    topic = "empty-wait"
    create_topic(kelp.http_url, topic)
    start = time.monotonic()
    reply = call("GET", f"{kelp.http_url}/topics/{topic}/partitions/0/records?offset=0&timeout=400")
    elapsed = time.monotonic() - start
    assert reply.status == 200 and reply.json() == []
    assert 0.35 <= elapsed < 5


def test_out_of_range_offset_names_the_valid_range(kelp) -> None:
    topic = "read-range"
    create_topic(kelp.http_url, topic)
    _produce(kelp.http_url, topic, [1, 2, 3])
    reply = call("GET", f"{kelp.http_url}/topics/{topic}/partitions/0/records?offset=50")
    assert reply.status == 416, reply
    body = reply.json()
    assert body["error_code"] == 1
    assert "offset 50" in body["message"] and "0..3" in body["message"]


def test_bad_read_parameters(kelp) -> None:
    topic = "read-params"
    create_topic(kelp.http_url, topic)
    base = f"{kelp.http_url}/topics/{topic}/partitions"
    r = call("GET", f"{base}/0/records?offset=abc")
    assert r.status == 400 and "offset" in r.json()["message"]
    r = call("GET", f"{base}/0/records?offset=0&timeout=999999")
    assert r.status == 400 and "timeout" in r.json()["message"]
    r = call("GET", f"{base}/3/records?offset=0")
    assert r.status == 404 and "partition 3" in r.json()["message"]
    r = call("GET", f"{kelp.http_url}/topics/missing-topic/partitions/0/records?offset=0")
    assert r.status == 404 and "missing-topic" in r.json()["message"]
