"""REST Proxy v2 consumers are real group members: two HTTP consumers and one
kafka-python consumer share a topic's partitions without overlap; idle
instances expire and leave the group."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from kafka import KafkaProducer

from .procs import ConsumerProc
from .test_clients_share_partitions import create_topic

V2 = "application/vnd.kafka.v2+json"


def http(method: str, url: str, body: Any = None, *, timeout: float = 30) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", V2)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


class RestConsumer:
    def __init__(self, base: str, group: str, name: str, **config: Any) -> None:
        status, body = http("POST", f"{base}/consumers/{group}",
                            {"name": name, "format": "binary", "auto.offset.reset": "earliest",
                             "auto.commit.enable": "false", **config})
        assert status == 200, body
        self.uri = body["base_uri"]
        self.seen: list[tuple[int, int, str]] = []

    def subscribe(self, topics: list[str]) -> None:
        status, body = http("POST", f"{self.uri}/subscription", {"topics": topics})
        assert status == 204, body

    def assignment(self) -> list[int]:
        status, body = http("GET", f"{self.uri}/assignments")
        assert status == 200, body
        return sorted(p["partition"] for p in body["partitions"])

    def poll(self, timeout_ms: int = 200) -> None:
        status, recs = http("GET", f"{self.uri}/records?timeout={timeout_ms}&max_bytes=1000000")
        assert status == 200, recs
        for r in recs:
            self.seen.append((r["partition"], r["offset"], base64.b64decode(r["value"]).decode()))
        if recs:
            last: dict[tuple[str, int], int] = {}
            for r in recs:
                last[(r["topic"], r["partition"])] = r["offset"] + 1
            status, body = http("POST", f"{self.uri}/offsets", {"offsets": [
                {"topic": t, "partition": p, "offset": o} for (t, p), o in last.items()]})
            assert status == 200, body

    def close(self) -> None:
        http("DELETE", self.uri)


def until(predicate: Any, *, timeout: float, what: str, step: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        if step is not None:
            step()
        else:
            time.sleep(0.1)


@pytest.mark.timeout(90)
def test_two_http_consumers_and_a_kafka_consumer_share_partitions(group_broker, consumers) -> None:
    bs, base = group_broker.bootstrap, group_broker.http_url
    create_topic(bs, "mixed", 6)
    a = RestConsumer(base, "mixed-group", "http-a")
    b = RestConsumer(base, "mixed-group", "http-b")
    a.subscribe(["mixed"])
    b.subscribe(["mixed"])
    kp: ConsumerProc = consumers(client="kafka-python", bootstrap=bs, group="mixed-group", topic="mixed",
                                 session_ms=3000)

    def covered() -> bool:
        parts = a.assignment() + b.assignment() + kp.assignment
        return sorted(parts) == list(range(6)) and all([a.assignment(), b.assignment(), kp.assignment])

    def poll_both() -> None:
        a.poll(100)
        b.poll(100)

    until(covered, timeout=45, what="three members (2 HTTP, 1 kafka-python) covering six partitions", step=poll_both)
    owned = {"a": set(a.assignment()), "b": set(b.assignment()), "kp": set(kp.assignment)}
    assert not (owned["a"] & owned["b"]) and not (owned["a"] & owned["kp"]) and not (owned["b"] & owned["kp"])

    p = KafkaProducer(bootstrap_servers=bs)
    sent = {f"m{i}" for i in range(300)}
    for i in range(300):
        p.send("mixed", f"m{i}".encode(), partition=i % 6)
    p.flush(30)
    p.close()

    def all_seen() -> bool:
        return {v for _, _, v in a.seen + b.seen + kp.records()} >= sent

    until(all_seen, timeout=30, what="all 300 records consumed", step=poll_both)
    values = [v for _, _, v in a.seen + b.seen + kp.records()]
    assert len(values) == len(set(values)) == 300, "each record consumed by exactly one member"
    assert {pp for pp, _, _ in a.seen} <= owned["a"] and {pp for pp, _, _ in b.seen} <= owned["b"]

    # The admin API sees all three members and zero lag after the commits.
    status, d = http("GET", f"{base}/admin/v1/groups/mixed-group")
    assert status == 200 and d["state"] == "Stable" and len(d["members"]) == 3
    until(lambda: http("GET", f"{base}/admin/v1/groups/mixed-group")[1]["total_lag"] == 0, timeout=10,
          what="zero lag after every member committed")
    kp.terminate()
    a.close()
    b.close()


@pytest.mark.timeout(60)
def test_idle_http_consumer_expires_and_leaves_the_group(group_broker) -> None:
    base = group_broker.http_url
    create_topic(group_broker.bootstrap, "idle", 2)
    c = RestConsumer(base, "idle-group", "sleepy", **{"consumer.instance.timeout.ms": 1500})
    c.subscribe(["idle"])
    until(lambda: c.assignment() == [0, 1], timeout=20, what="the HTTP consumer to be assigned both partitions")
    # Only the admin API is polled now: it does not touch the instance, so the instance idles.
    until(lambda: http("GET", f"{base}/admin/v1/groups/idle-group")[1]["members"] == [], timeout=15,
          what="the idle instance to expire and leave its group")
    status, body = http("GET", f"{c.uri}/records")
    assert status == 404 and "does not exist" in body["message"]


@pytest.mark.timeout(30)
def test_http_consumer_bad_requests(group_broker) -> None:
    base = group_broker.http_url
    status, body = http("POST", f"{base}/consumers/g", {"name": "x", "format": "thrift"})
    assert status == 422 and "format" in body["message"]
    assert http("POST", f"{base}/consumers/g", {"name": "x"})[0] == 200
    status, body = http("POST", f"{base}/consumers/g", {"name": "x"})
    assert status == 409 and "already exists" in body["message"]
    status, body = http("POST", f"{base}/consumers/g/instances/x/subscription", {"topics": ["no-such-topic"]})
    assert status == 404 and "no-such-topic" in body["message"]
    status, body = http("GET", f"{base}/consumers/g/instances/nobody/records")
    assert status == 404
    assert http("DELETE", f"{base}/consumers/g/instances/x")[0] == 204
