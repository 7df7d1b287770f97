"""The types of JSON documents, shared by every module that reads or writes one.

Why: bodies the HTTP API parses, answers it builds, and documents the cluster
layer and the operator exchange were all typed `Any`, so nothing checked that
a route looked at a body's shape before using it, or that an answer held only
what JSON can carry. Two views, because Python's containers are invariant:

- `JsonValue` / `JsonObject`: a parsed document, as `json.loads` returns it
  (`dict` and `list`). A reader narrows it with `isinstance` before use.
- `JsonData`: anything `json.dumps` turns into a document — any `Mapping` with
  string keys or `Sequence` of JSON data, so an answer built as
  `list[dict[str, int]]` is one without copying (`str` is a `Sequence` too,
  which changes nothing: it is JSON data either way).

This module must never hold behaviour: it is the aliases only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

__all__ = ["JsonValue", "JsonObject", "JsonData"]

JsonValue: TypeAlias = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]
"""A parsed JSON document (what `json.loads` returns)."""

JsonObject: TypeAlias = dict[str, JsonValue]
"""A parsed JSON object."""

JsonData: TypeAlias = None | bool | int | float | str | Sequence["JsonData"] | Mapping[str, "JsonData"]
"""What can be written as JSON (what `json.dumps` accepts without a `default`)."""
