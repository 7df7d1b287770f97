"""A Kafka-protocol connection from one broker to another (replica fetching).

Why: followers pull from leaders with the same Fetch API consumers use
(`replica_id` = this broker's id), and ask OffsetForLeaderEpoch where an
epoch ended before they fetch after a leader change. Requests and responses
are encoded by kafka-python's schema classes, as in the server; the records
of a fetch response stay one `bytes` blob per partition (whole batches as the
leader stored them), never decoded record by record.

One request in flight per connection: the replica fetcher sends one fetch
per source broker at a time, so pipelining would buy nothing. Every read is
bounded by `timeout_s`; a broken connection raises `PeerError` and is
reopened by the next call.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

__all__ = ["PeerConnection", "PeerError"]

_SIZE = struct.Struct(">i")


class PeerError(ConnectionError):
    """The peer broker could not be reached or answered garbage."""


def _response_class(request: Any) -> Any:
    import sys

    cls = type(request)
    base = cls.mro()[1] if getattr(cls, "_class_version", None) is not None else cls
    module = sys.modules[base.__module__]
    return getattr(module, base.__name__[: -len("Request")] + "Response")


class PeerConnection:
    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._corr = 0
        self._lock = asyncio.Lock()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=1 << 20), self.timeout_s
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise PeerError(f"cannot connect to broker at {self.address}: {exc or type(exc).__name__}") from None

    async def request(self, request: Any, version: int, *, timeout_s: float | None = None) -> Any:
        """Send one request and decode its response (same version)."""
        async with self._lock:
            if self._writer is None or self._writer.is_closing():
                await self._connect()
            assert self._reader is not None and self._writer is not None
            self._corr = (self._corr + 1) & 0x7FFFFFFF
            corr = self._corr
            request.with_header(correlation_id=corr, client_id=self.client_id)
            data = request.encode(version=version, header=True, framed=True)
            try:
                self._writer.write(bytes(data))
                await self._writer.drain()
                head = await asyncio.wait_for(self._reader.readexactly(4), timeout_s or self.timeout_s)
                (size,) = _SIZE.unpack(head)
                if size < 4 or size > 1 << 30:
                    raise PeerError(f"broker at {self.address} sent a response frame of {size} bytes")
                frame = await asyncio.wait_for(self._reader.readexactly(size), timeout_s or self.timeout_s)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                self._drop()
                raise PeerError(f"request to broker at {self.address} failed: {exc or type(exc).__name__}") from None
            except BaseException:
                self._drop()  # cancelled mid-request: the stream is out of step
                raise
            try:
                resp = _response_class(request).decode(frame, version=version, header=True)
            except Exception as exc:
                self._drop()
                raise PeerError(f"undecodable response from broker at {self.address}: {exc}") from None
            if resp.header.correlation_id != corr:
                self._drop()
                raise PeerError(f"broker at {self.address} answered correlation id {resp.header.correlation_id}, "
                                f"expected {corr}")
            return resp

    def _drop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def close(self) -> None:
        writer = self._writer
        self._drop()
        if writer is not None:
            try:
                await asyncio.wait_for(writer.wait_closed(), 2.0)
            except (OSError, asyncio.TimeoutError):
                pass
