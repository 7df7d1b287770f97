"""The Kafka-protocol TCP server: one buffered protocol per client connection.

Why: every Kafka client speaks size-prefixed request frames and expects the
responses on a connection in request order. Clients pipeline (many requests
in flight), so each request is handled in its own task while a writer sends
responses strictly in arrival order; `acks=0` produce requests get none. A
connection's produce requests append in arrival order too (`append_order`:
Kafka handles one request of a connection at a time, and sequence numbers
depend on it).
Handlers come from the registry (`handlers/`), so this file knows no API.

Connections (`connection.py`) read frames into buffers that grow as bytes
arrive and hand each one here (`dispatch`); the server owns what they
share: the staging buffer, the request memory pool and the connection
quota of `limits.py`, and the sweep that closes idle connections. It is the
connections' `ConnectionHost`: they reach it only through that interface.
The broker's parts (`kelp.broker.parts.BrokerParts`) come with `serve()`,
once they are all built; handlers reach them as `ctx.broker`.

One server per listener (`listeners`): it knows the listener's name and
security (`ListenerSecurity`: TLS context, SASL servers). A TLS listener's
connections are upgraded as they are accepted (`connection.py`), its
certificate files are looked at every `ssl.reload.interval.ms` and a rotated
certificate serves every new connection from then on. Each connection has a
`Session` (`session.py`): before SASL authentication only ApiVersions,
SaslHandshake and SaslAuthenticate are served (anything else closes the
connection), SaslHandshake and SaslAuthenticate are answered inline, as they
arrive, and every request's context names the session's principal and the
listener.

Failure policy: a frame with an impossible size, an undecodable header or an
unknown API key is logged naming the client and the reason; the connection
gets the protocol's error when a response can be formed, else it is closed.
Nothing a client sends can stop the server serving other connections.

This module must never touch partition data directly; handlers go through
the broker core (ReplicaManager, TopicManager).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
import struct
import time
import weakref
from typing import Any, Callable

from prometheus_client.metrics import Counter

from kelp.errors import ErrorCode, KelpError
from kelp.security.principal import KafkaPrincipal, PrincipalMappingError

from ..cpu_work import run_cpu
from ..metrics import BrokerMetrics
from ..parts import BrokerParts
from .append_order import AppendOrder
from .connection import STAGING_BYTES, WRITE_HIGH_WATER, _Connection
from .framing import SIZE, Buffer, FrameError, parse_request_header, response_frame
from .handlers import get_handler
from .handlers.registry import HandlerSpec, RawResponse, RequestContext
from .handlers.sasl import answer_sasl
from .limits import UNBOUNDED, ConnectionQuota, MemoryPool, RateLimitedLog
from .listener_security import ListenerSecurity
from .request_time import RequestTime
from .request_time import finish as finish_request_time
from .request_time import throttle_ms as request_throttle_ms
from .response_writer import MAX_IN_FLIGHT, Answer
from .session import SASL_AUTHENTICATE, SASL_HANDSHAKE, Session

__all__ = ["KafkaServer", "MAX_IN_FLIGHT", "STAGING_BYTES", "WRITE_HIGH_WATER", "decode_request", "encode_response"]

log = logging.getLogger("kelp.broker.kafka")

API_VERSIONS_KEY = 18
WRITE_TXN_MARKERS_KEY = 27  # inter-broker (ClusterAction): exempt from request quotas, as in Kafka
PRODUCE_KEY = 0
# A request body over this is decoded, and its answer encoded, on the CPU pool rather than the event loop.
OFF_LOOP_CODEC_BYTES = 16 << 10
LARGE_ANSWER_ENTRIES = 500  # entries of an answer's top-level list beyond which it is encoded on the CPU pool
# The pool of connections not yet authenticated: SASL handshakes are small (a few KiB even for OAUTHBEARER),
# so this is room for hundreds of logins at once, while sasl.server.max.receive.size bounds each frame.
UNAUTHENTICATED_POOL_BYTES = 16 << 20
UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION


class KafkaServer:
    """The Kafka listener; to its connections, their `ConnectionHost` (connection.py).

    `metrics`: the broker's registry, where its request latencies and connection counters go (None: a registry
    of the listener's own, for a listener built alone).
    """

    def __init__(
        self, *, host: str, port: int, advertised_host: str = "", max_request_bytes: int,
        queued_max_request_bytes: int | None = None, connections_max_idle_ms: int | None = None,
        max_connections: int = UNBOUNDED, max_connections_per_ip: int = UNBOUNDED,
        metrics: BrokerMetrics | None = None, security: ListenerSecurity | None = None,
        pool: MemoryPool | None = None, quota: ConnectionQuota | None = None,
        send_buffer_bytes: int = -1, receive_buffer_bytes: int = -1,
        unauthenticated_pool: MemoryPool | None = None, broker_pool: MemoryPool | None = None,
        broker_principals: Callable[[KafkaPrincipal], bool] | None = None,
        authentication_timeout_ms: int | None = None,
    ) -> None:
        self.broker: BrokerParts | None = None  # what handlers reach; given by serve()
        # The listener's name and security; a plain PLAINTEXT listener unless given.
        self.security = security or ListenerSecurity.plaintext(max_request_bytes=max_request_bytes)
        self.listener = self.security.name
        self.tls_context: ssl.SSLContext | None = self.security.tls.context if self.security.tls else None
        self.host = host
        self.port = port
        self.advertised_host = advertised_host
        self.advertised_port: int | None = None  # None: the bound port
        self.max_request_bytes = max_request_bytes
        # Shared by every listener of a broker when given (the bounds are the broker's, as in Kafka).
        self.pool = pool or MemoryPool(queued_max_request_bytes)
        # Connections not yet authenticated draw on a small pool of their own, brokers' on another: neither clients
        # nor would-be clients can take the memory replication and authenticated clients need (issue 33).
        self.unauthenticated_pool = unauthenticated_pool or MemoryPool(UNAUTHENTICATED_POOL_BYTES)
        self.broker_pool = broker_pool or MemoryPool(queued_max_request_bytes)
        self._broker_principals = broker_principals or (lambda _principal: False)
        self.quota = quota or ConnectionQuota(max_connections, max_connections_per_ip)
        self.idle_s = None if connections_max_idle_ms is None else connections_max_idle_ms / 1000
        self.auth_timeout_s = None if authentication_timeout_ms is None else authentication_timeout_ms / 1000
        # socket.send.buffer.bytes (set on a connection once it fetches as a consumer, connection.py) and
        # socket.receive.buffer.bytes (on the listening socket); -1 leaves the kernel's autotuned size.
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_Connection] = set()
        self.staging = bytearray(STAGING_BYTES)
        self.staging_view = memoryview(self.staging)
        self._sweeper: asyncio.Task[None] | None = None
        self._tls_watch: asyncio.Task[None] | None = None
        self._refusals = RateLimitedLog(log)
        self._metrics = metrics = metrics or BrokerMetrics()  # the broker's; a listener alone (tests) has its own
        self._latency = metrics.request_latency
        # Each connection's produce requests append in arrival order (append_order.py), keyed by its session.
        self._append_orders: weakref.WeakKeyDictionary[Session, AppendOrder] = weakref.WeakKeyDictionary()

    @property
    def bound_port(self) -> int:
        return self.port

    async def start(self, *, serve: bool = True) -> None:
        """Bind the listener (the port is known from here on); accept connections only with `serve` or once
        `serve(parts)` is called — the broker waits until it has read the cluster metadata (as Kafka's broker
        opens its data-plane listeners only after its metadata caught up), so no client is told "no such
        topic". (`serve=True` without parts: connections whose requests are refused; tests of the listener.)"""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), self.host, self.port, reuse_address=True, start_serving=serve
        )
        if self.receive_buffer_bytes != -1:
            for listening in self._server.sockets:
                # Before any connection: accepted sockets inherit the size (Linux copies it, and the lock that
                # stops autotuning, into each child), and set before the handshake it also sizes the window
                # scale announced.
                listening.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        if not self.advertised_host:
            self.advertised_host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if self.idle_s is not None or (self.auth_timeout_s is not None and self.security.uses_sasl):
            self._sweeper = loop.create_task(self._sweep_idle())
        if self.security.tls is not None:
            self._tls_watch = loop.create_task(self._watch_certificates())
        self._metrics.watch_listener(self)

    async def serve(self, broker: BrokerParts) -> None:
        """Start accepting connections on the bound listener, handling their requests with `broker`'s parts."""
        self.broker = broker
        # SCRAM users are the cluster metadata's: looked up in the image current at each authentication.
        self.security.scram_lookup = lambda user, mechanism: broker.cluster.state.image.scram_credentials.get(
            (user, mechanism))
        if self._server is not None and not self._server.is_serving():
            await self._server.start_serving()

    async def stop(self) -> None:
        for task in (self._sweeper, self._tls_watch):
            if task is not None:
                task.cancel()
        if self._server is not None:
            self._server.close()
        writers = [w for c in list(self._connections) if (w := c.abort()) is not None]
        if writers:
            await asyncio.wait(writers, timeout=2)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass

    # -- limits (ConnectionHost) -----------------------------------------
    def pool_for(self, session: Session | None) -> MemoryPool:
        if session is None:
            return self.unauthenticated_pool if self.security.uses_sasl else self.pool
        if not session.authenticated:
            return self.unauthenticated_pool
        return self.broker_pool if self.is_broker(session) else self.pool

    def is_broker(self, session: Session) -> bool:
        return session.authenticated and self._broker_principals(session.principal)

    def admit(self, conn: _Connection, ip: str) -> bool:
        """Count a new connection against Kafka's connection limits (`limits.ConnectionQuota`, which may evict an
        idle client connection to make room) and keep it; False: close it."""
        exceeded = self.quota.admit(ip, self.listener, conn.bounds)
        if exceeded is None:
            self._connections.add(conn)
            return True
        quota = self.quota
        if exceeded == "max.connections.per.ip":
            detail = f"={quota.limit_for_ip(ip)} reached ({quota.per_ip.get(ip, 0)} open)"
        elif exceeded == "max.connections":
            detail = f"={quota.max_connections} reached ({quota.total} open, none idle to close)"
        elif exceeded.endswith(".max.connections"):
            detail = f"={quota.listener_max.get(self.listener)} reached ({quota.per_listener.get(self.listener, 0)} " \
                     "open, none idle to close)"
        else:
            detail = " reached"
        self._refusals.warning(exceeded, "refusing connection from %s on listener %s: %s%s", conn.peer,
                               self.listener, exceeded, detail)
        self._count(self._metrics.connections_refused, exceeded)
        return False

    def leave(self, conn: _Connection, ip: str) -> None:
        self.quota.leave(ip, self.listener, conn.bounds)
        self._connections.discard(conn)

    def count_closed(self, reason: str) -> None:
        self._count(self._metrics.connections_closed, reason)

    @staticmethod
    def _count(counter: Counter, reason: str) -> None:
        try:
            counter.labels(reason=reason).inc()
        except Exception:  # metrics must never fail a connection
            pass

    async def _sweep_idle(self) -> None:
        """Close connections idle for connections.max.idle.ms, and those of a SASL listener not authenticated within
        kelp.authentication.timeout.ms: one periodic pass, no timer per read."""
        bounds = [b for b in (self.idle_s, self.auth_timeout_s if self.security.uses_sasl else None) if b is not None]
        interval = min(max(min(bounds) / 4, 0.05), 10.0)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            if self.auth_timeout_s is not None and self.security.uses_sasl:
                for conn in [c for c in self._connections if c.bounds.authentication_overdue(self.auth_timeout_s, now)]:
                    self.count_closed("kelp.authentication.timeout.ms")
                    conn.bounds.close_unauthenticated(self.auth_timeout_s)
            if self.idle_s is None:
                continue
            deadline = now - self.idle_s
            for conn in [c for c in self._connections if c.last_active < deadline]:
                if conn.bounds.idle():
                    self.count_closed("connections.max.idle.ms")
                    conn.bounds.close_idle(self.idle_s)

    # -- requests (ConnectionHost) ---------------------------------------
    def dispatch(self, frame: memoryview, peer: str, *, session: Session,
                 release: Callable[[], None] | None = None,
                 consumer_fetching: Callable[[], None] | None = None,
                 throttle: Callable[[int], None] | None = None) -> asyncio.Future[Answer] | None:
        """Parse the header and start handling; None means close the connection.

        `release` gives the frame's bytes back to the memory pool before the answer (the handler
        calls `ctx.release_frame()` once it holds no view of them).
        """
        broker = self.broker
        if broker is None:
            log.warning("closing connection from %s: this listener serves no broker yet", peer)
            return None
        if session.raw_tokens:
            return self._raw_token(session, frame)
        api_key, api_version = struct.unpack_from(">hh", frame, 0)
        spec = get_handler(api_key)
        flexible = False
        if spec is not None:
            try:
                flexible = spec.flexible(api_version) and not (
                    api_key == API_VERSIONS_KEY and api_version > spec.max_version
                )
            except Exception:
                flexible = False
        try:
            header = parse_request_header(frame, flexible=flexible)
        except FrameError as exc:
            log.warning("closing connection from %s: undecodable request header (api key %d v%d): %s", peer, api_key,
                        api_version, exc)
            return None
        refusal = session.refusal(api_key, spec.name if spec is not None else f"API key {api_key}")
        if refusal is not None:
            log.warning("closing connection from %s on listener %s: %s", peer, self.listener, refusal)
            return None
        ctx = RequestContext(
            broker=broker, api_key=api_key, api_version=api_version,
            correlation_id=header.correlation_id, client_id=header.client_id, peer=peer, release_frame=release,
            principal=session.principal, listener=self.listener, consumer_fetching=consumer_fetching,
            throttle=throttle,
        )
        if api_key == PRODUCE_KEY:
            order = self._append_orders.get(session)
            if order is None:
                order = self._append_orders[session] = AppendOrder()
            ctx.append_order = order
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
        if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return self._sasl(spec, ctx, session, body, flexible_header=resp_flexible)
        return asyncio.ensure_future(self._run(spec, ctx, body, api_version, flexible_header=resp_flexible))

    # -- authentication (session.py) ---------------------------------------
    def open_session(self, peer: str, certificate: bytes | None) -> Session | None:
        """The session of a new connection (after its TLS handshake, with the client's certificate in DER); None
        when the certificate's subject maps to no principal (the connection is closed)."""
        try:
            principal = self.security.certificate_principal(certificate) if self.tls_context is not None \
                and not self.security.uses_sasl else None
        except PrincipalMappingError as exc:
            log.warning("closing connection from %s on listener %s: its client certificate maps to no principal "
                        "(ssl.principal.mapping.rules): %s", peer, self.listener, exc)
            return None
        if principal is None:
            return Session(self.security, peer)
        return Session(self.security, peer, principal=principal)

    def tls_failed(self, peer: str, exc: BaseException) -> None:
        """A TLS handshake failed (a plaintext client on a TLS port, an untrusted or missing client certificate,
        garbage): logged once per connection, rate-limited per reason."""
        reason = getattr(exc, "reason", None) or type(exc).__name__
        message = str(exc) or f"{reason} (the peer closed the connection)"
        # Rate-limited per cause (a flood of one failure is one line every few seconds), never per peer.
        self._refusals.warning(f"tls:{message[:200]}", "TLS handshake with %s on listener %s failed: %s", peer,
                               self.listener, message)
        self._count(self._metrics.connections_closed, "tls.handshake")

    def _sasl(self, spec: HandlerSpec, ctx: RequestContext, session: Session, body: memoryview, *,
              flexible_header: bool) -> asyncio.Future[Answer] | None:
        """SaslHandshake and SaslAuthenticate, answered before the next frame is read (handlers/sasl.py)."""
        try:
            request = spec.request_class.decode(body, version=ctx.api_version)
        except Exception as exc:
            log.warning("closing connection from %s on listener %s: cannot decode %s v%d: %s", ctx.peer,
                        self.listener, spec.name, ctx.api_version, exc)
            return None
        response, answer = answer_sasl(session, ctx.api_key, request, ctx.api_version)
        assert response is not None and not isinstance(response, RawResponse)
        payload = response.encode(version=ctx.api_version)
        out: list[Buffer] = [response_frame(ctx.correlation_id, payload, flexible_header=flexible_header), payload]
        return _later(out, answer.delay_s)

    def _raw_token(self, session: Session, frame: memoryview) -> asyncio.Future[Answer]:
        """A token of the exchange after SaslHandshake v0: answered as a size-prefixed token; a failure is
        answered by closing the connection (after the failed-authentication delay), as Kafka does."""
        answer = session.raw_token(bytes(frame))
        if answer.close:
            return _later(False, answer.delay_s)
        return _later([SIZE.pack(len(answer.token)), answer.token], 0.0)

    async def _watch_certificates(self) -> None:
        """Look at the certificate files (ssl.reload.interval.ms); a rotated certificate serves new connections."""
        tls = self.security.tls
        assert tls is not None
        while True:
            await asyncio.sleep(self.security.reload_check_s)
            try:
                tls.maybe_reload()
            except Exception:  # the reloader logs what it refuses; a surprise must not end the watch
                log.exception("listener %s: checking the certificate files failed", self.listener)

    async def _run(
        self, spec: HandlerSpec, ctx: RequestContext, body: memoryview | None, version: int,
        *, flexible_header: bool, fallback: bool = False,
    ) -> Answer:
        start = time.perf_counter()
        if ctx.broker.quotas.limits_requests():
            ctx.request_time = RequestTime(exempt=ctx.api_key == WRITE_TXN_MARKERS_KEY)
            ctx.request_time.start()
        answer = self._answer(spec, ctx, body, version, flexible_header=flexible_header, fallback=fallback)
        body = None  # the frame is the answer's to free (a produce releases it before waiting for the ISR)
        try:
            return await (answer if ctx.request_time is None else ctx.request_time.timed(answer))
        finally:
            finish_request_time(ctx)
            try:
                self._latency.labels(api=spec.name).observe(time.perf_counter() - start)
            except Exception:  # metrics must never fail a request
                pass

    async def _answer(
        self, spec: HandlerSpec, ctx: RequestContext, body: memoryview | None, version: int,
        *, flexible_header: bool, fallback: bool,
    ) -> Answer:
        """Decode, handle and encode one request (timed by `_run` while request quotas are set)."""
        large = False
        request: object
        if fallback or body is None:  # only the ApiVersions fallback comes without a body
            request = None
            ctx.unsupported_version = True
        else:
            # kafka-python's codecs cost per entry; a handler's own decoder (Produce's: records as views, per
            # batch) marks a hot path whose large bodies are records, answered in a few entries, on the loop
            large = spec.decoder is None and len(body) > OFF_LOOP_CODEC_BYTES
            try:
                request = await decode_request(spec, body, version)
            except Exception as exc:
                log.warning(
                    "closing connection from %s: cannot decode %s v%d body (%d bytes): %s",
                    ctx.client, spec.name, version, len(body) if body is not None else 0, exc,
                )
                return False
            body = None  # the request holds what it needs; a handler that releases the frame frees it
        try:
            response = await spec.func(ctx, request)
        except KelpError as exc:
            log.warning("%s v%d from %s failed: %s", spec.name, version, ctx.client, exc)
            return False
        if ctx.request_time is not None:  # Kafka's sendResponseMaybeThrottle: the larger of the two throttles
            throttle = request_throttle_ms(ctx)
            if throttle and response is not None and not isinstance(response, RawResponse) \
                    and "throttle_time_ms" in getattr(type(response), "fields", ()):
                current = getattr(response, "throttle_time_ms", 0) or 0
                # kafka-python's messages declare their fields at run time, not to mypy
                response.throttle_time_ms = max(current, throttle)  # type: ignore[attr-defined]  # a declared field
        if response is None:
            return None
        if isinstance(response, RawResponse):
            prefix = response_frame(ctx.correlation_id, response.size, flexible_header=flexible_header)
            return [prefix, *response.buffers]
        payload = await encode_response(response, version, large=large)
        prefix = response_frame(ctx.correlation_id, payload, flexible_header=flexible_header)
        return [prefix, payload]

    def _raw_error(self, correlation_id: int, code: int) -> list[Buffer]:
        body = struct.pack(">h", code)
        return [response_frame(correlation_id, body, flexible_header=False), body]

    def _unsupported_response(self, spec: HandlerSpec, correlation_id: int, version: int) -> list[Buffer]:
        """An UNSUPPORTED_VERSION response in the requested version, if the schema can express it."""
        cls = spec.response_class
        highest: int | None = cls.max_version
        if 0 <= version <= (highest or 0) and "error_code" in cls.fields:
            try:
                resp = cls(version=version, error_code=UNSUPPORTED_VERSION)
                payload: bytes = resp.encode(version=version)
                flexible = spec.flexible(version)
                return [response_frame(correlation_id, payload, flexible_header=flexible), payload]
            except Exception:
                pass
        return self._raw_error(correlation_id, UNSUPPORTED_VERSION)


