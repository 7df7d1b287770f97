"""Bad input on secured listeners: each refused with the right error, logged once, and everyone else still served.

One broker with an SSL listener requiring client certificates, a SASL_PLAINTEXT listener (PLAIN and
SCRAM-SHA-512) and a PLAINTEXT one. A plaintext client on the TLS port, a TLS client on the plaintext port,
garbage where a TLS handshake should be, a client certificate from another CA, an expired one and none at all
fail the TLS handshake or are closed, and the log names the peer and why. On the SASL listener: a request before
authentication closes the connection unanswered; an unknown mechanism gets UNSUPPORTED_SASL_MECHANISM with
the enabled ones, a wrong password SASL_AUTHENTICATION_FAILED, both after
connection.failed.authentication.delay.ms and followed by the close; a SASL frame above
sasl.server.max.receive.size and one cut short are closed. No password is ever logged, and after all of it a
client authenticates and is served on every listener.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
import time
from collections.abc import Iterator

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from kelp.kafka_client import BlockingConnection, ConnectionSecurity, SaslCredentials, connection_security
from tests.support.broker_process import BrokerProcess
from tests.support.tls_files import PLAIN_JAAS, SCRAM_JAAS, Pki

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

DELAY_MS = 300


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("guarded"), settings={
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.location": str(pki.broker_file), "ssl.truststore.location": str(pki.ca_file),
        "ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "connection.failed.authentication.delay.ms": DELAY_MS,
        "offsets.topic.num.partitions": 1,
    })
    bp.start()
    yield bp
    bp.kill()


def address(broker: BrokerProcess, name: str) -> tuple[str, int]:
    assert broker.ready_info is not None
    host, port = str(broker.ready_info["listeners"][name]).rsplit(":", 1)
    return host, int(port)


def frame(request: object, version: int, correlation_id: int = 1) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="bad")  # type: ignore[attr-defined]
    return bytes(request.encode(version=version, header=True, framed=True))  # type: ignore[attr-defined]


def read_all(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the broker sends until it closes the connection (it must, within `timeout`)."""
    sock.settimeout(timeout)
    data = bytearray()
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return bytes(data)


def answers(data: bytes) -> list[bytes]:
    """The whole size-prefixed frames at the start of `data` (a TLS alert is none)."""
    out, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 0 or pos + 4 + size > len(data):
            break
        out.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return out


def served(broker: BrokerProcess, pki: Pki) -> None:
    """A good client on every listener is served."""
    cert, key = pki.client_certificate("good-client")
    tls = connection_security({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file),
                               "ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
    for name, security in (("PLAINTEXT", ConnectionSecurity()), ("SSL", tls),
                           ("SASL_PLAINTEXT", ConnectionSecurity(None, SaslCredentials("PLAIN", "alice",
                                                                                       "alice-secret")))):
        host, port = address(broker, name)
        with BlockingConnection(host, port, client_id="good", timeout_s=10, security=security) as conn:
            assert conn.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9).brokers


def test_tls_listener_refuses_plaintext_garbage_and_missing_or_foreign_certificates(guarded: BrokerProcess,
                                                                                   pki: Pki, tmp_path) -> None:
    host, port = address(guarded, "SSL")
    for payload in (frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3),
                    b"\x16\x03\x01\x02\x00" + bytes(range(256)) * 2, b"GET / HTTP/1.1\r\n\r\n"):
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(payload)
            assert not answers(read_all(sock))  # closed without a Kafka answer
    guarded.wait_for_log("on listener SSL failed")
    no_cert = ssl.create_default_context(cafile=str(pki.ca_file))
    foreign = Pki(tmp_path / "foreign")
    other = ssl.create_default_context(cafile=str(pki.ca_file))
    chain, key = foreign.client_certificate("mallory")
    other.load_cert_chain(str(chain), str(key))
    expired = ssl.create_default_context(cafile=str(pki.ca_file))
    chain, key = pki.client_certificate("lapsed", not_after=datetime.datetime.now(datetime.timezone.utc)
                                        - datetime.timedelta(days=1))
    expired.load_cert_chain(str(chain), str(key))
    for context in (no_cert, other, expired):
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with socket.create_connection((host, port), timeout=10) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                    tls.sendall(frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3))
                    if not tls.recv(4):
                        raise ConnectionError("closed")
    line = guarded.wait_for_log("TLS handshake with 127.0.0.1:")
    assert "listener SSL" in line
    guarded.wait_for_log("certificate has expired")
    served(guarded, pki)


