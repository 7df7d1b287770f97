"""The Kafka protocol's framing for a client: a request out as bytes, a reply's bytes back as a response.

Why: the blocking and the asyncio connection must frame, pair and check
replies identically, so that part is here once, with no I/O, used by the
protocol core under both (`protocol.ClientProtocol`). The codecs are kafka-python's schema classes
(`request.encode`, `Response.decode`), never written again — except where a
caller passes a hand-written decoder for a hot reply (the follower's
FetchResponse, `fetch_response.py`); the response
class is kafka-python's own pairing (the class registered for the request's
API key, at the request's version). A reply is checked before it is decoded:
its size must lie within bounds and its correlation id must be the one sent,
else the connection is out of step and `BadResponse` says so, naming the
broker.

This module must never do I/O, sleep or import a networking module.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Protocol

from kafka.protocol.api_message import ApiMessage

from .errors import BadResponse

__all__ = ["SIZE", "MAX_RESPONSE_BYTES", "CorrelationIds", "encode_request", "response_size", "decode_response"]

SIZE = struct.Struct(">i")
# A sanity bound, not a tuning knob: a size beyond it is garbage (or another protocol), never a reply.
MAX_RESPONSE_BYTES = 1 << 30
_CORRELATION = struct.Struct(">i")


class EncodableRequest(Protocol):
    """What `encode_request` needs of a request: kafka-python's classes, or a hand-written encoder of the
    same bytes (`fetch_request.FollowerFetch`)."""

    header: Any

    def expect_response(self) -> bool: ...

    def with_header(self, *, correlation_id: int, client_id: str) -> Any: ...

    def encode(self, *, version: int, header: bool = ..., framed: bool = ...) -> Any: ...


class CorrelationIds:
    """The ids one connection puts in its requests: 1, 2, ... wrapping within int32."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        self._last = (self._last + 1) & 0x7FFFFFFF
        return self._last


def encode_request(request: ApiMessage | EncodableRequest, version: int, *, correlation_id: int,
                   client_id: str) -> bytes:
    """The request at `version` with its header, size-prefixed, ready to write."""
    if not request.expect_response():
        # Such a request (a Produce with acks=0) gets no reply: waiting for one would only time out.
        raise ValueError(f"{type(request).__name__} expects no response; this client only sends requests that do")
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


def response_size(head: bytes, *, address: str, limit: int = MAX_RESPONSE_BYTES) -> int:
    """The size a reply's 4-byte prefix announces, refused when it cannot be a reply (below 4, above `limit`)."""
    size: int = SIZE.unpack(head)[0]
    if size < 4 or size > limit:
        raise BadResponse(f"broker at {address} sent a response frame of {size} bytes (a reply holds 4 to "
                          f"{limit})", address=address)
    return size


def decode_response(request: ApiMessage | EncodableRequest, version: int, frame: bytes, *, correlation_id: int,
                    address: str, decoder: Callable[[bytes], Any] | None = None) -> Any:
    """The response to `request` (encoded by `encode_request` at `version`) from its frame, size prefix removed;
    with `decoder`, what it makes of the frame (a hand-written decoder for that response and version, e.g.
    `fetch_response.decode_fetch_response`; a ValueError from it is a bad reply)."""
    answered: int = _CORRELATION.unpack_from(frame, 0)[0]
    if answered != correlation_id:
        raise BadResponse(f"broker at {address} answered correlation id {answered}, expected {correlation_id}",
                          address=address)
    if decoder is not None:
        try:
            return decoder(frame)
        except ValueError as exc:
            raise BadResponse(f"broker at {address} sent a bad reply: {exc}", address=address) from None
    header = request.header
    if header is None:
        raise ValueError("the request was never encoded with a header (use encode_request)")
    response_class = header.get_response_class()
    try:
        response: ApiMessage = response_class.decode(frame, version=version, header=True)
    except Exception as exc:  # any decoder failure means the bytes are not this response
        raise BadResponse(f"broker at {address} sent a reply that is no {response_class.name} v{version}: "
                          f"{exc or type(exc).__name__}", address=address) from None
    return response
