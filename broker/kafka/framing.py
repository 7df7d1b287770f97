"""Kafka wire framing: 4-byte size prefix, request header, response header.

Why: the request header must be read before the body can be decoded (the API
key and version choose the schema), and the response header's shape depends
on the API version (flexible versions add a tagged-field byte; ApiVersions
never does). Keeping this byte-level code in one place keeps the server loop
readable and testable.

This module must never do I/O; it works on bytes given to it. It also names
what a response is written as (`Buffer`), which the connection writes and the
handlers build.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO, Protocol

__all__ = ["RequestHeader", "FrameError", "parse_request_header", "response_frame", "SIZE", "Buffer", "FileRange"]

SIZE = struct.Struct(">i")
_FIXED = struct.Struct(">hhih")
_RESP = struct.Struct(">ii")
_RESP_FLEX = struct.Struct(">iiB")


class FileRange(Protocol):
    """A byte range of an open file, written with sendfile and then closed (a `replica.results.SegmentSlice`)."""

    @property
    def file(self) -> BinaryIO: ...

    @property
    def position(self) -> int: ...

    @property
    def size(self) -> int: ...

    def __len__(self) -> int: ...  # the byte count, `size`

    def close(self) -> None: ...


# One piece of a response, in the order written: bytes, or a file range sent without copying it.
Buffer = bytes | bytearray | memoryview | FileRange


class FrameError(ValueError):
    """The bytes are not a Kafka request; the connection must be closed."""


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def _read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise FrameError("truncated varint in request header tagged fields")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise FrameError("varint too long in request header tagged fields")


def parse_request_header(frame: memoryview, *, flexible: bool) -> RequestHeader:
    """Header v1 (api key, version, correlation id, nullable client id) + v2 tagged fields."""
    if len(frame) < _FIXED.size:
        raise FrameError(f"request of {len(frame)} bytes is shorter than a request header ({_FIXED.size} bytes)")
    api_key, version, corr, n = _FIXED.unpack_from(frame, 0)
    pos = _FIXED.size
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(frame):
            raise FrameError(f"client id length {n} runs past the end of the {len(frame)}-byte request")
        client_id = bytes(frame[pos : pos + n]).decode("utf-8", "replace")
        pos += n
    elif n != -1:
        raise FrameError(f"invalid client id length {n}")
    if flexible:
        count, pos = _read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
            if pos > len(frame):
                raise FrameError("request header tagged field runs past the end of the request")
    return RequestHeader(api_key, version, corr, client_id, pos)


def response_frame(correlation_id: int, body: bytes | bytearray | memoryview | int, *, flexible_header: bool) -> bytes:
    """Size prefix + response header (v1 adds an empty tagged-field section); `body` or its length."""
    n = body if isinstance(body, int) else len(body)
    if flexible_header:
        return _RESP_FLEX.pack(n + 5, correlation_id, 0)
    return _RESP.pack(n + 4, correlation_id)
