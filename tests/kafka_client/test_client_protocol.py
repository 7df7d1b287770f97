"""The I/O-free protocol core under both connections, attacked with bytes alone: no socket, no loop, no thread.

A reply arrives in every fragmentation (byte by byte, at random cuts, several replies in one chunk) and is
paired with its request; a reply out of turn, one for a correlation id no request has, and one with no
request in flight are each named; a frame above the limit is refused from its four-byte prefix, before any
of it is kept; a stream that ends mid-reply says how much had come; the SASL exchange runs on replies alone
and a refusal or a forged server signature mid-handshake is `AuthenticationFailed`; ApiVersions picks the
highest common version or names the gap. After an error the protocol stays broken until `reset()`, and the
correlation ids go on counting across it.
"""

from __future__ import annotations

import random
import ssl
import struct

import pytest
from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from kelp.kafka_client import AuthenticationFailed, BadResponse, BrokerTimeout, BrokerUnavailable, SaslCredentials
from kelp.kafka_client.errors import ErrorResponse
from kelp.kafka_client.protocol import Authenticated, ClientProtocol, Negotiated, Response
from kelp.security.scram import ScramMechanism, make_credential
from kelp.security.scram_exchange import ScramServer
from tests.support.fake_kafka_broker import Received, decode_request, encode_response

VERSION = 4
ADDRESS = "b1:9092"


def heartbeat() -> HeartbeatRequest:
    return HeartbeatRequest(group_id="g", generation_id=1, member_id="m", group_instance_id=None)


def answer(correlation_id: int, code: int = 0) -> bytes:
    return encode_response(HeartbeatResponse(throttle_time_ms=0, error_code=code), VERSION, correlation_id)


def sent(protocol: ClientProtocol) -> list[Received]:
    """The requests the protocol queued, decoded as a broker reads them."""
    data, out = protocol.bytes_to_send(), []
    while data:
        (size,) = struct.unpack_from(">i", data, 0)
        out.append(decode_request(data[4:4 + size]))
        data = data[4 + size:]
    return out


def cuts(data: bytes, rng: random.Random) -> list[bytes]:
    """`data` in random pieces, some a single byte, some spanning frames."""
    pieces, at = [], 0
    while at < len(data):
        step = rng.choice((1, 2, 3, rng.randint(1, 64)))
        pieces.append(data[at:at + step])
        at += step
    return pieces


def feed(protocol: ClientProtocol, pieces: list[bytes]) -> list[object]:
    events: list[object] = []
    for piece in pieces:
        events.extend(protocol.receive(piece))
    return events


@pytest.mark.parametrize("seed", range(20))
def test_pipelined_replies_in_any_fragmentation_pair_with_their_requests(seed: int) -> None:
    rng = random.Random(seed)
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    ids = [protocol.send(heartbeat(), VERSION) for _ in range(5)]
    assert [r.correlation_id for r in sent(protocol)] == ids == [1, 2, 3, 4, 5]
    replies = b"".join(answer(cid, code=cid) for cid in ids)  # code = id: each reply is told apart
    events = feed(protocol, cuts(replies, rng))
    assert [(e.correlation_id, e.value.error_code) for e in events if isinstance(e, Response)] == \
        [(cid, cid) for cid in ids]
    assert protocol.in_flight == 0 and protocol.bytes_wanted() == 4


def test_a_reply_fed_byte_by_byte_completes_only_on_its_last_byte() -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    cid = protocol.send(heartbeat(), VERSION)
    reply = answer(cid)
    for i, byte in enumerate(reply[:-1]):
        assert protocol.bytes_wanted() == (4 - i if i < 4 else len(reply) - i)  # never past the frame
        assert protocol.receive(bytes([byte])) == []
    (event,) = protocol.receive(reply[-1:])
    assert isinstance(event, Response) and event.correlation_id == cid and event.value.error_code == 0


def test_a_reply_out_of_turn_is_named_and_breaks_the_protocol_until_reset() -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    first, second = protocol.send(heartbeat(), VERSION), protocol.send(heartbeat(), VERSION)
    with pytest.raises(BadResponse, match=rf"broker at {ADDRESS} answered correlation id {second}, expected "
                                          rf"{first}: out of turn") as err:
        protocol.receive(answer(second))
    assert err.value.address == ADDRESS
    with pytest.raises(BadResponse, match="out of turn"):  # broken: the same error, whatever comes next
        protocol.receive(answer(first))
    with pytest.raises(BadResponse, match="out of turn"):
        protocol.send(heartbeat(), VERSION)
    protocol.reset()
    assert protocol.send(heartbeat(), VERSION) == 3  # ids go on: a late reply cannot pass for a new one's
    (event,) = protocol.receive(answer(3))
    assert isinstance(event, Response) and event.correlation_id == 3


