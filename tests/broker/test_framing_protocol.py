"""The receive path of the Kafka server: frames split or merged arbitrarily by TCP arrive whole and in order."""

from __future__ import annotations

import asyncio
import random
import struct

from kelp.broker.kafka.server import STAGING_BYTES, KafkaServer, _Connection


class _FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closed = False
        self.reading = True

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def write(self, data) -> None:
        self.written.append(bytes(data))

    def writelines(self, list_of_data) -> None:
        self.written.append(b"".join(bytes(d) for d in list_of_data))

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def _frames(sizes: list[int]) -> tuple[bytes, list[bytes]]:
    bodies = [struct.pack(">hhi", 0, 9, i) + bytes([i % 251]) * (n - 8) for i, n in enumerate(sizes)]
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies), bodies


def _feed(conn: _Connection, data: bytes, chunks: list[int]) -> None:
    pos = 0
    for n in chunks:
        while n and pos < len(data):
            buf = conn.get_buffer(-1)
            take = min(n, len(buf), len(data) - pos)
            assert take > 0
            buf[:take] = data[pos : pos + take]
            conn.buffer_updated(take)
            pos += take
            n -= take


async def test_frames_survive_any_split_and_large_ones_get_their_own_buffer(monkeypatch) -> None:
    server = KafkaServer(host="127.0.0.1", port=0, max_request_bytes=10 << 20)
    seen: list[memoryview] = []

    def dispatch(frame: memoryview, peer: str, **_: object):
        seen.append(frame)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result([struct.pack(">i", len(frame))])
        return fut

    server.dispatch = dispatch  # type: ignore[method-assign]
    sizes = [8, 100, STAGING_BYTES - 4, STAGING_BYTES * 3 + 17, 9, 1 << 20, 8, 70_000]
    data, bodies = _frames(sizes)
    rng = random.Random(7)
    for chunking in ([len(data)], [1] * 300 + [len(data)], [rng.randint(1, 200_000) for _ in range(200)]):
        seen.clear()
        conn = _Connection(server)
        transport = _FakeTransport()
        conn.connection_made(transport)
        _feed(conn, data, chunking)
        assert [bytes(f) for f in seen] == bodies
        assert all(not f.readonly for f in seen)  # the request owns a writable frame
        conn.eof_received()
        await asyncio.wait_for(conn.writer.task, 5)
        assert b"".join(transport.written) == b"".join(struct.pack(">i", n) for n in sizes)
        assert transport.closed


async def test_oversized_or_undersized_frame_closes_after_answering_earlier_requests(caplog) -> None:
    server = KafkaServer(host="127.0.0.1", port=0, max_request_bytes=1000)

    def dispatch(frame: memoryview, peer: str, **_: object):
        fut = asyncio.get_running_loop().create_future()
        fut.set_result([b"ok"])
        return fut

    server.dispatch = dispatch  # type: ignore[method-assign]
    for bad in (1001, 7, -1):
        conn = _Connection(server)
        transport = _FakeTransport()
        conn.connection_made(transport)
        good, _ = _frames([20])
        _feed(conn, good + struct.pack(">i", bad) + b"x" * 50, [len(good) + 54])
        await asyncio.wait_for(conn.writer.task, 5)
        assert transport.written == [b"ok"] and transport.closed
        assert f"request size {bad} is outside 8..1000" in caplog.text


async def test_connections_share_staging_and_keep_only_their_incomplete_frame() -> None:
    """Reads of several connections interleave through one staging buffer; none mixes up another's bytes."""
    server = KafkaServer(host="127.0.0.1", port=0, max_request_bytes=10 << 20)
    seen: dict[str, list[bytes]] = {}

    def dispatch(frame: memoryview, peer: str, **_: object):
        seen.setdefault(peer, []).append(bytes(frame))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    server.dispatch = dispatch  # type: ignore[method-assign]
    conns, streams = [], []
    for i in range(3):
        conn = _Connection(server)
        conn.connection_made(_FakeTransport())
        conn.peer = f"client-{i}"
        conns.append(conn)
        data, bodies = _frames([8 + i, 300, STAGING_BYTES - 4, 9, STAGING_BYTES + 50, 40_000 + i])
        streams.append((data, bodies))
    assert all(c._tail == b"" for c in conns)  # connected, nothing read: no receive buffer of its own
    rng = random.Random(11)
    positions = [0, 0, 0]
    while any(positions[i] < len(streams[i][0]) for i in range(3)):
        i = rng.randrange(3)
        data = streams[i][0]
        if positions[i] == len(data):
            continue
        buf = conns[i].get_buffer(-1)
        take = min(len(buf), rng.randint(1, 5_000), len(data) - positions[i])
        buf[:take] = data[positions[i] : positions[i] + take]
        conns[i].buffer_updated(take)
        positions[i] += take
    for i, conn in enumerate(conns):
        assert seen[f"client-{i}"] == streams[i][1]
        assert conn._tail == b"" and conn._frame is None  # every frame whole: nothing held between reads
        conn.abort()
