"""One asyncio Kafka-protocol connection to one broker: send a request, await its response.

Why: the broker's own client paths (the replica fetcher today, REST
consumers of remote coordinators with issue 22) run on the broker's event
loop and must never block it. Framing and checks are `framing.py`'s, shared
with the blocking connection, which behaves the same way:

- one request in flight (an `asyncio.Lock`), the connection opened on first
  use; a replica fetcher sends one request per source broker at a time, so
  pipelining would buy nothing;
- every step bounded: connecting (with the TLS handshake and the SASL
  exchange, when `security` asks for them) by the connection's timeout,
  sending and reading the whole reply by one deadline per request
  (`asyncio.timeout`, which, unlike `wait_for` on Python 3.11, never
  swallows a cancellation);
- SASL re-authentication (KIP-368) before the session the broker announced
  runs out, on the same connection (`sasl.py`);
- any failure — refused, timed out, closed mid-reply, a reply out of step,
  a cancellation mid-request — drops the stream and raises a
  `BrokerUnavailable` naming the broker (an authentication the broker
  refused: `AuthenticationFailed`; a cancellation is re-raised as itself);
  the next request connects again.

What it must never do: wait without a deadline, retry by itself (that is the
caller's `RetryPolicy`), or call anything that blocks the loop.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Callable

from kafka.protocol.api_message import ApiMessage

from .errors import AuthenticationFailed, BrokerTimeout, BrokerUnavailable
from .framing import (
    MAX_RESPONSE_BYTES,
    CorrelationIds,
    EncodableRequest,
    decode_response,
    encode_request,
    response_size,
)
from .sasl import authentication, reauthenticate_after_s
from .security import PLAINTEXT, ConnectionSecurity

__all__ = ["AsyncConnection"]


class AsyncConnection:
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
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reauth_at: float | None = None  # loop time: re-authenticate before the next request
        self._ids = CorrelationIds()
        self._lock = asyncio.Lock()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def request(self, request: ApiMessage | EncodableRequest, version: int, *, timeout_s: float | None = None,
                      decoder: Callable[[bytes], Any] | None = None) -> Any:
        """Send `request` at `version` and return its decoded response; `timeout_s` overrides the
        connection's bound for this request (a fetch that may wait on the broker's side, say); `decoder`
        decodes the reply instead of kafka-python (`framing.decode_response`)."""
        async with self._lock:
            bound = self.timeout_s if timeout_s is None else timeout_s
            try:
                reader, writer = await self._connected()
                loop = asyncio.get_running_loop()
                if self._reauth_at is not None and loop.time() >= self._reauth_at:
                    async with asyncio.timeout(self.timeout_s):
                        await self._authenticate(reader, writer)
                async with asyncio.timeout(bound):
                    return await self._roundtrip(reader, writer, request, version, decoder)
            except (BrokerUnavailable, AuthenticationFailed):
                self._drop()
                raise
            except TimeoutError:
                self._drop()
                raise BrokerTimeout(f"broker at {self.address} did not answer within {bound:g}s",
                                    address=self.address) from None
            except asyncio.IncompleteReadError as exc:
                self._drop()
                raise BrokerUnavailable(f"broker at {self.address} closed the connection after "
                                        f"{len(exc.partial)} of {exc.expected} bytes of a reply",
                                        address=self.address) from None
            except OSError as exc:
                self._drop()
                raise BrokerUnavailable(f"request to broker at {self.address} failed: {exc}",
                                        address=self.address) from None
            except BaseException:
                self._drop()  # cancelled mid-request: the stream is out of step
                raise

    async def close(self) -> None:
        writer = self._writer
        self._drop()
        if writer is not None:
            try:
                async with asyncio.timeout(2.0):
                    await writer.wait_closed()
            except (OSError, TimeoutError):
                pass

    async def _roundtrip(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         request: ApiMessage | EncodableRequest, version: int,
                         decoder: Callable[[bytes], Any] | None = None) -> Any:
        correlation_id = self._ids.next()
        writer.write(encode_request(request, version, correlation_id=correlation_id, client_id=self.client_id))
        await writer.drain()
        size = response_size(await reader.readexactly(4), address=self.address, limit=self.max_response_bytes)
        frame = await reader.readexactly(size)
        return decode_response(request, version, frame, correlation_id=correlation_id, address=self.address,
                               decoder=decoder)

    async def _connected(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is not None and self._writer is not None and not self._writer.is_closing():
            return self._reader, self._writer
        self._drop()
        context = self.security.ssl_context
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, limit=1 << 20, ssl=context,
                    server_hostname=self.host if context is not None else None)
                try:
                    if self.security.sasl is not None:
                        await self._authenticate(reader, writer)
                except BaseException:
                    writer.close()
                    raise
        except TimeoutError:
            raise BrokerTimeout(f"cannot connect to broker at {self.address} within {self.timeout_s:g}s "
                                f"({self.security.protocol})", address=self.address) from None
        except ssl.SSLError as exc:
            raise BrokerUnavailable(f"TLS handshake with broker at {self.address} failed: {exc}",
                                    address=self.address) from None
        except asyncio.IncompleteReadError as exc:
            raise BrokerUnavailable(f"broker at {self.address} closed the connection while authenticating "
                                    f"({len(exc.partial)} of {exc.expected} bytes of a reply)",
                                    address=self.address) from None
        except OSError as exc:
            raise BrokerUnavailable(f"cannot connect to broker at {self.address}: {exc}",
                                    address=self.address) from None
        self._reader, self._writer = reader, writer
        return reader, writer

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The SASL exchange (sasl.py) on the stream; remembers when to run it again."""
        assert self.security.sasl is not None
        exchange = authentication(self.security.sasl, address=self.address)
        step = next(exchange)
        while True:
            response = await self._roundtrip(reader, writer, step[0], step[1])
            try:
                step = exchange.send(response)
            except StopIteration as done:
                after = reauthenticate_after_s(int(done.value))
                self._reauth_at = None if after is None else asyncio.get_running_loop().time() + after
                return

    def _drop(self) -> None:
        self._reauth_at = None
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
