"""Upgrading an accepted connection to TLS with `loop.start_tls` without losing what the client sent first.

Why a module of its own: a TLS listener accepts a plain TCP connection, admits it, then upgrades it with
`start_tls` (connection.py). asyncio's loop starts reading a new connection only after the callbacks queued by
its `connection_made`, so `start_tls` always takes the transport before a byte is read. uvloop's starts reading
as `connection_made` returns, and a client's ClientHello (sent right after the connect) can be read before the
task that calls `start_tls` runs: read by the Kafka protocol, it is lost to the handshake, which then waits out
its timeout (a quarter of the handshakes on a loaded machine). Here the bytes read before the upgrade are
kept by a holding protocol, which pauses reading, and handed to the TLS protocol once `start_tls` has started
it, before any later read, so the handshake sees the byte stream whole on either loop.

This module must never parse or answer the bytes it holds.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, cast

__all__ = ["EarlyBytes", "hold", "start_tls"]


class EarlyBytes(asyncio.Protocol):
    """The raw transport's protocol from `connection_made` until `start_tls` takes it: holds what is read (and
    pauses reading), and passes the end of the connection on to the connection's protocol."""

    def __init__(self, owner: asyncio.BaseProtocol) -> None:
        self.owner = owner
        self.data = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # not called: set on a live transport
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.data += data
        if self.transport is not None:
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        return False  # a client gone before its handshake: the transport closes and `connection_lost` follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.connection_lost(exc)

    def hand_over(self, raw: asyncio.Transport) -> None:
        """The held bytes to the protocol `start_tls` put on `raw` (its TLS protocol), as if just read."""
        data, self.data = bytes(self.data), bytearray()
        protocol: Any = raw.get_protocol()
        if not data or protocol is self or raw.is_closing():
            return
        view = memoryview(data)
        if hasattr(protocol, "get_buffer"):  # asyncio's and uvloop's TLS protocols are buffered ones
            while view:
                buf = memoryview(protocol.get_buffer(len(view)))
                n = min(len(buf), len(view))
                buf[:n] = view[:n]
                protocol.buffer_updated(n)
                view = view[n:]
        else:
            protocol.data_received(data)


def hold(raw: asyncio.Transport, owner: asyncio.BaseProtocol) -> EarlyBytes:
    """Put a holding protocol on `raw` (until `start_tls` replaces it) for `owner`, the connection's protocol."""
    early = EarlyBytes(owner)
    early.transport = raw
    raw.set_protocol(early)
    return early


async def start_tls(raw: asyncio.Transport, protocol: asyncio.BaseProtocol, early: EarlyBytes,
                    context: ssl.SSLContext, *, timeout_s: float) -> asyncio.Transport | None:
    """`loop.start_tls(raw, protocol, ...)` as a server, with what `early` held fed to the TLS protocol first.

    `start_tls`, in its first step, pauses `raw`, puts its TLS protocol on it and queues two callbacks: that
    protocol's `connection_made`, then `raw.resume_reading()`. The hand-over is queued behind that step, so it
    queues itself behind those two callbacks, in the same pass of the loop: after the TLS protocol started and
    before the loop reads the socket again."""
    loop = asyncio.get_running_loop()
    upgrade = loop.create_task(loop.start_tls(raw, protocol, context, server_side=True,
                                              ssl_handshake_timeout=timeout_s))
    loop.call_soon(loop.call_soon, early.hand_over, raw)
    return await upgrade
