"""Real consumers read everything from a broker that keeps fetch sessions (KIP-227).

kafka-python's consumer and Kafka's Java consumer (ConsoleConsumer of kafka-tools) fetch in incremental
sessions (their FetchSessionHandler): while they read records produced in waves across partitions, the
broker's `kelp_fetch_sessions` gauge shows their session, and they get every record exactly once, in order
per partition. librdkafka (confluent-kafka) is run the same way; it has no fetch sessions (it sends epoch -1:
the gauge stays 0, the test prints it) and reads everything answered in full.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.request
from typing import Any, Callable

import pytest

from kelp import kafka_tools
from tests.broker.helpers import create_topic_wire

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

PARTITIONS = 6
WAVES, PER_WAVE = 5, 40
# Small partition fetches: a consumer catching up on a wave takes several fetches while the high watermark stands
# still, so the leader must answer a partition for its records alone, from the offset the consumer last named.
PARTITION_FETCH_BYTES = 512


def _value(wave: int, i: int) -> bytes:
    return f"{wave}-{i}-".encode() + b"." * 200


def _gauge(http_url: str, name: str) -> float:
    with urllib.request.urlopen(f"{http_url}/metrics", timeout=10) as page:
        text = page.read().decode()
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found is not None, f"{name} is not among the broker's metrics"
    return float(found.group(1))


def _produce_wave(bootstrap: str, topic: str, wave: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    for i in range(PER_WAVE):
        # Uneven across partitions, some partitions skipped in a wave: unchanged ones are left out of answers.
        p = (i * (wave + 1)) % PARTITIONS
        producer.produce(topic, value=_value(wave, i), partition=p)
    assert producer.flush(10) == 0


def _read_in_waves(bootstrap: str, http_url: str, topic: str,
                   poll: Callable[[float], list[tuple[int, bytes]]]) -> tuple[dict[int, list[bytes]], float]:
    """Produce WAVES waves, polling between them; (values read per partition, most sessions seen cached)."""
    got: dict[int, list[bytes]] = {}
    sessions = 0.0
    want = 0
    for wave in range(WAVES):
        _produce_wave(bootstrap, topic, wave)
        want += PER_WAVE
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < want and time.monotonic() < deadline:
            for p, value in poll(0.5):
                got.setdefault(p, []).append(value)
        sessions = max(sessions, _gauge(http_url, "kelp_fetch_sessions"))
    return got, sessions


def _expected() -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for wave in range(WAVES):
        for i in range(PER_WAVE):
            out.setdefault((i * (wave + 1)) % PARTITIONS, []).append(_value(wave, i))
    return out


def test_kafka_python_reads_everything_in_a_fetch_session(broker: Any) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic = "sessions-kp"
    assert create_topic_wire(broker.bootstrap, topic, PARTITIONS) == 0
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100,
                             max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
                             auto_offset_reset="earliest", consumer_timeout_ms=1000)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()

    def poll(timeout_s: float) -> list[tuple[int, bytes]]:
        batches = consumer.poll(timeout_ms=int(timeout_s * 1000))
        return [(tp.partition, m.value) for tp, msgs in batches.items() for m in msgs]

    try:
        got, sessions = _read_in_waves(broker.bootstrap, broker.http_url, topic, poll)
    finally:
        consumer.close()
    assert got == _expected()
    assert sessions >= 1, "kafka-python never held a fetch session"


def test_librdkafka_reads_everything_from_a_broker_with_fetch_sessions(broker: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = "sessions-rdkafka"
    assert create_topic_wire(broker.bootstrap, topic, PARTITIONS) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-sessions",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                         "max.partition.fetch.bytes": PARTITION_FETCH_BYTES})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

    def poll(timeout_s: float) -> list[tuple[int, bytes]]:
        msg = consumer.poll(timeout_s)
        if msg is None:
            return []
        assert msg.error() is None, msg.error()
        return [(msg.partition(), msg.value())]

    try:
        got, sessions = _read_in_waves(broker.bootstrap, broker.http_url, topic, poll)
    finally:
        consumer.close()
    assert got == _expected()
    print(f"librdkafka held {sessions:.0f} fetch session(s) at most")


def test_the_java_consumer_reads_everything_in_a_fetch_session(broker: Any) -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka's ConsoleConsumer cannot run")
    kafka_tools.fetch()  # a no-op after `make test`'s bootstrap
    topic = "sessions-java"
    assert create_topic_wire(broker.bootstrap, topic, PARTITIONS) == 0
    command = kafka_tools.java_command(
        "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
        "--from-beginning", "--max-messages", str(WAVES * PER_WAVE), "--timeout-ms", "60000",
        "--property", "print.partition=true", "--command-property", "fetch.max.wait.ms=100",
        "--command-property", f"max.partition.fetch.bytes={PARTITION_FETCH_BYTES}")
    consumer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert consumer.stdout is not None
    got: dict[int, list[bytes]] = {}
    sessions = 0.0
    try:
        for wave in range(WAVES):
            _produce_wave(broker.bootstrap, topic, wave)
            while sum(map(len, got.values())) < (wave + 1) * PER_WAVE:
                line = consumer.stdout.readline()  # bounded: the consumer exits after --timeout-ms idle
                if not line:
                    break
                part, tab, value = line.rstrip("\n").partition("\t")
                if part.startswith("Partition:") and tab:
                    got.setdefault(int(part.removeprefix("Partition:")), []).append(value.encode())
            if wave < WAVES - 1:  # the consumer is still running (it stops at --max-messages)
                sessions = max(sessions, _gauge(broker.http_url, "kelp_fetch_sessions"))
        _, err = consumer.communicate(timeout=90)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
    assert consumer.returncode == 0, err[-3000:]
    assert got == _expected()
    assert sessions >= 1, "the Java consumer never held a fetch session"
