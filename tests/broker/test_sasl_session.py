"""A connection's authentication state machine (`kelp.broker.kafka.session`), without sockets.

Before SASL authentication only ApiVersions and SaslHandshake, then only SaslAuthenticate (or the raw tokens
after SaslHandshake v0) are served and frames are bounded by sasl.server.max.receive.size; an unknown
mechanism and a failed exchange are answered after the failed-authentication delay and close the connection,
logged once with the peer, the listener, the mechanism and the user tried, never the password. KIP-368: the
session lifetime is announced to v1+ clients, an expired session closes at the next request, and a
re-authentication keeps the mechanism and the principal. A listener without SASL answers the SASL requests
ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import logging

import pytest

from kelp.broker.kafka.listener_security import ListenerSecurity
from kelp.broker.kafka.session import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE, Session
from kelp.config.broker import BrokerConfig
from kelp.security.scram import ScramMechanism, make_credential
from kelp.security.scram_exchange import ScramClient
from tests.support.tls_files import plain_jaas

METADATA, PRODUCE = 3, 0
ALICE = make_credential("alice-secret", ScramMechanism.SCRAM_SHA_512, 4096)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def security(**settings: object) -> ListenerSecurity:
    cfg = BrokerConfig.load(env={}, overrides={
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(
            {"admin": "admin-secret", "alice": "alice-secret"}, username="admin", password="admin-secret"),
        "connection.failed.authentication.delay.ms": 150, **settings})
    setup = cfg.listener_setup
    sec = ListenerSecurity(setup.listeners[0], setup, max_request_bytes=100 << 20)
    sec.scram_lookup = lambda user, mechanism: ALICE if (user, mechanism) == ("alice", "SCRAM-SHA-512") else None
    return sec


def scram(session: Session, user: str, password: str, *, version: int = 1) -> tuple[int, str | None, int]:
    """A whole SCRAM-SHA-512 exchange after the handshake: (error code, message, session lifetime)."""
    client = ScramClient(ScramMechanism.SCRAM_SHA_512, user, password)
    first = session.authenticate(client.first_message(), version=version)
    if first.error_code:
        return first.error_code, first.message, 0
    final = session.authenticate(client.final_message(first.token), version=version)
    if not final.error_code:
        client.verify_server_final(final.token)
    return final.error_code, final.message, final.session_lifetime_ms


def test_only_api_versions_and_the_sasl_requests_before_authentication() -> None:
    session = Session(security(), "10.0.0.1:5000")
    assert session.max_frame_bytes == 524288 and session.min_frame_bytes == 8
    assert session.refusal(API_VERSIONS, "ApiVersions") is None
    assert session.refusal(SASL_HANDSHAKE, "SaslHandshake") is None
    assert "Metadata (API key 3) waiting for SaslHandshake" in session.refusal(METADATA, "Metadata")
    assert "SaslAuthenticate" in session.refusal(SASL_AUTHENTICATE, "SaslAuthenticate")
    assert session.handshake(1, "SCRAM-SHA-512").error_code == 0
    assert session.refusal(API_VERSIONS, "ApiVersions") is not None  # Kafka: only SaslAuthenticate now
    assert session.refusal(SASL_AUTHENTICATE, "SaslAuthenticate") is None
    assert scram(session, "alice", "alice-secret") == (0, None, 0)
    assert str(session.principal) == "User:alice" and session.refusal(PRODUCE, "Produce") is None
    assert session.max_frame_bytes == 100 << 20


def test_plain_authenticates_and_a_second_authenticate_is_illegal() -> None:
    session = Session(security(), "p")
    session.handshake(1, "PLAIN")
    answer = session.authenticate(b"\x00alice\x00alice-secret", version=2)
    assert (answer.error_code, answer.close, str(session.principal)) == (0, False, "User:alice")
    again = session.authenticate(b"\x00alice\x00alice-secret", version=2)
    assert again.error_code == 34 and not again.close


def test_an_unknown_mechanism_is_answered_with_the_enabled_ones_after_the_delay(caplog) -> None:
    session = Session(security(), "10.0.0.1:5000")
    with caplog.at_level(logging.WARNING, logger="kelp.broker.kafka.auth"):
        answer = session.handshake(1, "GSSAPI")
    assert (answer.error_code, answer.close, answer.delay_s) == (33, True, 0.15)
    assert session.closing and session.refusal(API_VERSIONS, "ApiVersions") == "its authentication failed"
    assert "unsupported mechanism 'GSSAPI' (enabled: PLAIN, SCRAM-SHA-512)" in caplog.text
    assert "from 10.0.0.1:5000" in caplog.text


@pytest.mark.parametrize(("mechanism", "run", "expected"), [
    ("PLAIN", lambda s: (s.authenticate(b"\x00alice\x00nope", version=1).error_code, None),
     "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-512", lambda s: scram(s, "alice", "nope")[:2], "Invalid client credentials"),
    ("SCRAM-SHA-512", lambda s: scram(s, "mallory", "nope")[:2], "Invalid client credentials"),
])
def test_a_failed_exchange_is_logged_once_without_the_password_and_closes(caplog, mechanism, run,
                                                                         expected: str) -> None:
    session = Session(security(), "10.0.0.2:6000")
    session.handshake(1, mechanism)
    with caplog.at_level(logging.WARNING, logger="kelp.broker.kafka.auth"):
        code, _ = run(session)
    assert code == 58 and session.closing
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("kelp.")]  # not a leaked client's
    assert len(lines) == 1 and expected in lines[0] and "nope" not in lines[0], lines
    assert "on listener SASL_PLAINTEXT from 10.0.0.2:6000" in lines[0] and f"mechanism {mechanism}" in lines[0]
    assert ("principal User:alice" in lines[0]) or ("principal User:mallory" in lines[0])


def test_the_client_sees_kafkas_generic_scram_message() -> None:
    session = Session(security(), "p")
    session.handshake(1, "SCRAM-SHA-512")
    code, message, _ = scram(session, "alice", "nope")
    assert message == ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
                       "SCRAM-SHA-512")


def test_kip368_lifetime_expiry_and_reauthentication() -> None:
    clock = Clock()
    session = Session(security(**{"connections.max.reauth.ms": 60000}), "p", clock_ms=clock)
    session.handshake(1, "SCRAM-SHA-512")
    assert scram(session, "alice", "alice-secret") == (0, None, 60000)
    clock.now += 50_000
    assert session.refusal(METADATA, "Metadata") is None
    assert session.handshake(1, "SCRAM-SHA-512").error_code == 0  # re-authentication begins; requests still served
    assert session.refusal(METADATA, "Metadata") is None
    assert scram(session, "alice", "alice-secret") == (0, None, 60000)
    clock.now += 59_999
    assert session.refusal(METADATA, "Metadata") is None
    clock.now += 1
    assert "expired" in session.refusal(METADATA, "Metadata")
    assert "expired" in session.refusal(SASL_HANDSHAKE, "SaslHandshake")  # too late to re-authenticate


def test_v0_authenticate_gets_no_lifetime_but_the_session_still_expires() -> None:
    clock = Clock()
    session = Session(security(**{"connections.max.reauth.ms": 1000}), "p", clock_ms=clock)
    session.handshake(1, "PLAIN")
    assert session.authenticate(b"\x00alice\x00alice-secret", version=0).session_lifetime_ms == 0
    clock.now += 1000
    assert session.refusal(METADATA, "Metadata") is not None


def test_reauthentication_keeps_the_mechanism_and_the_principal() -> None:
    session = Session(security(), "p")
    session.handshake(1, "PLAIN")
    session.authenticate(b"\x00alice\x00alice-secret", version=1)
    assert session.handshake(1, "SCRAM-SHA-512").error_code == 34 and session.closing
    other = Session(security(), "p")
    other.handshake(1, "PLAIN")
    other.authenticate(b"\x00alice\x00alice-secret", version=1)
    other.handshake(1, "PLAIN")
    answer = other.authenticate(b"\x00admin\x00admin-secret", version=1)
    assert answer.error_code == 58 and "Cannot change principals during re-authentication" in str(answer.message)


def test_handshake_v0_switches_to_raw_tokens() -> None:
    session = Session(security(), "p")
    session.handshake(0, "PLAIN")
    assert session.raw_tokens and session.min_frame_bytes == 0
    answer = session.raw_token(b"\x00alice\x00alice-secret")
    assert answer.error_code == 0 and answer.token == b"" and not session.raw_tokens
    failed = Session(security(), "p")
    failed.handshake(0, "PLAIN")
    assert failed.raw_token(b"\x00alice\x00x").close


def test_a_listener_without_sasl_is_anonymous_and_answers_illegal_sasl_state() -> None:
    plain = ListenerSecurity.plaintext(max_request_bytes=1000)
    session = Session(plain, "p")
    assert str(session.principal) == "User:ANONYMOUS" and session.refusal(PRODUCE, "Produce") is None
    assert session.max_frame_bytes == 1000
    assert session.handshake(1, "PLAIN").error_code == 34 and not session.closing
    assert session.authenticate(b"x", version=1).error_code == 34
