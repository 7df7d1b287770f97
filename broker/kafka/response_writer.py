"""A connection's answers, written in request order: the queue of requests in flight, its bound, the writer
task and the transport's flow control.

Why an object of its own: the receive path (`connection.py`) reads frames and dispatches requests, each
handled in its own task; this side waits for each answer in arrival order and writes it — byte buffers in
runs, file ranges with sendfile (under TLS, and on uvloop's loop, which has no `sendfile`: read in 1 MiB
chunks and written through the transport) —
pausing while the transport's buffer is above its high-water mark, and closes the connection after an
answer that says so (a failed authentication's, a handler's `False`). It also holds the in-flight bound:
reading pauses once MAX_IN_FLIGHT requests wait for their answers and resumes below half of it. The
connection composes one `ResponseWriter` and sees it only through its methods; the writer sees the
connection as a `WriterHost` and the reading it pauses as a `ReadGate` (`connection_bounds.ConnectionBounds`).

This module must never read from the socket or decode anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from typing import Literal, Protocol, Sequence

from .connection_bounds import PAUSE_IN_FLIGHT
from .framing import Buffer, FileRange

__all__ = ["Answer", "MAX_IN_FLIGHT", "ReadGate", "ResponseWriter", "WriterHost", "close_buffers"]

log = logging.getLogger("kelp.broker.kafka")

MAX_IN_FLIGHT = 64
# Under TLS a file range is read and encrypted in chunks of this size. asyncio's sendfile fallback reads
# 16 KiB per round trip through the default executor (a thread hop and an event-loop wake-up each): a
# consumer over TLS got a quarter of what the same fetches carry in plaintext.
TLS_READ_CHUNK = 1 << 20

# What handling one request comes to: the buffers to send, None (no answer: acks=0), or False (close the
# connection after what came before it).
Answer = list[Buffer] | Literal[False] | None


class WriterHost(Protocol):
    """The connection, as its writer sees it (`connection._Connection` is one)."""

    peer: str  # for the log
    last_active: float  # monotonic seconds of its last read, answer or write: the writer sets it after each answer

    def writer_stopped(self) -> None:
        """The writer has stopped (a closing answer, a failure, the transport lost or aborted): read no more."""
        ...


class ReadGate(Protocol):
    """The connection's reading, paused while any reason (a bit) holds it (`ConnectionBounds` is one)."""

    paused: int  # the reasons reading is paused for

    def pause(self, why: int) -> None: ...

    def resume(self, why: int) -> None: ...


class ResponseWriter:
    """The requests of one connection in arrival order, and the task that writes their answers in that order."""

    def __init__(self, host: WriterHost, gate: ReadGate) -> None:
        self._host = host
        self._gate = gate
        # Requests in arrival order, each its answer to come; None: close once the ones before it are answered.
        self.pending: deque[asyncio.Future[Answer] | None] = deque()
        # Bare futures, made only while the writer waits (an idle connection holds none):
        # `_wake` for a new item in `pending`, `_drained` for the transport to drain.
        self._wake: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None  # the writer, from `start` on
        self.writing = False  # an answer is being written
        self._paused = False  # the transport is above its high-water mark
        self._lost = False  # the transport is gone
        self._copy_ranges = False  # file ranges are read and written through the transport, not sendfile

    @property
    def busy(self) -> bool:
        """Requests waiting for their answers, or an answer being written."""
        return bool(self.pending) or self.writing

    def start(self, transport: asyncio.Transport, *, tls: bool) -> None:
        """Write the answers to `transport` (the connection is open) from now on."""
        loop = asyncio.get_running_loop()
        # uvloop implements no `loop.sendfile` (the base class's raises NotImplementedError, fallback or not), and
        # its transports own their descriptors: file ranges go through the transport there, as under TLS.
        self._copy_ranges = tls or type(loop).sendfile is asyncio.AbstractEventLoop.sendfile
        self.task = loop.create_task(self._write_loop(transport))

    def push(self, item: asyncio.Future[Answer]) -> None:
        """A request dispatched: its answer goes out after those before it. At MAX_IN_FLIGHT unanswered, reading
        pauses (the writer resumes it below half of that)."""
        pending = self.pending
        pending.append(item)
        fut, self._wake = self._wake, None
        if fut is not None and not fut.done():
            fut.set_result(None)
        if len(pending) >= MAX_IN_FLIGHT:
            self._gate.pause(PAUSE_IN_FLIGHT)

    def end(self) -> None:
        """No request follows: close the connection once the ones before are answered."""
        self.pending.append(None)
        self._notify()

    # -- the transport's flow control (the connection forwards its protocol callbacks) ---------------------
    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        fut, self._drained = self._drained, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def lose(self) -> None:
        """The transport is gone: nothing more is written; what is in flight is dropped and the writer ends."""
        self._lost = True
        self.resume_writing()
        self._cancel_pending()
        self.end()

    def abort(self) -> asyncio.Task[None] | None:
        """Server stop: drop what is in flight and stop now; the writer task, to wait for."""
        self._cancel_pending()
        if self.task is not None:
            self.task.cancel()
        return self.task

    def _cancel_pending(self) -> None:
        for item in self.pending:
            if item is not None and not item.done():
                item.cancel()

    def _notify(self) -> None:
        """Wake the writer if it waits for an item in `pending`."""
        fut, self._wake = self._wake, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def _write_loop(self, transport: asyncio.Transport) -> None:
        pending = self.pending
        host, gate = self._host, self._gate
        loop = asyncio.get_running_loop()
        try:
            while True:
                while not pending:
                    self._wake = loop.create_future()
                    await self._wake
                item = pending.popleft()
                if gate.paused & PAUSE_IN_FLIGHT and len(pending) < MAX_IN_FLIGHT // 2:
                    gate.resume(PAUSE_IN_FLIGHT)
                if item is None:
                    return
                try:
                    out = await item
                except asyncio.CancelledError:
                    if self._lost:
                        return
                    raise
                except Exception:
                    log.exception("request from %s failed; closing the connection", host.peer)
                    return
                if out is None:
                    continue
                if out is False:
                    return
                if self._lost:
                    close_buffers(out)
                    return
                self.writing = True
                if not await self._send(transport, out):
                    return
                if self._paused:
                    self._drained = loop.create_future()
                    await self._drained
                self.writing = False
                host.last_active = time.monotonic()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            host.writer_stopped()
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
                if self._copy_ranges:
                    sent = await self._copy_range(transport, buf)
                else:
                    sent = await asyncio.get_running_loop().sendfile(
                        transport, buf.file, buf.position, buf.size, fallback=True
                    )
                if sent != buf.size:
                    log.error(
                        "closing connection to %s: sent %d of %d bytes of %s (segment shrank?)",
                        self._host.peer, sent, buf.size, getattr(buf.file, "name", "?"),
                    )
                    return False
            if run:
                transport.writelines(run)
            return True
        finally:
            close_buffers(out)

    async def _copy_range(self, transport: asyncio.Transport, buf: FileRange) -> int:
        """A file range through the transport (TLS's, or uvloop's), in TLS_READ_CHUNK reads (from the page cache,
        as sendfile reads), waiting between chunks while the transport is above its high-water mark; the bytes
        written."""
        fd = buf.file.fileno()
        position, left = buf.position, buf.size
        while left > 0 and not self._lost:
            chunk = os.pread(fd, min(left, TLS_READ_CHUNK), position)
            if not chunk:
                break  # the segment shrank: the caller closes the connection
            transport.write(chunk)
            position += len(chunk)
            left -= len(chunk)
            if self._paused and left > 0 and not self._lost:
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
