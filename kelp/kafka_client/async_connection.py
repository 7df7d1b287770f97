"""One asyncio Kafka-protocol connection to one broker: send a request, await its response.

Why: the broker's own client paths (the replica fetcher, REST consumers of remote coordinators, transaction
markers) run on the broker's event loop and must never block it. The protocol — framing, pairing replies by
correlation id, size bounds, the SASL exchange, ApiVersions, naming failures — is `protocol.py`'s
`ClientProtocol`, with no I/O and shared with the blocking connection; this class only moves its bytes over an
asyncio stream:

- one request in flight (an `asyncio.Lock`), the connection opened on first use; a replica fetcher sends one
  request per source broker at a time, so pipelining would buy nothing;
- every step bounded: connecting (with the TLS handshake and the SASL exchange, when `security` asks for
  them) by the connection's timeout, sending and reading the whole reply by one deadline per request
  (`asyncio.timeout`, which, unlike `wait_for` on Python 3.11, never swallows a cancellation); a read never
  asks for more than the frame being read still needs (`ClientProtocol.bytes_wanted`);
- SASL re-authentication (KIP-368) before the session the broker announced runs out, on the same connection;
- any failure — refused, timed out, closed mid-reply, a reply out of step, a cancellation mid-request — drops
  the stream and raises a `BrokerUnavailable` naming the broker (an authentication the broker refused:
  `AuthenticationFailed`; a cancellation is re-raised as itself); the next request connects again.

What it must never do: wait without a deadline, retry by itself (that is the caller's `RetryPolicy`), or call
anything that blocks the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from kafka.protocol.api_message import ApiMessage

from .driver import Driver
from .framing import EncodableRequest
from .protocol import Authenticated, Event, Negotiated, Response, expect

__all__ = ["AsyncConnection"]

T = TypeVar("T")


class AsyncConnection(Driver):
    """A connection to the broker at `host:port` over an asyncio stream (`Driver` has the arguments)."""

    _reader: asyncio.StreamReader | None = None
    _writer: asyncio.StreamWriter | None = None

    def _init_io(self) -> None:
        self._lock = asyncio.Lock()

    async def request(self, request: ApiMessage | EncodableRequest, version: int, *, timeout_s: float | None = None,
                      decoder: Callable[[bytes], Any] | None = None) -> Any:
        """Send `request` at `version` and return its decoded response; `timeout_s` overrides the
        connection's bound for this request (a fetch that may wait on the broker's side, say); `decoder`
        decodes the reply instead of kafka-python (`framing.decode_response`)."""

        async def roundtrip() -> Any:
            self.protocol.send(request, version, decoder=decoder)
            return expect(await self._next_event(), Response).value

        return await self._run(self.timeout_s if timeout_s is None else timeout_s, roundtrip)

    async def api_versions(self) -> Mapping[int, tuple[int, int]]:
        """The broker's version ranges by api key (ApiVersions v3, asked once per connection)."""

        async def negotiate() -> Mapping[int, tuple[int, int]]:
            if self.protocol.versions is None:
                self.protocol.negotiate()
                return expect(await self._next_event(), Negotiated).versions
            return self.protocol.versions

        return await self._run(self.timeout_s, negotiate)

    async def close(self) -> None:
        writer = self._writer
        self._drop()
        if writer is not None:
            try:
                async with asyncio.timeout(2.0):
                    await writer.wait_closed()
            except (OSError, TimeoutError):
                pass

    async def _run(self, bound: float, step: Callable[[], Awaitable[T]]) -> T:
        """`step` on the connection (connected, authenticated) within `bound`, one at a time; any failure
        drops the connection and is raised as the protocol names it."""
        async with self._lock:
            try:
                await self._connected()
                if self.protocol.reauthentication_due(asyncio.get_running_loop().time()):
                    async with asyncio.timeout(self.timeout_s):
                        await self._authenticate()
                async with asyncio.timeout(bound):
                    return await step()
            except BaseException as exc:
                self._drop()  # a cancellation too: the stream is out of step
                raise self.protocol.failure(exc, bound_s=bound) from None

    async def _next_event(self) -> Event:
        """Write what the protocol queued and read until it completes an event."""
        assert self._reader is not None and self._writer is not None
        while True:
            data = self.protocol.bytes_to_send()
            if data:
                self._writer.write(data)
                await self._writer.drain()
            events = self.protocol.receive(await self._reader.read(self.protocol.bytes_wanted()))
            if events:
                return events[0]

    async def _connected(self) -> None:
        if self._reader is not None and self._writer is not None and not self._writer.is_closing():
            return
        self._drop()
        context = self.security.ssl_context
        try:
            async with asyncio.timeout(self.timeout_s):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, limit=1 << 20, ssl=context,
                    server_hostname=self.host if context is not None else None)
                if self.security.sasl is not None:
                    await self._authenticate()
        except BaseException as exc:
            self._drop()
            raise self.protocol.failure(exc, bound_s=self.timeout_s, connecting=self.security.protocol) from None

    async def _authenticate(self) -> None:
        """The SASL exchange (`ClientProtocol.authenticate`) on the stream."""
        assert self.security.sasl is not None
        self.protocol.authenticate(self.security.sasl, asyncio.get_running_loop().time())
        expect(await self._next_event(), Authenticated)

    def _drop(self) -> None:
        self.protocol.reset()
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

