"""The Kafka-protocol TCP server: one asyncio stream per client connection.

Why: every Kafka client speaks size-prefixed request frames and expects the
responses on a connection in request order. Clients pipeline (many requests
in flight), so each request is handled in its own task while a writer sends
responses strictly in arrival order; `acks=0` produce requests get none.
Handlers come from the registry (`handlers/`), so this file knows no API.

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


class KafkaServer:
    def __init__(self, broker: Any, *, host: str, port: int, advertised_host: str = "", max_request_bytes: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.advertised_host = advertised_host
        self.advertised_port: int | None = None  # None: the bound port
        self.max_request_bytes = max_request_bytes
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()

    @property
    def bound_port(self) -> int:
        return self.port

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=1 << 20, reuse_address=True
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        if not self.advertised_host:
            self.advertised_host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=2)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass

    # -- one connection -------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        pending: deque[asyncio.Future] = deque()
        wake = asyncio.Event()
        closing = False
        writer_task = asyncio.create_task(self._write_loop(writer, pending, wake, peer))
        cancelled = False
        try:
            while True:
                try:
                    head = await reader.readexactly(4)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                (size,) = SIZE.unpack(head)
                if size < 8 or size > self.max_request_bytes:
                    log.warning(
                        "closing connection from %s: request size %d is outside 8..%d (socket.request.max.bytes)",
                        peer, size, self.max_request_bytes,
                    )
                    break
                try:
                    frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    log.warning("connection from %s closed in the middle of a %d-byte request", peer, size)
                    break
                item = self._dispatch(memoryview(frame), peer)
                if item is None:
                    closing = True
                    break
                pending.append(item)
                wake.set()
                if len(pending) >= MAX_IN_FLIGHT:
                    await asyncio.wait([pending[0]])
        except asyncio.CancelledError:
            cancelled = True  # the server is stopping: drop what is in flight
        finally:
            pending.append(None)  # type: ignore[arg-type]
            wake.set()
            if cancelled:
                writer_task.cancel()
                for item in list(pending):
                    if item is not None:
                        item.cancel()
            else:
                try:
                    await asyncio.wait_for(asyncio.shield(writer_task), 10 if not closing else 2)
                except (asyncio.TimeoutError, asyncio.CancelledError, Exception):
                    writer_task.cancel()
            try:
                writer.close()
            except Exception:
                pass
            self._connections.discard(task)

    async def _write_loop(self, writer: asyncio.StreamWriter, pending: deque, wake: asyncio.Event, peer: str) -> None:
        try:
            while True:
                while not pending:
                    wake.clear()
                    await wake.wait()
                item = pending.popleft()
                if item is None:
                    return
                try:
                    out = await item
                except Exception:
                    log.exception("request from %s failed; closing the connection", peer)
                    writer.close()
                    return
                if out is None:
                    continue
                if out is False:
                    writer.close()
                    return
                # write() each buffer: writelines() joins them (a copy of every record blob) on 3.11
                if not await self._send(writer, out, peer):
                    writer.close()
                    return
                if writer.transport.get_write_buffer_size() > (4 << 20):
                    await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return

    async def _send(self, writer: asyncio.StreamWriter, out: list, peer: str) -> bool:
        """Write buffers in order; file ranges go out with sendfile. False: connection unusable."""
        try:
            for buf in out:
                if isinstance(buf, (bytes, bytearray, memoryview)):
                    writer.write(buf)
                    continue
                sent = await asyncio.get_running_loop().sendfile(
                    writer.transport, buf.file, buf.position, buf.size, fallback=True
                )
                if sent != buf.size:
                    log.error(
                        "closing connection to %s: sent %d of %d bytes of %s (segment shrank?)",
                        peer, sent, buf.size, getattr(buf.file, "name", "?"),
                    )
                    return False
            return True
        finally:
            for buf in out:
                if not isinstance(buf, (bytes, bytearray, memoryview)):
                    buf.close()

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


def _done(value: Any) -> asyncio.Future:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(value)
    return fut
