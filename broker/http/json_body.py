"""The one reader of JSON request bodies for every HTTP route, and the bounded JSON value decoder.

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
import json
import re
import sys
from array import array
from itertools import accumulate
from typing import Callable, NoReturn, TypeVar

from aiohttp import web

from kelp.json_types import JsonObject, JsonValue

from .keys import OFF_LOOP_SLOTS
from .problems import HttpProblem

__all__ = ["read_json", "read_json_as", "decode_body", "loads_bounded", "json_value", "BodyError", "MAX_JSON_DEPTH",
           "INLINE_MAX_BYTES", "off_loop"]

MAX_JSON_DEPTH = 512
# Bodies up to this size are decoded on the event loop (well under a millisecond).
INLINE_MAX_BYTES = 64 * 1024
# The depth pre-scan handles this many characters per step (a few ms of GIL at most).
_SCAN_SLICE = 256 * 1024

# Complete strings and everything outside strings, up to (not into) a string the window cuts.
_WHOLE_STRINGS = re.compile(r'(?:"(?:[^"\\]++|\\.)*+"|[^"]++)*+', re.S)  # possessive: no backtracking
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.S)
_BRACKETS_ONLY = str.maketrans({chr(c): None for c in range(128) if chr(c) not in "[]{}"})
_BRACKET_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
_WS = re.compile(r"[ \t\n\r]*")

_T = TypeVar("_T")


def _match_end(pattern: re.Pattern[str], text: str, pos: int, endpos: int = sys.maxsize) -> int:
    """Where `pattern` stops matching from `pos`: `_WHOLE_STRINGS` and `_WS` match the empty string, so always match."""
    match = pattern.match(text, pos, endpos)
    return pos if match is None else match.end()


class BodyError(ValueError):
    """Input that is not acceptable JSON; `status` 400 or 413, the message names where."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _refuse_constant(name: str) -> NoReturn:
    raise BodyError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise BodyError(f"number {text[:40]} is out of range (it overflows a 64-bit float)")
    return value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - text.rfind("\n", 0, pos)
    return f"line {line} column {col} (char {pos})"


def _check_strings_and_depth(text: str, max_depth: int) -> None:
    """Pre-scan, without recursion: nesting depth <= max_depth, no lone surrogate escapes.

    Works on windows that end outside any string, so every step is a few C
    calls over at most `_SCAN_SLICE` characters (plus one string that crosses
    the window). Malformed text is left for the parser to report.
    """
    n = len(text)
    pos = 0
    depth = 0
    window = _SCAN_SLICE
    while pos < n:
        end = _match_end(_WHOLE_STRINGS, text, pos, min(n, pos + window))
        if end == pos:  # a string longer than the window starts here: widen it
            if pos + window >= n:
                return  # an unterminated string: the parser names it
            window *= 2
            continue
        window = _SCAN_SLICE
        seg = text[pos:end]
        if "\\u" in seg and _LONE_SURROGATE.search(seg.replace("\\\\", "")):
            raise BodyError("a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff unpaired); "
                            "it is not valid Unicode text")
        brackets = _STRING.sub("", seg).translate(_BRACKETS_ONLY)
        if brackets:
            steps = array("b", brackets.encode("ascii").translate(_BRACKET_STEP))
            if max(accumulate(steps, initial=depth)) > max_depth:
                raise BodyError(f"JSON nested deeper than {max_depth} levels "
                                f"(in the text before {_where(text, end)}); flatten the document")
            depth += sum(steps)
        pos = end


def _raw(text: str, pos: int) -> tuple[JsonValue, int]:
    try:
        value: JsonValue
        value, end = _DECODER.raw_decode(text, pos)
        return value, end
    except json.JSONDecodeError as exc:
        raise BodyError(f"not valid JSON: {exc.msg} ({_where(text, exc.pos)})") from None
    except RecursionError:  # not reached after the pre-scan; never a 500 either way
        raise BodyError(f"JSON nested too deeply near {_where(text, pos)}") from None
    except BodyError as exc:
        raise BodyError(f"{exc} ({_where(text, pos)})") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise BodyError(f"a value near {_where(text, pos)} cannot be read: {exc}") from None


def _expect(text: str, pos: int, chars: str, what: str) -> int:
    pos = _match_end(_WS, text, pos)
    if pos >= len(text) or text[pos] not in chars:
        got = "the end of the body" if pos >= len(text) else repr(text[pos])
        raise BodyError(f"not valid JSON: expected {what} at {_where(text, pos)}, got {got}")
    return pos


