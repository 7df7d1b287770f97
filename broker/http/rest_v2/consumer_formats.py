"""How a REST v2 consumer instance turns a record's stored bytes into the JSON it answers, by its `format`.

Why: Confluent's consumer instances are created with a format — `binary` (base64), `json` (the bytes as
JSON), or a registered schema's (`avro`, `jsonschema`, `protobuf`: Confluent's wire format decoded with the
schema the value names, `schema_registry.embedded`) — and a record the format cannot read must stop the
instance at that record, named, rather than be skipped (`consumer_instance`: 406, 40601). Schema readers
are found before a fetch is decoded (`prepare`, which may ask the registry), so decoding itself stays
synchronous and per record.

This module must never move a position: it only decodes.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Iterable

from kelp.json_types import JsonValue

from ...schema_registry.embedded import NotDecodable, SchemaReader, framed_id
from ...schema_registry.errors import RegistryError
from ..json_body import json_value

__all__ = ["FORMATS", "SCHEMA_FORMATS", "CONTENT_TYPES", "Undeliverable", "RecordDecoder", "ReaderLookup"]

SCHEMA_FORMATS = {"avro": "AVRO", "jsonschema": "JSON", "protobuf": "PROTOBUF"}
FORMATS = ("binary", "json", *SCHEMA_FORMATS)
CONTENT_TYPES = {fmt: f"application/vnd.kafka.{fmt}.v2+json" for fmt in FORMATS}
ReaderLookup = Callable[[int], Awaitable[SchemaReader]]  # a schema id's reader (RegistryError when none)


class Undeliverable(Exception):
    """A record's key or value this instance's format cannot read; `reason` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


class RecordDecoder:
    """One instance's format: `prepare` the schema readers a fetch needs, then `decode` each key and value."""

    def __init__(self, fmt: str) -> None:
        self.format = fmt
        self.schema_type = SCHEMA_FORMATS.get(fmt)
        self._readers: dict[int, SchemaReader | str] = {}  # a schema id's reader, or why there is none

    async def prepare(self, values: Iterable[bytes | None], lookup: ReaderLookup | None) -> None:
        """Find the reader of every schema id `values` name (once per id; a missing one is remembered as the
        reason `decode` gives)."""
        if self.schema_type is None:
            return
        for data in values:
            try:
                schema_id = framed_id(data) if data is not None else None
            except NotDecodable:
                continue  # decode says so for that record
            if schema_id is None or schema_id in self._readers:
                continue
            if lookup is None:
                self._readers[schema_id] = "the Schema Registry is disabled on this broker " \
                                           "(http.schema.registry.enable=false)"
                continue
            try:
                self._readers[schema_id] = await lookup(schema_id)
            except RegistryError as exc:
                self._readers[schema_id] = f"its schema {schema_id} is not in the registry: {exc.message}"

    def decode(self, data: bytes | None, field: str) -> JsonValue:
        if data is None:
            return None
        if self.format == "binary":
            return base64.b64encode(data).decode()
        if self.schema_type is None:
            try:
                return json_value(data)
            except ValueError as exc:
                raise Undeliverable(field, f"it is not JSON: {exc}") from None
        try:
            reader = self._readers.get(framed_id(data))
        except NotDecodable as exc:
            raise Undeliverable(field, str(exc)) from None
        if not isinstance(reader, SchemaReader):
            raise Undeliverable(field, reader or "its schema was not looked up")
        if reader.schema_type != self.schema_type:
            raise Undeliverable(field, f"it is in a {reader.schema_type} schema ({reader.schema_id}), not "
                                       f"{self.schema_type}")
        try:
            return reader.read(data)
        except NotDecodable as exc:
            raise Undeliverable(field, str(exc)) from None
