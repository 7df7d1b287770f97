"""The Kafka listener's memory and connection bounds (issue #11 item 6).

A client must not decide how much memory the broker uses: a declared frame
costs only the bytes that arrived, receive buffers and unanswered requests
draw on the `queued.max.request.bytes` pool (a connection that needs more
stops reading), silent connections are closed after
`connections.max.idle.ms`, and connections beyond `max.connections` /
`max.connections.per.ip` are closed right after accept. The last test is
the issue's acceptance: 200 connections declaring 100 MiB frames and
trickling bytes keep a real broker's RSS under 512 MiB while another client
produces and consumes.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import socket
import struct
import subprocess
import time
import urllib.request

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

from kelp.broker.kafka.server import STAGING_BYTES, KafkaServer, _Connection
from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError, ErrorCode
from tests.broker.helpers import batch_headers, create_topic_wire, fetch_all_batches, produce, raw_fetch, raw_fetch_on
from tests.broker.test_framing_protocol import _FakeTransport
from tests.support.kafka_wire import WireClient, make_batch

MiB = 1 << 20


def _feed(conn: _Connection, data: bytes, *, step: int = 1 << 30) -> int:
    """Deliver bytes as the event loop does (get_buffer, fill, buffer_updated), `step` at most per
    read, until all are in or the connection pauses reading; returns how many went in."""
    pos = 0
    while pos < len(data) and conn.transport.reading:
        buf = conn.get_buffer(-1)
        take = min(len(buf), step, len(data) - pos)
        buf[:take] = data[pos : pos + take]
        del buf  # the loop's view dies with the read
        conn.buffer_updated(take)
        pos += take
    return pos


def _frame(size: int, fill: int = 7) -> bytes:
    body = struct.pack(">hhi", 0, 9, size) + bytes([fill]) * (size - 8)
    return struct.pack(">i", size) + body


class _Requests:
    """A stand-in dispatcher: each frame becomes a request the test answers when it likes."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.futures: list[asyncio.Future] = []

    def __call__(self, frame: memoryview, peer: str, **_: object) -> asyncio.Future:
        self.frames.append(bytes(frame))
        fut = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


def _server(**kwargs) -> tuple[KafkaServer, _Requests]:
    server = KafkaServer(host="127.0.0.1", port=0, max_request_bytes=200 * MiB, **kwargs)
    requests = _Requests()
    server.dispatch = requests  # type: ignore[method-assign]
    return server, requests


def _connect(server: KafkaServer, peer: str = "client") -> tuple[_Connection, _FakeTransport]:
    conn = _Connection(server)
    transport = _FakeTransport()
    conn.connection_made(transport)
    conn.peer = peer
    return conn, transport


async def test_declared_frame_costs_only_the_bytes_that_arrived() -> None:
    server, requests = _server(queued_max_request_bytes=128 * MiB)
    conns = [_connect(server, f"c{i}")[0] for i in range(50)]
    head = _frame(100 * MiB)[:14]  # the size, the header and 4 body bytes
    for conn in conns:
        assert _feed(conn, head) == 14
    for conn in conns:
        assert conn._frame is not None and len(conn._frame) <= 2 * STAGING_BYTES
    assert server.pool.used <= 50 * 2 * STAGING_BYTES
    # and one that does send its 100 MiB is served whole, its buffer having grown as bytes came
    conn = conns[0]
    data = _frame(100 * MiB)
    assert _feed(conn, data[14:], step=3 * MiB) == len(data) - 14
    assert requests.frames == [data[4:]]
    assert server.pool.used >= 100 * MiB  # charged until answered
    requests.futures[0].set_result(None)
    await asyncio.sleep(0)
    assert server.pool.used <= 49 * 2 * STAGING_BYTES
    for c in conns:
        c.abort()


