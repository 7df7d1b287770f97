"""The HTTP listener: its port bound at start, aiohttp and the routes loaded by its first connection.

Why: aiohttp (its client included, which `import aiohttp` loads), the admin API, the REST Proxy and the Schema
Registry's routes are about 15 MiB of an empty broker's memory and 0.1–0.2 s of its start (issue 38), and a
broker that nobody asks over HTTP (a plain broker, a test's, a bench's) never needs them. The port is bound
and listening from `start` on, as before (the advertised HTTP port is known at once and a connection is
never refused); the first connection accepted makes `build` run (the modules imported in a worker thread,
so the event loop keeps serving while they load; the application built on the loop), waits with its
reading paused, and is then handed to aiohttp's protocol with whatever it had sent. Every later connection
goes to aiohttp directly. In Kubernetes the first readiness probe loads it within a second of the start; a
broker that joins a cluster of several builds it at once (`prepare`), since the others call it over HTTP.

A `build` that fails (a module that does not import) is logged with its traceback, the waiting connections
are closed and `on_failure` is called (the broker stops, as it did when such a module failed its start).

This module must never import aiohttp at module level.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Awaitable, Callable, cast

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["HttpListener"]

log = logging.getLogger("kelp.broker.http")

BACKLOG = 128  # aiohttp's TCPSite's


class _Waiting(asyncio.Protocol):
    """A connection accepted before the application exists: reading paused until it is handed over."""

    def __init__(self, listener: HttpListener) -> None:
        self._listener = listener
        self.transport: asyncio.Transport | None = None
        self._received: list[bytes] = []
        self._eof = False
        self._lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream server hands its protocols a stream transport; uvloop's are not asyncio.Transport subclasses
        # (its Cython classes derive from none of asyncio's), so no isinstance check here.
        self.transport = stream = cast(asyncio.Transport, transport)
        stream.pause_reading()
        self._listener.waiting(self)

    def data_received(self, data: bytes) -> None:  # what a TLS record held past the pause
        self._received.append(data)

    def eof_received(self) -> bool:
        self._eof = True
        return True  # kept open until aiohttp has it, which then does with the end of input what it always does

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True

    def hand_over(self, factory: Callable[[], asyncio.Protocol]) -> None:
        if self._lost or self.transport is None:
            return
        protocol = factory()
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)
        for data in self._received:
            protocol.data_received(data)
        if self._eof and not protocol.eof_received():
            self.transport.close()
            return
        self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None and not self._lost:
            self.transport.close()


class HttpListener:
    """One listening HTTP port whose aiohttp runner is built on demand (`build`) and cleaned up by `cleanup`."""

    def __init__(self, build: Callable[[], Awaitable[web.AppRunner]], *, on_failure: Callable[[], None]) -> None:
        self._build = build
        self._on_failure = on_failure
        self._server: asyncio.Server | None = None
        self._waiting: list[_Waiting] = []
        self._building: asyncio.Task[web.AppRunner] | None = None
        self._factory: Callable[[], asyncio.Protocol] = lambda: _Waiting(self)
        self.runner: web.AppRunner | None = None  # once built
        self.port = 0

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> int:
        """Bind and listen (aiohttp's TCPSite's options); returns the port bound."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: self._factory(), host, port, ssl=ssl_context,
                                                backlog=BACKLOG, reuse_address=True)
        sockets = self._server.sockets
        self.port = sockets[0].getsockname()[1] if sockets else port
        return self.port

    def waiting(self, connection: _Waiting) -> None:
        # Accepted (its protocol made) before the build ended, made known (`connection_made` runs a loop step later)
        # after it: handed over now, or closed if the build failed.
        if self.runner is not None and self.runner.server is not None:
            connection.hand_over(self.runner.server)
            return
        building = self._build_started()
        if building.done():
            connection.close()
            return
        self._waiting.append(connection)

    def _build_started(self) -> asyncio.Task[web.AppRunner]:
        if self._building is None:
            self._building = asyncio.create_task(self._build_once(), name="http-listener-build")
            self._building.add_done_callback(_retrieve)  # a failure is logged by _build_once
        return self._building

    def prepare(self) -> None:
        """Build the app now, in the background, before any connection asks for it."""
        self._build_started()

    async def application(self) -> web.Application:
        """The application, built now if no connection has come yet."""
        return (await asyncio.shield(self._build_started())).app

    async def _build_once(self) -> web.AppRunner:
        try:
            runner = await self._build()
        except BaseException as exc:
            waiting, self._waiting = self._waiting, []
            for connection in waiting:
                connection.close()
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("the HTTP listener's application could not be built; stopping the broker")
                self._on_failure()
            raise
        self.runner = runner
        server = runner.server
        assert server is not None, "AppRunner.setup() ran"
        self._factory = server
        waiting, self._waiting = self._waiting, []
        for connection in waiting:
            connection.hand_over(server)
        return runner

    async def cleanup(self) -> None:
        """Stop listening, then close aiohttp's connections and the application (aiohttp's own cleanup)."""
        if self._server is not None:
            self._server.close()
        if self._building is not None and not self._building.done():
            self._building.cancel()
            await asyncio.wait({self._building})
        for connection in self._waiting:
            connection.close()
        self._waiting = []
        if self.runner is not None:
            await self.runner.cleanup()


def _retrieve(task: asyncio.Task[web.AppRunner]) -> None:
    if not task.cancelled():
        task.exception()
