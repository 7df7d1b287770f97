"""One asyncio Kafka-protocol connection to one broker: send a request, await its response.

Why: the broker's own client paths (the replica fetcher today, REST
consumers of remote coordinators with issue 22) run on the broker's event
loop and must never block it. Framing and checks are `framing.py`'s, shared
with the blocking connection, which behaves the same way:

- one request in flight (an `asyncio.Lock`), the connection opened on first
  use; a replica fetcher sends one request per source broker at a time, so
  pipelining would buy nothing;
- every step bounded: connecting by the connection's timeout, sending and
  reading the whole reply by one deadline per request (`asyncio.timeout`,
  which, unlike `wait_for` on Python 3.11, never swallows a cancellation);
- any failure — refused, timed out, closed mid-reply, a reply out of step,
  a cancellation mid-request — drops the stream and raises a
  `BrokerUnavailable` naming the broker (a cancellation is re-raised as
  itself); the next request connects again.

What it must never do: wait without a deadline, retry by itself (that is the
caller's `RetryPolicy`), or call anything that blocks the loop.
"""

from __future__ import annotations

import asyncio

from kafka.protocol.api_message import ApiMessage

from .errors import BrokerTimeout, BrokerUnavailable
from .framing import MAX_RESPONSE_BYTES, CorrelationIds, decode_response, encode_request, response_size

__all__ = ["AsyncConnection"]


class AsyncConnection:
    """A connection to the broker at `host:port`; `timeout_s` bounds connecting and each request."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float = 30.0,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = CorrelationIds()
        self._lock = asyncio.Lock()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def request(self, request: ApiMessage, version: int, *, timeout_s: float | None = None) -> ApiMessage:
        """Send `request` at `version` and return its decoded response; `timeout_s` overrides the
        connection's bound for this request (a fetch that may wait on the broker's side, say)."""
        async with self._lock:
            correlation_id = self._ids.next()
            data = encode_request(request, version, correlation_id=correlation_id, client_id=self.client_id)
            bound = self.timeout_s if timeout_s is None else timeout_s
            try:
                reader, writer = await self._connected()
                async with asyncio.timeout(bound):
                    writer.write(data)
                    await writer.drain()
                    size = response_size(await reader.readexactly(4), address=self.address,
                                         limit=self.max_response_bytes)
                    frame = await reader.readexactly(size)
                return decode_response(request, version, frame, correlation_id=correlation_id,
                                       address=self.address)
            except BrokerUnavailable:
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

    async def _connected(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is not None and self._writer is not None and not self._writer.is_closing():
            return self._reader, self._writer
        self._drop()
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        except TimeoutError:
            raise BrokerTimeout(f"cannot connect to broker at {self.address} within {self.timeout_s:g}s",
                                address=self.address) from None
        except OSError as exc:
            raise BrokerUnavailable(f"cannot connect to broker at {self.address}: {exc}",
                                    address=self.address) from None
        self._reader, self._writer = reader, writer
        return reader, writer

    def _drop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