async def decode_request(spec: HandlerSpec, body: memoryview, version: int) -> object:
    """A request's body decoded: by the handler's own decoder (Produce's keeps the records as views, per batch),
    else by kafka-python's, on the CPU pool for a body over OFF_LOOP_CODEC_BYTES (thousands of entries decode for
    tens of milliseconds, which the loop must not spend: issue 33's loop-lag guard)."""
    if spec.decoder is not None:
        return spec.decoder(body, version)
    if len(body) > OFF_LOOP_CODEC_BYTES:
        return await run_cpu(functools.partial(spec.request_class.decode, body, version=version))
    return spec.request_class.decode(body, version=version)


def many_entries(response: Any) -> bool:
    """Whether a top-level list of the answer holds over LARGE_ANSWER_ENTRIES entries: a small request whose answer
    walks the whole state (Metadata of every topic, ListTransactions, DescribeAcls, ...) encodes as long as a
    large request's does (10,000 topics: a third of a second)."""
    for name in getattr(type(response), "fields", None) or ():
        value = getattr(response, name, None)
        if isinstance(value, list) and len(value) > LARGE_ANSWER_ENTRIES:
            return True
    return False


async def encode_response(response: Any, version: int, *, large: bool) -> bytes:
    """A response encoded; on the CPU pool when its request was `large` (its answer has as many entries) or the
    answer itself has many entries."""
    if large or many_entries(response):
        payload: bytes = await run_cpu(functools.partial(response.encode, version=version))
        return payload
    encoded: bytes = response.encode(version=version)
    return encoded


def _done(value: Answer) -> asyncio.Future[Answer]:
    fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    fut.set_result(value)
    return fut


def _later(value: Answer, delay_s: float) -> asyncio.Future[Answer]:
    """A future with `value` after `delay_s` (at once for 0); a cancelled one (the connection went) stays so."""
    if delay_s <= 0:
        return _done(value)
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Answer] = loop.create_future()

    def fire() -> None:
        if not fut.done():
            fut.set_result(value)

    loop.call_later(delay_s, fire)
    return fut
