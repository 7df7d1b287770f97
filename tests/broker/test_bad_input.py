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


def api_versions_ok(sock: socket.socket) -> bool:
    """One ApiVersions v0 on a raw socket: True when answered without error."""
    body = struct.pack(">hhih", 18, 0, 1, -1)
    sock.sendall(struct.pack(">i", len(body)) + body)
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return False
    answer = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    return struct.unpack_from(">ih", answer) == (1, 0)


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
    for payload in (struct.pack(">i", -5), struct.pack(">i", 3) + b"abc"):
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


# -- seeded fuzz of the frame parser -------------------------------------------------------------

FUZZ_SEED = 20261123
FUZZ_CASES = 300


def _header(api_key: int, version: int, corr: int, *, flexible: bool) -> bytes:
    client_id = b"fuzz"
    head = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    return head + (b"\x00" if flexible else b"")


def _fuzz_cases(rng, specs: list, valid: list[bytes]) -> list[tuple[str, bytes]]:
    """(what, bytes on the wire): random sizes, truncations, garbage headers, every API key with a garbage body."""
    def garbage(n: int) -> bytes:
        return bytes(rng.getrandbits(8) for _ in range(n))

    def framed(body: bytes) -> bytes:
        return struct.pack(">i", len(body)) + body

    cases: list[tuple[str, bytes]] = []
    for i in range(max(FUZZ_CASES, 6 * len(specs))):  # enough that every API gets a garbage body
        kind = i % 6
        if kind in (0, 1):  # a registered API, a version in (or just outside) its range, a garbage body
            spec = specs[(i // 6) % len(specs)]
            version = rng.randint(spec.min_version, spec.max_version + (1 if kind == 1 else 0))
            flexible = version <= spec.max_version and bool(spec.request_class.flexible_version_q(version))
            body = _header(spec.api_key, version, i, flexible=flexible) + garbage(rng.choice((0, 1, 3, 8, 40, 300)))
            cases.append((f"{spec.name} v{version} + garbage body", framed(body)))
        elif kind == 2:  # a valid request with bytes flipped, inserted or deleted
            frame = bytearray(rng.choice(valid))
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(4, len(frame))
                op = rng.randrange(3)
                if op == 0:
                    frame[pos] ^= 1 << rng.randrange(8)
                elif op == 1:
                    frame[pos:pos] = garbage(rng.randint(1, 8))
                elif len(frame) > 12:
                    del frame[pos]
            if rng.random() < 0.5:  # keep the size prefix true to the new length
                frame[:4] = struct.pack(">i", len(frame) - 4)
            cases.append(("mutated valid request", bytes(frame)))
        elif kind == 3:  # a valid request cut short
            frame = rng.choice(valid)
            cases.append(("truncated request", frame[: rng.randrange(1, len(frame))]))
        elif kind == 4:  # sizes that are impossible or lie
            size = rng.choice((-(2**31), -1, 0, 1, 7, 2**31 - 1, 104857601, rng.randint(8, 5000)))
            cases.append((f"size {size}", struct.pack(">i", size) + garbage(rng.randint(0, 64))))
        else:  # a garbage header
            cases.append(("garbage header", framed(garbage(rng.randint(8, 64)))))
    return cases


def _answered_or_closed(host: str, port: int, data: bytes) -> None:
    """Send, half-close, and read until the broker closes (it must, bounded); responses are well framed."""
    s = socket.create_connection((host, port), timeout=10)
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        received = bytearray()
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            received += chunk
    except ConnectionResetError:
        return  # closed, abruptly
    finally:
        s.close()
    pos = 0
    while pos < len(received):  # whatever came back is whole Kafka response frames
        (size,) = struct.unpack_from(">i", received, pos)
        assert size >= 4 and pos + 4 + size <= len(received), f"a torn response frame: {bytes(received[:64])!r}"
        pos += 4 + size


def test_seeded_fuzz_of_frames_never_crashes_or_damages_data(broker_factory) -> None:
    """300 seeded mutations across every registered API: each answered or closed; the broker lives on."""
    import random
    import time

    from kafka.protocol.producer import ProduceRequest

    from kelp.broker.kafka.handlers import all_handlers

    b = broker_factory(settings={"auto.create.topics.enable": "false"})
    assert create_topic_wire(b.bootstrap, "good") == 0 and create_topic_wire(b.bootstrap, "fuzz") == 0
    with WireClient(b.bootstrap) as c:
        for i in range(3):
            assert produce(c, "good", make_batch([(b"k%d" % i, b"v%d" % i)])) == (0, i)
    before = fetch_all_batches(b.bootstrap, "good", 0)
    specs = all_handlers()
    assert {s.api_key for s in specs} <= {k for k in _advertised(b.bootstrap)}  # the keys the broker serves
    valid = []
    for req, version in (
        (ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"), 3),
        (MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="fuzz")], allow_auto_topic_creation=False),
         8),
        (ProduceRequest(transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
            ProduceRequest.TopicProduceData(name="fuzz", partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=0,
                                                                     records=make_batch([(b"k", b"v" * 50)]))])]), 7),
    ):
        req.with_header(correlation_id=1, client_id="fuzz")
        valid.append(bytes(req.encode(version=version, header=True, framed=True)))
    rng = random.Random(FUZZ_SEED)
    host, port = b.bootstrap.split(":")
    started = time.monotonic()
    cases = _fuzz_cases(rng, specs, valid)
    assert {what.split(" v")[0] for what, _ in cases if "garbage body" in what} == {s.name for s in specs}
    for what, data in cases:
        try:
            _answered_or_closed(host, int(port), data)
        except (socket.timeout, AssertionError) as exc:
            raise AssertionError(f"case {what!r} ({data[:40]!r}...): {exc}") from None
        assert b.running, f"broker died on {what!r}; log:\n{b.log_text()[-3000:]}"
    assert time.monotonic() - started < 120
    assert fetch_all_batches(b.bootstrap, "good", 0) == before  # data produced before is intact
    still_serving(b.bootstrap, "good", 3)  # and a fresh connection is served
    assert "Traceback" not in b.log_text(), b.log_text()[-3000:]


