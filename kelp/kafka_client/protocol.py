"""The Kafka client protocol without I/O: bytes and requests in, bytes to write and completed replies out.

Why: the blocking connection (Spark's workers, the CLI) and the asyncio one (the replica fetcher, REST
consumers, transaction markers) must speak the protocol identically — pair replies with requests, frame,
bound sizes, authenticate, negotiate versions and name what went wrong the same way. Written twice, the two
copies drift; so, in the sans-I/O style of h11 and hyper's h2, the protocol is this one object and each
connection is only a driver that moves bytes between it and a socket or a stream. It is tested with no
socket at all (`tests/kafka_client/test_client_protocol.py`).

`ClientProtocol` is the state of one connection to one broker:

- `send(request, version)` frames the request with the next correlation id (`framing.py`) and queues its
  bytes; `bytes_to_send()` hands them to the driver, which writes them.
- `receive(data)` takes whatever bytes arrived — any fragmentation, several replies in one chunk — and
  returns the events completed: a `Response` per reply, paired with its request by correlation id. Kafka
  answers a connection's requests in order, so a reply must answer the oldest request in flight; one that
  answers another request out of turn, or an id no request in flight has, is a `BadResponse`. A size
  prefix out of bounds is refused as soon as its four bytes arrive, before any of the frame is kept.
  `receive(b"")` is the end of the stream: with a request in flight, a `BrokerUnavailable` that says how
  much of the reply had come. `bytes_wanted()` is how many bytes complete the frame being read, so a
  driver never reads past it.
- SASL (`authenticate(credentials, now)`): the exchange of `sasl.py` runs on the replies by itself, each
  next request queued as the reply before it arrives, until an `Authenticated` event; a refusal is
  `AuthenticationFailed`. `reauthentication_due(now)` says when the session the broker announced
  (KIP-368) must be renewed. While authenticating, no other request may be sent (Kafka serves none).
- ApiVersions (`negotiate()`): a `Negotiated` event with the broker's ranges; `version(api_key, lo, hi)`
  picks the highest version both sides speak, or names the gap.
- `failure(exc, ...)`: the one mapping from what a driver caught (a timeout, an OSError, a TLS error) to
  the client's errors, each naming the broker.

Once a call raised, the stream is out of step: the protocol is broken and every later call raises the same
error until `reset()`, which a driver calls when it drops the connection (the correlation ids go on
counting, so a late reply of an old connection can never pass for a new one's).

This module must never do I/O, read a clock (times are passed in), sleep, or import a networking module
(`tests/layout` checks); `ssl` is imported for its exception class only.
"""

from __future__ import annotations

import ssl
import struct
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest

from .errors import BadResponse, BrokerTimeout, BrokerUnavailable, ErrorResponse, KafkaClientError, error_name
from .framing import (
    MAX_RESPONSE_BYTES,
    CorrelationIds,
    EncodableRequest,
    decode_response,
    encode_request,
    response_size,
)
from .sasl import Exchange, SaslCredentials, authentication, reauthenticate_after_s

__all__ = ["ClientProtocol", "Response", "Authenticated", "Negotiated", "Event", "expect",
           "API_VERSIONS_VERSION", "UNSUPPORTED_VERSION"]

API_VERSIONS_VERSION = 3  # v3 carries the client's software name (KIP-511)
UNSUPPORTED_VERSION = 35
_CORRELATION = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class Response:
    """The reply to the request sent with `correlation_id`, decoded."""

    correlation_id: int
    value: Any


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The SASL exchange succeeded; the broker's session lasts `session_lifetime_ms` (0: no limit)."""

    session_lifetime_ms: int


@dataclass(frozen=True, slots=True)
class Negotiated:
    """The broker's ApiVersions answer: api key -> (lowest, highest) version it serves."""

    versions: Mapping[int, tuple[int, int]]


Event = Response | Authenticated | Negotiated
E = TypeVar("E", Response, Authenticated, Negotiated)


def expect(event: Event, kind: type[E]) -> E:
    """`event` as the `kind` a driver awaits: with one request in flight, the event completed is the one
    awaited, so anything else is a bug in the driver."""
    if not isinstance(event, kind):
        raise AssertionError(f"a driver awaited {kind.__name__}, the protocol completed {event!r}")
    return event


class _Purpose(Enum):
    CALLER = "caller"
    SASL = "sasl"
    VERSIONS = "versions"


@dataclass(frozen=True, slots=True)
class _InFlight:
    correlation_id: int
    request: ApiMessage | EncodableRequest
    version: int
    decoder: Callable[[bytes], Any] | None
    purpose: _Purpose


