"""What mutes or closes one Kafka connection: the reasons its reading is paused, a client quota's throttle, and
the bounds that close it — frame size, idleness, eviction, the authentication deadline.

Why an object of its own: the connection (`connection.py`) is the receive path, the produce hot path; these are
the decisions that mute or close it. Reading pauses while any reason holds — MAX_IN_FLIGHT requests unanswered
(`response_writer.py`), waiting for the memory pool (`limits.MemoryPool`), a client over its quota muted for its
throttle time (KIP-219) — and resumes once none is left. A frame size outside `socket.request.max.bytes` (or,
before authentication, `sasl.server.max.receive.size`) closes the connection, as do silence for
`connections.max.idle.ms` and no authentication within `kelp.authentication.timeout.ms` (both found by the
listener's one periodic sweep, `KafkaServer._sweep_idle`), and the least recently used idle connection is evicted
for a new one (`limits.ConnectionQuota`). Each says why in the log and counts the closing against the config key
that bounded it. The connection composes one `ConnectionBounds`; the bounds see the connection as a
`BoundedConnection` and the listener as a `BoundsHost`, and nothing else of either.

This module must never read from the socket or decode anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from .session import Session

__all__ = ["BoundedConnection", "BoundsHost", "ConnectionBounds", "PAUSE_IN_FLIGHT", "PAUSE_POOL", "PAUSE_THROTTLE"]

log = logging.getLogger("kelp.broker.kafka")

# The reasons a connection's reading is paused for (bits of `ConnectionBounds.paused`; it reads again once none is
# left):
PAUSE_IN_FLIGHT = 1  # MAX_IN_FLIGHT requests unanswered (response_writer.py pauses and resumes it)
PAUSE_POOL = 2  # waiting for the memory pool (connection.py's receive path)
PAUSE_THROTTLE = 4  # over a client quota: muted for its throttle time (Kafka's KIP-219)


class BoundsHost(Protocol):
    """What the bounds ask of the listener (`connection.ConnectionHost` has it all)."""

    def is_broker(self, session: Session) -> bool:
        """Whether the connection's principal is a broker's (its connection is never evicted)."""
        ...

    def count_closed(self, reason: str) -> None:
        """A connection was closed by the bound named `reason` (a config key), for the metrics."""
        ...


class BoundedConnection(Protocol):
    """The connection, as its bounds see it (`connection._Connection` is one)."""

    peer: str
    transport: asyncio.Transport | None  # the one reading is paused on (None: not connected yet)
    session: Session | None  # None until the connection is open (after a TLS handshake)
    closed: bool  # no more requests will be read
    lost: bool  # the transport is gone
    last_active: float  # monotonic seconds of its last read, answer or write (reading again counts)
    opened_at: float  # monotonic seconds it opened at (the authentication deadline counts from there)

    @property
    def busy(self) -> bool:
        """Requests in flight or answers being written."""
        ...

    @property
    def handshaking(self) -> bool:
        """Its TLS handshake is under way (a bound of its own)."""
        ...

    def partial_request(self) -> tuple[int | None, int] | None:
        """The request it is in the middle of receiving, as (its declared size, None while the size itself is
        incomplete; the bytes received); None: between requests."""
        ...

    def drop(self) -> None:
        """Read no more, free the receive buffers; what is in flight is answered, then the connection closes."""
        ...


class ConnectionBounds:
    """What mutes or closes one connection (`connection._Connection` composes one)."""

    __slots__ = ("_conn", "_host", "paused", "_unmute")

    def __init__(self, conn: BoundedConnection, host: BoundsHost) -> None:
        self._conn = conn
        self._host = host
        self.paused = 0  # the PAUSE_* reasons reading is paused for
        self._unmute: asyncio.TimerHandle | None = None  # the end of a client quota's throttle time

    # -- pausing reading (the writer's `ReadGate`) ----------------------------------------------------------
    def pause(self, why: int) -> None:
        conn = self._conn
        if not self.paused and conn.transport is not None and not conn.lost:
            conn.transport.pause_reading()
        self.paused |= why

    def resume(self, why: int) -> None:
        if not self.paused & why:
            return
        self.paused &= ~why
        conn = self._conn
        if not self.paused and not conn.closed and conn.transport is not None:
            conn.last_active = time.monotonic()  # waiting on the broker is not idleness
            conn.transport.resume_reading()

    # -- a client over its quota (KIP-219) ----------------------------------------
    def throttle(self, ms: int) -> None:
        """Over a client quota: read nothing more from this client for `ms` (its answers still go out)."""
        if ms <= 0 or self._conn.closed:
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + ms / 1000
        if self._unmute is not None:
            if self._unmute.when() >= when:
                return
            self._unmute.cancel()
        self.pause(PAUSE_THROTTLE)
        self._unmute = loop.call_at(when, self._end_throttle)

    def _end_throttle(self) -> None:
        self._unmute = None
        self.resume(PAUSE_THROTTLE)

    def stop(self) -> None:
        """The transport is gone: no throttle time ends any more."""
        if self._unmute is not None:
            self._unmute.cancel()

    # -- the frame size -------------------------------------------------------------------------------------
    def refuse_size(self, size: int, session: Session) -> None:
        """A frame size outside the bounds: logged with the bound that refused it (the caller closes)."""
        authenticated = session.authenticated
        key = "socket.request.max.bytes" if authenticated else "sasl.server.max.receive.size"
        hint = ""
        if (size >> 24) & 0xFF == 0x16 and (size >> 16) & 0xFF == 0x03:
            hint = " (it looks like a TLS handshake: the client uses TLS on a listener without it)"
        what = "request" if authenticated else "request before authentication"
        log.warning("closing connection from %s: %s size %d is outside %d..%d (%s)%s", self._conn.peer, what, size,
                    session.min_frame_bytes, session.max_frame_bytes, key, hint)
        self._host.count_closed(key)

    # -- idle connections, eviction and the authentication deadline (asked by the listener's sweep) ----------
    @property
    def last_active(self) -> float:
        """The connection's last read, answer or write (the quota evicts the least recent first)."""
        return self._conn.last_active

    def idle(self) -> bool:
        """Silent, nothing in flight and not held back by the broker (see KafkaServer._sweep_idle); a TLS handshake
        has its own bound."""
        conn = self._conn
        return not (conn.closed or conn.busy or self.paused & PAUSE_POOL or conn.handshaking)

    def eviction_rank(self) -> int | None:
        """For the connection quota (`limits.ConnectionQuota`): 0 not authenticated yet, 1 an idle client's; None a
        broker's, a busy one or one already closing (never evicted)."""
        conn = self._conn
        if conn.closed or conn.lost or conn.busy:
            return None
        session = conn.session
        if session is None or not session.authenticated:
            return 0
        return None if self._host.is_broker(session) else 1

    def evict(self, limit: str) -> None:
        """Closed to make room for a new connection under `limit` (the least recently used idle one)."""
        conn = self._conn
        log.info("closing connection from %s, idle for %.0f ms, to make room for a new one (%s)", conn.peer,
                 (time.monotonic() - conn.last_active) * 1000, limit)
        self._host.count_closed(f"{limit} (evicted)")
        conn.drop()

    def authentication_overdue(self, timeout_s: float, now: float) -> bool:
        """Open (TLS done), not authenticated, and past the authentication deadline."""
        conn = self._conn
        session = conn.session
        return session is not None and not session.authenticated and not conn.closed \
            and now - conn.opened_at > timeout_s

    def close_unauthenticated(self, timeout_s: float) -> None:
        log.warning("closing connection from %s: not authenticated within %.0f ms (kelp.authentication.timeout.ms)",
                    self._conn.peer, timeout_s * 1000)
        self._conn.drop()

    def close_idle(self, idle_s: float) -> None:
        conn = self._conn
        partial = conn.partial_request()
        if partial is None:  # routine, as in Kafka
            log.debug("closing connection from %s: idle for %.0f ms (connections.max.idle.ms)", conn.peer,
                      idle_s * 1000)
        elif partial[0] is not None:
            log.warning(
                "closing connection from %s: no bytes for %.0f ms in the middle of a %d-byte request "
                "(%d bytes received; connections.max.idle.ms)", conn.peer, idle_s * 1000, partial[0], partial[1],
            )
        else:
            log.warning(
                "closing connection from %s: no bytes for %.0f ms in the middle of a request's size "
                "(%d of 4 bytes received; connections.max.idle.ms)", conn.peer, idle_s * 1000, partial[1],
            )
        conn.drop()