async def test_pool_exhausted_stops_reading_one_frame_at_a_time_beyond_it_and_small_requests_pass() -> None:
    limit = 4 * MiB
    server, requests = _server(queued_max_request_bytes=limit)
    pool = server.pool
    names = "abcd"
    conns = dict(zip(names, (_connect(server, n) for n in names), strict=True))
    frames = {n: _frame(6 * MiB, i) for i, n in enumerate(names)}
    sent = dict.fromkeys(names, 0)
    # a takes the pool's share for large frames; b cannot grow and takes the one overdraft;
    # c and d then wait with their reading paused (having read one staging buffer at most)
    sent["a"] = _feed(conns["a"][0], frames["a"][: 3 * MiB], step=256 << 10)
    sent["b"] = _feed(conns["b"][0], frames["b"][: 1 * MiB], step=256 << 10)
    for n in "cd":
        sent[n] = _feed(conns[n][0], frames[n], step=256 << 10)
        assert sent[n] <= STAGING_BYTES and not conns[n][1].reading
    assert sent["a"] == 3 * MiB and sent["b"] == 1 * MiB and pool.overdraft is conns["b"][0]
    assert pool.used <= limit
    # a request that fits staging still gets through: the last eighth of the pool is for those
    small = _frame(1000, 9)
    s, ts = _connect(server, "small")
    assert _feed(s, small) == len(small) and ts.reading
    assert requests.frames == [small[4:]]
    requests.futures[0].set_result(None)
    await asyncio.sleep(0)
    # every frame completes, one at a time beyond the pool, as answered ones release their bytes
    answered = 1
    for _ in range(100):
        for n in names:
            conn, transport = conns[n]
            if transport.reading and sent[n] < len(frames[n]):
                sent[n] += _feed(conn, frames[n][sent[n] :], step=1 * MiB)
            assert pool.used <= limit + 4 * 1024  # what is counted against the pool ...
            assert pool.over <= 6 * MiB  # ... and the one frame let beyond it
        if answered == len(requests.futures):
            if all(sent[n] == len(frames[n]) for n in names):
                break
            continue
        requests.futures[answered].set_result(None)
        answered += 1
        await asyncio.sleep(0)
    assert sorted(requests.frames[1:]) == sorted(f[4:] for f in frames.values())
    assert pool.used == 0 and pool.over == 0 and pool.overdraft is None and pool.waiting == 0
    assert pool.peak <= limit + 6 * MiB + 4 * 1024


async def test_unanswered_small_requests_fill_the_pool_then_reading_stops_until_one_is_answered() -> None:
    limit = 256 << 10
    server, requests = _server(queued_max_request_bytes=limit)
    conn, transport = _connect(server, "pipeliner")
    other, other_transport = _connect(server, "other")
    frames = b"".join(_frame(60_000, i) for i in range(10))
    sent = _feed(conn, frames, step=STAGING_BYTES)
    assert not transport.reading  # stopped reading once the pool was full ...
    assert len(requests.frames) == 4 and limit <= server.pool.used <= limit + 1024  # ... or 1 KiB more
    # another connection, reading while the pool is full, reads at most 1 KiB and stops too
    assert _feed(other, _frame(60_000, 99)) == 1024 and not other_transport.reading
    requests.futures[0].set_result(None)
    await asyncio.sleep(0)
    assert transport.reading and other_transport.reading
    answered = 1
    while sent < len(frames) or answered < len(requests.futures):
        sent += _feed(conn, frames[sent:], step=STAGING_BYTES)
        if answered < len(requests.futures):
            requests.futures[answered].set_result(None)
            answered += 1
            await asyncio.sleep(0)
        assert server.pool.used <= limit + 2 * 1024
    assert requests.frames == [_frame(60_000, i)[4:] for i in range(10)]
    assert server.pool.used == 1024  # the other connection's incomplete frame, all that is left
    other.abort()
    conn.abort()


async def test_closed_connection_returns_its_bytes_and_wakes_waiters() -> None:
    server, requests = _server(queued_max_request_bytes=2 * MiB)
    (a, _ta), (b, _tb), (c, tc) = _connect(server, "a"), _connect(server, "b"), _connect(server, "c")
    _feed(a, _frame(10 * MiB)[: 1 * MiB], step=128 << 10)
    _feed(b, _frame(10 * MiB)[: 1 * MiB], step=128 << 10)  # the overdraft
    _feed(c, _frame(10 * MiB)[: 100], step=128 << 10)
    assert not tc.reading
    b.connection_lost(None)  # the overdraft's owner goes away mid-frame
    assert server.pool.overdraft is not b
    a.connection_lost(None)
    assert tc.reading
    c.connection_lost(None)
    assert server.pool.used == 0 and server.pool.waiting == 0


async def _serve(**kwargs) -> KafkaServer:
    """A real listener on loopback that answers every frame with 4 bytes."""
    server = KafkaServer(host="127.0.0.1", port=0, max_request_bytes=10 * MiB, **kwargs)

    def dispatch(frame: memoryview, peer: str, **_: object) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        fut.set_result([struct.pack(">i", 0)])
        return fut

    server.dispatch = dispatch  # type: ignore[method-assign]
    await server.start()
    return server


async def _closed_by_peer(reader: asyncio.StreamReader, timeout: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(100), timeout) == b""
    except (asyncio.TimeoutError, ConnectionError):
        return False