class ClientProtocol:
    """One connection's protocol state (see the module docstring): `address` names the broker in errors."""

    def __init__(self, *, address: str, client_id: str, max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.address = address
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        self._ids = CorrelationIds()
        self._outgoing = bytearray()
        # The reply being read: its size prefix's bytes until all four came, then its announced size and the
        # pieces of its frame so far (joined once, when the last piece comes: one copy however it was cut).
        self._prefix = bytearray()
        self._size: int | None = None
        self._parts: list[bytes] = []
        self._have = 0
        self._in_flight: deque[_InFlight] = deque()
        self._exchange: Exchange | None = None
        self._auth_began = 0.0
        self._reauth_at: float | None = None
        self._versions: dict[int, tuple[int, int]] | None = None
        self._broken: KafkaClientError | None = None

    # -- state -----------------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """How many requests await their reply."""
        return len(self._in_flight)

    @property
    def authenticating(self) -> bool:
        return self._exchange is not None

    @property
    def versions(self) -> Mapping[int, tuple[int, int]] | None:
        """The broker's version ranges once negotiated on this connection, else None."""
        return self._versions

    def reset(self) -> None:
        """Forget the stream (the driver dropped the connection); the correlation ids go on counting."""
        self._outgoing.clear()
        self._prefix.clear()
        self._size = None
        self._parts = []
        self._have = 0
        self._in_flight.clear()
        self._exchange = None
        self._reauth_at = None
        self._versions = None
        self._broken = None

    # -- requests out ----------------------------------------------------------------------------------
    def send(self, request: ApiMessage | EncodableRequest, version: int, *,
             decoder: Callable[[bytes], Any] | None = None) -> int:
        """Queue `request` at `version`; returns its correlation id. `decoder` decodes its reply instead of
        kafka-python (`framing.decode_response`)."""
        if self._exchange is not None:
            raise RuntimeError(f"a request to broker at {self.address} cannot be sent while SASL authentication "
                               "is in progress")
        return self._queue(request, version, decoder, _Purpose.CALLER)

    def bytes_to_send(self) -> bytes:
        """What to write to the broker now (empty: nothing); handed out once."""
        data = bytes(self._outgoing)
        self._outgoing.clear()
        return data

    def authenticate(self, credentials: SaslCredentials, now: float) -> None:
        """Start the SASL exchange (on an idle connection); `now` is the driver's clock, from which the
        re-authentication time is counted."""
        self._idle("SASL authentication")
        self._exchange = authentication(credentials, address=self.address)
        self._auth_began = now
        request, version = next(self._exchange)
        self._queue(request, version, None, _Purpose.SASL)

    def reauthentication_due(self, now: float) -> bool:
        """True when the session the broker announced must be renewed before the next request (KIP-368)."""
        return self._reauth_at is not None and now >= self._reauth_at

    def negotiate(self, *, software: tuple[str, str] = ("kelp", "1")) -> None:
        """Ask the broker which versions it serves (ApiVersions v3, naming this client's software)."""
        name, version = software
        request = ApiVersionsRequest(client_software_name=name, client_software_version=version)
        self._queue(request, API_VERSIONS_VERSION, None, _Purpose.VERSIONS)

    def version(self, api_key: int, lowest: int, highest: int) -> int:
        """The highest version of `api_key` in both this client's [lowest, highest] and the broker's range."""
        if self._versions is None:
            raise RuntimeError(f"no ApiVersions answer from broker at {self.address} yet (call negotiate)")
        theirs = self._versions.get(api_key)
        if theirs is None or theirs[1] < lowest or theirs[0] > highest:
            served = "not at all" if theirs is None else f"v{theirs[0]}..v{theirs[1]}"
            raise ErrorResponse(f"broker at {self.address} serves api key {api_key} {served}; this client speaks "
                                f"v{lowest}..v{highest}", UNSUPPORTED_VERSION, address=self.address)
        return min(highest, theirs[1])

    # -- bytes in --------------------------------------------------------------------------------------
    def bytes_wanted(self) -> int:
        """How many more bytes complete the size prefix or the frame being read (at least 1)."""
        if self._size is None:
            return 4 - len(self._prefix)
        return self._size - self._have

    def receive(self, data: bytes) -> list[Event]:
        """The events `data` completes (b"": the broker closed the stream)."""
        self._check()
        try:
            if not data:
                self._closed()
                return []
            events: list[Event] = []
            at = 0
            while at < len(data):
                frame, at = self._take(data, at)
                if frame is not None and (event := self._complete(frame)) is not None:
                    events.append(event)
            return events
        except KafkaClientError as exc:
            self._broken = exc
            raise

    # -- errors ----------------------------------------------------------------------------------------
    def failure(self, exc: BaseException, *, bound_s: float, connecting: str | None = None) -> BaseException:
        """What a driver raises for `exc`, caught during a request bounded by `bound_s` or, with `connecting`
        (the security protocol), while connecting; a cancellation or an interrupt is itself."""
        address = self.address
        if isinstance(exc, KafkaClientError):
            return exc
        if isinstance(exc, TimeoutError):
            if connecting is not None:
                return BrokerTimeout(f"cannot connect to broker at {address} within {bound_s:g}s ({connecting})",
                                     address=address)
            return BrokerTimeout(f"broker at {address} did not answer within {bound_s:g}s", address=address)
        if connecting is not None and isinstance(exc, ssl.SSLError):
            return BrokerUnavailable(f"TLS handshake with broker at {address} failed: {exc}", address=address)
        if isinstance(exc, OSError) and connecting is not None:
            return BrokerUnavailable(f"cannot connect to broker at {address}: {exc}", address=address)
        if isinstance(exc, OSError):
            return BrokerUnavailable(f"request to broker at {address} failed: {exc}", address=address)
        return exc

    # -- inside ----------------------------------------------------------------------------------------
    def _queue(self, request: ApiMessage | EncodableRequest, version: int, decoder: Callable[[bytes], Any] | None,
               purpose: _Purpose) -> int:
        self._check()
        correlation_id = self._ids.next()
        self._outgoing += encode_request(request, version, correlation_id=correlation_id, client_id=self.client_id)
        self._in_flight.append(_InFlight(correlation_id, request, version, decoder, purpose))
        return correlation_id

    def _idle(self, what: str) -> None:
        if self._in_flight or self._exchange is not None:
            raise RuntimeError(f"{what} with broker at {self.address} needs an idle connection "
                               f"({len(self._in_flight)} requests in flight)")

    def _check(self) -> None:
        if self._broken is not None:
            raise self._broken

    def _take(self, data: bytes, at: int) -> tuple[bytes | None, int]:
        """Consume what `data[at:]` holds of the reply being read: (its frame once complete, else None; where
        the rest of `data` begins). The size prefix is checked as soon as its fourth byte comes."""
        if self._size is None:
            end = min(at + 4 - len(self._prefix), len(data))
            self._prefix += data[at:end]
            if len(self._prefix) < 4:
                return None, end
            self._size = response_size(bytes(self._prefix), address=self.address, limit=self.max_response_bytes)
            self._prefix.clear()
            at = end
        end = min(at + self._size - self._have, len(data))
        piece = data if at == 0 and end == len(data) else data[at:end]  # a whole read: kept as it is
        if piece:
            self._parts.append(piece)
            self._have += len(piece)
        if self._have < self._size:
            return None, end
        frame = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        self._size, self._parts, self._have = None, [], 0
        return frame, end

    def _complete(self, frame: bytes) -> Event | None:
        answered: int = _CORRELATION.unpack_from(frame, 0)[0]
        if not self._in_flight:
            raise BadResponse(f"broker at {self.address} answered correlation id {answered} with no request in "
                              "flight", address=self.address)
        pending = self._in_flight[0]
        if answered != pending.correlation_id:
            turn = ("out of turn (a broker answers in order)"
                    if any(p.correlation_id == answered for p in self._in_flight) else "an id no request in flight has")
            raise BadResponse(f"broker at {self.address} answered correlation id {answered}, expected "
                              f"{pending.correlation_id}: {turn}", address=self.address)
        self._in_flight.popleft()
        value = decode_response(pending.request, pending.version, frame, correlation_id=answered,
                                address=self.address, decoder=pending.decoder)
        if pending.purpose is _Purpose.SASL:
            return self._authentication_step(value)
        if pending.purpose is _Purpose.VERSIONS:
            return self._negotiated(value)
        return Response(answered, value)

    def _authentication_step(self, response: ApiMessage) -> Authenticated | None:
        assert self._exchange is not None
        try:
            request, version = self._exchange.send(response)
        except StopIteration as done:
            self._exchange = None
            lifetime = int(done.value)
            after = reauthenticate_after_s(lifetime)
            self._reauth_at = None if after is None else self._auth_began + after
            return Authenticated(lifetime)
        except KafkaClientError:  # refused, or the server's answers cannot be trusted: the exchange is over
            self._exchange = None
            raise
        self._queue(request, version, None, _Purpose.SASL)
        return None

    def _negotiated(self, response: ApiMessage) -> Negotiated:
        if response.error_code:
            raise ErrorResponse(f"broker at {self.address} refused ApiVersions v{API_VERSIONS_VERSION}: "
                                f"{error_name(response.error_code)}", response.error_code, address=self.address)
        self._versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
        return Negotiated(dict(self._versions))

    def _closed(self) -> None:
        if not self._in_flight:
            self._broken = BrokerUnavailable(f"broker at {self.address} closed the connection", address=self.address)
            return
        expected, have = (4, len(self._prefix)) if self._size is None else (self._size, self._have)
        during = " while authenticating" if self._in_flight[0].purpose is _Purpose.SASL else ""
        raise BrokerUnavailable(f"broker at {self.address} closed the connection{during} after {have} of "
                                f"{expected} bytes of a reply", address=self.address)