def _advertised(bootstrap: str) -> set[int]:
    from tests.broker.helpers import advertised_api_keys

    return advertised_api_keys(bootstrap)


def test_listener_limits_refuse_oversized_stalled_and_surplus_connections(broker_factory) -> None:
    """socket.request.max.bytes, connections.max.idle.ms and max.connections, as a user sets them."""
    import re
    import time
    import urllib.request

    b = broker_factory(settings={"auto.create.topics.enable": "false", "socket.request.max.bytes": 1000000,
                                 "connections.max.idle.ms": 2000, "max.connections": 4})
    assert create_topic_wire(b.bootstrap, "good") == 0
    with WireClient(b.bootstrap) as c:
        assert produce(c, "good", make_batch([(b"k", b"v")])) == (0, 0)
    host, port = b.bootstrap.split(":")
    # a frame over socket.request.max.bytes: closed, logged with the peer and the size
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(struct.pack(">i", 1000001) + b"x" * 100)
    assert s.recv(10) == b""
    s.close()
    line = b.wait_for_log("request size 1000001")
    assert "127.0.0.1:" in line and "socket.request.max.bytes" in line
    # a connection stuck in the middle of a frame: closed after connections.max.idle.ms
    stuck = socket.create_connection((host, int(port)), timeout=10)
    stuck.sendall(struct.pack(">i", 500000) + struct.pack(">hhih", 0, 7, 1, -1) + b"x" * 50)
    started = time.monotonic()
    assert stuck.recv(10) == b""
    assert 1.5 < time.monotonic() - started < 15
    assert "500000-byte request (60 bytes received" in b.wait_for_log("in the middle of a")
    # max.connections=4 held by idle sockets: the next one is served, the least recently used idle one closed to
    # make room (Kafka's behaviour at the limit; issue 33 — it used to lock every other client out)
    others = [socket.create_connection((host, int(port)), timeout=10) for _ in range(4)]
    for o in others:  # each one served once, in order: others[0] is the least recently used
        assert api_versions_ok(o)
    with WireClient(b.bootstrap) as c:
        assert produce(c, "good", make_batch([(b"k2", b"v2")])) == (0, 1)
    assert others[0].recv(10) == b""
    assert "to make room for a new one (max.connections)" in b.wait_for_log("to make room")
    for o in others:
        o.close()
    still_serving(b.bootstrap, "good", 2)
    scraped = urllib.request.urlopen(f"{b.http_url}/metrics", timeout=10).read().decode()
    for pattern in (r'kelp_kafka_connections_closed_by_limit_total\{reason="max.connections \(evicted\)"\} [1-9]',
                    r'kelp_kafka_connections_closed_by_limit_total\{reason="socket.request.max.bytes"\} 1\.0',
                    r'kelp_kafka_connections_closed_by_limit_total\{reason="connections.max.idle.ms"\} [1-9]',
                    r"kelp_kafka_request_pool_limit_bytes 1\.34217728e\+08"):
        assert re.search(pattern, scraped), pattern


SASL_FUZZ_CASES = 200