async def test_idle_and_stalled_mid_frame_connections_are_closed(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="kelp.broker.kafka")
    server = await _serve(connections_max_idle_ms=400)
    try:
        port = server.port
        idle_r, idle_w = await asyncio.open_connection("127.0.0.1", port)
        stuck_r, stuck_w = await asyncio.open_connection("127.0.0.1", port)
        stuck_w.write(_frame(5 * MiB)[:100])
        busy_r, busy_w = await asyncio.open_connection("127.0.0.1", port)
        started = time.monotonic()
        # `busy` sends a request every 100 ms for 1.5 s: never idle, never closed
        for _ in range(15):
            busy_w.write(_frame(20))
            assert await asyncio.wait_for(busy_r.readexactly(4), 5) == b"\0\0\0\0"
            await asyncio.sleep(0.1)
        assert await _closed_by_peer(idle_r, 5)
        assert await _closed_by_peer(stuck_r, 5)
        assert time.monotonic() - started < 6
        assert "idle for 400 ms (connections.max.idle.ms)" in caplog.text
        assert "in the middle of a 5242880-byte request (96 bytes received" in caplog.text
        busy_w.write(_frame(20))
        assert await asyncio.wait_for(busy_r.readexactly(4), 5) == b"\0\0\0\0"
        assert server.pool.used == 0
        for w in (idle_w, stuck_w, busy_w):
            w.close()
    finally:
        await server.stop()


async def test_connections_beyond_max_connections_per_ip_are_closed_at_accept(caplog) -> None:
    server = await _serve(max_connections_per_ip=2)
    try:
        kept = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        assert await _closed_by_peer(r, 5)
        assert "max.connections.per.ip=2 reached (2 open)" in caplog.text
        # another address is not affected
        other_r, other_w = await asyncio.open_connection("127.0.0.1", server.port, local_addr=("127.0.0.2", 0))
        other_w.write(_frame(20))
        assert await asyncio.wait_for(other_r.readexactly(4), 5) == b"\0\0\0\0"
        for _r, w2 in kept + [(r, w), (other_r, other_w)]:
            w2.close()
    finally:
        await server.stop()


async def _until(cond) -> None:
    while not cond():
        await asyncio.sleep(0.01)


def test_bounds_are_validated_with_kafka_names() -> None:
    cfg = BrokerConfig.load(env={})
    assert cfg["queued.max.request.bytes"] == 128 * MiB
    assert cfg["connections.max.idle.ms"] == 600000
    assert cfg["max.connections"] == 10000
    assert cfg["max.connections.per.ip"] == 2**31 - 1
    assert (cfg["socket.send.buffer.bytes"], cfg["socket.receive.buffer.bytes"]) == (102400, -1)
    assert BrokerConfig.load(env={}, overrides={"queued.max.request.bytes": "-1"})["queued.max.request.bytes"] == -1
    for key, bad in (("queued.max.request.bytes", "0"), ("connections.max.idle.ms", "-5"),
                     ("max.connections", "0"), ("max.connections.per.ip", "lots"),
                     ("socket.send.buffer.bytes", "0"), ("socket.receive.buffer.bytes", "-2")):
        with pytest.raises(ConfigError, match=f"'{key}'"):
            BrokerConfig.load(env={}, overrides={key: bad})


# -- acceptance: a real broker process --------------------------------------------------------


