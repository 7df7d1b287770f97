"""Kafka's coordinator record schemas (`__consumer_offsets`, `__share_group_state` keys and values) as
kafka-python data classes.

Why: the consumer-group coordinator (KIP-848 records) and the share-group state log (ShareSnapshot records)
both write Kafka's own record formats, read from Kafka's schema files vendored beside them; one loader keeps
the two codecs the same codec (kafka-python's `ApiData`), instead of a copy in each package.
"""

from __future__ import annotations

import types
from typing import Any

from kafka.protocol.api_data import ApiData

__all__ = ["schema_class"]


def _patch(cls: type, json: dict[str, Any]) -> dict[str, Any]:
    json["type"] = "data"  # kafka-python's ApiData takes Kafka's coordinator-key/-value schemas as plain data
    return json


def schema_class(name: str, *, package: str, module: str) -> Any:
    """The data class of Kafka's schema `<package>/<name>.json` (its codec is kafka-python's), named as a class
    of `module`."""
    return types.new_class(name, (ApiData,), {"load_json": package},
                           lambda ns: ns.update(json_patch=classmethod(_patch), __module__=module))