def test_a_reply_for_an_unknown_correlation_id_is_named() -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    cid = protocol.send(heartbeat(), VERSION)
    with pytest.raises(BadResponse, match=rf"answered correlation id 77, expected {cid}: an id no request in "
                                          "flight has"):
        protocol.receive(answer(77))


def test_a_reply_with_no_request_in_flight_is_named() -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    with pytest.raises(BadResponse, match=rf"broker at {ADDRESS} answered correlation id 1 with no request in "
                                          "flight"):
        protocol.receive(answer(1))


@pytest.mark.parametrize("size", [3, -1, 1001, 1 << 31 - 1])
def test_a_frame_over_the_limit_is_refused_from_its_prefix_alone(size: int) -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t", max_response_bytes=1000)
    protocol.send(heartbeat(), VERSION)
    assert protocol.receive(struct.pack(">i", size)[:3]) == []
    with pytest.raises(BadResponse, match=rf"broker at {ADDRESS} sent a response frame of {size} bytes "
                                          r"\(a reply holds 4 to 1000\)"):
        protocol.receive(struct.pack(">i", size)[3:])  # refused before one byte of the frame is kept


@pytest.mark.parametrize(("cut", "said"), [(0, "after 0 of 4 bytes"), (2, "after 2 of 4 bytes"),
                                           (6, r"after 2 of \d+ bytes")])
def test_a_stream_that_ends_mid_reply_says_how_much_had_come(cut: int, said: str) -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    cid = protocol.send(heartbeat(), VERSION)
    if cut:
        protocol.receive(answer(cid)[:cut])
    with pytest.raises(BrokerUnavailable, match=rf"broker at {ADDRESS} closed the connection {said} of a reply"):
        protocol.receive(b"")


def test_a_stream_that_ends_while_idle_is_no_error_until_used() -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    assert protocol.receive(b"") == []
    with pytest.raises(BrokerUnavailable, match=rf"broker at {ADDRESS} closed the connection"):
        protocol.send(heartbeat(), VERSION)


CREDENTIAL = make_credential("alice-secret", ScramMechanism.SCRAM_SHA_256, 4096)


def scram_broker(protocol: ClientProtocol, server: ScramServer, *, forge: bool = False) -> list[object]:
    """Answer the protocol's SASL requests as a broker with `server` would, until it asks nothing more."""
    events: list[object] = []
    while requests := sent(protocol):
        (seen,) = requests  # one at a time: each next request waits for the reply before it
        if seen.api_key == 17:
            reply = SaslHandshakeResponse(error_code=0, mechanisms=["SCRAM-SHA-256"])
        else:
            try:
                token = server.evaluate(bytes(seen.request.auth_bytes))
            except Exception as exc:  # the server refuses: Kafka's SASL_AUTHENTICATION_FAILED
                reply = SaslAuthenticateResponse(error_code=58, error_message=str(exc), auth_bytes=b"",
                                                 session_lifetime_ms=0)
            else:
                if forge and server.complete:
                    token = b"v=" + b"AAAA" * 11
                reply = SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=token,
                                                 session_lifetime_ms=60_000 if server.complete else 0)
        events.extend(protocol.receive(encode_response(reply, seen.version, seen.correlation_id)))
    return events


def test_the_sasl_exchange_runs_on_replies_alone_and_schedules_reauthentication() -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    protocol.authenticate(SaslCredentials("SCRAM-SHA-256", "alice", "alice-secret"), now=100.0)
    assert protocol.authenticating
    with pytest.raises(RuntimeError, match="while SASL authentication is in progress"):
        protocol.send(heartbeat(), VERSION)
    events = scram_broker(protocol, ScramServer(ScramMechanism.SCRAM_SHA_256, lambda user: CREDENTIAL))
    assert events == [Authenticated(60_000)] and not protocol.authenticating
    assert not protocol.reauthentication_due(100.0 + 50.9) and protocol.reauthentication_due(100.0 + 51.0)


