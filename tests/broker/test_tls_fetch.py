"""Fetch answers over TLS: log file ranges of several MiB go out in chunks through the TLS transport, intact.

Without TLS a fetch's file ranges leave with sendfile; under TLS the broker reads them in 1 MiB chunks and
writes each through asyncio's TLS transport, waiting while the transport is above its high-water mark
(`response_writer.TLS_READ_CHUNK`; asyncio's own fallback read 16 KiB per executor round trip). Checked:
one fetch answer of several MiB arrives byte for byte over SSL as over PLAINTEXT, a consumer reads every
record in order, and a client that goes away in the middle of such an answer leaves the broker serving.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator

import pytest
from kafka.protocol.consumer import FetchRequest

from kelp.broker.kafka.response_writer import TLS_READ_CHUNK
from tests.support.broker_process import BrokerProcess
from tests.support.kafka_wire import WireClient
from tests.support.tls_files import Pki

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

TOPIC = "tls-fetch"
RECORDS = 5_000
VALUE_BYTES = 1024


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Pki, list[bytes]]]:
    from confluent_kafka import Producer

    pki = Pki(tmp_path_factory.mktemp("pki"))
    bp = BrokerProcess(tmp_path_factory.mktemp("tls-fetch"), settings={
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(pki.broker_file), "ssl.truststore.location": str(pki.ca_file),
        "num.partitions": 1})
    bp.start()
    try:
        values = [b"%08d" % i + os.urandom(VALUE_BYTES - 8) for i in range(RECORDS)]
        producer = Producer({"bootstrap.servers": bp.bootstrap, "linger.ms": 50, "batch.size": 1_000_000})
        for value in values:
            producer.produce(TOPIC, value, partition=0)
        assert producer.flush(60) == 0
        yield bp, pki, values
    finally:
        bp.kill()


def _listener(bp: BrokerProcess, name: str) -> str:
    assert bp.ready_info is not None
    return str(bp.ready_info["listeners"][name])


def _fetch(address: str, tls: ssl.SSLContext | None) -> bytes:
    """One Fetch v11 from offset 0 asking for up to 10 MiB: the records bytes of the answer."""
    F = FetchRequest.FetchTopic
    with WireClient(address, timeout=30) as w:
        if tls is not None:
            w.sock = tls.wrap_socket(w.sock, server_hostname="127.0.0.1")
        resp = w.request(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=10 << 20,
                                      isolation_level=0, session_id=0, session_epoch=-1,
                                      topics=[F(topic=TOPIC, partitions=[F.FetchPartition(
                                          partition=0, fetch_offset=0, partition_max_bytes=10 << 20)])],
                                      forgotten_topics_data=[], rack_id=""), 11)
        partition = resp.responses[0].partitions[0]
        assert partition.error_code == 0
        return bytes(partition.records)


def test_a_multi_mib_fetch_answer_is_the_same_over_tls(tls_broker: tuple[BrokerProcess, Pki, list[bytes]]) -> None:
    bp, pki, _ = tls_broker
    plain = _fetch(_listener(bp, "PLAINTEXT"), None)
    assert len(plain) > 3 * TLS_READ_CHUNK  # several chunks, and the transport's flow control between them
    tls = _fetch(_listener(bp, "SSL"), ssl.create_default_context(cafile=str(pki.ca_file)))
    assert tls == plain


def test_a_consumer_over_tls_reads_every_record_in_order(tls_broker: tuple[BrokerProcess, Pki, list[bytes]]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    bp, pki, values = tls_broker
    consumer = Consumer({"bootstrap.servers": _listener(bp, "SSL"), "security.protocol": "SSL",
                         "ssl.ca.location": str(pki.ca_file), "group.id": "tls-fetch",
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 10 << 20})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        for _ in range(60):
            for msg in consumer.consume(num_messages=RECORDS, timeout=1.0):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
            if len(got) >= RECORDS:
                break
    finally:
        consumer.close()
    assert got == values


def test_a_client_gone_in_the_middle_of_an_answer_leaves_the_broker_serving(
        tls_broker: tuple[BrokerProcess, Pki, list[bytes]]) -> None:
    bp, pki, _ = tls_broker
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    F = FetchRequest.FetchTopic
    for _ in range(3):
        with WireClient(_listener(bp, "SSL"), timeout=30) as w:
            w.sock = context.wrap_socket(w.sock, server_hostname="127.0.0.1")
            w.send(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=10 << 20, isolation_level=0,
                                session_id=0, session_epoch=-1, topics=[F(topic=TOPIC, partitions=[F.FetchPartition(
                                    partition=0, fetch_offset=0, partition_max_bytes=10 << 20)])],
                                forgotten_topics_data=[], rack_id=""), 11)
            assert len(w.sock.recv(4096)) > 0  # the answer has started; the client leaves without the rest
    assert _fetch(_listener(bp, "SSL"), context) == _fetch(_listener(bp, "PLAINTEXT"), None)
    assert "Traceback" not in bp.log_text()
