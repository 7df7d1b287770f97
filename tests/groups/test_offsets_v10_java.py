"""Kafka's Java consumer (kafka-clients 4.4.0) commits and resumes against Kelp with OffsetCommit v10 and
OffsetFetch v10 (issue 36): topics named by id.

One run takes 13 of 30 records and commits exactly those; a second run of the same group resumes where the commit
left off: together they took every record once. Both group protocols: KIP-848's consumer protocol commits and
fetches by topic id (v10, kafka-clients' CommitRequestManager builds them `forTopicIdsOrNames`); the classic one
still by name (v9: its ConsumerCoordinator builds them `forTopicNames`). The broker says which versions it served
(its DEBUG line per OffsetCommit / OffsetFetch), so the test proves v10 was negotiated, not just that commits
worked. The Java tier skips only without `java` (`make test` fetches the jars,
`bench.kafka_ref`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pytest
from kafka import KafkaProducer

from bench.kafka_ref import fetch as fetch_kafka
from tests.support.broker_process import BrokerProcess

from .test_clients_share_partitions import create_topic

JAVA_SOURCE = Path(__file__).with_name("OffsetsResume.java")
SETTINGS = {"offsets.topic.num.partitions": 1, "group.consumer.heartbeat.interval.ms": 500,
            "group.initial.rebalance.delay.ms": 0}
RECORDS = 30
FIRST = 13


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """A broker that logs each OffsetCommit / OffsetFetch with its version (DEBUG), once the Kafka jars are here."""
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka's Java consumer cannot run")
    fetch_kafka()
    return broker_factory(settings=SETTINGS, extra_args=["--log-level", "DEBUG"])


def run(bootstrap: str, topic: str, group: str, protocol: str, limit: int) -> tuple[list[tuple[int, int, str]],
                                                                                    dict[int, int]]:
    """OffsetsResume.java once: (records taken, {partition: committed offset read back})."""
    classpath = f"{fetch_kafka()}/*"
    done = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath,
                           str(JAVA_SOURCE), bootstrap, topic, group, protocol, str(limit), "3000", "60000"],
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    taken: list[tuple[int, int, str]] = []
    committed: dict[int, int] = {}
    for line in done.stdout.splitlines():
        fields = line.split("\t")
        if fields[0] == "#committed":
            committed[int(fields[1])] = int(fields[2])
        elif len(fields) == 3 and fields[0].isdigit():
            taken.append((int(fields[0]), int(fields[1]), fields[2]))
    return taken, committed


@pytest.mark.timeout(400)
@pytest.mark.parametrize(("protocol", "version"), [("consumer", 10), ("classic", 9)])
def test_the_java_consumer_commits_by_topic_id_and_resumes(broker: BrokerProcess, protocol: str, version: int) -> None:
    topic, group = f"resume-{protocol}", f"java-v10-{protocol}"
    create_topic(broker.bootstrap, topic, 3)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(RECORDS):
        p.send(topic, f"v{i}".encode(), partition=i % 3)
    p.flush(30)
    p.close()

    first, committed = run(broker.bootstrap, topic, group, protocol, FIRST)
    assert len(first) == FIRST
    ends: dict[int, int] = {}
    for part, offset, _ in first:
        ends[part] = max(ends.get(part, 0), offset + 1)
    assert {k: v for k, v in committed.items() if v >= 0} == ends, "committed() reads back what commitSync wrote"
    broker.wait_for_log(f"OffsetCommit v{version} of group '{group}'", timeout=10)
    broker.wait_for_log(f"OffsetFetch v{version} of group '{group}'", timeout=10)
    served = [line for line in broker.log_text().splitlines() if f"of group '{group}'" in line and " v" in line
              and ("OffsetCommit v" in line or "OffsetFetch v" in line)]
    assert all(f" v{version} " in line for line in served), served

    rest, after = run(broker.bootstrap, topic, group, protocol, RECORDS)
    values = sorted((v for _, _, v in first + rest), key=lambda v: int(v[1:]))
    assert values == [f"v{i}" for i in range(RECORDS)], "resumed exactly where the commit left off, nothing twice"
    assert after == {0: 10, 1: 10, 2: 10}
