"""The table from Kafka API key to handler, filled by `@handles` decorators.

Why: ApiVersions must advertise exactly what the broker serves, and other
parts (the group coordinator) add APIs without editing the server. A handler
module registers itself at import; `handlers/__init__.py` imports them all.

This module must never import the server or any handler module (no cycles);
it only holds the table and what a handler is given (`RequestContext`).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence, TypeVar

from kafka.protocol.api_message import ApiMessage

from kelp.security.principal import ANONYMOUS, KafkaPrincipal

from ...parts import BrokerParts
from ..append_order import AppendOrder
from ..framing import Buffer
from ..request_time import RequestTime

__all__ = ["handles", "HandlerSpec", "RawResponse", "RequestContext", "get_handler", "all_handlers",
           "response_class_for", "Response"]

log = logging.getLogger("kelp.broker.kafka")


@dataclass
class RequestContext:
    """What a handler knows about the request besides its body."""

    broker: BrokerParts  # the broker's parts: what a handler may call (kelp.broker.parts)
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    # Who sent it: the connection's authenticated principal (User:ANONYMOUS on an unauthenticated listener),
    # and the name of the listener it came in on (`listeners`, e.g. PLAINTEXT or INTERNAL).
    principal: KafkaPrincipal = ANONYMOUS
    listener: str = "PLAINTEXT"
    # An ApiVersions request above the highest version served, answered in v0 without a body (server.py).
    unsupported_version: bool = False
    # Gives the request frame's bytes back to the listener's memory pool before the answer is sent.
    release_frame: Callable[[], None] | None = None
    # Called by a consumer's fetch: the connection sizes its send buffer (socket.send.buffer.bytes) once; None
    # once it has (or outside a connection).
    consumer_fetching: Callable[[], None] | None = None
    # Called with a throttle time (ms) by a request over its client quota: the connection reads nothing from the
    # client for that long (Kafka mutes the channel); None outside a connection.
    throttle: Callable[[int], None] | None = None
    # A Produce's place among its connection's produce requests: they append in arrival order (append_order.py);
    # None outside a connection.
    append_order: AppendOrder | None = None
    # The broker time this request took, while some client has a request_percentage quota (request_time.py);
    # None when none has.
    request_time: RequestTime | None = None

    @property
    def client(self) -> str:
        return f"{self.client_id or '-'}@{self.peer}"


class RawResponse:
    """A response body already encoded as a list of buffers (sent without joining them).

    A buffer may also be a file range (`framing.FileRange`, a `SegmentSlice`): the server sends it with
    sendfile and closes it.
    """

    __slots__ = ("buffers", "size")

    def __init__(self, buffers: Sequence[Buffer], size: int) -> None:
        self.buffers = buffers
        self.size = size

    def close(self) -> None:
        for buf in self.buffers:
            if not isinstance(buf, (bytes, bytearray, memoryview)):
                buf.close()


# What a handler answers: a kafka-python response object, a body already encoded, or None (no answer: acks=0).
Response = ApiMessage | RawResponse | None
# The table holds handlers of every API; each takes its own request type (kafka-python's class, or what its
# `decoder` returns), which only its registration pairs with its decoder: the table cannot name one type.
Handler = Callable[[RequestContext, Any], Awaitable[Response]]
_H = TypeVar("_H", bound=Handler)


@dataclass(frozen=True)
class HandlerSpec:
    api_key: int
    name: str
    request_class: type[ApiMessage]
    response_class: type[ApiMessage]
    min_version: int
    max_version: int
    func: Handler
    # decoder(body: memoryview, version) -> request; None: request_class.decode
    decoder: Callable[[memoryview, int], object] | None = None

    def flexible(self, version: int) -> bool:
        return bool(self.request_class.flexible_version_q(version))


_HANDLERS: dict[int, HandlerSpec] = {}


def response_class_for(request_class: type[ApiMessage]) -> type[ApiMessage]:
    module = sys.modules[request_class.__module__]
    name = request_class.__name__
    if not name.endswith("Request"):
        raise TypeError(f"{name} is not a kafka-python request class")
    response = getattr(module, name[: -len("Request")] + "Response")
    if not (isinstance(response, type) and issubclass(response, ApiMessage)):
        raise TypeError(f"{module.__name__}.{name[: -len('Request')]}Response is not a kafka-python response class")
    return response


def handles(
    request_class: type[ApiMessage],
    *,
    min_version: int = 0,
    max_version: int | None = None,
    response_class: type[ApiMessage] | None = None,
    decoder: Callable[[memoryview, int], object] | None = None,
) -> Callable[[_H], _H]:
    """Register `async def handler(ctx, request) -> response | None` for an API.

    Versions outside [min_version, max_version] are answered UNSUPPORTED_VERSION.
    """
    highest: int = request_class.max_version
    top = highest if max_version is None else max_version
    if top > highest:
        raise ValueError(f"{request_class.__name__} supports at most v{highest}, not v{top}")

    def register(func: _H) -> _H:
        key: int = request_class.API_KEY
        name: str = request_class.name
        previous = _HANDLERS.get(key)
        if previous is not None and previous.func is not func:
            log.warning("handler for %s replaced: %s -> %s", name, previous.func.__qualname__, func.__qualname__)
        _HANDLERS[key] = HandlerSpec(
            api_key=key,
            name=name[: -len("Request")] if name.endswith("Request") else name,
            request_class=request_class,
            response_class=response_class or response_class_for(request_class),
            min_version=min_version,
            max_version=top,
            func=func,
            decoder=decoder,
        )
        return func

    return register


def get_handler(api_key: int) -> HandlerSpec | None:
    return _HANDLERS.get(api_key)


def all_handlers() -> list[HandlerSpec]:
    return [_HANDLERS[k] for k in sorted(_HANDLERS)]
