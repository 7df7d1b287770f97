"""Per-connection budgets of the Kafka listener (issue 33, items 2 and 5).

Item 2: connections that have not authenticated draw on a small pool of their own, not on the
`queued.max.request.bytes` pool authenticated clients need, brokers' connections on another one, and a SASL
connection that does not authenticate in time is closed. The attack: partial frames on unauthenticated
connections filled the shared pool and every authenticated client stopped being read.

Item 5: Kafka's connection limits with Kafka's behaviour at the limit: at `max.connections` the least recently
used idle client connection is closed to make room (the inter-broker listener exempt), `max.connections.per.ip`
with its overrides, per-listener limits and `max.connection.creation.rate`. The attack: one client holding every
slot with idle sockets locked every other client out.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from kelp.broker.kafka.limits import UNBOUNDED, ConnectionQuota, MemoryPool
from kelp.broker.kafka.server import KafkaServer, _Connection
from kelp.broker.kafka.session import State
from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError
from kelp.security.principal import KafkaPrincipal
from tests.broker.test_framing_protocol import _FakeTransport
from tests.broker.test_listener_bounds import _closed_by_peer, _feed, _frame, _Requests, _serve
from tests.broker.test_sasl_session import security as sasl_security

KiB, MiB = 1 << 10, 1 << 20
BROKER = KafkaPrincipal.user("admin")  # the inter-broker user of the SASL listener's JAAS config


def _pair(*, pool_bytes: int, unauthenticated_bytes: int) -> tuple[KafkaServer, KafkaServer, _Requests]:
    """A SASL listener and a PLAINTEXT one sharing the broker's pools, as a broker's listeners do."""
    pool = MemoryPool(pool_bytes)
    sasl = KafkaServer(host="127.0.0.1", port=0, max_request_bytes=100 * MiB, security=sasl_security(), pool=pool)
    # set as attributes, so the same test runs (and fails) against a listener that had no such pools
    sasl.unauthenticated_pool = MemoryPool(unauthenticated_bytes)
    sasl.broker_pool = MemoryPool(pool_bytes)
    sasl._broker_principals = lambda principal: principal == BROKER
    plain = KafkaServer(host="127.0.0.1", port=0, max_request_bytes=100 * MiB, pool=pool, quota=sasl.quota)
    requests = _Requests()
    sasl.dispatch = plain.dispatch = requests  # type: ignore[method-assign]
    return sasl, plain, requests


def _connect(server: KafkaServer) -> tuple[_Connection, _FakeTransport]:
    conn = _Connection(server)
    transport = _FakeTransport()
    conn.connection_made(transport)
    return conn, transport


async def test_unauthenticated_partial_frames_cannot_take_the_clients_pool() -> None:
    sasl, plain, requests = _pair(pool_bytes=1 * MiB, unauthenticated_bytes=256 * KiB)
    attackers = [_connect(sasl) for _ in range(40)]
    for conn, _t in attackers:  # 30 KB of a 60 KB frame each (under sasl.server.max.receive.size), then silence
        _feed(conn, _frame(60_000)[:30_000])
    assert sasl.pool.used == 0, "unauthenticated bytes were charged to the clients' pool"
    assert sasl.unauthenticated_pool.used <= 256 * KiB + 40 * KiB  # a read while full is cut to 1 KiB
    assert any(not t.reading for _c, t in attackers)  # the attackers wait for their own pool
    # an authenticated client (here on the PLAINTEXT listener) is read and served as before
    honest, transport = _connect(plain)
    for _ in range(5):
        _feed(honest, _frame(200))
        assert transport.reading
    assert len(requests.frames) == 5
    for conn, _t in attackers + [(honest, transport)]:
        conn.abort()


async def test_a_connection_moves_to_its_principals_pool_once_authenticated() -> None:
    sasl, _plain, requests = _pair(pool_bytes=1 * MiB, unauthenticated_bytes=256 * KiB)
    who: dict[int, KafkaPrincipal] = {}

    def authenticate(frame: memoryview, peer: str, *, session, **kw):  # a successful SaslAuthenticate
        session.state, session.principal = State.AUTHENTICATED, who[id(session)]
        return requests(frame, peer, **kw)

    sasl.dispatch = authenticate  # type: ignore[method-assign]
    (alice, _ta), (broker, _tb) = _connect(sasl), _connect(sasl)
    assert alice.pool is sasl.unauthenticated_pool
    for conn, principal in ((alice, KafkaPrincipal.user("alice")), (broker, BROKER)):
        assert conn.session is not None
        who[id(conn.session)] = principal
        # SaslAuthenticate and part of the next frame in one read: the held part moves with the connection
        _feed(conn, _frame(100) + _frame(40_000)[:1000])
    assert alice.pool is sasl.pool and broker.pool is sasl.broker_pool
    assert sasl.pool.used == 1000 and sasl.broker_pool.used == 1000
    assert sasl.unauthenticated_pool.used == 200  # the two SaslAuthenticate frames, until answered
    for fut in requests.futures:
        fut.set_result(None)
    await asyncio.sleep(0)
    assert sasl.unauthenticated_pool.used == 0  # each frame went back to the pool it was charged to
    alice.abort()
    broker.abort()
    await asyncio.sleep(0)


async def test_a_sasl_connection_that_does_not_authenticate_in_time_is_closed(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="kelp.broker.kafka")
    server = KafkaServer(host="127.0.0.1", port=0, max_request_bytes=MiB, security=sasl_security(),
                         authentication_timeout_ms=300)
    server.dispatch = _Requests()  # type: ignore[method-assign]
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await _closed_by_peer(reader, 5)
        assert "not authenticated within 300 ms (kelp.authentication.timeout.ms)" in caplog.text
        writer.close()
    finally:
        await server.stop()


# -- connection limits -------------------------------------------------------------------------------------------
async def test_one_client_holding_every_slot_does_not_lock_the_others_out(caplog) -> None:
    caplog.set_level(logging.INFO, logger="kelp.broker.kafka")
    server = await _serve(max_connections=20)
    try:
        hog = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(20)]
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(_frame(20))
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"\0\0\0\0"  # served
        assert await _closed_by_peer(hog[0][0], 5)  # the least recently used idle one made room
        assert "to make room for a new one (max.connections)" in caplog.text
        assert server.quota.total <= 20
        for _r, w in hog + [(reader, writer)]:
            w.close()
    finally:
        await server.stop()


async def test_busy_connections_are_never_evicted_and_the_new_one_is_refused(caplog) -> None:
    server = KafkaServer(host="127.0.0.1", port=0, max_request_bytes=MiB, max_connections=3)
    requests = _Requests()  # requests never answered: every connection stays busy
    server.dispatch = requests  # type: ignore[method-assign]
    await server.start()
    try:
        busy = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
        for _r, w in busy:
            w.write(_frame(20))
        for _ in range(500):
            if len(requests.frames) == 3:
                break
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await _closed_by_peer(reader, 5)
        assert "max.connections=3 reached (3 open, none idle to close)" in caplog.text
        for _r, w in busy:
            assert not w.is_closing()
        for _r, w in busy + [(reader, writer)]:
            w.close()
    finally:
        await server.stop()


async def test_per_ip_limit_and_its_overrides() -> None:
    server = await _serve(max_connections_per_ip=1)
    server.quota.per_ip_overrides = {"127.0.0.2": 2}
    try:
        first = await asyncio.open_connection("127.0.0.1", server.port)
        second = await asyncio.open_connection("127.0.0.1", server.port)
        assert await _closed_by_peer(second[0], 5)
        others = [await asyncio.open_connection("127.0.0.1", server.port, local_addr=("127.0.0.2", 0))
                  for _ in range(2)]
        for r, w in others:
            w.write(_frame(20))
            assert await asyncio.wait_for(r.readexactly(4), 5) == b"\0\0\0\0"
        for _r, w in [first, second, *others]:
            w.close()
    finally:
        await server.stop()


class _Conn:
    """A connection as the quota sees it."""

    def __init__(self, last_active: float, rank: int | None = 1) -> None:
        self.last_active = last_active
        self.rank = rank
        self.evicted: str | None = None

    def eviction_rank(self) -> int | None:
        return self.rank

    def evict(self, limit: str) -> None:
        self.evicted = limit


def test_eviction_order_listener_limits_and_the_inter_broker_exemption() -> None:
    quota = ConnectionQuota(3, UNBOUNDED, listener_max={"CLIENT": 2}, protected="REPLICATION")
    idle, fresh, broker = _Conn(1.0), _Conn(5.0, rank=0), _Conn(0.0, rank=None)
    assert quota.admit("10.0.0.1", "CLIENT", idle) is None
    assert quota.admit("10.0.0.2", "CLIENT", fresh) is None
    assert quota.admit("10.0.0.3", "REPLICATION", broker) is None
    # the listener's limit: its not-yet-authenticated connection goes first, however recent
    newer = _Conn(6.0)
    assert quota.admit("10.0.0.4", "CLIENT", newer) is None
    assert fresh.evicted == "listener.name.client.max.connections" and idle.evicted is None
    # broker-wide: a client listener evicts the LRU idle client (never the broker's connection)
    assert quota.admit("10.0.0.5", "OTHER", _Conn(7.0)) is None
    assert idle.evicted == "max.connections" and broker.evicted is None
    # nothing left to evict: a client is refused, the inter-broker listener is admitted anyway (KIP-402)
    for conn in list(quota.open):
        if isinstance(conn, _Conn):
            conn.rank = None
    assert quota.admit("10.0.0.6", "OTHER", _Conn(8.0)) == "max.connections"
    assert quota.admit("10.0.0.7", "REPLICATION", _Conn(9.0)) is None
    assert quota.total == 4
    quota.leave("10.0.0.3", "REPLICATION", broker)
    assert quota.total == 3


def test_connection_creation_rate() -> None:
    now = [100.0]
    quota = ConnectionQuota(UNBOUNDED, UNBOUNDED, creation_rate=2, listener_rates={"EXTERNAL": 1},
                            protected="REPLICATION", monotonic=lambda: now[0])
    assert [quota.admit(f"10.0.0.{i}", "CLIENT") for i in range(3)] == [None, None, "max.connection.creation.rate"]
    assert quota.admit("10.0.1.1", "REPLICATION") is None  # the inter-broker listener is exempt
    now[0] += 0.5
    assert quota.admit("10.0.0.9", "CLIENT") is None
    assert quota.admit("10.0.2.1", "EXTERNAL") == "max.connection.creation.rate"  # the broker-wide rate is spent
    now[0] += 1.0
    assert quota.admit("10.0.2.1", "EXTERNAL") is None
    assert quota.admit("10.0.2.2", "EXTERNAL") == "listener.name.external.max.connection.creation.rate"


def test_the_limits_take_kafkas_keys() -> None:
    cfg = BrokerConfig.load(env={}, overrides={
        "listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "listener.name.external.max.connections": 100, "listener.name.external.max.connection.creation.rate": 5,
        "max.connections.per.ip.overrides": "10.0.0.1:200,[::1]:50", "max.connection.creation.rate": 30})
    assert cfg.per_listener("max.connections") == {"EXTERNAL": 100}
    assert cfg.per_listener("max.connection.creation.rate") == {"EXTERNAL": 5}
    assert cfg["max.connections.per.ip.overrides"] == "10.0.0.1:200,::1:50"
    assert cfg["max.connection.creation.rate"] == 30
    assert cfg["kelp.authentication.timeout.ms"] == 10000
    for key, bad in (("max.connections.per.ip.overrides", "10.0.0.1"), ("max.connection.creation.rate", "0"),
                     ("listener.name.external.max.connections", "none")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            BrokerConfig.load(env={}, overrides={key: bad})


async def test_the_broker_wires_the_pools_and_limits(tmp_path) -> None:
    from tests.authorization.harness import InProcessBroker

    async with InProcessBroker(tmp_path, **{"max.connections.per.ip.overrides": "127.0.0.9:3",
                                            "kelp.unauthenticated.queued.max.request.bytes": 65536}) as b:
        server = b.broker.kafka_server
        assert server is not None
        assert server.quota.limit_for_ip("127.0.0.9") == 3
        assert server.unauthenticated_pool.limit == 65536
        assert server.broker_pool is not server.pool and server.broker_pool.limit == server.pool.limit
        assert server._broker_principals(KafkaPrincipal.user("admin"))  # a super user
        assert not server._broker_principals(KafkaPrincipal.user("alice"))



def test_an_address_connection_creation_rate_quota() -> None:
    """`kafka-configs --entity-type ips --entity-name A --add-config connection_creation_rate=N` (KIP-612): an
    address's own quota, else the default address's; the inter-broker listener is exempt."""
    now = [100.0]
    rates = {"10.0.0.1": 2.0, "default": 1.0}
    quota = ConnectionQuota(UNBOUNDED, UNBOUNDED, protected="REPLICATION", monotonic=lambda: now[0],
                            ip_rates=lambda ip: rates.get(ip, rates.get("default")))
    assert [quota.admit("10.0.0.1", "CLIENT") for _ in range(3)] == [None, None, "connection_creation_rate"]
    assert [quota.admit("10.0.0.2", "CLIENT") for _ in range(2)] == [None, "connection_creation_rate"]
    assert quota.admit("10.0.0.2", "REPLICATION") is None
    now[0] += 0.5  # a token back for 10.0.0.1 (2/s), half of one for 10.0.0.2 (1/s)
    assert quota.admit("10.0.0.1", "CLIENT") is None and quota.admit("10.0.0.2", "CLIENT") is not None
    now[0] += 0.5
    assert quota.admit("10.0.0.2", "CLIENT") is None
    del rates["default"]
    assert [quota.admit("10.0.0.3", "CLIENT") for _ in range(5)] == [None] * 5  # no quota: unbounded


async def test_the_broker_takes_the_ip_quota_from_the_metadata(tmp_path) -> None:
    from kafka.protocol.admin import AlterClientQuotasRequest

    from tests.authorization.harness import InProcessBroker

    A = AlterClientQuotasRequest.EntryData
    async with InProcessBroker(tmp_path) as b:
        server = b.broker.kafka_server
        assert server is not None and server.quota.ip_rates("127.0.0.1") is None
        answer = await b.call(AlterClientQuotasRequest(validate_only=False, entries=[A(
            entity=[A.EntityData(entity_type="ip", entity_name=None)],
            ops=[A.OpData(key="connection_creation_rate", value=3.0, remove=False)])]), 1)
        assert answer.entries[0].error_code == 0
        assert server.quota.ip_rates("127.0.0.1") == 3.0
        results = [server.quota.admit("127.0.0.1", server.listener) for _ in range(4)]
        assert results[:3] == [None] * 3 and results[3] == "connection_creation_rate"
