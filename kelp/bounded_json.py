"""A bounded JSON decoder: `json.loads` that refuses what JSON does not allow and cannot be made to recurse.

Why: a JSON document from a client (an HTTP body, a schema text inside one, a stored record's value) nested
5,000 deep made Python's recursive C parser raise RecursionError, which answered 500 where a 400 names what is
wrong; NaN and Infinity, which Python accepts and JSON does not, were stored and later served. This module is the
one place such text is parsed: a pre-scan without recursion bounds the nesting depth (`MAX_JSON_DEPTH`) and
refuses lone UTF-16 surrogate escapes, and the top two levels are parsed member by member and item by item, so a
large document never holds the GIL in one C call. The HTTP layer (`broker/http/json_body.py`) reads request bodies
with it; the Schema Registry parses schema texts with it.

This module must never do I/O or raise anything but `BodyError` for bad input.
"""

from __future__ import annotations

import json
import re
import sys
from array import array
from itertools import accumulate
from typing import NoReturn

from kelp.json_types import JsonObject, JsonValue

__all__ = ["BodyError", "MAX_JSON_DEPTH", "loads_bounded", "json_value"]

MAX_JSON_DEPTH = 512
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


def json_value(data: bytes | bytearray | memoryview) -> JsonValue:
    """A stored record key or value as JSON, bounded like a request body; `ValueError` says why not."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"byte 0x{bytes(data)[exc.start]:02x} at offset {exc.start} is not UTF-8") from None
    return loads_bounded(text)
