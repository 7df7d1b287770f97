"""Every codec from the Java client (kafka-clients 4.3.1's ConsoleProducer) to plain and compacted topics, read
back by the Java consumer after a cleaner pass (issue 36).

The Java client frames snappy with snappy-java's xerial framing and writes gzip, lz4 and zstd with its own
libraries: each batch goes through the broker's check of the records, is stored in the producer's codec, and
on the compacted topic survives the cleaner's rewrite with the last value of every key.
"""

from __future__ import annotations

import shutil
import time
from typing import Iterator

import pytest

from kelp import kafka_tools
from kelp.records.header import iter_headers
from kelp.records.record import iter_records
from tests.broker.helpers import create_topic_wire, fetch_all_batches
from tests.support.broker_process import BrokerProcess
from tests.support.poison import CODECS
from tests.tools.conftest import SETTINGS, Tools

PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
N = 200
KEYS = 20
CLEAN_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tools]:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka's Java client cannot run")
    kafka_tools.fetch()
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-java-codecs"),
                       settings={**SETTINGS, "log.retention.check.interval.ms": 200})  # the cleaner's pace
    bp.start()
    kafka_tools.ensure_archive(bp.bootstrap)
    yield Tools(bp.bootstrap)
    bp.kill()


def _lines() -> list[str]:
    return [f"k{i % KEYS}:v{i}-" + "x" * 500 for i in range(N)]


def _consume(java: Tools, topic: str, count: int) -> list[str]:
    got = java.run(CONSUMER, "--topic", topic, "--from-beginning", "--max-messages", str(count),
                   "--formatter-property", "print.key=true", "--formatter-property", "key.separator=:",
                   "--timeout-ms", "60000").ok()
    return got.stdout.splitlines()


@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_the_java_client_writes_every_codec_and_reads_it_back_after_a_cleaner_pass(java: Tools, policy: str) -> None:
    topics = {codec: f"java-{policy}-{codec}" for codec in CODECS}
    for topic in topics.values():
        assert create_topic_wire(java.bootstrap, topic, configs={
            "cleanup.policy": policy, "segment.bytes": 4096, "min.cleanable.dirty.ratio": 0.01}) == 0
    stdin = "\n".join(_lines()) + "\n"
    runs = java.run_parallel(*[(PRODUCER, "--topic", topic, "--reader-property", "parse.key=true",
                                "--reader-property", "key.separator=:", "--compression-codec", codec,
                                "--producer-property", "linger.ms=20", "--producer-property", "batch.size=4096",
                                {"stdin": stdin}) for codec, topic in topics.items()])
    for run in runs:
        run.ok()
    for codec, topic in topics.items():
        stored = fetch_all_batches(java.bootstrap, topic, 0)
        assert {h.compression_name for h in iter_headers(stored)} == {codec}, codec
        if policy == "delete":
            assert _consume(java, topic, N) == _lines(), codec
            continue
        deadline = time.monotonic() + CLEAN_TIMEOUT_S
        while sum(1 for _ in iter_records(stored)) == N:  # bounded: the cleaner runs every 200 ms
            assert time.monotonic() < deadline, f"no cleaner pass on {topic} within {CLEAN_TIMEOUT_S} s"
            time.sleep(0.2)
            stored = fetch_all_batches(java.bootstrap, topic, 0)
        assert {h.compression_name for h in iter_headers(stored)} == {codec}, codec
        latest = dict(line.split(":", 1) for line in _lines())
        read = _consume(java, topic, sum(1 for _ in iter_records(stored)))
        assert dict(line.split(":", 1) for line in read) == latest, codec
