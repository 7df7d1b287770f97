"""`event.loop`: the broker on uvloop's loop serves what it serves on asyncio's (broker/event_loop.py).

Why: uvloop is a drop-in loop, but three things the broker did held only on asyncio's, each seen failing here
on the old code with `event.loop=uvloop`: uvloop has no `loop.sendfile` (every fetch answer with a file range
raised NotImplementedError in the writer task: a consumer read nothing), its transports are no
`asyncio.Transport` instances (the HTTP listener's hand-over asserted it: every HTTP connection was reset), and
it starts reading a new connection at once, so a ClientHello could be read before `start_tls` took the
transport (a quarter of the TLS handshakes then waited out their 10 s timeout). One broker on uvloop with
PLAINTEXT, SSL and SASL_SSL listeners takes a produce and a consume over each, many TLS handshakes, HTTP,
and stops on SIGTERM flushing its logs; the TLS hand-over itself is attacked in-process on both loops with the
ClientHello read before the upgrade, every time. The rest of the suite runs on asyncio's loop (the default);
`KELP_EVENT_LOOP=uvloop make test` runs every broker process of it on uvloop.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka.protocol.metadata import MetadataRequest

from kelp.broker import event_loop
from kelp.broker.kafka.tls_upgrade import EarlyBytes, start_tls
from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError
from kelp.kafka_client import BlockingConnection, ConnectionSecurity, SaslCredentials, connection_security
from tests.support.broker_process import BrokerProcess
from tests.support.secure_clients import ClientAuth, round_trip
from tests.support.tls_files import PLAIN_JAAS, Pki

uvloop = pytest.importorskip("uvloop")  # the `uvloop` extra; the test extras install it

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]


# -- the setting --------------------------------------------------------------------------------------------------


def test_the_setting_is_validated_and_resolved() -> None:
    assert BrokerConfig.load(overrides={"event.loop": "UVLOOP"})["event.loop"] == "uvloop"
    assert BrokerConfig.load(overrides={})["event.loop"] == "asyncio"
    with pytest.raises(ConfigError, match="event.loop.*expected one of asyncio, uvloop, auto"):
        BrokerConfig.load(overrides={"event.loop": "trio"})
    assert event_loop.resolve("auto") == "uvloop"  # installed here
    loop = event_loop.new_event_loop("uvloop")
    try:
        assert event_loop.loop_name(loop) == "uvloop"
    finally:
        loop.close()


def test_uvloop_asked_for_but_missing_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_loop, "uvloop_installed", lambda: False)
    with pytest.raises(ConfigError, match=r"uvloop is not installed \(pip install 'kelp\[uvloop\]'\)"):
        event_loop.resolve("uvloop")
    assert event_loop.resolve("auto") == "asyncio"


# -- the TLS hand-over, attacked: the ClientHello is read before start_tls, every time ----------------------------


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


async def _upgrade_after_the_client_hello(pki: Pki) -> bytes:
    """A server that holds the raw connection until the client's first bytes were read, then upgrades it."""
    loop = asyncio.get_running_loop()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(pki.broker_file)
    read_first = asyncio.Event()
    upgraded: list[asyncio.Task[asyncio.Transport | None]] = []

    class Seen(EarlyBytes):
        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            read_first.set()

    class Server(_Echo):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            raw: asyncio.Transport = transport  # type: ignore[assignment]
            early = Seen(self)
            early.transport = raw
            raw.set_protocol(early)

            async def upgrade() -> asyncio.Transport | None:
                await read_first.wait()  # the ClientHello is in `early`, read from the socket
                tls = await start_tls(raw, self, early, server_ctx, timeout_s=10)
                assert tls is not None
                self.transport = tls
                return tls
            upgraded.append(loop.create_task(upgrade()))

    server = await loop.create_server(Server, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        client_ctx = ssl.create_default_context(cafile=str(pki.ca_file))
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="127.0.0.1"), 15)
        writer.write(b"ping over tls")
        echoed = await asyncio.wait_for(reader.readexactly(13), 15)
        writer.close()
        await asyncio.wait_for(asyncio.gather(*upgraded), 15)
        return echoed
    finally:
        server.close()


@pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"])
def test_a_client_hello_read_before_the_upgrade_reaches_the_handshake(
        tmp_path: Path, loop_factory: Callable[[], asyncio.AbstractEventLoop]) -> None:
    pki = Pki(tmp_path / "pki")
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        assert runner.run(_upgrade_after_the_client_hello(pki)) == b"ping over tls"


# -- a broker on uvloop ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def uvloop_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("uvloop-broker"), settings={
        "event.loop": "uvloop",
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(pki.broker_file), "ssl.truststore.location": str(pki.ca_file),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
        "http.authentication.methods": "none",
    })
    bp.start()
    yield bp
    bp.kill()


def _listener(bp: BrokerProcess, name: str) -> str:
    assert bp.ready_info is not None
    return str(bp.ready_info["listeners"][name])


def test_the_broker_runs_the_loop_it_was_given(uvloop_broker: BrokerProcess) -> None:
    assert uvloop_broker.ready_info is not None
    assert uvloop_broker.ready_info["event_loop"] == "uvloop"


@pytest.mark.parametrize("name", ["PLAINTEXT", "SSL", "SASL_SSL"])
def test_produce_and_consume_over_each_listener(uvloop_broker: BrokerProcess, pki: Pki, name: str) -> None:
    """PLAINTEXT fetch answers carry file ranges: uvloop has no sendfile, so they are copied through the
    transport; under TLS they always were."""
    auth = ClientAuth(name, ca=pki.ca_file if name != "PLAINTEXT" else None,
                      **({"mechanism": "PLAIN", "username": "alice", "password": "alice-secret"}
                         if name == "SASL_SSL" else {}))
    round_trip("confluent-kafka", _listener(uvloop_broker, name), f"uvloop-{name.lower()}", auth, count=200)


def test_a_fetch_answer_with_file_ranges_arrives_whole(uvloop_broker: BrokerProcess) -> None:
    """2 MiB of 1 KiB records read back in order: answers far above fetch.ZERO_COPY_MIN_BYTES, whose log ranges
    asyncio sends with sendfile, copied through uvloop's transport."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic, count = "uvloop-ranges", 2000
    values = [b"%06d" % i + bytes(1018) for i in range(count)]
    producer = Producer({"bootstrap.servers": uvloop_broker.bootstrap, "linger.ms": 50})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": uvloop_broker.bootstrap, "group.id": "uvloop-ranges",
                         "enable.auto.commit": False, "fetch.max.bytes": 4 << 20})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(60):  # bounded: a second per poll at most
            for msg in consumer.consume(num_messages=count, timeout=1.0):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
            if len(got) >= count:
                break
    finally:
        consumer.close()
    assert got == values


def test_every_tls_handshake_completes(uvloop_broker: BrokerProcess, pki: Pki) -> None:
    """Twenty connections in a row, each a handshake and a Metadata answer within the client's 10 s."""
    tls = connection_security({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file)})
    plain = SaslCredentials("PLAIN", "alice", "alice-secret")
    for i in range(10):
        for name, security in (("SSL", tls), ("SASL_SSL", ConnectionSecurity(tls.ssl_context, plain))):
            host, port = _listener(uvloop_broker, name).rsplit(":", 1)
            with BlockingConnection(host, int(port), client_id=f"hs-{i}", timeout_s=10, security=security) as conn:
                assert conn.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9).brokers


def test_http_is_served(uvloop_broker: BrokerProcess) -> None:
    with urllib.request.urlopen(uvloop_broker.http_url + "/healthz", timeout=10) as resp:
        assert resp.status == 200
    with urllib.request.urlopen(uvloop_broker.http_url + "/metrics", timeout=10) as resp:
        assert b"kelp_event_loop_lag_seconds_count" in resp.read()  # the loop monitor runs on uvloop too


def test_sigterm_stops_it_and_flushes_the_logs(uvloop_broker: BrokerProcess) -> None:
    """Last in this module: the signal handler on uvloop, then the flush in a worker thread (`to_thread`)."""
    assert uvloop_broker.terminate(timeout=60) == 0
    assert "all segments flushed and closed" in uvloop_broker.log_text()
