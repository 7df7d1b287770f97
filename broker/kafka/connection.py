"""One Kafka client connection: frames in, responses out in request order.

Why: the receive path is the produce hot path and the place where a client
could make the broker hold memory; keeping it apart from the server's
dispatch (`server.py`), from the writing of answers in request order and
the in-flight bound (`response_writer.ResponseWriter`) and from what mutes
or closes it (the reasons reading is paused, a quota's throttle, frame size,
idleness, eviction, the authentication deadline:
`connection_bounds.ConnectionBounds`) keeps each readable. The connection
composes one of each; each sees the connection only through the Protocol
its module declares (`WriterHost`, `BoundedConnection`), so none reaches
into another's state.

Receive path (the produce hot path): an `asyncio.BufferedProtocol` reads
into a staging buffer until a frame's size is known; a frame bigger than
what staging already holds gets a `bytearray` that grows (doubling, up to the
declared size) as its bytes arrive, and the socket reads straight into it
(no StreamReader, no joins). Each frame is handed on as a writable
memoryview the request owns. The staging buffer is one per server, shared
by every connection: the event loop calls `get_buffer`, reads the socket and
calls `buffer_updated` in one step, so no two connections ever use it at
once; a connection keeps only the bytes of an incomplete frame between
reads, and an idle one holds no receive buffer.

Memory and connection bounds (`limits.py`): frames over
`socket.request.max.bytes` are refused; receive buffers and unanswered
frames draw on the `queued.max.request.bytes` pool, and a connection that
needs more than the pool has stops reading until bytes are released; a
connection silent for `connections.max.idle.ms` (also one stuck in the middle
of a frame) is closed by one periodic sweep; connections beyond
`max.connections` / `max.connections.per.ip` are closed right after accept.

TLS (an SSL or SASL_SSL listener): the accepted TCP connection is upgraded
with `loop.start_tls` (what is read before it is held for it: `tls_upgrade.py`), bounded by
`TLS_HANDSHAKE_TIMEOUT_S`; a failed handshake (a plaintext client, an
untrusted client certificate, garbage) is reported to the listener, which
logs it, and the connection closes. asyncio's TLS transport feeds this same
buffered protocol, so the receive path below is the same with and without
TLS (file ranges are read in chunks and encrypted under TLS: `response_writer.py`).

Authentication: once the connection is open the listener gives it a
`Session` (`session.py`): its principal, and until SASL authentication
succeeds the tighter frame bound `sasl.server.max.receive.size`; a failed
authentication makes the session close the connection after its answer.

What a connection needs from the listener that accepted it is `ConnectionHost`:
the shared staging buffer and memory pool, the frame size bound, admission
(and leaving) against the connection quota, a counter of connections closed
by a bound, the TLS context and sessions, and `dispatch`. `KafkaServer` is one;
this module never imports server.py, so the server's internals stay its own.

This module must never decode request bodies or touch partition data; it
hands whole frames to `ConnectionHost.dispatch`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from typing import Callable, Protocol, cast

from .connection_bounds import PAUSE_POOL, BoundsHost, ConnectionBounds
from .framing import SIZE
from .limits import MemoryPool
from .response_writer import Answer, ResponseWriter
from .session import Session
from .tls_upgrade import EarlyBytes, hold, start_tls

log = logging.getLogger("kelp.broker.kafka")

# Reads land in this buffer first (one per server, shared by its connections); a frame
# larger than it gets a buffer of its own, grown as its bytes arrive, and the socket
# then reads the rest straight into that.
STAGING_BYTES = 64 * 1024
# Pause writing to the transport above this many queued bytes until it drains.
WRITE_HIGH_WATER = 4 << 20
# A large frame's buffer starts at what staging held and doubles (at least by this) up to its size.
GROW_MIN = STAGING_BYTES
# What a connection may read while the memory pool is full (then it stops reading until bytes are released).
POOL_FULL_READ = 1024
# A TLS handshake that takes longer is abandoned (the peer is too slow, or not speaking TLS at all).
TLS_HANDSHAKE_TIMEOUT_S = 10.0



class ConnectionHost(BoundsHost, Protocol):
    """The listener a connection belongs to, as the connection sees it (`KafkaServer` is one); with what its
    bounds ask (`BoundsHost`: whether a session is a broker's, counting a connection a bound closed)."""

    max_request_bytes: int  # socket.request.max.bytes
    # Reads land here first; one buffer shared by every connection of the listener (see get_buffer).
    staging: bytearray
    staging_view: memoryview

    def pool_for(self, session: Session | None) -> MemoryPool:
        """The memory pool a connection in `session`'s state draws on (None: not open yet): one for connections not
        yet authenticated, one for brokers', the `queued.max.request.bytes` pool for the other clients."""
        ...

    def admit(self, conn: _Connection, ip: str) -> bool:
        """Count a new connection against the connection quota and keep it; False: close it."""
        ...

    def leave(self, conn: _Connection, ip: str) -> None:
        """The admitted connection `conn` is gone: its quota slot is free, the listener forgets it."""
        ...

    @property
    def tls_context(self) -> ssl.SSLContext | None:
        """The listener's TLS context (None: plaintext); connections are upgraded with it as they are accepted."""
        ...

    def open_session(self, peer: str, certificate: bytes | None) -> Session | None:
        """The session of a connection that is open (after its TLS handshake; `certificate` is the client's, in
        DER); None: close it."""
        ...

    def tls_failed(self, peer: str, exc: BaseException) -> None:
        """The TLS handshake of the connection from `peer` failed with `exc` (the connection closes)."""
        ...

    send_buffer_bytes: int  # socket.send.buffer.bytes (-1: the kernel's), for connections that fetch as consumers

    def dispatch(self, frame: memoryview, peer: str, *, session: Session,
                 release: Callable[[], None] | None = None,
                 consumer_fetching: Callable[[], None] | None = None,
                 throttle: Callable[[int], None] | None = None) -> asyncio.Future[Answer] | None:
        """Start handling one request frame; the future's result is what to send (`response_writer.Answer`).
        None: close the connection. `release` hands the frame's bytes back to the pool; `consumer_fetching`
        is called by a consumer's fetch (it sizes the connection's send buffer); `throttle(ms)` by a request
        over its client quota (the connection reads nothing for that long)."""
        ...


class _Connection(asyncio.BufferedProtocol):
    """One client connection: frames read into buffers that grow as bytes arrive, answered in order.

    Receive: `get_buffer` hands the transport either the server's staging
    buffer (frame headers and small frames, several per read), with the
    bytes of this connection's incomplete frame, if any, copied to its front,
    or, once a frame's size is known and it does not fit staging, the free
    end of that frame's own `bytearray`, which starts at the bytes staging
    held and doubles up to the declared size as they arrive (each growth is
    granted by the server's memory pool first), so large produce requests are
    read with no intermediate copies and a frame declared but not sent costs
    only what was sent. Between reads a connection holds only `_tail`, the
    bytes of an incomplete small frame (usually none), or its large frame.
    Each frame is dispatched as a writable memoryview the request owns (the
    produce path rewrites offsets in place); its bytes stay charged to the
    pool until the request is answered.
    Composed of two parts, each seeing the connection through a Protocol of its module: `writer`
    (`ResponseWriter`: every request runs in its own task, the writer sends the answers in arrival order)
    and `bounds` (`ConnectionBounds`: what mutes or closes it). Reading pauses at MAX_IN_FLIGHT requests,
    while the socket's send buffer is over WRITE_HIGH_WATER and while the connection waits for the memory
    pool or a quota's throttle time.
    """

    def __init__(self, server: ConnectionHost) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._ip = ""
        self._tail = b""  # bytes of an incomplete frame that fits staging, kept between reads
        self._frame: bytearray | None = None  # a large frame being received in place
        self._frame_size = 0  # its declared size
        self._frame_got = 0  # bytes received
        self._frame_cap = 0  # bytes granted by the pool (its buffer grows to this at the next read)
        self._overdraft = False  # the pool let this frame grow beyond its limit
        self._frame_over = 0  # bytes of the frame charged beyond the pool (the overdraft)
        self.bounds = bounds = ConnectionBounds(self, server)  # what mutes or closes it
        self.writer = ResponseWriter(self, bounds)  # its answers, in request order
        self._throttle = bounds.throttle  # handed to every request (bound once)
        self.closed = False  # no more requests will be read
        self.lost = False  # the transport is gone
        self._admitted = False
        self._in_flight = 0  # requests dispatched and not finished
        self.last_active = time.monotonic()  # last bytes read, request finished or response sent
        self.session: Session | None = None  # given once the connection is open (after a TLS handshake)
        self._tls = False
        self._send_buffer_set = False  # socket.send.buffer.bytes applied (at the first consumer fetch)
        self._handshake: asyncio.Task[None] | None = None
        # The memory pool this connection's receive buffers and frames draw on now (`ConnectionHost.pool_for`); a
        # frame keeps the pool it was charged to until it is answered.
        self.pool = server.pool_for(None)
        self._pool_check = False  # the session's state changed: move to its pool once no large frame is in progress
        self.opened_at = time.monotonic()

    # -- transport callbacks ----------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream server (`loop.create_server`) hands its protocols an asyncio.Transport.
        self.transport = stream = cast(asyncio.Transport, transport)
        peername = transport.get_extra_info("peername")
        self.peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        self._ip = peername[0] if peername else "?"
        if not self.server.admit(self, self._ip):
            self.closed = self.lost = True
            transport.close()
            return
        self._admitted = True
        context = self.server.tls_context
        if context is not None:
            self._tls = True
            # What uvloop reads before `start_tls` takes the transport is held for the handshake (tls_upgrade.py).
            early = hold(stream, self)
            self._handshake = asyncio.get_running_loop().create_task(self._start_tls(stream, context, early))
            return
        self._open(stream, None)

    async def _start_tls(self, raw: asyncio.Transport, context: ssl.SSLContext, early: EarlyBytes) -> None:
        """Upgrade the accepted connection to TLS; this protocol reads and writes through the TLS transport after."""
        try:
            stream = await start_tls(raw, self, early, context, timeout_s=TLS_HANDSHAKE_TIMEOUT_S)
        except (OSError, ssl.SSLError, ConnectionError, TimeoutError) as exc:
            self.server.tls_failed(self.peer, exc)
            self.closed = True
            return
        finally:
            self._handshake = None
        if stream is None or self.lost or self.closed:
            self.closed = True
            if stream is not None:
                stream.close()
            return
        ssl_object = stream.get_extra_info("ssl_object")
        certificate = ssl_object.getpeercert(binary_form=True) if isinstance(ssl_object, ssl.SSLObject) else None
        self._open(stream, certificate)

    def _open(self, stream: asyncio.Transport, certificate: bytes | None) -> None:
        """The connection is open (after TLS, if any): its session, then the writer."""
        self.transport = stream
        session = self.server.open_session(self.peer, certificate)
        if session is None:
            self.closed = True
            stream.close()
            return
        self.session = session
        self.last_active = self.opened_at = time.monotonic()
        self._switch_pool()
        stream.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.writer.start(stream, tls=self._tls)
        if self._tail and self._frame is None and not self.closed:
            self.get_buffer(0)  # what arrived before the session: back into staging, and parsed now
            self.buffer_updated(0)

    def pause_writing(self) -> None:
        self.writer.pause_writing()

    def resume_writing(self) -> None:
        self.writer.resume_writing()

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None:
            got = self._frame_got
            if got == len(frame):
                if self._frame_cap <= got:  # read while waiting for the pool: never hand out nothing
                    grow = min(GROW_MIN, self._frame_size - got)
                    self.pool.charge(grow)
                    self._frame_cap += grow
                # Grow to what the pool granted (the transport's view of the last read died with
                # that read; should one still be alive, the bytes move to a new buffer).
                try:
                    frame.extend(bytes(self._frame_cap - got))
                except BufferError:
                    grown = bytearray(self._frame_cap)
                    grown[:got] = frame
                    self._frame = frame = grown
            return memoryview(frame)[got:]
        # The shared staging buffer: valid until the `buffer_updated` that follows this call
        # (the event loop makes both calls in one step). `_tail` stays authoritative until then.
        tail = self._tail
        server = self.server
        if tail:
            server.staging[: len(tail)] = tail
        view = server.staging_view[len(tail) :]
        pool = self.pool
        limit = pool.limit
        if limit is not None and limit - pool.used < len(view):
            # The pool is (nearly) full: read no more than fits it, at least POOL_FULL_READ bytes.
            return view[: max(limit - pool.used, POOL_FULL_READ)]
        return view

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        if self._frame is not None:
            self._frame_got += nbytes
            if self._frame_got == self._frame_size:
                frame = self._frame
                over = self._frame_over if self._overdraft else None
                self._overdraft = False
                self._frame = None
                self._frame_size = self._frame_got = self._frame_cap = self._frame_over = 0
                self._handle_frame(frame, over=over)
                if self._pool_check:
                    self._switch_pool()
            elif self._frame_got == self._frame_cap and not self._try_grow():
                self._wait_for_pool(grow=True)
            return
        tail = len(self._tail)
        self._tail = b""
        pool = self.pool
        self._parse_staging(tail + nbytes)
        held = len(self._tail) - tail  # the bytes of an incomplete small frame are held too
        if held > 0:
            pool.charge(held)
        elif held < 0:
            pool.release(-held)
        if self._pool_check and self._frame is None:
            self._switch_pool()
        elif pool.exhausted and self._frame is None:
            self._wait_for_pool(grow=False)

    def _parse_staging(self, end: int) -> None:
        """Dispatch the whole frames in staging[:end]; keep an incomplete one in `_tail`."""
        staging = self.server.staging
        start = 0
        while not self.closed:
            available = end - start
            if available < 4:
                break
            (size,) = SIZE.unpack_from(staging, start)
            session = self.session
            if session is None:
                # TLS: bytes that came with the handshake's last message, before `_start_tls` resumed and opened
                # the session (at most one read); kept, and parsed once the session is open (`_open`).
                break
            if size < session.min_frame_bytes or size > session.max_frame_bytes:
                self.bounds.refuse_size(size, session)
                self._close_after_responses()
                return
            begin = start + 4
            if available - 4 >= size:
                frame = staging[begin : begin + size]  # small frame: one copy out of staging
                start = begin + size
                self.pool.charge(size)
                if not self._handle_frame(frame):
                    return
                continue
            if size > len(staging) - 4:
                # Too big for staging: a buffer of its own, holding what arrived and growing as more does.
                got = end - begin
                self._frame = bytearray(staging[begin:end])
                self._frame_size, self._frame_got, self._frame_cap = size, got, got
                self.pool.charge(got)  # already read
                start = end
                if not self._try_grow():
                    self._wait_for_pool(grow=True)
            break
        if start < end and not self.closed:
            self._tail = bytes(self.server.staging_view[start:end])

    # -- the memory pool ----------------------------------------------------
    def _try_grow(self) -> bool:
        """Reserve the next growth of the large frame (doubling, up to its size) from the pool."""
        cap = self._frame_cap
        want = min(self._frame_size, max(2 * cap, cap + GROW_MIN)) - cap
        pool = self.pool
        if self._overdraft:
            pool.charge_over(want)
            self._frame_over += want
            grant = want
        else:
            grant = pool.try_grow(want, min(want, GROW_MIN))
        self._frame_cap += grant
        return grant > 0

    def _wait_for_pool(self, *, grow: bool) -> None:
        if self.bounds.paused & PAUSE_POOL or self.closed:
            return
        self.bounds.pause(PAUSE_POOL)
        if grow:
            self.pool.wait_to_grow(self)
        else:
            self.pool.wait_to_read(self)

    # `limits.PoolWaiter`: the pool calls these back.
    def pool_grow(self) -> bool:
        """The pool released bytes: True when this connection got its growth (or left) and reads again."""
        if self.closed or self._frame is None:
            return True
        if not self._try_grow():
            return False
        self.bounds.resume(PAUSE_POOL)
        return True

    def pool_overdraft(self) -> None:
        """The pool lets this frame grow beyond its limit until it is answered."""
        if self._frame is None or self.closed:
            self.pool.end_overdraft(self, 0)
            return
        self._overdraft = True
        self._try_grow()
        self.bounds.resume(PAUSE_POOL)

    def pool_resume(self) -> None:
        self.bounds.resume(PAUSE_POOL)

    def _switch_pool(self) -> None:
        """Move to the pool of the session's state (`ConnectionHost.pool_for`), taking the bytes of an incomplete
        small frame along; called where no large frame is in progress. Frames in flight stay with their pool."""
        self._pool_check = False
        old, new = self.pool, self.server.pool_for(self.session)
        if new is old:
            return
        waiting = bool(self.bounds.paused & PAUSE_POOL)
        if waiting:
            old.forget(self)
        self.pool = new
        held = len(self._tail)
        if held:
            old.release(held)
            new.charge(held)
        if waiting:
            self.bounds.resume(PAUSE_POOL)
        if new.exhausted and self._frame is None:
            self._wait_for_pool(grow=False)

    def _release_receive_buffers(self) -> None:
        pool = self.pool
        pool.forget(self)
        held = len(self._tail) + (self._frame_cap - self._frame_over if self._frame is not None else 0)
        self._tail = b""
        self._frame = None
        if self._overdraft:
            self._overdraft = False
            pool.end_overdraft(self, self._frame_over)
        self._frame_over = 0
        if held:
            pool.release(held)

    def eof_received(self) -> bool:
        if self._frame is not None or self._tail:
            log.warning("connection from %s closed in the middle of a request", self.peer)
        self._close_after_responses()
        self._release_receive_buffers()
        # Keep a plain transport open until the writer has sent what is in flight (TLS shuts down on its own).
        return not self._tls

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._admitted:
            return
        self._admitted = False
        self.server.leave(self, self._ip)
        self.lost = True
        self.closed = True
        self._release_receive_buffers()
        self.writer.lose()
        self.bounds.stop()

    # -- requests -------------------------------------------------------
    def _handle_frame(self, frame: bytearray, *, over: int | None = None) -> bool:
        """Dispatch one frame (its bytes already charged to the pool, `over` of them as the
        overdraft if it had it); False when the connection is closing."""
        size = len(frame)
        released = False
        pool = self.pool

        def release() -> None:
            """The frame's bytes go back to the pool: when the request is answered, or earlier when its
            handler is done with them (a produce once appended, before it waits for the ISR)."""
            nonlocal released
            if not released:
                released = True
                self._finished(pool, size, over)

        session = self.session
        assert session is not None, "no frame is read before the connection is open"
        was_authenticated = session.authenticated
        try:
            item = self.server.dispatch(memoryview(frame), self.peer, session=session, release=release,
                                        consumer_fetching=None if self._send_buffer_set else self._consumer_fetching,
                                        throttle=self._throttle)
        except BaseException:
            release()
            raise
        if item is None:
            release()
            self._close_after_responses()
            return False
        self._in_flight += 1
        if session.authenticated != was_authenticated:
            self._pool_check = True  # SASL authentication completed: the connection moves to its principal's pool

        def answered(_f: asyncio.Future[Answer]) -> None:
            self._answered()
            release()

        item.add_done_callback(answered)
        self.writer.push(item)
        if session.closing:  # a failed authentication: its answer is the last
            self._close_after_responses()
            return False
        return True

    def _consumer_fetching(self) -> None:
        """This connection fetches as a consumer: its send buffer becomes `socket.send.buffer.bytes`, once.

        Why only then: librdkafka reads a 10 MiB fetch 25% slower through the kernel's autotuned buffer
        (4 MiB pushes that it receives in bursts) than through Kafka's 100 KiB, while Kelp's own followers
        replicate 1.5x faster through the autotuned one: 100 KiB makes each 1 MiB answer ten trips through
        the leader's busy event loop (docs/performance.md). A connection that never fetches as a consumer
        (followers, producers) keeps the kernel's buffer; Kafka sets the one size on every connection.
        """
        self._send_buffer_set = True
        size = self.server.send_buffer_bytes
        transport = self.transport
        if size == -1 or transport is None or self.lost:
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
            except OSError as exc:  # a closing socket: nothing to size
                log.debug("could not set SO_SNDBUF of the connection from %s: %s", self.peer, exc)

    def _answered(self) -> None:
        self._in_flight -= 1
        self.last_active = time.monotonic()

    def _finished(self, pool: MemoryPool, size: int, over: int | None) -> None:
        """A frame's bytes go back to the pool it was charged to (once per frame: see `release` above)."""
        if over is not None:
            size -= over
            pool.end_overdraft(self, over)
        pool.release(size)

    def _close_after_responses(self) -> None:
        """Stop reading; the writer answers what is in flight, then closes."""
        if self.closed:
            return
        self.closed = True
        if self.transport is not None and not self.lost:
            try:
                self.transport.pause_reading()
            except Exception:
                pass
        self.writer.end()

    def abort(self) -> asyncio.Task[None] | None:
        """Server stop: drop what is in flight and close now."""
        self.closed = True
        if self._handshake is not None:
            self._handshake.cancel()
        writer = self.writer.abort()
        if self.transport is not None:
            self.transport.abort()
        return writer

    # -- what the writer and the bounds see (`WriterHost`, `BoundedConnection`) ----------------------------------
    def writer_stopped(self) -> None:
        self.closed = True

    @property
    def busy(self) -> bool:
        return bool(self._in_flight) or self.writer.busy

    @property
    def handshaking(self) -> bool:
        return self._handshake is not None

    def partial_request(self) -> tuple[int | None, int] | None:
        if self._frame is not None:
            return self._frame_size, self._frame_got
        tail = self._tail
        if len(tail) >= 4:
            return SIZE.unpack_from(tail)[0], len(tail) - 4
        return (None, len(tail)) if tail else None

    def drop(self) -> None:
        self._close_after_responses()
        self._release_receive_buffers()
        if self.writer.task is None and self.transport is not None and not self.lost:
            self.transport.close()  # not open yet (a TLS handshake): no writer to close it
