"""Kelp's client connections over TLS and SASL, both kinds alike, and Kafka client properties read as Kafka's are.

A scripted broker on 127.0.0.1 speaks TLS with a trustme certificate and answers SaslHandshake and
SaslAuthenticate with the broker's own SASL servers (`kelp.security`): PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 authenticate and the request after them is answered; a session lifetime makes the connection
re-authenticate before it runs out, on the same connection; a wrong password, a mechanism the broker does not
enable, a server that does not know the credential and a certificate the client does not trust each fail with
an error naming the broker, and nothing is retried behind the caller's back.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from kelp.kafka_client import (
    AsyncConnection,
    AuthenticationFailed,
    BlockingConnection,
    BrokerUnavailable,
    ConnectionSecurity,
    SaslCredentials,
    connection_security,
)
from kelp.kafka_client.sasl import authentication
from kelp.security.plain import PlainServer
from kelp.security.sasl import SaslAuthenticationError, SaslServer
from kelp.security.scram import ScramMechanism, make_credential
from kelp.security.scram_exchange import ScramServer
from tests.support.fake_kafka_broker import FakeBroker, Received
from tests.support.tls_files import Pki

pytestmark = pytest.mark.timeout(60)

USERS = {"alice": "alice-secret"}
CREDENTIALS = {(m.mechanism_name, "alice"): make_credential("alice-secret", m, 4096) for m in ScramMechanism}


class SaslBroker:
    """Answers SASL requests with the broker's SASL servers (one per connection), anything else with a heartbeat."""

    def __init__(self, mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), *,
                 lifetime_ms: int = 0, server: Callable[[str], SaslServer] | None = None) -> None:
        self.mechanisms = mechanisms
        self.lifetime_ms = lifetime_ms
        self.server_for = server or _server
        self.exchanges: list[str] = []
        self._server: SaslServer | None = None

    def __call__(self, seen: Received) -> object:
        if seen.api_key == 17:
            mechanism = seen.request.mechanism
            if mechanism not in self.mechanisms:
                return SaslHandshakeResponse(error_code=33, mechanisms=list(self.mechanisms))
            self._server = self.server_for(mechanism)
            self.exchanges.append(mechanism)
            return SaslHandshakeResponse(error_code=0, mechanisms=list(self.mechanisms))
        if seen.api_key == 36:
            assert self._server is not None
            try:
                token = self._server.evaluate(bytes(seen.request.auth_bytes))
            except SaslAuthenticationError as exc:
                return SaslAuthenticateResponse(error_code=58, error_message=exc.client_message(
                    self._server.mechanism), auth_bytes=b"", session_lifetime_ms=0)
            lifetime = self.lifetime_ms if self._server.complete else 0
            return SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=token,
                                            session_lifetime_ms=lifetime)
        return HeartbeatResponse(throttle_time_ms=0, error_code=0)


def _server(mechanism: str) -> SaslServer:
    if mechanism == "PLAIN":
        return PlainServer(USERS)
    return ScramServer(ScramMechanism.from_name(mechanism), lambda user: CREDENTIALS.get((mechanism, user)))


def heartbeat() -> HeartbeatRequest:
    return HeartbeatRequest(group_id="g", generation_id=1, member_id="m", group_instance_id=None)


async def request(kind: str, port: int, security: ConnectionSecurity, *, count: int = 1, pause_s: float = 0.0,
                  ) -> list[int]:
    """`count` heartbeats over one connection of `kind`; their error codes."""
    if kind == "blocking":
        conn = BlockingConnection("127.0.0.1", port, client_id="t", timeout_s=10, security=security)

        def run() -> list[int]:
            out = []
            for i in range(count):
                if i:
                    time.sleep(pause_s)
                out.append(conn.request(heartbeat(), 4).error_code)
            conn.close()
            return out

        return await asyncio.to_thread(run)
    aconn = AsyncConnection("127.0.0.1", port, client_id="t", timeout_s=10, security=security)
    try:
        out = []
        for i in range(count):
            if i:
                await asyncio.sleep(pause_s)
            out.append((await aconn.request(heartbeat(), 4)).error_code)
        return out
    finally:
        await aconn.close()


