"""The one reader of JSON request bodies for every HTTP route (the bounded decoder is `kelp.bounded_json`).

Why: every route must refuse the same bad input the same way — a 400 naming
what is wrong, never a 500 — and no body may hold the event loop:

- not UTF-8, not JSON, empty, the wrong top-level type: 400 with the byte,
  line and column;
- `NaN`, `Infinity`, `-Infinity` (Python's json accepts them, JSON does not)
  and numbers that overflow to infinity: 400, so nothing invalid is stored
  and later served;
- nesting deeper than `MAX_JSON_DEPTH`: 400, found by a pre-scan *before*
  the (recursive) C parser runs, so there is no RecursionError;
- lone UTF-16 surrogate escapes (`"\\ud800"`): 400, they cannot be stored
  as UTF-8 text;
- more items in one array than the route allows (the produce `records`
  list, `http.request.max.records`): 413.

A body above `INLINE_MAX_BYTES` is decoded in a worker thread, and piecewise:
the members of the top-level object and the items of the arrays they hold are
parsed one at a time, so the C parser never holds the GIL (and with it the
event loop) for more than one item — a 50 MB body of three million records
used to block every other client for 19 s. The depth pre-scan runs on slices
for the same reason. The body size itself is capped by aiohttp's
`client_max_size` (`http.request.max.bytes`, see `app.py`).

This module must never raise anything but `HttpProblem` for bad input.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, TypeVar

from aiohttp import web

from kelp.bounded_json import MAX_JSON_DEPTH, BodyError, json_value, loads_bounded
from kelp.json_types import JsonValue

from .keys import OFF_LOOP_SLOTS
from .problems import HttpProblem, rest_proxy_path

__all__ = ["read_body", "read_json", "read_json_as", "decode_body", "loads_bounded", "json_value", "BodyError",
           "MAX_JSON_DEPTH", "INLINE_MAX_BYTES", "off_loop"]

log = logging.getLogger("kelp.broker.http")

# Bodies up to this size are decoded on the event loop (well under a millisecond).
INLINE_MAX_BYTES = 64 * 1024

_T = TypeVar("_T")


def decode_body(raw: bytes, *, what: str, expect: type | None, shape_status: int, max_items: int | None,
                limit_name: str) -> JsonValue:
    """Bytes to a JSON value or an `HttpProblem`; runs on the loop or in a worker thread."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HttpProblem(400, f"{what} is not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start} "
                               f"({exc.reason})") from None
    if text.startswith("\ufeff"):
        raise HttpProblem(400, f"{what} starts with a byte order mark; send UTF-8 JSON without one")
    if not text.strip(" \t\r\n"):
        raise HttpProblem(400, f"{what} is empty; a JSON document is required")
    try:
        value = loads_bounded(text, max_items=max_items, limit_name=limit_name)
    except BodyError as exc:
        raise HttpProblem(exc.status, f"{what}: {exc}") from None
    if expect is not None and not isinstance(value, expect):
        kind = "object" if expect is dict else "array" if expect is list else expect.__name__
        raise HttpProblem(shape_status, f"{what} must be a JSON {kind}, got {_json_kind(value)}")
    return value


def _json_kind(value: JsonValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"



async def read_body(request: web.Request, *, what: str = "request body") -> bytes:
    """The request's whole body. A peer that hangs up before sending all of it (its own timeout, a restart) is
    answered 400 naming what was cut off — nobody reads the answer, but it is not a server error, and the log
    says so in one line instead of a 500's traceback."""
    try:
        return await request.read()
    except ConnectionResetError:
        log.info(
            "HTTP %s %s from %s: the client hung up before sending the whole %s", request.method, request.path,
            request.remote, what)
        raise HttpProblem(400, f"the {what} was cut off: the client closed the connection before sending it all",
                          error_code=400) from None

async def read_json(request: web.Request, *, what: str = "request body", expect: type | None = dict,
                    shape_status: int = 400, allow_empty: bool = False, max_items: int | None = None,
                    limit_name: str = "") -> JsonValue:
    """The request's JSON body, validated as the module docstring says (a JSON object unless `expect` says
    otherwise: `list`, or None for any value).

    `allow_empty`: an empty body is `None` (routes where the body is optional).
    """
    raw = await read_body(request, what=what)
    if allow_empty and not raw.strip():
        return None
    return await _decode(request, raw, _same, what=what, expect=expect, shape_status=shape_status,
                         max_items=max_items, limit_name=limit_name)


async def read_json_as(request: web.Request, convert: Callable[[JsonValue], _T], *, what: str = "request body",
                       expect: type | None = dict, shape_status: int = 400, max_items: int | None = None,
                       limit_name: str = "") -> _T:
    """`read_json`, then `convert` (a validation/transformation of the value) in the same step: in the same
    worker thread as the parse for bodies above `INLINE_MAX_BYTES`."""
    return await _decode(request, await read_body(request, what=what), convert, what=what, expect=expect,
                         shape_status=shape_status, max_items=max_items, limit_name=limit_name)


def _same(value: JsonValue) -> JsonValue:
    return value


async def _decode(request: web.Request, raw: bytes, convert: Callable[[JsonValue], _T], *, what: str,
                  expect: type | None, shape_status: int, max_items: int | None, limit_name: str) -> _T:
    if len(raw) <= INLINE_MAX_BYTES and not raw.strip() and rest_proxy_path(request.path):
        # Confluent's REST Proxy validates a missing body as a constraint violation (@NotNull): 422, 422.
        raise HttpProblem(422, f"Payload error. Request body is empty. Data is required ({what}).", error_code=422)

    def work() -> _T:
        value = decode_body(raw, what=what, expect=expect, shape_status=shape_status, max_items=max_items,
                            limit_name=limit_name)
        return convert(value)

    if len(raw) <= INLINE_MAX_BYTES:
        return work()
    return await off_loop(request, work)


async def off_loop(request: web.Request, work: Callable[[], _T]) -> _T:
    """Run CPU-bound `work` in a worker thread, at most `OFF_LOOP_SLOTS` at once per listener.

    More threads competing for the GIL would only slow the event loop down
    (each of its system calls waits for a thread to yield the GIL), not the work up.
    """
    slots = request.app.get(OFF_LOOP_SLOTS)
    loop = asyncio.get_running_loop()
    if slots is None:
        return await loop.run_in_executor(None, work)
    async with slots:
        return await loop.run_in_executor(None, work)