def test_a_tls_client_on_the_plaintext_port_is_told_apart(guarded: BrokerProcess, pki: Pki) -> None:
    host, port = address(guarded, "PLAINTEXT")
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with socket.create_connection((host, port), timeout=10) as raw:
            context.wrap_socket(raw, server_hostname="127.0.0.1")
    line = guarded.wait_for_log("it looks like a TLS handshake")
    assert "socket.request.max.bytes" in line
    served(guarded, pki)


def test_sasl_listener_closes_a_request_before_authentication(guarded: BrokerProcess, pki: Pki) -> None:
    host, port = address(guarded, "SASL_PLAINTEXT")
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3, 1)
                     + frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9, 2))
        got = answers(read_all(sock))
    assert [struct.unpack_from(">i", a)[0] for a in got] == [1]  # ApiVersions answered, Metadata not: closed
    guarded.wait_for_log("Metadata (API key 3) waiting for SaslHandshake, before SASL authentication completed")
    with socket.create_connection((host, port), timeout=10) as sock:  # SaslHandshake, then anything but SASL
        sock.sendall(frame(SaslHandshakeRequest(mechanism="PLAIN"), 1, 1)
                     + frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3, 2))
        assert len(answers(read_all(sock))) == 1
    served(guarded, pki)


def _authenticate_raw(broker: BrokerProcess, mechanism: str, token: bytes) -> tuple[list[bytes], float]:
    host, port = address(broker, "SASL_PLAINTEXT")
    with socket.create_connection((host, port), timeout=10) as sock:
        began = time.monotonic()
        sock.sendall(frame(SaslHandshakeRequest(mechanism=mechanism), 1, 1)
                     + frame(SaslAuthenticateRequest(auth_bytes=token), 1, 2))
        got = answers(read_all(sock))
        return got, time.monotonic() - began


def test_an_unknown_mechanism_is_answered_with_the_enabled_ones_after_the_delay(guarded: BrokerProcess) -> None:
    from kafka.protocol.sasl import SaslHandshakeResponse

    got, took = _authenticate_raw(guarded, "GSSAPI", b"x")
    assert len(got) == 1 and took >= DELAY_MS / 1000 * 0.9  # the handshake's answer only, after the delay
    answer = SaslHandshakeResponse.decode(got[0][4:], version=1)
    assert answer.error_code == 33 and answer.mechanisms == ["PLAIN", "SCRAM-SHA-512"]
    guarded.wait_for_log("unsupported mechanism 'GSSAPI' (enabled: PLAIN, SCRAM-SHA-512)")


def test_a_wrong_password_gets_sasl_authentication_failed_after_the_delay(guarded: BrokerProcess) -> None:
    from kafka.protocol.sasl import SaslAuthenticateResponse

    got, took = _authenticate_raw(guarded, "PLAIN", b"\x00alice\x00not-her-password")
    assert len(got) == 2 and took >= DELAY_MS / 1000 * 0.9
    answer = SaslAuthenticateResponse.decode(got[1][4:], version=1)
    assert answer.error_code == 58 and answer.error_message == "Authentication failed: Invalid username or password"
    line = guarded.wait_for_log("(principal User:alice, mechanism PLAIN)")
    assert "authentication failed on listener SASL_PLAINTEXT from 127.0.0.1:" in line
    assert "not-her-password" not in guarded.log_text()


def test_oversized_and_truncated_sasl_frames_are_closed(guarded: BrokerProcess, pki: Pki) -> None:
    host, port = address(guarded, "SASL_PLAINTEXT")
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(frame(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1) + struct.pack(">i", 600_000)
                     + b"\x00\x24\x00\x01" + b"x" * 1000)
        assert len(answers(read_all(sock))) == 1  # the handshake's answer, then the close
    guarded.wait_for_log("request before authentication size 600000 is outside 8..524288 (sasl.server.max.receive"
                         ".size)")
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(frame(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1) + struct.pack(">i", 200) + b"\x00\x24")
        sock.shutdown(socket.SHUT_WR)
        assert len(answers(read_all(sock))) == 1
    guarded.wait_for_log("closed in the middle of a request")
    served(guarded, pki)