@pytest.fixture(params=["blocking", "asyncio"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def server_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pki.broker_file))
    return context


def client_context(pki: Pki) -> ssl.SSLContext:
    return connection_security({"security.protocol": "SSL", "ssl.truststore.location": str(pki.ca_file)}).ssl_context


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_sasl_ssl_authenticates_then_serves(kind: str, mechanism: str, pki: Pki) -> None:
    script = SaslBroker()
    broker = await FakeBroker(script, ssl_context=server_context(pki)).start()
    try:
        security = ConnectionSecurity(client_context(pki), SaslCredentials(mechanism, "alice", "alice-secret"))
        assert security.protocol == "SASL_SSL"
        assert await request(kind, broker.port, security, count=2) == [0, 0]
        assert script.exchanges == [mechanism] and broker.connections == 1
        assert [r.api_key for r in broker.received][0] == 17
    finally:
        await broker.stop()


async def test_a_session_lifetime_makes_the_connection_reauthenticate_in_place(kind: str) -> None:
    script = SaslBroker(lifetime_ms=400)  # re-authenticate at 85%: after 340 ms
    broker = await FakeBroker(script).start()
    try:
        security = ConnectionSecurity(None, SaslCredentials("SCRAM-SHA-512", "alice", "alice-secret"))
        assert await request(kind, broker.port, security, count=3, pause_s=0.25) == [0, 0, 0]
        assert script.exchanges == ["SCRAM-SHA-512", "SCRAM-SHA-512"] and broker.connections == 1
    finally:
        await broker.stop()


@pytest.mark.parametrize(("credentials", "expected"), [
    (SaslCredentials("PLAIN", "alice", "wrong"), "Invalid username or password"),
    (SaslCredentials("SCRAM-SHA-512", "alice", "wrong"), "refused SASL/SCRAM-SHA-512 authentication as alice"),
    (SaslCredentials("SCRAM-SHA-512", "mallory", "x"), "refused SASL/SCRAM-SHA-512 authentication as mallory"),
])
async def test_wrong_credentials_fail_without_retry(kind: str, credentials: SaslCredentials, expected: str) -> None:
    broker = await FakeBroker(SaslBroker()).start()
    try:
        with pytest.raises(AuthenticationFailed, match=expected) as info:
            await request(kind, broker.port, ConnectionSecurity(None, credentials))
        assert info.value.address == broker.address and info.value.code == 58
        assert "wrong" not in str(info.value)
        assert [r.api_key for r in broker.received if r.api_key == 12] == []  # nothing but SASL was sent
    finally:
        await broker.stop()


async def test_a_mechanism_the_broker_does_not_enable_is_named(kind: str) -> None:
    broker = await FakeBroker(SaslBroker(("SCRAM-SHA-512",))).start()
    try:
        with pytest.raises(AuthenticationFailed, match=r"refused SASL/PLAIN: .* \(it enables SCRAM-SHA-512\)"):
            await request(kind, broker.port, ConnectionSecurity(None, SaslCredentials("PLAIN", "alice", "x")))
    finally:
        await broker.stop()


class ImpostorScram:
    """A server that does not know alice's credential but answers as if it did: its signature cannot verify."""

    mechanism = "SCRAM-SHA-256"
    complete = False

    def __init__(self) -> None:
        self.step = 0

    def evaluate(self, token: bytes) -> bytes:
        self.step += 1
        if self.step == 1:
            nonce = token.decode().split("r=", 1)[1]
            return f"r={nonce}xyz,s={base64.b64encode(b'salt').decode()},i=4096".encode()
        self.complete = True
        return b"v=" + base64.b64encode(b"\x00" * 32)

    @property
    def outcome(self) -> object:
        raise AssertionError


