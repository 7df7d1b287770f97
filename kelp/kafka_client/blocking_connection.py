"""One blocking Kafka-protocol connection to one broker: send a request, wait for its response.

Why: the Spark source runs in Spark's Python workers, plain threads without an event loop, and the CLI checks
a listener's security with one connection; a socket with a deadline is all they need. The protocol —
framing, pairing replies by correlation id, size bounds, the SASL exchange, ApiVersions, naming failures — is
`protocol.py`'s `ClientProtocol`, with no I/O and shared with the asyncio connection; this class only moves
its bytes over a socket:

- one request in flight (a lock), the connection opened on first use;
- every step bounded: connecting (with the TLS handshake and the SASL exchange, when `security` asks for
  them) by the connection's timeout, sending and reading the whole reply by one deadline per request;
- a read asks for no more than the frame being read still needs, and at most 1 MiB at a time: a reply
  announcing a huge size costs memory for what it sends, not for what it announces;
- SASL re-authentication (KIP-368) before the session the broker announced runs out, on the same connection;
- any failure — refused, timed out, closed mid-reply, a reply out of step — drops the socket and raises a
  `BrokerUnavailable` naming the broker (an authentication the broker refused: `AuthenticationFailed`); the
  next request connects again.

What it must never do: block without a deadline, retry by itself (that is the caller's `RetryPolicy`), or
touch an event loop.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Self, TypeVar

from kafka.protocol.api_message import ApiMessage

from .driver import Driver
from .protocol import Authenticated, Event, Negotiated, Response, expect

__all__ = ["BlockingConnection"]

T = TypeVar("T")
_CHUNK = 1 << 20  # the most one read asks for


class BlockingConnection(Driver):
    """A connection to the broker at `host:port` over a socket with deadlines (`Driver` has the arguments)."""

    _sock: socket.socket | None = None

    def _init_io(self) -> None:
        self._lock = threading.Lock()

    def request(self, request: ApiMessage, version: int, *, timeout_s: float | None = None) -> ApiMessage:
        """Send `request` at `version` and return its decoded response; `timeout_s` overrides the
        connection's bound for this request (a fetch that may wait on the broker's side, say)."""

        def roundtrip(sock: socket.socket, deadline: float) -> ApiMessage:
            self.protocol.send(request, version)
            # No decoder: kafka-python's response class decodes it, an ApiMessage.
            response: ApiMessage = expect(self._next_event(sock, deadline), Response).value
            return response

        return self._run(self.timeout_s if timeout_s is None else timeout_s, roundtrip)

    def api_versions(self) -> Mapping[int, tuple[int, int]]:
        """The broker's version ranges by api key (ApiVersions v3, asked once per connection)."""

        def negotiate(sock: socket.socket, deadline: float) -> Mapping[int, tuple[int, int]]:
            if self.protocol.versions is not None:
                return self.protocol.versions
            self.protocol.negotiate()
            return expect(self._next_event(sock, deadline), Negotiated).versions

        return self._run(self.timeout_s, negotiate)

    def close(self) -> None:
        with self._lock:
            self._drop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, bound: float, step: Callable[[socket.socket, float], T]) -> T:
        """`step(socket, deadline)` on the connection (connected, authenticated) within `bound`, one at a time;
        any failure drops the connection and is raised as the protocol names it."""
        with self._lock:
            try:
                sock = self._sock if self._sock is not None else self._connect()
                if self.protocol.reauthentication_due(time.monotonic()):
                    self._authenticate(sock, time.monotonic() + self.timeout_s)
                return step(sock, time.monotonic() + bound)
            except BaseException as exc:
                self._drop()  # interrupted mid-request too: the stream is out of step
                raise self.protocol.failure(exc, bound_s=bound) from None

    def _next_event(self, sock: socket.socket, deadline: float) -> Event:
        """Write what the protocol queued and read until it completes an event, by `deadline`."""
        while True:
            data = self.protocol.bytes_to_send()
            if data:
                self._within(sock, deadline)
                sock.sendall(data)
            self._within(sock, deadline)
            events = self.protocol.receive(sock.recv(min(self.protocol.bytes_wanted(), _CHUNK)))
            if events:
                return events[0]

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.timeout_s
        context = self.security.ssl_context
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                self._within(sock, deadline)
                sock = context.wrap_socket(sock, server_hostname=self.host)
            if self.security.sasl is not None:
                self._authenticate(sock, deadline)
        except BaseException as exc:
            if sock is not None:
                sock.close()
            self.protocol.reset()
            raise self.protocol.failure(exc, bound_s=self.timeout_s, connecting=self.security.protocol) from None
        self._sock = sock
        return sock

    def _authenticate(self, sock: socket.socket, deadline: float) -> None:
        """The SASL exchange (`ClientProtocol.authenticate`) on `sock`, by `deadline`."""
        assert self.security.sasl is not None
        self.protocol.authenticate(self.security.sasl, time.monotonic())
        expect(self._next_event(sock, deadline), Authenticated)

    def _within(self, sock: socket.socket, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)

    def _drop(self) -> None:
        self.protocol.reset()
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