@pytest.mark.parametrize(("password", "forge", "named"), [
    ("wrong", False, rf"broker at {ADDRESS} refused SASL/SCRAM-SHA-256 authentication as alice"),
    ("alice-secret", True, rf"broker at {ADDRESS}: SASL/SCRAM-SHA-256: the server's signature does not verify"),
])
def test_an_authentication_failure_mid_handshake_is_named_and_sends_nothing_more(password: str, forge: bool,
                                                                                named: str) -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    protocol.authenticate(SaslCredentials("SCRAM-SHA-256", "alice", password), now=0.0)
    with pytest.raises(AuthenticationFailed, match=named) as err:
        scram_broker(protocol, ScramServer(ScramMechanism.SCRAM_SHA_256, lambda user: CREDENTIAL), forge=forge)
    assert err.value.address == ADDRESS and "wrong" not in str(err.value)
    assert protocol.bytes_to_send() == b"" and not protocol.authenticating
    with pytest.raises(AuthenticationFailed):
        protocol.send(heartbeat(), VERSION)


def test_a_stream_that_ends_mid_handshake_says_so() -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    protocol.authenticate(SaslCredentials("PLAIN", "alice", "alice-secret"), now=0.0)
    (seen,) = sent(protocol)
    protocol.receive(encode_response(SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]), 1,
                                     seen.correlation_id)[:5])
    with pytest.raises(BrokerUnavailable, match=r"closed the connection while authenticating after 1 of \d+ bytes"):
        protocol.receive(b"")


def test_api_versions_pick_the_highest_common_version_or_name_the_gap() -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    protocol.negotiate(software=("kelp-test", "9"))
    (seen,) = sent(protocol)
    assert (seen.api_key, seen.version, seen.request.client_software_name) == (18, 3, "kelp-test")
    ranges = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
              for k, lo, hi in ((1, 4, 13), (12, 0, 4))]
    reply = ApiVersionsResponse(error_code=0, api_keys=ranges, throttle_time_ms=0)
    (event,) = protocol.receive(encode_response(reply, 3, seen.correlation_id))
    assert isinstance(event, Negotiated) and event.versions == {1: (4, 13), 12: (0, 4)}
    assert protocol.version(1, 4, 16) == 13 and protocol.version(12, 0, 2) == 2
    with pytest.raises(ErrorResponse, match=rf"broker at {ADDRESS} serves api key 1 v4..v13; this client speaks "
                                            r"v0..v3") as err:
        protocol.version(1, 0, 3)
    assert err.value.code == 35
    with pytest.raises(ErrorResponse, match="serves api key 22 not at all"):
        protocol.version(22, 0, 4)


def test_api_versions_refused_is_named() -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    protocol.negotiate()
    (seen,) = sent(protocol)
    # A broker that does not serve v3 answers in v0's format, with UNSUPPORTED_VERSION and its ranges.
    reply = ApiVersionsResponse(error_code=35, api_keys=[ApiVersionsResponse.ApiVersion(
        api_key=18, min_version=0, max_version=2)])
    with pytest.raises(ErrorResponse, match=rf"broker at {ADDRESS} refused ApiVersions v3: UnsupportedVersion"):
        protocol.receive(encode_response(reply, 0, seen.correlation_id))


def test_failures_a_driver_catches_are_named_once_for_both_drivers() -> None:
    protocol = ClientProtocol(address=ADDRESS, client_id="t")
    late = protocol.failure(TimeoutError(), bound_s=0.5)
    assert isinstance(late, BrokerTimeout) and str(late) == f"broker at {ADDRESS} did not answer within 0.5s"
    slow = protocol.failure(TimeoutError(), bound_s=3, connecting="SASL_SSL")
    assert str(slow) == f"cannot connect to broker at {ADDRESS} within 3s (SASL_SSL)"
    tls = protocol.failure(ssl.SSLError(1, "bad cert"), bound_s=3, connecting="SSL")
    assert type(tls) is BrokerUnavailable and str(tls).startswith(f"TLS handshake with broker at {ADDRESS} failed")
    refused = protocol.failure(ConnectionRefusedError(111, "refused"), bound_s=3, connecting="PLAINTEXT")
    assert str(refused) == f"cannot connect to broker at {ADDRESS}: [Errno 111] refused"
    reset = protocol.failure(ConnectionResetError(104, "reset"), bound_s=3)
    assert str(reset) == f"request to broker at {ADDRESS} failed: [Errno 104] reset"
    interrupt = KeyboardInterrupt()
    assert protocol.failure(interrupt, bound_s=3) is interrupt  # a cancellation or an interrupt stays itself
