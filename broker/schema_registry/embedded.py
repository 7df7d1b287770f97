"""Values in a registered schema, as REST produce writes them: JSON data in Confluent's wire format.

Why: Confluent's REST Proxy produces AVRO, JSONSCHEMA and PROTOBUF data — v2 with
`application/vnd.kafka.{avro,jsonschema,protobuf}.v2+json` and `value_schema`/`value_schema_id`, v3 with
`{"type": "AVRO"|"JSONSCHEMA"|"PROTOBUF", "schema_id"?, "schema_version"?, "subject"?, "schema"?, "data"}`
— encoding each record's JSON with a schema of the registry and framing it as Confluent's serializers do:
magic byte 0, the schema id (4 bytes, big-endian), for PROTOBUF the message indexes (the schema's first
message: one 0 byte), then the Avro binary, the JSON text or the Protobuf bytes. Any Confluent deserializer
reads the records, and Kelp's own consumers get the same bytes.

Finding the schema (`find_writer`): by id; else under the subject (given, or the topic's: `<topic>-value` /
`<topic>-key`, Confluent's TopicNameStrategy) at a version, or the latest; a schema given inline is
registered under the subject first, through the registry's write path (forwarded to its leader, checked for
compatibility) as any registration. The JSON data must match the schema: Avro's JSON encoding (a union's
value as `{"type": value}`, bytes and fixed as strings of code points 0-255), a JSON Schema's validation,
Protobuf's JSON mapping; otherwise `NotEncodable` names the field and nothing is produced.

Reading (REST v2 consumers created with `format` avro, jsonschema or protobuf): `framed_id` finds the schema
id a value names, `find_reader` the reader of that id, whose `read` answers the JSON the produce side takes
(Avro's JSON encoding, the JSON text, Protobuf's JSON mapping of the first message); bytes that are not in
Confluent's wire format or not in that schema raise `NotDecodable` saying why.

The codecs themselves (Avro, JSON Schema, Protobuf and their libraries) are in `embedded_codecs`, imported
on the CPU pool when a REST request first needs a schema's writer or reader, not at start (issue 38: a
broker whose REST proxies never see a schema does not hold those libraries).

This module must never change the registry except by registering a schema given inline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from kelp.json_types import JsonObject, JsonValue

from ..cpu_work import run_cpu
from .errors import Code, NotDecodable, NotEncodable, RegistryError
from .registry import SchemaRegistry
from .requests import LATEST
from .state import RegistryState

__all__ = ["REST_TYPES", "NotEncodable", "SchemaWriter", "find_writer", "Register", "NotDecodable", "SchemaReader",
           "find_reader", "framed_id"]
# The REST proxies' names of the registry's schema types
REST_TYPES = {"AVRO": "AVRO", "JSONSCHEMA": "JSON", "PROTOBUF": "PROTOBUF"}
MAGIC = b"\x00"
_CACHED_WRITERS = 1000

# Registers `body` ({"schema", "schemaType", "references"}) under a subject: {"id", "version"}
Register = Callable[[str, JsonObject], Awaitable[JsonObject]]


@dataclass(frozen=True, slots=True)
class SchemaWriter:
    """Encodes JSON data with one registered schema, framed: `write(data) -> bytes` (NotEncodable)."""

    schema_id: int
    schema_type: str
    encode: Callable[[JsonValue], bytes]

    def write(self, data: JsonValue) -> bytes:
        return MAGIC + self.schema_id.to_bytes(4, "big") + self.encode(data)


# -- finding the schema --------------------------------------------------------------------------------------
_WRITERS: WeakKeyDictionary[SchemaRegistry, dict[int, SchemaWriter]] = WeakKeyDictionary()


async def _writer(registry: SchemaRegistry, state: RegistryState, schema_id: int) -> SchemaWriter:
    """The writer of a schema id, remembered per registry (a schema's id never names another schema); built on
    the CPU pool (parsing a registered schema of 1 MB takes seconds), its references resolved here, on the loop."""
    cache = _WRITERS.setdefault(registry, {})
    found = cache.get(schema_id)
    if found is not None:
        return found
    identity = state.ids.get(schema_id)
    if identity is None:
        raise RegistryError(404, Code.SCHEMA_NOT_FOUND, f"Schema {schema_id} not found")
    schema_type, text, refs = identity[:3]
    resolved = registry.resolve(state, refs, schema_type)

    def build() -> SchemaWriter:
        from .embedded_codecs import encoder  # avro, jsonschema, protobuf: on first use, here on the CPU pool

        encode = encoder(registry, schema_type, text, refs, resolved)
        return SchemaWriter(schema_id, schema_type, encode)

    writer = await run_cpu(build)
    if len(cache) >= _CACHED_WRITERS:
        cache.clear()
    cache[schema_id] = writer
    return writer


async def find_writer(registry: SchemaRegistry, register: Register, *, subject: str, schema_type: str | None,
                      schema_id: int | None = None, version: int | None = None, schema: str | None = None,
                      references: list[JsonValue] | None = None) -> SchemaWriter:
    """The writer of the schema a produce request names (see the module docstring); RegistryError when there
    is none (not found, invalid, incompatible), and 422 when its type is not the one asked for."""
    state = await registry.state()
    if schema_id is None and schema is not None:
        if schema_type is None:
            raise RegistryError(422, Code.INVALID_SCHEMA,
                                f"a schema given inline for subject '{subject}' needs its type "
                                "(AVRO, JSONSCHEMA or PROTOBUF)")
        body: JsonObject = {"schema": schema, "schemaType": schema_type, "references": references or []}
        answer = await register(subject, body)
        registered = answer.get("id")
        if not isinstance(registered, int):
            raise RegistryError(500, Code.STORE_ERROR,
                                f"registering the schema under subject '{subject}' answered {answer!r}")
        schema_id = registered
        state = await registry.state()
    elif schema_id is None:
        schema_id = registry.find(state, subject, LATEST if version is None else version, deleted=False).schema_id
    writer = await _writer(registry, state, schema_id)
    if schema_type is not None and writer.schema_type != schema_type:
        raise RegistryError(422, Code.INVALID_SCHEMA,
                            f"schema {schema_id} is a {writer.schema_type} schema, not {schema_type}")
    return writer


# -- reading ------------------------------------------------------------------------------------------------
def framed_id(data: bytes) -> int:
    """The schema id Confluent's wire format names at the start of `data`; NotDecodable otherwise."""
    if len(data) < 5 or data[0] != 0:
        raise NotDecodable("it is not in Confluent's wire format (magic byte 0 and a 4-byte schema id)")
    return int.from_bytes(data[1:5], "big")


@dataclass(frozen=True, slots=True)
class SchemaReader:
    """Decodes values written with one registered schema: `read(data) -> JSON` (NotDecodable)."""

    schema_id: int
    schema_type: str
    decode: Callable[[bytes], JsonValue]

    def read(self, data: bytes) -> JsonValue:
        if framed_id(data) != self.schema_id:
            raise NotDecodable(f"it names schema {framed_id(data)}, not {self.schema_id}")
        try:
            return self.decode(data[5:])
        except NotDecodable:
            raise
        except Exception as exc:  # whatever the format's library says of bytes that are not its own
            raise NotDecodable(f"it is not a {self.schema_type} value of schema {self.schema_id}: {exc}"[:300]) \
                from None


_READERS: WeakKeyDictionary[SchemaRegistry, dict[int, SchemaReader]] = WeakKeyDictionary()


async def find_reader(registry: SchemaRegistry, schema_id: int) -> SchemaReader:
    """The reader of schema `schema_id` (remembered per registry); RegistryError 40403 when there is none."""
    cache = _READERS.setdefault(registry, {})
    found = cache.get(schema_id)
    if found is not None:
        return found
    state = await registry.state()
    identity = state.ids.get(schema_id)
    if identity is None:
        raise RegistryError(404, Code.SCHEMA_NOT_FOUND, f"Schema {schema_id} not found")
    schema_type, text, refs = identity[:3]
    resolved = registry.resolve(state, refs, schema_type)

    def build() -> SchemaReader:  # on the CPU pool, as a writer is built
        from .embedded_codecs import decoder

        decode = decoder(registry, schema_type, text, refs, resolved)
        return SchemaReader(schema_id, schema_type, decode)

    reader = await run_cpu(build)
    if len(cache) >= _CACHED_WRITERS:
        cache.clear()
    cache[schema_id] = reader
    return reader