def _value(text: str, pos: int, level: int, max_items: int | None, limit_name: str,
           path: str = "the body") -> tuple[JsonValue, int]:
    """Parse one value; objects and arrays of the top two levels member by member, the rest in one call."""
    pos = _match_end(_WS, text, pos)
    opener = text[pos:pos + 1]
    if level >= 2 or opener not in ("{", "["):
        return _raw(text, pos)
    if opener == "{":
        return _object(text, pos, level, max_items, limit_name)
    return _array(text, pos, level, max_items, limit_name, path)


def _object(text: str, pos: int, level: int, max_items: int | None, limit_name: str) -> tuple[JsonObject, int]:
    """The object opening at `pos`, member by member."""
    out: JsonObject = {}
    pos = _match_end(_WS, text, pos + 1)
    if text[pos:pos + 1] == "}":
        return out, pos + 1
    while True:
        pos = _expect(text, pos, '"', "a member name in double quotes")
        key, pos = _raw(text, pos)
        if not isinstance(key, str):  # a JSON string starts with '"': never reached
            raise BodyError(f"not valid JSON: expected a member name at {_where(text, pos)}")
        pos = _expect(text, pos, ":", "':' after a member name") + 1
        out[key], pos = _value(text, pos, level + 1, max_items, limit_name, f"'{key[:80]}'")
        pos = _expect(text, pos, ",}", "',' or '}'")
        if text[pos] == "}":
            return out, pos + 1
        pos += 1


def _array(text: str, pos: int, level: int, max_items: int | None, limit_name: str,
           path: str) -> tuple[list[JsonValue], int]:
    """The array opening at `pos`, item by item, at most `max_items` of them."""
    out: list[JsonValue] = []
    pos = _match_end(_WS, text, pos + 1)
    if text[pos:pos + 1] == "]":
        return out, pos + 1
    while True:
        if max_items is not None and len(out) >= max_items:
            raise BodyError(f"{path} holds more than {max_items} items, the most one request may carry "
                            f"({limit_name}); split it into several requests", status=413)
        item, pos = _value(text, pos, level + 1, max_items, limit_name, path)
        out.append(item)
        pos = _expect(text, pos, ",]", "',' or ']'")
        if text[pos] == "]":
            return out, pos + 1
        pos += 1


def loads_bounded(text: str, *, max_depth: int = MAX_JSON_DEPTH, max_items: int | None = None,
                  limit_name: str = "") -> JsonValue:
    """`json.loads` without NaN/Infinity, depth-bounded, piecewise; raises `BodyError`."""
    _check_strings_and_depth(text, max_depth)
    value, end = _value(text, 0, 0, max_items, limit_name)
    end = _match_end(_WS, text, end)
    if end != len(text):
        raise BodyError(f"not valid JSON: extra data after the document at {_where(text, end)}")
    return value


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


async def read_json(request: web.Request, *, what: str = "request body", expect: type | None = dict,
                    shape_status: int = 400, allow_empty: bool = False, max_items: int | None = None,
                    limit_name: str = "") -> JsonValue:
    """The request's JSON body, validated as the module docstring says (a JSON object unless `expect` says
    otherwise: `list`, or None for any value).

    `allow_empty`: an empty body is `None` (routes where the body is optional).
    """
    raw = await request.read()
    if allow_empty and not raw.strip():
        return None
    return await _decode(request, raw, _same, what=what, expect=expect, shape_status=shape_status,
                         max_items=max_items, limit_name=limit_name)


async def read_json_as(request: web.Request, convert: Callable[[JsonValue], _T], *, what: str = "request body",
                       expect: type | None = dict, shape_status: int = 400, max_items: int | None = None,
                       limit_name: str = "") -> _T:
    """`read_json`, then `convert` (a validation/transformation of the value) in the same step: in the same
    worker thread as the parse for bodies above `INLINE_MAX_BYTES`."""
    return await _decode(request, await request.read(), convert, what=what, expect=expect,
                         shape_status=shape_status, max_items=max_items, limit_name=limit_name)


def _same(value: JsonValue) -> JsonValue:
    return value


async def _decode(request: web.Request, raw: bytes, convert: Callable[[JsonValue], _T], *, what: str,
                  expect: type | None, shape_status: int, max_items: int | None, limit_name: str) -> _T:
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


def json_value(data: bytes | bytearray | memoryview) -> JsonValue:
    """A stored record key or value as JSON, bounded like a request body; `ValueError` says why not."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"byte 0x{bytes(data)[exc.start]:02x} at offset {exc.start} is not UTF-8") from None
    return loads_bounded(text)