@pytest.mark.parametrize("first", ["impostor", "greedy"])
async def test_a_scram_server_must_prove_it_knows_the_credential(kind: str, first: str) -> None:
    class Greedy(ImpostorScram):
        def evaluate(self, token: bytes) -> bytes:
            nonce = token.decode().split("r=", 1)[1]
            return f"r={nonce}xyz,s=c2FsdA==,i=10000000".encode()  # ten million iterations of the client's CPU

    factory = ImpostorScram if first == "impostor" else Greedy
    broker = await FakeBroker(SaslBroker(server=lambda m: factory())).start()  # type: ignore[arg-type,return-value]
    try:
        message = "signature does not verify" if first == "impostor" else "10000000 iterations"
        with pytest.raises(AuthenticationFailed, match=message):
            await request(kind, broker.port,
                          ConnectionSecurity(None, SaslCredentials("SCRAM-SHA-256", "alice", "alice-secret")))
    finally:
        await broker.stop()


async def test_an_untrusted_certificate_fails_the_tls_handshake(kind: str, pki: Pki, tmp_path: Path) -> None:
    other = Pki(tmp_path / "other")
    broker = await FakeBroker(SaslBroker(), ssl_context=server_context(other)).start()
    try:
        with pytest.raises(BrokerUnavailable, match=rf"TLS handshake with broker at {broker.address} failed: "
                                                    r".*CERTIFICATE_VERIFY_FAILED"):
            await request(kind, broker.port, ConnectionSecurity(client_context(pki)))
    finally:
        await broker.stop()


def test_the_exchange_is_the_same_generator_for_both_connections() -> None:
    steps = authentication(SaslCredentials("PLAIN", "alice", "alice-secret"), address="b:1")
    handshake, version = next(steps)
    assert (handshake.mechanism, version) == ("PLAIN", 1)
    auth, version = steps.send(SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]))
    assert bytes(auth.auth_bytes) == b"\x00alice\x00alice-secret" and version == 1
    with pytest.raises(StopIteration) as done:
        steps.send(SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=b"", session_lifetime_ms=9))
    assert done.value.value == 9


def test_client_properties_java_and_librdkafka_names(pki: Pki) -> None:
    chain, key = pki.client_certificate("alice")
    java = connection_security({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
                            'password="a \\"quoted\\" secret";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
        "ssl.endpoint.identification.algorithm": ""})
    assert java.protocol == "SASL_SSL" and java.sasl == SaslCredentials("SCRAM-SHA-512", "alice", 'a "quoted" secret')
    assert java.ssl_context is not None and not java.ssl_context.check_hostname
    assert "secret" not in repr(java)
    rdkafka = connection_security({"security.protocol": "ssl", "ssl.ca.location": str(pki.ca_file),
                                   "ssl.certificate.location": str(chain), "ssl.key.location": str(key)})
    assert rdkafka.protocol == "SSL" and rdkafka.ssl_context is not None and rdkafka.ssl_context.check_hostname
    assert connection_security({}).protocol == "PLAINTEXT"
    plain = connection_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                                 "sasl.username": "bob", "sasl.password": "pw"})
    assert plain.sasl == SaslCredentials("PLAIN", "bob", "pw") and plain.ssl_context is None


@pytest.mark.parametrize(("props", "named"), [
    ({"security.protocol": "TLS"}, "kafka.security.protocol"),
    ({"security.protocol": "SASL_SSL"}, "kafka.sasl.mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "kafka.sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI", "sasl.username": "a",
      "sasl.password": "b"}, "kafka.sasl.mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}, "token provider"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "kafka.ssl.truststore.type"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent.pem"}, "kafka.ssl.truststore.location"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
     "kafka.ssl.endpoint.identification.algorithm"),
])
def test_bad_client_properties_are_named(props: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        connection_security(props, prefix="kafka.")
