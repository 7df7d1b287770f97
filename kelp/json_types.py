"""The type of decoded JSON, shared by every layer that handles free-form JSON documents.

Why: JSON whose shape is not fixed (a Kubernetes API body, an answer relayed from another broker, a
document read before its shape is checked) was typed `dict` or `Any`, which a type checker cannot
follow; `JsonValue` says exactly what `json.loads` can return, so code must check a value's type before
it uses it. Where a document's shape is fixed, a TypedDict or a dataclass says so instead, beside the
code that writes it. This module must never hold logic: it is the two aliases only.
"""

from __future__ import annotations

__all__ = ["JsonValue", "JsonObject"]

JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject = dict[str, JsonValue]
