"""`/healthz`, `/readyz` and `/metrics` after real traffic."""

from __future__ import annotations

import re

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.http.httpcall import call, create_topic


def _sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        m = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        if m and m.group(1) == name and all(f'{k}="{v}"' in m.group(2) for k, v in labels.items()):
            return float(m.group(3))
        if not labels and line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_health_and_readiness(kelp) -> None:
    assert call("GET", f"{kelp.http_url}/healthz").json() == {"status": "alive"}
    r = call("GET", f"{kelp.http_url}/readyz")
    assert r.status == 200 and r.json()["status"] == "ready" and r.json()["kafka"] == kelp.bootstrap


def test_metrics_count_traffic(kelp) -> None:
    topic = "metered"
    create_topic(kelp.http_url, topic)
    producer = KafkaProducer(bootstrap_servers=kelp.bootstrap)
    for _ in range(10):
        producer.send(topic, value=b"x" * 100)
    producer.flush(10)
    producer.close(5)
    consumer = KafkaConsumer(bootstrap_servers=kelp.bootstrap, group_id=None, consumer_timeout_ms=5000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = 0
    for _ in consumer:
        got += 1
        if got == 10:
            break
    consumer.close()
    call("GET", f"{kelp.http_url}/topics/{topic}/partitions/0/records?offset=0")

    r = call("GET", f"{kelp.http_url}/metrics")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
    text = r.body.decode()
    assert _sample(text, "kelp_topic_bytes_in_total", topic=topic) >= 1000
    assert _sample(text, "kelp_topic_records_in_total", topic=topic) == 10
    assert _sample(text, "kelp_topic_bytes_out_total", topic=topic) >= 1000
    assert _sample(text, "kelp_topic_records_out_total", topic=topic) >= 10
    assert _sample(text, "kelp_log_end_offset", topic=topic, partition="0") == 10
    assert _sample(text, "kelp_log_start_offset", topic=topic, partition="0") == 0
    assert _sample(text, "kelp_log_size_bytes", topic=topic, partition="0") > 1000
    assert _sample(text, "kelp_request_latency_seconds_count", api="Produce") >= 1
    assert _sample(text, "kelp_request_latency_seconds_count", api="Fetch") >= 1
    assert _sample(text, "kelp_request_latency_seconds_count",
                   api="HTTP GET /topics/{topic}/partitions/{partition}/records") >= 1