def _socket_buffers(broker_port: int) -> dict[int, tuple[int, int]]:
    """The broker's established connections on `broker_port`: client port -> (SO_SNDBUF, SO_RCVBUF), `ss`'s
    skmem tb and rb."""
    out = subprocess.run(["ss", "-tmnH", "state", "established", f"( sport = :{broker_port} )"],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    sizes = {}
    for m in re.finditer(r":(\d+)\s*\n?\s*skmem:\(([^)]*)\)", out):
        fields = dict(re.findall(r"([a-z_]+)(\d+)", m.group(2)))
        sizes[int(m.group(1))] = (int(fields["tb"]), int(fields["rb"]))
    return sizes


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read the broker's socket buffers")
def test_a_consumer_connection_gets_socket_send_buffer_bytes_a_follower_keeps_the_kernels(broker_factory) -> None:
    """socket.send.buffer.bytes is set on a connection at its first consumer fetch (Linux reports twice the
    size set); a connection that fetches as a follower, or never fetches, keeps the kernel's autotuned one.
    socket.receive.buffer.bytes is every accepted connection's, from the listening socket."""
    b = broker_factory(settings={"socket.send.buffer.bytes": 65536, "socket.receive.buffer.bytes": 49152})
    assert create_topic_wire(b.bootstrap, "sized") == 0
    port = int(b.bootstrap.rpartition(":")[2])
    with WireClient(b.bootstrap) as consumer, WireClient(b.bootstrap) as follower, \
            WireClient(b.bootstrap) as other:
        assert raw_fetch_on(consumer, "sized", replica_id=-1).responses[0].partitions[0].error_code == 0
        # broker 7 is no replica of the topic: refused, and the connection is still a follower's
        refused = raw_fetch_on(follower, "sized", replica_id=7).responses[0].partitions[0].error_code
        assert refused == ErrorCode.NOT_LEADER_OR_FOLLOWER
        other.request(ApiVersionsRequest(), 0)
        sizes = _socket_buffers(port)
        assert sizes[consumer.sock.getsockname()[1]][0] == 2 * 65536
        # unlocked, the kernel grows a loopback connection's buffer at once (about 2 MSS x the initial window)
        assert sizes[follower.sock.getsockname()[1]][0] > 4 * 65536
        assert sizes[other.sock.getsockname()[1]][0] > 4 * 65536
        assert {rb for _tb, rb in sizes.values()} == {2 * 49152}


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.clients
def test_200_connections_declaring_100mib_frames_keep_rss_bounded_while_others_are_served(broker_factory) -> None:
    b = broker_factory()  # default listener bounds
    assert create_topic_wire(b.bootstrap, "served") == 0
    pid = b.proc.pid
    rss_start = _rss_bytes(pid)
    host, port = b.bootstrap.split(":")
    attackers = []
    header = struct.pack(">i", 100 * MiB) + struct.pack(">hhih", 0, 9, 1, -1)
    burst = b"x" * MiB  # 200 MiB in all: more than the pool, so it must stop reading some of them
    for _ in range(200):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.setblocking(False)
        try:
            s.send(header + burst)
        except BlockingIOError:
            pass
        attackers.append(s)
    peak = _rss_bytes(pid)
    produced = []
    deadline = time.monotonic() + 60
    with WireClient(b.bootstrap) as client:
        for i in range(20):
            for s in attackers:  # trickle
                try:
                    s.send(b"y" * 16)
                except (BlockingIOError, ConnectionError):
                    pass
            batch = make_batch([(b"k%d" % i, b"v" * 1000)])
            assert produce(client, "served", batch) == (0, i)
            produced.append(batch)
            fetched = raw_fetch(b.bootstrap, "served", 0, i).responses[0].partitions[0]  # a consumer
            assert fetched.error_code == 0 and batch_headers(fetched.records)[0][0] == i
            peak = max(peak, _rss_bytes(pid))
            time.sleep(0.05)
            assert time.monotonic() < deadline
        resp = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        assert resp.error_code == 0
    assert len(batch_headers(fetch_all_batches(b.bootstrap, "served", 0))) == 20
    peak = max(peak, _rss_bytes(pid))
    print(f"broker RSS: {rss_start / MiB:.0f} MiB before, peak {peak / MiB:.0f} MiB with 200 trickling 100 MiB frames")
    assert peak < 512 * MiB, f"broker RSS {peak / MiB:.0f} MiB"
    assert b.running
    scraped = urllib.request.urlopen(f"{b.http_url}/metrics", timeout=10).read().decode()
    pool_used = float(re.search(r"^kelp_kafka_request_pool_used_bytes (\S+)$", scraped, re.M).group(1))
    assert 100 * MiB < pool_used <= 128 * MiB + 100 * MiB + 200 * 1024  # the pool, the overdraft, 1 KiB reads
    assert re.search(r"^kelp_kafka_connections 200\.0$", scraped, re.M)
    for s in attackers:
        s.close()


async def test_a_handler_can_give_its_frame_back_to_the_pool_before_answering() -> None:
    """A produce parked for acks=all releases its frame once appended (Kafka clears a parked produce's
    records): waiting requests must not fill the pool, or follower fetches would stop being read."""
    server = KafkaServer(host="127.0.0.1", port=0, max_request_bytes=10 * MiB, queued_max_request_bytes=MiB)
    parked: list[tuple[asyncio.Future, object]] = []

    def dispatch(frame: memoryview, peer: str, *, release=None, **_: object) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        parked.append((fut, release))
        return fut

    server.dispatch = dispatch  # type: ignore[method-assign]
    conn, transport = _connect(server)
    _feed(conn, _frame(300_000, 1) + _frame(300_000, 2))
    assert len(parked) == 2 and server.pool.used == 2 * 300_000
    parked[0][1]()  # the handler is done with the bytes, its answer is still pending
    assert server.pool.used == 300_000 and conn._in_flight == 2
    parked[0][1]()  # twice is once
    parked[0][0].set_result([struct.pack(">i", 0)])
    parked[1][0].set_result([struct.pack(">i", 0)])
    await asyncio.sleep(0)
    assert server.pool.used == 0 and conn._in_flight == 0  # nothing released twice, nothing left
    conn.abort()
