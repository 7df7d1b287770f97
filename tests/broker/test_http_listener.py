"""The HTTP listener listens from the start and builds its aiohttp app at the first connection (issue 38).

What must hold (`kelp.broker.http_listener`): no connection is refused or lost while the app does not exist
yet. The adversary's interleavings: requests that arrive while the build is still running, from several
connections at once, some whole, some in two parts around the build's end, one client that gives up and
closes before the build ends; the build runs once whatever the number of such connections; a build that fails
closes them and stops the broker; a stop before any connection leaves no port open; a connection accepted
while a prepared build ends (asyncio makes its protocol at the accept and calls `connection_made` a loop step
later) is served: it was left parked forever before `waiting` handed such a connection over at once.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from aiohttp import web

from kelp.broker.http_listener import HttpListener
from tests.authorization.harness import InProcessBroker

REQUEST = b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


async def _ping(request: web.Request) -> web.Response:
    return web.Response(text="pong")


class _Build:
    """A build the test releases: counts its calls, holds until `go` is set."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls = 0
        self.go = asyncio.Event()
        self.fail = fail

    async def __call__(self) -> web.AppRunner:
        self.calls += 1
        await asyncio.wait_for(self.go.wait(), 10)
        if self.fail:
            raise ImportError("no module named 'aiohttp' (the test's)")
        app = web.Application()
        app.router.add_get("/ping", _ping)
        runner = web.AppRunner(app)
        await runner.setup()
        return runner


async def _exchange(port: int, *, rest_after: asyncio.Event | None = None) -> bytes:
    """One request; with `rest_after`, its first half now and the rest once the event is set."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    cut = len(REQUEST) // 2 if rest_after is not None else len(REQUEST)
    writer.write(REQUEST[:cut])
    await writer.drain()
    if rest_after is not None:
        await rest_after.wait()
        writer.write(REQUEST[cut:])
        await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def _gives_up(port: int) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(REQUEST[:10])
    await writer.drain()
    writer.close()


async def test_requests_sent_while_the_app_is_built_are_answered_and_it_is_built_once() -> None:
    build = _Build()
    stopped: list[bool] = []
    listener = HttpListener(build, on_failure=lambda: stopped.append(True))
    port = await listener.start("127.0.0.1", 0, None)
    try:
        clients = [asyncio.create_task(_exchange(port, rest_after=build.go if i % 2 else None)) for i in range(4)]
        await _gives_up(port)
        for _ in range(200):  # every client accepted and parked (bounded)
            if len(listener._waiting) == 5:
                break
            await asyncio.sleep(0.01)
        assert len(listener._waiting) == 5 and build.calls == 1 and listener.runner is None
        build.go.set()
        answers = await asyncio.wait_for(asyncio.gather(*clients), 10)
        assert all(a.startswith(b"HTTP/1.1 200") and a.endswith(b"pong") for a in answers), answers
        # A connection after the build goes to aiohttp directly.
        assert (await _exchange(port)).endswith(b"pong")
        assert build.calls == 1 and listener.runner is not None and not stopped
    finally:
        await listener.cleanup()


async def test_a_build_that_fails_closes_the_waiting_connections_and_stops_the_broker() -> None:
    build = _Build(fail=True)
    stopped: list[bool] = []
    listener = HttpListener(build, on_failure=lambda: stopped.append(True))
    port = await listener.start("127.0.0.1", 0, None)
    try:
        client = asyncio.create_task(_exchange(port))
        for _ in range(200):
            if listener._waiting:
                break
            await asyncio.sleep(0.01)
        build.go.set()
        try:  # closed, not left hanging: an end of stream, or a reset (its request was never read)
            assert await asyncio.wait_for(client, 10) == b""
        except ConnectionResetError:
            pass
        assert stopped == [True] and listener.runner is None
    finally:
        await listener.cleanup()


async def test_a_stop_before_any_connection_closes_the_port() -> None:
    build = _Build()
    listener = HttpListener(build, on_failure=lambda: None)
    port = await listener.start("127.0.0.1", 0, None)
    await listener.cleanup()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert build.calls == 0


async def test_a_broker_builds_its_http_app_at_the_first_request(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path, **{"authorizer.class.name": ""}) as b:
        listener = b.broker.http_listener
        assert listener is not None and listener.runner is None  # started and serving Kafka without it
        reader, writer = await asyncio.open_connection("127.0.0.1", b.broker.http_port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert listener.runner is not None


async def test_prepare_builds_before_any_connection_and_only_once() -> None:
    build = _Build()
    listener = HttpListener(build, on_failure=lambda: None)
    port = await listener.start("127.0.0.1", 0, None)
    try:
        listener.prepare()
        client = asyncio.create_task(_exchange(port))  # arrives while the prepared build still runs
        build.go.set()
        assert (await asyncio.wait_for(client, 10)).endswith(b"pong")
        assert build.calls == 1 and listener.runner is not None
    finally:
        await listener.cleanup()
