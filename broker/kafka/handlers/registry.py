"""The table from Kafka API key to handler, filled by `@handles` decorators.

Why: ApiVersions must advertise exactly what the broker serves, and other
parts (the group coordinator) add APIs without editing the server. A handler
module registers itself at import; `handlers/__init__.py` imports them all.

This module must never import the server or any handler module (no cycles);
it only holds the table.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

__all__ = ["handles", "HandlerSpec", "RawResponse", "RequestContext", "get_handler", "all_handlers",
           "response_class_for"]

log = logging.getLogger("kelp.broker.kafka")


@dataclass
class RequestContext:
    """What a handler knows about the request besides its body."""

    broker: Any
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    server: Any = None
    extra: dict = field(default_factory=dict)
    # Gives the request frame's bytes back to the listener's memory pool before the answer is sent.
    release_frame: Callable[[], None] | None = None

    @property
    def client(self) -> str:
        return f"{self.client_id or '-'}@{self.peer}"


Handler = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True)
class HandlerSpec:
    api_key: int
    name: str
    request_class: Any
    response_class: Any
    min_version: int
    max_version: int
    func: Handler
    # decoder(body: memoryview, version) -> request; None: request_class.decode
    decoder: Callable[[memoryview, int], Any] | None = None

    def flexible(self, version: int) -> bool:
        return bool(self.request_class.flexible_version_q(version))


_HANDLERS: dict[int, HandlerSpec] = {}


def response_class_for(request_class: Any) -> Any:
    module = sys.modules[request_class.__module__]
    name = request_class.__name__
    if not name.endswith("Request"):
        raise TypeError(f"{name} is not a kafka-python request class")
    return getattr(module, name[: -len("Request")] + "Response")


def handles(
    request_class: Any,
    *,
    min_version: int = 0,
    max_version: int | None = None,
    response_class: Any = None,
    decoder: Callable[[memoryview, int], Any] | None = None,
) -> Callable[[Handler], Handler]:
    """Register `async def handler(ctx, request) -> response | None` for an API.

    Versions outside [min_version, max_version] are answered UNSUPPORTED_VERSION.
    """
    top = request_class.max_version if max_version is None else max_version
    if top > request_class.max_version:
        raise ValueError(f"{request_class.__name__} supports at most v{request_class.max_version}, not v{top}")

    def register(func: Handler) -> Handler:
        key = request_class.API_KEY
        previous = _HANDLERS.get(key)
        if previous is not None and previous.func is not func:
            log.warning("handler for %s replaced: %s -> %s", request_class.name, previous.func.__qualname__,
                        func.__qualname__)
        _HANDLERS[key] = HandlerSpec(
            api_key=key,
            name=request_class.name[: -len("Request")] if request_class.name.endswith("Request")
            else request_class.name,
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


class RawResponse:
    """A response body already encoded as a list of buffers (sent without joining them).

    A buffer may also be a file range with `file`, `position`, `size` and
    `close()` (a `SegmentSlice`): the server sends it with sendfile and closes it.
    """

    __slots__ = ("buffers", "size")

    def __init__(self, buffers: list, size: int) -> None:
        self.buffers = buffers
        self.size = size

    def close(self) -> None:
        for buf in self.buffers:
            close = getattr(buf, "close", None)
            if close is not None and not isinstance(buf, (bytes, bytearray, memoryview)):
                close()
