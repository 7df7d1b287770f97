"""The Kafka-protocol TCP server: one buffered protocol per client connection.

Why: every Kafka client speaks size-prefixed request frames and expects the
responses on a connection in request order. Clients pipeline (many requests
in flight), so each request is handled in its own task while a writer sends
responses strictly in arrival order; `acks=0` produce requests get none.
Handlers come from the registry (`handlers/`), so this file knows no API.

Receive path (the produce hot path): an `asyncio.BufferedProtocol` reads
into a staging buffer until a frame's size is known; a frame bigger than
what staging already holds gets a `bytearray` of exactly its size and the
socket reads the rest straight into it (no StreamReader, no joins). Each
frame is handed on as a writable memoryview the request owns. The staging
buffer is one per server, shared by every connection: the event loop calls
`get_buffer`, reads the socket and calls `buffer_updated` in one step, so no
two connections ever use it at once; a connection keeps only the bytes of an
incomplete frame between reads, and an idle one holds no receive buffer.

Failure policy: a frame with an impossible size, an undecodable header or an
unknown API key is logged naming the client and the reason; the connection
gets the protocol's error when a response can be formed, else it is closed.
Nothing a client sends can stop the server serving other connections.

This module must never touch partition data directly; handlers go through
the broker core (ReplicaManager, TopicManager).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from typing import Any

from kelp.errors import KelpError

from .framing import SIZE, FrameError, parse_request_header, response_frame
from .handlers import get_handler
from .handlers.registry import HandlerSpec, RawResponse, RequestContext

__all__ = ["KafkaServer"]

log = logging.getLogger("kelp.broker.kafka")

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35
MAX_IN_FLIGHT = 64

try:
    from kelp.broker import metrics as _metrics  # type: ignore[attr-defined]
except Exception:  # pragma: no cover - the HTTP part provides it
    _metrics = None

_LATENCY = getattr(_metrics, "REQUEST_LATENCY", None) if _metrics is not None else None


class _Unsupported(Exception):
    pass


# Reads land in this buffer first (one per server, shared by its connections); a frame
# larger than it gets a buffer of its own size, and the socket then reads the rest
# straight into that.
STAGING_BYTES = 64 * 1024
# Pause writing to the transport above this many queued bytes until it drains.
WRITE_HIGH_WATER = 4 << 20


class KafkaServer:
    def __init__(self, broker: Any, *, host: str, port: int, advertised_host: str = "", max_request_bytes: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.advertised_host = advertised_host
        self.advertised_port: int | None = None  # None: the bound port
        self.max_request_bytes = max_request_bytes
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_Connection] = set()
        self._staging = bytearray(STAGING_BYTES)
        self._staging_view = memoryview(self._staging)

    @property
    def bound_port(self) -> int:
        return self.port

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), self.host, self.port, reuse_address=True
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        if not self.advertised_host:
            self.advertised_host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        writers = [c.abort() for c in list(self._connections)]
        writers = [w for w in writers if w is not None]
        if writers:
            await asyncio.wait(writers, timeout=2)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass

    def _dispatch(self, frame: memoryview, peer: str) -> asyncio.Future | None:
        """Parse the header and start handling; None means close the connection."""
        api_key, api_version = struct.unpack_from(">hh", frame, 0)
        spec = get_handler(api_key)
        flexible = False
        if spec is not None:
            try:
                flexible = spec.request_class.flexible_version_q(api_version) and not (
                    api_key == API_VERSIONS_KEY and api_version > spec.max_version
                )
            except Exception:
                flexible = False
        try:
            header = parse_request_header(frame, flexible=flexible)
        except FrameError as exc:
            log.warning("closing connection from %s: undecodable request header (api key %d v%d): %s", peer, api_key, api_version, exc)
            return None
        ctx = RequestContext(
            broker=self.broker, api_key=api_key, api_version=api_version,
            correlation_id=header.correlation_id, client_id=header.client_id, peer=peer, server=self,
        )
        if spec is None:
            log.warning(
                "unsupported API key %d (v%d) from client %s: answering UNSUPPORTED_VERSION (35)",
                api_key, api_version, ctx.client,
            )
            return _done(self._raw_error(header.correlation_id, UNSUPPORTED_VERSION))
        if not spec.min_version <= api_version <= spec.max_version:
            if api_key == API_VERSIONS_KEY:
                log.info(
                    "ApiVersions v%d from client %s is above v%d: answering v0 with UNSUPPORTED_VERSION and the ranges",
                    api_version, ctx.client, spec.max_version,
                )
                return asyncio.ensure_future(self._run(spec, ctx, None, 0, flexible_header=False, fallback=True))
            log.warning(
                "unsupported version %d of %s (API key %d) from client %s; supported v%d-v%d",
                api_version, spec.name, api_key, ctx.client, spec.min_version, spec.max_version,
            )
            return _done(self._unsupported_response(spec, header.correlation_id, api_version))
        body = frame[header.body_offset :]
        resp_flexible = flexible and api_key != API_VERSIONS_KEY
        return asyncio.ensure_future(self._run(spec, ctx, body, api_version, flexible_header=resp_flexible))

    async def _run(
        self, spec: HandlerSpec, ctx: RequestContext, body: memoryview | None, version: int,
        *, flexible_header: bool, fallback: bool = False,
    ) -> list | None | bool:
        start = time.perf_counter()
        try:
            if fallback:
                request = None
                ctx.extra["unsupported_version"] = True
            else:
                try:
                    if spec.decoder is not None:
                        request = spec.decoder(body, version)
                    else:
                        request = spec.request_class.decode(body, version=version)
                except Exception as exc:
                    log.warning(
                        "closing connection from %s: cannot decode %s v%d body (%d bytes): %s",
                        ctx.client, spec.name, version, len(body) if body is not None else 0, exc,
                    )
                    return False
            try:
                response = await spec.func(ctx, request)
            except KelpError as exc:
                log.warning("%s v%d from %s failed: %s", spec.name, version, ctx.client, exc)
                return False
            if response is None:
                return None
            if isinstance(response, RawResponse):
                prefix = response_frame(ctx.correlation_id, response.size, flexible_header=flexible_header)
                return [prefix, *response.buffers]
            payload = response.encode(version=version)
            prefix = response_frame(ctx.correlation_id, payload, flexible_header=flexible_header)
            return [prefix, payload]
        finally:
            if _LATENCY is not None:
                try:
                    _LATENCY.labels(api=spec.name).observe(time.perf_counter() - start)
                except Exception:
                    pass

    def _raw_error(self, correlation_id: int, code: int) -> list:
        body = struct.pack(">h", code)
        return [response_frame(correlation_id, body, flexible_header=False), body]

    def _unsupported_response(self, spec: HandlerSpec, correlation_id: int, version: int) -> list | bool:
        """An UNSUPPORTED_VERSION response in the requested version, if the schema can express it."""
        cls = spec.response_class
        if 0 <= version <= (cls.max_version or 0) and "error_code" in cls._struct.fields:
            try:
                resp = cls(version=version, error_code=UNSUPPORTED_VERSION)
                payload = resp.encode(version=version)
                flexible = bool(spec.request_class.flexible_version_q(version))
                return [response_frame(correlation_id, payload, flexible_header=flexible), payload]
            except Exception:
                pass
        return self._raw_error(correlation_id, UNSUPPORTED_VERSION)


class _Connection(asyncio.BufferedProtocol):
    """One client connection: frames read into buffers of their own size, answered in order.

    Receive: `get_buffer` hands the transport either the server's staging
    buffer (frame headers and small frames, several per read), with the
    bytes of this connection's incomplete frame, if any, copied to its front,
    or, once a frame's size is known and it does not fit staging, the rest of
    a `bytearray` of exactly that frame's size, so large produce requests are
    read with no intermediate copies. Between reads a connection holds only
    `_tail`, the bytes of an incomplete small frame (usually none). Each
    frame is dispatched as a writable memoryview the request owns (the
    produce path rewrites offsets in place).
    Pipelining: every request runs in its own task; the writer task sends
    the responses in arrival order. Reading pauses at MAX_IN_FLIGHT requests
    and while the socket's send buffer is over WRITE_HIGH_WATER.
    """

    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._tail = b""  # bytes of an incomplete frame that fits staging, kept between reads
        self._frame: bytearray | None = None  # a large frame being filled in place
        self._frame_view: memoryview | None = None
        self._frame_got = 0
        self._pending: deque = deque()
        # Bare futures, made only while the writer waits (an idle connection holds none):
        # `_wake` for a new item in `_pending`, `_drained` for the transport to drain.
        self._wake: asyncio.Future | None = None
        self._drained: asyncio.Future | None = None
        self._writer: asyncio.Task | None = None
        self._closed = False  # no more requests will be read
        self._lost = False
        self._paused = False
        self._write_paused = False

    # -- transport callbacks ----------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peername = transport.get_extra_info("peername")
        self.peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[union-attr]
        self.server._connections.add(self)
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame_view is not None:
            return self._frame_view[self._frame_got :]
        # The shared staging buffer: valid until the `buffer_updated` that follows this call
        # (the event loop makes both calls in one step). `_tail` stays authoritative until then.
        tail = self._tail
        if tail:
            self.server._staging[: len(tail)] = tail
        return self.server._staging_view[len(tail) :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._frame_got += nbytes
            if self._frame_got == len(self._frame):
                frame = self._frame
                self._frame = self._frame_view = None
                self._frame_got = 0
                self._handle_frame(frame)
            return
        end = len(self._tail) + nbytes
        self._tail = b""
        self._parse_staging(end)

    def _parse_staging(self, end: int) -> None:
        """Dispatch the whole frames in staging[:end]; keep an incomplete one in `_tail`."""
        staging = self.server._staging
        start = 0
        while not self._closed:
            available = end - start
            if available < 4:
                break
            (size,) = SIZE.unpack_from(staging, start)
            if size < 8 or size > self.server.max_request_bytes:
                log.warning(
                    "closing connection from %s: request size %d is outside 8..%d (socket.request.max.bytes)",
                    self.peer, size, self.server.max_request_bytes,
                )
                self._close_after_responses()
                return
            begin = start + 4
            if available - 4 >= size:
                frame = staging[begin : begin + size]  # small frame: one copy out of staging
                start = begin + size
                if not self._handle_frame(frame):
                    return
                continue
            if size > len(staging) - 4:
                # Too big for staging: a buffer of the frame's size, filled in place from here on.
                frame = bytearray(size)
                got = end - begin
                frame[:got] = staging[begin:end]
                start = end
                self._frame, self._frame_view, self._frame_got = frame, memoryview(frame), got
            break
        if start < end and not self._closed:
            self._tail = bytes(self.server._staging_view[start:end])

    def eof_received(self) -> bool:
        if self._frame is not None or self._tail:
            log.warning("connection from %s closed in the middle of a request", self.peer)
        self._close_after_responses()
        return True  # keep the transport open until the writer has sent what is in flight

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._closed = True
        self.resume_writing()
        self.server._connections.discard(self)
        for item in self._pending:
            if item is not None and not item.done():
                item.cancel()
        self._pending.append(None)
        self._notify()

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

    # -- requests -------------------------------------------------------
    def _handle_frame(self, frame: bytearray) -> bool:
        """Dispatch one frame; False when the connection is closing."""
        item = self.server._dispatch(memoryview(frame), self.peer)
        if item is None:
            self._close_after_responses()
            return False
        self._pending.append(item)
        self._notify()
        if len(self._pending) >= MAX_IN_FLIGHT and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        return True

    def _close_after_responses(self) -> None:
        """Stop reading; the writer answers what is in flight, then closes."""
        if self._closed:
            return
        self._closed = True
        if self.transport is not None and not self._lost:
            try:
                self.transport.pause_reading()
            except Exception:
                pass
        self._pending.append(None)
        self._notify()

    def abort(self) -> asyncio.Task | None:
        """Server stop: drop what is in flight and close now."""
        self._closed = True
        for item in self._pending:
            if item is not None and not item.done():
                item.cancel()
        if self._writer is not None:
            self._writer.cancel()
        if self.transport is not None:
            self.transport.abort()
        return self._writer

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
                if self._paused and len(pending) < MAX_IN_FLIGHT // 2 and not self._closed:
                    self._paused = False
                    transport.resume_reading()
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
                    _close_buffers(out)
                    return
                if not await self._send(transport, out):
                    return
                if self._write_paused:
                    self._drained = loop.create_future()
                    await self._drained
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._closed = True
            for item in pending:  # results never sent: release their open files
                if item is not None and item.done() and not item.cancelled() and item.exception() is None:
                    result = item.result()
                    if isinstance(result, list):
                        _close_buffers(result)
                elif item is not None:
                    item.cancel()
            pending.clear()
            if not transport.is_closing():
                transport.close()

    async def _send(self, transport: asyncio.Transport, out: list) -> bool:
        """Write buffers in order; file ranges go out with sendfile. False: connection unusable."""
        try:
            i = 0
            n = len(out)
            while i < n:
                j = i
                while j < n and isinstance(out[j], (bytes, bytearray, memoryview)):
                    j += 1
                if j > i:
                    transport.writelines(out[i:j])
                    i = j
                    continue
                buf = out[i]
                i += 1
                if self._lost:
                    return False
                sent = await asyncio.get_running_loop().sendfile(
                    transport, buf.file, buf.position, buf.size, fallback=True
                )
                if sent != buf.size:
                    log.error(
                        "closing connection to %s: sent %d of %d bytes of %s (segment shrank?)",
                        self.peer, sent, buf.size, getattr(buf.file, "name", "?"),
                    )
                    return False
            return True
        finally:
            _close_buffers(out)


def _close_buffers(out: list) -> None:
    for buf in out:
        if not isinstance(buf, (bytes, bytearray, memoryview)):
            try:
                buf.close()
            except Exception:
                pass


def _done(value: Any) -> asyncio.Future:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(value)
    return fut
