"""The bounds a listener puts on one Kafka connection: frame size, client quota throttle, idleness, eviction, and
the authentication deadline.

Why a module of its own: the connection (`connection.py`) is the receive path, the produce hot path; these are
the decisions that close or mute it — a frame size outside `socket.request.max.bytes` (or, before
authentication, `sasl.server.max.receive.size`), a client over its quota muted for its throttle time (KIP-219),
a connection silent for `connections.max.idle.ms` or not authenticated within `kelp.authentication.timeout.ms`
(both found by the listener's one periodic sweep, `KafkaServer._sweep_idle`), and the least recently used idle
connection evicted for a new one (`limits.ConnectionQuota`). Each says why in the log and counts the closing
against the config key that bounded it. It is mixed into the connection, like `response_writer.py`; the state
it reads is declared here.

This module must never read from the socket or decode anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Protocol

from .framing import SIZE
from .response_writer import PAUSE_POOL, PAUSE_THROTTLE, Answer
from .session import Session

__all__ = ["BoundsHost", "ConnectionBounds"]

log = logging.getLogger("kelp.broker.kafka")


class BoundsHost(Protocol):
    """What the bounds ask of the listener (`connection.ConnectionHost` has it all)."""

    def is_broker(self, session: Session) -> bool:
        """Whether the connection's principal is a broker's (its connection is never evicted)."""
        ...

    def count_closed(self, reason: str) -> None:
        """A connection was closed by the bound named `reason` (a config key), for the metrics."""
        ...


class ConnectionBounds:
    """The bounding half of a Kafka connection (`connection._Connection`)."""

    server: BoundsHost
    peer: str
    transport: asyncio.Transport | None
    session: Session | None
    _pending: deque[asyncio.Future[Answer] | None]
    _closed: bool
    _lost: bool
    _writing: bool
    _in_flight: int
    _pause_bits: int
    _handshake: asyncio.Task[None] | None
    _writer: asyncio.Task[None] | None
    _last_active: float
    _opened_at: float
    _tail: bytes
    _frame: bytearray | None
    _frame_size: int
    _frame_got: int
    _unmute: asyncio.TimerHandle | None

    if TYPE_CHECKING:
        def _pause(self, why: int) -> None: ...
        def _resume(self, why: int) -> None: ...
        def _close_after_responses(self) -> None: ...
        def _release_receive_buffers(self) -> None: ...

    def _refuse_size(self, size: int, session: Session) -> None:
        """A frame size outside the bounds: logged with the bound that refused it, the connection closed."""
        authenticated = session.authenticated
        key = "socket.request.max.bytes" if authenticated else "sasl.server.max.receive.size"
        hint = ""
        if (size >> 24) & 0xFF == 0x16 and (size >> 16) & 0xFF == 0x03:
            hint = " (it looks like a TLS handshake: the client uses TLS on a listener without it)"
        what = "request" if authenticated else "request before authentication"
        log.warning("closing connection from %s: %s size %d is outside %d..%d (%s)%s", self.peer, what, size,
                    session.min_frame_bytes, session.max_frame_bytes, key, hint)
        self.server.count_closed(key)
        self._close_after_responses()

    # -- a client over its quota (KIP-219) ----------------------------------------
    def _throttle(self, ms: int) -> None:
        """Over a client quota: read nothing more from this client for `ms` (its answers still go out)."""
        if ms <= 0 or self._closed:
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + ms / 1000
        if self._unmute is not None:
            if self._unmute.when() >= when:
                return
            self._unmute.cancel()
        self._pause(PAUSE_THROTTLE)
        self._unmute = loop.call_at(when, self._end_throttle)

    def _end_throttle(self) -> None:
        self._unmute = None
        self._resume(PAUSE_THROTTLE)

    # -- idle connections, eviction and the authentication deadline (asked by the listener's sweep) ----------
    def _idle(self) -> bool:
        """Silent, nothing in flight and not held back by the broker (see KafkaServer._sweep_idle); a TLS handshake
        has its own bound."""
        return not (
            self._closed or self._pending or self._in_flight or self._writing or self._pause_bits & PAUSE_POOL
            or self._handshake is not None
        )

    def eviction_rank(self) -> int | None:
        """For the connection quota (`limits.ConnectionQuota`): 0 not authenticated yet, 1 an idle client's; None a
        broker's, a busy one or one already closing (never evicted)."""
        if self._closed or self._lost or self._pending or self._in_flight or self._writing:
            return None
        session = self.session
        if session is None or not session.authenticated:
            return 0
        return None if self.server.is_broker(session) else 1

    def evict(self, limit: str) -> None:
        """Closed to make room for a new connection under `limit` (the least recently used idle one)."""
        log.info("closing connection from %s, idle for %.0f ms, to make room for a new one (%s)", self.peer,
                 (time.monotonic() - self._last_active) * 1000, limit)
        self.server.count_closed(f"{limit} (evicted)")
        self._close_after_responses()
        self._release_receive_buffers()
        if self._writer is None and self.transport is not None and not self._lost:
            self.transport.close()  # not open yet (a TLS handshake): no writer to close it

    def _authentication_overdue(self, timeout_s: float, now: float) -> bool:
        """Open (TLS done), not authenticated, and past the authentication deadline."""
        session = self.session
        return session is not None and not session.authenticated and not self._closed \
            and now - self._opened_at > timeout_s

    def _close_unauthenticated(self, timeout_s: float) -> None:
        log.warning("closing connection from %s: not authenticated within %.0f ms (kelp.authentication.timeout.ms)",
                    self.peer, timeout_s * 1000)
        self._close_after_responses()
        self._release_receive_buffers()

    def _close_idle(self, idle_s: float) -> None:
        if self._frame is not None or len(self._tail) >= 4:
            size = self._frame_size if self._frame is not None else SIZE.unpack_from(self._tail)[0]
            got = self._frame_got if self._frame is not None else len(self._tail) - 4
            log.warning(
                "closing connection from %s: no bytes for %.0f ms in the middle of a %d-byte request "
                "(%d bytes received; connections.max.idle.ms)", self.peer, idle_s * 1000, size, got,
            )
        elif self._tail:
            log.warning(
                "closing connection from %s: no bytes for %.0f ms in the middle of a request's size "
                "(%d of 4 bytes received; connections.max.idle.ms)", self.peer, idle_s * 1000, len(self._tail),
            )
        else:  # routine, as in Kafka
            log.debug("closing connection from %s: idle for %.0f ms (connections.max.idle.ms)", self.peer,
                      idle_s * 1000)
        self._close_after_responses()
        self._release_receive_buffers()
