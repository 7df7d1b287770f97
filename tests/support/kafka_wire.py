"""A raw Kafka-protocol client for tests: send one request class, read its response.

Why: some behaviour can only be checked below a client library — a retried
batch with the same producer id/epoch/sequence, an out-of-order sequence, a
bad CRC, a malformed frame, an unknown API key. This speaks the wire with
kafka-python's schema classes over a plain blocking socket (bounded timeouts).
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from kafka.record.memory_records import MemoryRecordsBuilder

__all__ = ["WireClient", "make_batch"]

COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def make_batch(
    records: list[tuple[bytes | None, bytes | None]],
    *,
    compression: str = "none",
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_ms: int | None = None,
    headers: list[tuple[str, bytes]] | None = None,
) -> bytes:
    """One RecordBatch v2 holding (key, value) records."""
    b = MemoryRecordsBuilder(2, COMPRESSION[compression], 1 << 24, offset=0,
                             producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)
    now_ms = int(time.time() * 1000)
    for i, (key, value) in enumerate(records):
        ts = timestamp_ms if timestamp_ms is not None else now_ms + i
        b.append(timestamp=ts, key=key, value=value, headers=list(headers or []))
    b.close()
    return bytes(b.buffer())


class WireClient:
    def __init__(self, bootstrap: str, *, timeout: float = 10.0, client_id: str = "kelp-test-wire") -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.settimeout(timeout)
        self.client_id = client_id
        self._corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        head = self._recv_exact(4)
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def send(self, request: Any, version: int) -> int:
        self._corr += 1
        request.with_header(correlation_id=self._corr, client_id=self.client_id)
        data = request.encode(version=version, header=True, framed=True)
        self.sock.sendall(bytes(data))
        return self._corr

    def request(self, request: Any, version: int) -> Any:
        """Send and decode the matching response (same version)."""
        corr = self.send(request, version)
        frame = self.recv_frame()
        response_class = type(request).header_class  # noqa: F841 - for readers
        resp_cls = _response_class(request)
        resp = resp_cls.decode(frame, version=version, header=True)
        assert resp.header.correlation_id == corr, (resp.header.correlation_id, corr)
        return resp


def _response_class(request: Any) -> Any:
    import sys

    cls = type(request)
    base = cls.mro()[1] if getattr(cls, "_class_version", None) is not None else cls
    module = sys.modules[base.__module__]
    return getattr(module, base.__name__[: -len("Request")] + "Response")
