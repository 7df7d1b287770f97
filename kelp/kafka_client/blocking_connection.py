"""One blocking Kafka-protocol connection to one broker: send a request, wait for its response.

Why: the Spark source runs in Spark's Python workers, plain threads without
an event loop; a task reads one offset range and returns, so a socket with a
deadline is all it needs. Framing and checks are `framing.py`'s, shared with
the asyncio connection, which behaves the same way:

- one request in flight (a lock), the connection opened on first use;
- every step bounded: connecting (with the TLS handshake and the SASL
  exchange, when `security` asks for them) by the connection's timeout,
  sending and reading the whole reply by one deadline per request;
- SASL re-authentication (KIP-368) before the session the broker announced
  runs out, on the same connection (`sasl.py`);
- any failure — refused, timed out, closed mid-reply, a reply out of step —
  drops the socket and raises a `BrokerUnavailable` naming the broker (an
  authentication the broker refused: `AuthenticationFailed`); the next
  request connects again.

What it must never do: block without a deadline, retry by itself (that is the
caller's `RetryPolicy`), or touch an event loop.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Self

from kafka.protocol.api_message import ApiMessage

from .errors import AuthenticationFailed, BrokerTimeout, BrokerUnavailable
from .framing import MAX_RESPONSE_BYTES, CorrelationIds, decode_response, encode_request, response_size
from .sasl import authentication, reauthenticate_after_s
from .security import PLAINTEXT, ConnectionSecurity

__all__ = ["BlockingConnection"]

# The receive buffer starts at most this large and grows only as bytes arrive: a reply announcing a huge
# size costs memory for what it sends, not for what it announces.
_FIRST_CHUNK = 1 << 20


class BlockingConnection:
    """A connection to the broker at `host:port`; `timeout_s` bounds connecting and each request; `security`
    says whether it speaks TLS and authenticates (plaintext by default)."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float = 30.0,
                 max_response_bytes: int = MAX_RESPONSE_BYTES, security: ConnectionSecurity = PLAINTEXT) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.security = security
        self._sock: socket.socket | None = None
        self._reauth_at: float | None = None  # monotonic seconds: re-authenticate before the next request
        self._ids = CorrelationIds()
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def request(self, request: ApiMessage, version: int, *, timeout_s: float | None = None) -> ApiMessage:
        """Send `request` at `version` and return its decoded response; `timeout_s` overrides the
        connection's bound for this request (a fetch that may wait on the broker's side, say)."""
        with self._lock:
            bound = self.timeout_s if timeout_s is None else timeout_s
            try:
                sock = self._sock if self._sock is not None else self._connect()
                if self._reauth_at is not None and time.monotonic() >= self._reauth_at:
                    self._authenticate(sock, time.monotonic() + self.timeout_s)
                return self._roundtrip(sock, request, version, time.monotonic() + bound)
            except (BrokerUnavailable, AuthenticationFailed):
                self._drop()
                raise
            except TimeoutError:
                self._drop()
                raise BrokerTimeout(f"broker at {self.address} did not answer within {bound:g}s",
                                    address=self.address) from None
            except OSError as exc:
                self._drop()
                raise BrokerUnavailable(f"request to broker at {self.address} failed: {exc}",
                                        address=self.address) from None
            except BaseException:
                self._drop()  # interrupted mid-request: the stream is out of step
                raise

    def close(self) -> None:
        with self._lock:
            self._drop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _roundtrip(self, sock: socket.socket, request: ApiMessage, version: int, deadline: float) -> ApiMessage:
        correlation_id = self._ids.next()
        data = encode_request(request, version, correlation_id=correlation_id, client_id=self.client_id)
        self._within(sock, deadline)
        sock.sendall(data)
        size = response_size(self._read(sock, 4, deadline), address=self.address, limit=self.max_response_bytes)
        frame = self._read(sock, size, deadline)
        # No decoder: kafka-python's response class decodes it, an ApiMessage (decode_response's Any is for decoders).
        response: ApiMessage = decode_response(request, version, frame, correlation_id=correlation_id,
                                               address=self.address)
        return response

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.timeout_s
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except TimeoutError:
            raise BrokerTimeout(f"cannot connect to broker at {self.address} within {self.timeout_s:g}s",
                                address=self.address) from None
        except OSError as exc:
            raise BrokerUnavailable(f"cannot connect to broker at {self.address}: {exc}",
                                    address=self.address) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        context = self.security.ssl_context
        try:
            if context is not None:
                self._within(sock, deadline)
                sock = context.wrap_socket(sock, server_hostname=self.host)
            if self.security.sasl is not None:
                self._authenticate(sock, deadline)
        except ssl.SSLError as exc:
            sock.close()
            raise BrokerUnavailable(f"TLS handshake with broker at {self.address} failed: {exc}",
                                    address=self.address) from None
        except TimeoutError:
            sock.close()
            raise BrokerTimeout(f"cannot connect to broker at {self.address} within {self.timeout_s:g}s "
                                f"({self.security.protocol})", address=self.address) from None
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        return sock

    def _authenticate(self, sock: socket.socket, deadline: float) -> None:
        """The SASL exchange (sasl.py) on `sock`; remembers when to run it again."""
        assert self.security.sasl is not None
        exchange = authentication(self.security.sasl, address=self.address)
        step = next(exchange)
        while True:
            try:
                step = exchange.send(self._roundtrip(sock, step[0], step[1], deadline))
            except StopIteration as done:
                after = reauthenticate_after_s(int(done.value))
                self._reauth_at = None if after is None else time.monotonic() + after
                return

    def _within(self, sock: socket.socket, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)

    def _read(self, sock: socket.socket, n: int, deadline: float) -> bytes:
        buf = bytearray(min(n, _FIRST_CHUNK))
        got = 0
        while got < n:
            if got == len(buf):
                buf.extend(bytes(min(n - got, len(buf))))
            self._within(sock, deadline)
            read = sock.recv_into(memoryview(buf)[got:], len(buf) - got)
            if not read:
                raise BrokerUnavailable(f"broker at {self.address} closed the connection after {got} of {n} "
                                        "bytes of a reply", address=self.address)
            got += read
        return bytes(buf)

    def _drop(self) -> None:
        self._reauth_at = None
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
