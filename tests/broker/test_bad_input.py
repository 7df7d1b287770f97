"""Bad input gets Kafka's error code and a log line; the broker keeps serving.

Malformed frames, unknown API keys, corrupt CRCs, oversized batches, unknown
topics (auto-create off) and invalid topic names each get the protocol's
answer; another connection keeps working and stored data stays intact.
"""

from __future__ import annotations

import socket
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from tests.broker.helpers import batch_headers, create_topic_wire, fetch_all_batches, produce
from tests.support.kafka_wire import WireClient, make_batch

pytestmark = pytest.mark.clients


def still_serving(bootstrap: str, topic: str, expect_batches: int) -> None:
    with WireClient(bootstrap) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        assert resp.error_code == 0
    assert len(batch_headers(fetch_all_batches(bootstrap, topic, 0))) == expect_batches


@pytest.fixture
def strict_broker(broker_factory):
    b = broker_factory(settings={"auto.create.topics.enable": "false", "message.max.bytes": 10000})
    assert create_topic_wire(b.bootstrap, "good") == 0
    with WireClient(b.bootstrap) as c:
        assert produce(c, "good", make_batch([(b"k", b"v")])) == (0, 0)
    return b


def test_malformed_frames_close_only_that_connection(strict_broker) -> None:
    b = strict_broker
    host, port = b.bootstrap.split(":")
    for payload, reason in ((struct.pack(">i", -5), "outside"), (struct.pack(">i", 3) + b"abc", "outside")):
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(payload)
        assert s.recv(10) == b""  # closed by the broker
        s.close()
    b.wait_for_log("request size -5")
    # a body that does not decode as the announced API
    s = socket.create_connection((host, int(port)), timeout=5)
    body = struct.pack(">hhih", 3, 9, 1, 1) + b"x" + b"\x00" + b"\xff\xff\xff"
    s.sendall(struct.pack(">i", len(body)) + body)
    assert s.recv(10) == b""
    s.close()
    b.wait_for_log("cannot decode Metadata v9")
    still_serving(b.bootstrap, "good", 1)


def test_unknown_api_key_gets_unsupported_version(strict_broker) -> None:
    b = strict_broker
    with WireClient(b.bootstrap) as c:
        body = struct.pack(">hhih", 999, 0, 42, 1) + b"x"
        c.send_raw(struct.pack(">i", len(body)) + body)
        frame = c.recv_frame()
        corr, code = struct.unpack(">ih", frame[:6])
        assert (corr, code) == (42, 35)
        # ApiVersions above our range (v5, a v4 request relabelled): v0 answer with error 35 and the ranges
        req = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        req.with_header(correlation_id=43, client_id="t")
        raw = bytearray(req.encode(version=4, header=True, framed=True))
        raw[6:8] = struct.pack(">h", 5)
        c.send_raw(bytes(raw))
        frame = c.recv_frame()
        assert struct.unpack(">ih", frame[:6]) == (43, 35)
    b.wait_for_log("unsupported API key 999")
    still_serving(b.bootstrap, "good", 1)


def test_corrupt_crc_refused_with_code_2(strict_broker) -> None:
    b = strict_broker
    batch = bytearray(make_batch([(b"k", b"value")]))
    batch[-1] ^= 0xFF
    with WireClient(b.bootstrap) as c:
        assert produce(c, "good", bytes(batch))[0] == 2
    line = b.wait_for_log("refused")
    assert "good" in line and "partition 0" in line
    still_serving(b.bootstrap, "good", 1)


def test_batch_over_message_max_bytes_refused_with_code_10(strict_broker) -> None:
    b = strict_broker
    with WireClient(b.bootstrap) as c:
        assert produce(c, "good", make_batch([(b"k", b"x" * 20000)]))[0] == 10
    assert "10000" in b.wait_for_log("refused")
    still_serving(b.bootstrap, "good", 1)


def test_unknown_topic_without_auto_create_code_3(strict_broker) -> None:
    b = strict_broker
    with WireClient(b.bootstrap) as c:
        assert produce(c, "missing", make_batch([(b"k", b"v")]))[0] == 3
        md = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="missing")],
                                       allow_auto_topic_creation=True), 8)
        assert md.topics[0].error_code == 3
    assert "'missing'" in b.wait_for_log("auto.create.topics.enable is false")
    still_serving(b.bootstrap, "good", 1)


def test_invalid_topic_name_code_17(broker) -> None:
    with WireClient(broker.bootstrap) as c:
        assert produce(c, "bad/name", make_batch([(b"k", b"v")]))[0] == 17
        md = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a" * 300)],
                                       allow_auto_topic_creation=True), 8)
        assert md.topics[0].error_code == 17
    assert create_topic_wire(broker.bootstrap, "..") == 17
    assert "'bad/name'" in broker.wait_for_log("invalid topic name")
