"""A connection's answers, written in request order: the writer task and the transport's flow control.

Why a module of its own: the receive path (`connection.py`) reads frames and dispatches requests, each
handled in its own task; this side waits for each answer in arrival order and writes it — byte buffers in
runs, file ranges with sendfile (under TLS: read in 1 MiB chunks and written through the TLS transport) —
pausing while the transport's buffer is above its high-water mark, and closes the connection after an
answer that says so (a failed authentication's, a handler's `False`). It is mixed into the connection;
the state both sides share is declared here.

This module must never read from the socket or decode anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from typing import TYPE_CHECKING, Literal, Sequence

from .framing import Buffer, FileRange

__all__ = ["Answer", "MAX_IN_FLIGHT", "PAUSE_IN_FLIGHT", "PAUSE_POOL", "PAUSE_THROTTLE", "ResponseWriter",
           "close_buffers"]

log = logging.getLogger("kelp.broker.kafka")

MAX_IN_FLIGHT = 64
# The reasons a connection's reading is paused for (bits of its `_pause_bits`; it reads again once none is left):
PAUSE_IN_FLIGHT = 1  # MAX_IN_FLIGHT requests unanswered (this writer resumes it)
PAUSE_POOL = 2  # waiting for the memory pool (connection.py's receive path)
PAUSE_THROTTLE = 4  # over a client quota: muted for its throttle time (Kafka's KIP-219, connection_bounds.py)
# Under TLS a file range is read and encrypted in chunks of this size. asyncio's sendfile fallback reads
# 16 KiB per round trip through the default executor (a thread hop and an event-loop wake-up each): a
# consumer over TLS got a quarter of what the same fetches carry in plaintext.
TLS_READ_CHUNK = 1 << 20

# What handling one request comes to: the buffers to send, None (no answer: acks=0), or False (close the
# connection after what came before it).
Answer = list[Buffer] | Literal[False] | None


class ResponseWriter:
    """The writing half of a Kafka connection (`connection._Connection`)."""

    peer: str
    transport: asyncio.Transport | None
    # Requests in arrival order, each its answer to come; None: close once the ones before it are answered.
    _pending: deque[asyncio.Future[Answer] | None]
    # Bare futures, made only while the writer waits: `_wake` for a new item, `_drained` for the transport.
    _wake: asyncio.Future[None] | None
    _drained: asyncio.Future[None] | None
    _closed: bool
    _lost: bool
    _tls: bool
    _pause_bits: int
    _write_paused: bool
    _writing: bool
    _last_active: float

    if TYPE_CHECKING:
        def _resume(self, why: int) -> None: ...

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        fut, self._drained = self._drained, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _notify(self) -> None:
        """Wake the writer if it waits for an item in `_pending`."""
        fut, self._wake = self._wake, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def _write_loop(self) -> None:
        pending = self._pending
        transport = self.transport
        assert transport is not None
        loop = asyncio.get_running_loop()
        try:
            while True:
                while not pending:
                    self._wake = loop.create_future()
                    await self._wake
                item = pending.popleft()
                if self._pause_bits & PAUSE_IN_FLIGHT and len(pending) < MAX_IN_FLIGHT // 2:
                    self._resume(PAUSE_IN_FLIGHT)
                if item is None:
                    return
                try:
                    out = await item
                except asyncio.CancelledError:
                    if self._lost:
                        return
                    raise
                except Exception:
                    log.exception("request from %s failed; closing the connection", self.peer)
                    return
                if out is None:
                    continue
                if out is False:
                    return
                if self._lost:
                    close_buffers(out)
                    return
                self._writing = True
                if not await self._send(transport, out):
                    return
                if self._write_paused:
                    self._drained = loop.create_future()
                    await self._drained
                self._writing = False
                self._last_active = time.monotonic()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._closed = True
            for item in pending:  # results never sent: release their open files
                if item is not None and item.done() and not item.cancelled() and item.exception() is None:
                    result = item.result()
                    if isinstance(result, list):
                        close_buffers(result)
                elif item is not None:
                    item.cancel()
            pending.clear()
            if not transport.is_closing():
                transport.close()

    async def _send(self, transport: asyncio.Transport, out: list[Buffer]) -> bool:
        """Write buffers in order, byte buffers in runs; file ranges go out with sendfile. False: connection
        unusable."""
        try:
            run: list[bytes | bytearray | memoryview] = []
            for buf in out:
                if isinstance(buf, (bytes, bytearray, memoryview)):
                    run.append(buf)
                    continue
                if run:
                    transport.writelines(run)
                    run = []
                if self._lost:
                    return False
                if self._tls:
                    sent = await self._copy_range(transport, buf)
                else:
                    sent = await asyncio.get_running_loop().sendfile(
                        transport, buf.file, buf.position, buf.size, fallback=True
                    )
                if sent != buf.size:
                    log.error(
                        "closing connection to %s: sent %d of %d bytes of %s (segment shrank?)",
                        self.peer, sent, buf.size, getattr(buf.file, "name", "?"),
                    )
                    return False
            if run:
                transport.writelines(run)
            return True
        finally:
            close_buffers(out)

    async def _copy_range(self, transport: asyncio.Transport, buf: FileRange) -> int:
        """A file range through a TLS transport, in TLS_READ_CHUNK reads (from the page cache, as sendfile
        reads), waiting between chunks while the transport is above its high-water mark; the bytes written."""
        fd = buf.file.fileno()
        position, left = buf.position, buf.size
        while left > 0 and not self._lost:
            chunk = os.pread(fd, min(left, TLS_READ_CHUNK), position)
            if not chunk:
                break  # the segment shrank: the caller closes the connection
            transport.write(chunk)
            position += len(chunk)
            left -= len(chunk)
            if self._write_paused and left > 0 and not self._lost:
                self._drained = asyncio.get_running_loop().create_future()
                await self._drained
        return buf.size - left


def close_buffers(out: Sequence[Buffer]) -> None:
    """Close the file ranges of an answer (sent or not): their open segment files."""
    for buf in out:
        if not isinstance(buf, (bytes, bytearray, memoryview)):
            try:
                buf.close()
            except Exception:
                pass
