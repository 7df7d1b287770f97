"""Kafka's coordinator record schemas (`__consumer_offsets`, `__share_group_state` keys and values) as
kafka-python data classes.

Why: the consumer-group coordinator (KIP-848 records), the share groups' membership (KIP-932 records) and the
share-group state log (ShareSnapshot records) all write Kafka's own record formats, read from Kafka's schema
files vendored beside them; one loader keeps their codecs the same codec (kafka-python's `ApiData`), and one
`RecordCodec` their keys and values, instead of a copy in each package.
"""

from __future__ import annotations

import struct
import types
from typing import Any

from kafka.protocol.api_data import ApiData

__all__ = ["schema_class", "RecordCodec"]


def _patch(cls: type, json: dict[str, Any]) -> dict[str, Any]:
    json["type"] = "data"  # kafka-python's ApiData takes Kafka's coordinator-key/-value schemas as plain data
    return json


def schema_class(name: str, *, package: str, module: str) -> Any:
    """The data class of Kafka's schema `<package>/<name>.json` (its codec is kafka-python's), named as a class
    of `module`."""
    return types.new_class(name, (ApiData,), {"load_json": package},
                           lambda ns: ns.update(json_patch=classmethod(_patch), __module__=module))


class RecordCodec:
    """Kafka's group-coordinator records of some types (`keys`/`values`: record type -> schema class): the key is
    the record type (int16) then the key's fields at version 0 (group id, and member id where it has one); the
    value its version (int16, 0) then its fields. The consumer groups' records and the share groups' use one."""

    def __init__(self, keys: dict[int, Any], values: dict[int, Any]) -> None:
        self.keys = keys
        self.values = values

    def key(self, kind: int, group_id: str, member_id: str | None = None) -> bytes:
        fields: dict[str, Any] = {"group_id": group_id}
        if member_id is not None:
            fields["member_id"] = member_id
        body: bytes = self.keys[kind](version=0, **fields).encode(version=0, header=False)
        return struct.pack(">h", kind) + body

    def value(self, kind: int, **fields: Any) -> bytes:
        return bytes(self.values[kind](version=0, **fields).encode(version=0))

    def key_of(self, data: bytes) -> tuple[int, str, str] | None:
        """(type, group, member or "") of a key of these types; None for any other key."""
        if len(data) < 2:
            return None
        kind = struct.unpack_from(">h", data)[0]
        if kind not in self.keys:
            return None
        key = self.keys[kind].decode(data[2:], version=0, header=False)
        return kind, key.group_id, getattr(key, "member_id", "") or ""