def _sasl_fuzz_cases(rng) -> list[tuple[str, bytes]]:
    """SASL exchanges gone wrong: garbage and mutated tokens after SaslHandshake v1 (SaslAuthenticate) and v0 (raw
    tokens), random mechanism names, mutated and cut SASL frames, tokens past sasl.server.max.receive.size."""
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    from kelp.security.scram import ScramMechanism
    from kelp.security.scram_exchange import ScramClient

    def garbage(n: int) -> bytes:
        return bytes(rng.getrandbits(8) for _ in range(n))

    def framed(request, version: int, corr: int) -> bytes:
        request.with_header(correlation_id=corr, client_id="fuzz")
        return bytes(request.encode(version=version, header=True, framed=True))

    def mutate(token: bytes) -> bytes:
        out = bytearray(token)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(out)) if out else 0
            op = rng.randrange(3)
            if op == 0 and out:
                out[pos] ^= 1 << rng.randrange(8)
            elif op == 1:
                out[pos:pos] = garbage(rng.randint(1, 6))
            elif out:
                del out[pos]
        return bytes(out)

    valid_tokens = [ScramClient(ScramMechanism.SCRAM_SHA_512, "alice", "x").first_message(),
                    b"\x00alice\x00not-the-password", b"n,,n=alice,r=abc", b"c=biws,r=abcdef,p=AAAA"]
    cases: list[tuple[str, bytes]] = []
    for i in range(SASL_FUZZ_CASES):
        kind = i % 7
        mechanism = rng.choice(("PLAIN", "SCRAM-SHA-512"))
        handshake = framed(SaslHandshakeRequest(mechanism=mechanism), 1, 1)
        if kind == 0:  # garbage token
            token = garbage(rng.choice((0, 1, 7, 64, 2000)))
            cases.append(("garbage SaslAuthenticate", handshake + framed(SaslAuthenticateRequest(auth_bytes=token),
                                                                       rng.randint(0, 2), 2)))
        elif kind == 1:  # a mutated valid token, then another
            tokens = [mutate(rng.choice(valid_tokens)) for _ in range(2)]
            cases.append(("mutated token", handshake + b"".join(
                framed(SaslAuthenticateRequest(auth_bytes=t), 1, 2 + n) for n, t in enumerate(tokens))))
        elif kind == 2:  # v0: raw tokens of any size, some empty or tiny
            raw = b"".join(struct.pack(">i", len(t)) + t for t in
                           (garbage(rng.choice((0, 1, 3, 40))), mutate(rng.choice(valid_tokens))))
            cases.append(("v0 raw tokens", framed(SaslHandshakeRequest(mechanism=mechanism), 0, 1) + raw))
        elif kind == 3:  # a random mechanism name
            name = garbage(rng.randint(0, 40)).decode("latin-1")
            cases.append(("random mechanism", framed(SaslHandshakeRequest(mechanism=name), 1, 1)))
        elif kind == 4:  # a mutated SASL frame, its size prefix kept true or not
            data = bytearray(handshake + framed(SaslAuthenticateRequest(auth_bytes=rng.choice(valid_tokens)), 2, 2))
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(4, len(data))] ^= 1 << rng.randrange(8)
            cases.append(("mutated SASL frame", bytes(data)))
        elif kind == 5:  # cut short
            data = handshake + framed(SaslAuthenticateRequest(auth_bytes=rng.choice(valid_tokens)), 1, 2)
            cases.append(("truncated SASL frame", data[: rng.randrange(1, len(data))]))
        else:  # a frame past the bound before authentication (the broker closes before reading it all)
            cases.append(("oversized SASL frame", handshake + struct.pack(">i", rng.choice((524289, 2**31 - 1)))
                          + garbage(64)))
    return cases


def test_seeded_fuzz_of_sasl_exchanges_never_crashes_or_lets_anyone_in(broker_factory) -> None:
    """200 seeded bad SASL exchanges on a SASL_PLAINTEXT listener: each answered or closed, none authenticates,
    the broker lives on and a good client is served."""
    import random

    from kafka.protocol.metadata import MetadataRequest

    from kelp.kafka_client import BlockingConnection, ConnectionSecurity, SaslCredentials
    from tests.support.tls_files import PLAIN_JAAS, SCRAM_JAAS

    b = broker_factory(settings={
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "connection.failed.authentication.delay.ms": 0})
    host, port = b.bootstrap.split(":")
    for what, data in _sasl_fuzz_cases(random.Random(FUZZ_SEED)):
        try:
            _answered_or_closed(host, int(port), data)
        except (socket.timeout, AssertionError) as exc:
            raise AssertionError(f"case {what!r} ({data[:40]!r}...): {exc}") from None
        assert b.running, f"broker died on {what!r}; log:\n{b.log_text()[-3000:]}"
    log = b.log_text()
    assert "Traceback" not in log, log[-3000:]
    assert "authenticated as" not in log  # nobody got in
    good = ConnectionSecurity(None, SaslCredentials("PLAIN", "alice", "alice-secret"))
    with BlockingConnection(host, int(port), client_id="good", timeout_s=10, security=good) as conn:
        assert conn.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9).brokers
