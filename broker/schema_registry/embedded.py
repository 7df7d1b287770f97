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

This module must never change the registry except by registering a schema given inline.
"""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import avro.errors
import avro.io
import avro.name
import avro.schema
import jsonschema
import jsonschema.validators
from google.protobuf import json_format
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from kelp.json_types import JsonObject, JsonValue

from ..cpu_work import run_cpu
from .avro_format import AvroSchema
from .errors import RegistryError
from .json_format import JsonSchema
from .parsed import ResolvedReference, flatten
from .protobuf_descriptor import message_class
from .registry import SchemaRegistry
from .requests import LATEST
from .state import RegistryState

__all__ = ["REST_TYPES", "NotEncodable", "SchemaWriter", "find_writer", "Register", "NotDecodable", "SchemaReader",
           "find_reader", "framed_id"]

# The REST proxies' names of the registry's schema types
REST_TYPES = {"AVRO": "AVRO", "JSONSCHEMA": "JSON", "PROTOBUF": "PROTOBUF"}
MAGIC = b"\x00"
FIRST_MESSAGE = b"\x00"  # Confluent's message-index list [0], written as the single byte 0
_CACHED_WRITERS = 1000

# Registers `body` ({"schema", "schemaType", "references"}) under a subject: {"id", "version"}
Register = Callable[[str, JsonObject], Awaitable[JsonObject]]


class NotEncodable(Exception):
    """JSON data that does not match its schema; the message names the field and why."""


@dataclass(frozen=True, slots=True)
class SchemaWriter:
    """Encodes JSON data with one registered schema, framed: `write(data) -> bytes` (NotEncodable)."""

    schema_id: int
    schema_type: str
    encode: Callable[[JsonValue], bytes]

    def write(self, data: JsonValue) -> bytes:
        return MAGIC + self.schema_id.to_bytes(4, "big") + self.encode(data)


# -- Avro's JSON encoding to the datum the Avro writer takes ------------------------------------------------
def _code_points(value: JsonValue, path: str, kind: str) -> bytes:
    if not isinstance(value, str):
        raise NotEncodable(f"{path}: {kind} is written in Avro's JSON encoding as a string of code points "
                           f"0-255, got {value!r}"[:300])
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        raise NotEncodable(f"{path}: a {kind} string may hold code points 0-255 only") from None


def _branch_name(schema: avro.schema.Schema) -> str:
    return schema.fullname if isinstance(schema, avro.schema.NamedSchema) else schema.type


def _avro_datum(schema: avro.schema.Schema, value: JsonValue, path: str) -> object:
    """The Python datum of Avro-JSON `value` for `schema`; NotEncodable naming `path` where it does not fit."""
    kind = schema.type
    if isinstance(schema, avro.schema.UnionSchema):
        if value is None:
            if any(s.type == "null" for s in schema.schemas):
                return None
            raise NotEncodable(f"{path}: null is none of the union's branches "
                               f"({', '.join(_branch_name(s) for s in schema.schemas)})")
        if not isinstance(value, dict) or len(value) != 1:
            raise NotEncodable(f"{path}: a union's value is written {{\"<branch type>\": value}} in Avro's JSON "
                               f"encoding (branches: {', '.join(_branch_name(s) for s in schema.schemas)}), "
                               f"got {value!r}"[:300])
        (name, inner), = value.items()
        for branch in schema.schemas:
            if name in (_branch_name(branch), getattr(branch, "name", None)):
                return _avro_datum(branch, inner, f"{path}.{name}")
        raise NotEncodable(f"{path}: '{name}' is none of the union's branches "
                           f"({', '.join(_branch_name(s) for s in schema.schemas)})")
    if kind == "null":
        if value is not None:
            raise NotEncodable(f"{path}: expected null, got {value!r}"[:300])
        return None
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind in ("int", "long") and isinstance(value, int) and not isinstance(value, bool):
        bound = 1 << (31 if kind == "int" else 63)
        if not -bound <= value < bound:
            raise NotEncodable(f"{path}: {value} is out of range for an Avro {kind}")
        return value
    if kind in ("float", "double") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "bytes":
        return _code_points(value, path, "bytes")
    if isinstance(schema, avro.schema.FixedSchema):
        raw = _code_points(value, path, f"fixed '{schema.fullname}'")
        if len(raw) != schema.size:
            raise NotEncodable(f"{path}: fixed '{schema.fullname}' is {schema.size} bytes, got {len(raw)}")
        return raw
    if isinstance(schema, avro.schema.EnumSchema):
        if value not in schema.symbols:
            raise NotEncodable(f"{path}: {value!r} is not a symbol of enum '{schema.fullname}' "
                               f"({', '.join(schema.symbols)})"[:300])
        return value
    if isinstance(schema, avro.schema.ArraySchema) and isinstance(value, list):
        return [_avro_datum(schema.items, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(schema, avro.schema.MapSchema) and isinstance(value, dict):
        return {k: _avro_datum(schema.values, v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(schema, avro.schema.RecordSchema) and isinstance(value, dict):
        names = {f.name for f in schema.fields}
        unknown = sorted(set(value) - names)
        if unknown:
            raise NotEncodable(f"{path}: record '{schema.fullname}' has no field(s) {', '.join(unknown)}")
        out: dict[str, object] = {}
        for f in schema.fields:
            if f.name in value:
                out[f.name] = _avro_datum(f.type, value[f.name], f"{path}.{f.name}")
            elif f.has_default:
                out[f.name] = _avro_datum(f.type, f.default, f"{path}.{f.name}") \
                    if not isinstance(f.type, avro.schema.UnionSchema) else f.default
            else:
                raise NotEncodable(f"{path}: field '{f.name}' of record '{schema.fullname}' is missing and has no "
                                   "default")
        return out
    raise NotEncodable(f"{path}: expected Avro {_branch_name(schema)}, got {json.dumps(value)[:200]}")


def _without_logical_types(node: object) -> object:
    """A schema's JSON without `logicalType`s: the bytes are the same (a logical type only annotates), and the
    data is then its underlying type's JSON (an `int` for a `date`), as Avro's JSON encoding writes it."""
    if isinstance(node, dict):
        return {k: _without_logical_types(v) for k, v in node.items() if k not in ("logicalType", "precision",
                                                                                  "scale")}
    if isinstance(node, list):
        return [_without_logical_types(v) for v in node]
    return node


def _avro_encoder(schema: avro.schema.Schema) -> Callable[[JsonValue], bytes]:
    schema = avro.schema.make_avsc_object(_without_logical_types(schema.to_json()), avro.name.Names())
    writer = avro.io.DatumWriter(schema)

    def encode(data: JsonValue) -> bytes:
        datum = _avro_datum(schema, data, "data")
        buf = io.BytesIO()
        try:
            writer.write(datum, avro.io.BinaryEncoder(buf))
        except (avro.errors.AvroException, TypeError, ValueError) as exc:
            raise NotEncodable(f"data does not fit the Avro schema: {exc}"[:500]) from None
        return buf.getvalue()
    return encode


def _json_encoder(document: JsonObject | bool, references: tuple[ResolvedReference, ...]
                  ) -> Callable[[JsonValue], bytes]:
    resources = Registry().with_resources(
        (ref.name, Resource.from_contents(json.loads(ref.schema), default_specification=DRAFT7))
        for ref in flatten(references))
    cls = jsonschema.validators.validator_for(document, default=jsonschema.Draft7Validator)
    validator = cls(document, registry=resources)

    def encode(data: JsonValue) -> bytes:
        error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        if error is not None:
            where = "data" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            raise NotEncodable(f"{where} does not match the JSON Schema: {error.message}"[:500])
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    return encode


def _protobuf_encoder(text: str, references: tuple[ResolvedReference, ...]) -> Callable[[JsonValue], bytes]:
    cls = message_class(text, references)

    def encode(data: JsonValue) -> bytes:
        if not isinstance(data, dict):
            raise NotEncodable(f"data must be a JSON object for message '{cls.DESCRIPTOR.full_name}', got "
                               f"{json.dumps(data)[:200]}")
        try:
            message = json_format.ParseDict(data, cls())
        except json_format.ParseError as exc:
            raise NotEncodable(f"data does not fit message '{cls.DESCRIPTOR.full_name}': {exc}"[:500]) from None
        return FIRST_MESSAGE + message.SerializeToString()
    return encode


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
        raise RegistryError(404, 40403, f"Schema {schema_id} not found")
    schema_type, text, refs = identity
    resolved = registry.resolve(state, refs, schema_type)

    def build() -> SchemaWriter:
        encode: Callable[[JsonValue], bytes]
        if schema_type == "AVRO":
            parsed = registry.parse_resolved(schema_type, text, refs, resolved)
            assert isinstance(parsed, AvroSchema)
            encode = _avro_encoder(parsed.schema)
        elif schema_type == "JSON":
            parsed_json = registry.parse_resolved(schema_type, text, refs, resolved)
            assert isinstance(parsed_json, JsonSchema) and isinstance(parsed_json.document, (dict, bool))
            encode = _json_encoder(parsed_json.document, resolved)
        else:
            encode = _protobuf_encoder(text, resolved)
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
            raise RegistryError(422, 42201, f"a schema given inline for subject '{subject}' needs its type "
                                            "(AVRO, JSONSCHEMA or PROTOBUF)")
        body: JsonObject = {"schema": schema, "schemaType": schema_type, "references": references or []}
        answer = await register(subject, body)
        registered = answer.get("id")
        if not isinstance(registered, int):
            raise RegistryError(500, 50001, f"registering the schema under subject '{subject}' answered {answer!r}")
        schema_id = registered
        state = await registry.state()
    elif schema_id is None:
        schema_id = registry.find(state, subject, LATEST if version is None else version, deleted=False).schema_id
    writer = await _writer(registry, state, schema_id)
    if schema_type is not None and writer.schema_type != schema_type:
        raise RegistryError(422, 42201, f"schema {schema_id} is a {writer.schema_type} schema, not {schema_type}")
    return writer


# -- reading ------------------------------------------------------------------------------------------------
class NotDecodable(Exception):
    """Stored bytes that are not a value in Confluent's wire format, or not in the schema they name."""


def framed_id(data: bytes) -> int:
    """The schema id Confluent's wire format names at the start of `data`; NotDecodable otherwise."""
    if len(data) < 5 or data[0] != 0:
        raise NotDecodable("it is not in Confluent's wire format (magic byte 0 and a 4-byte schema id)")
    return int.from_bytes(data[1:5], "big")


def _avro_json(schema: avro.schema.Schema, datum: object) -> JsonValue:
    """Avro's JSON encoding of a datum Apache avro's reader made (the inverse of `_avro_datum`)."""
    if isinstance(schema, avro.schema.UnionSchema):
        if datum is None:
            return None
        for branch in schema.schemas:
            if branch.type != "null" and branch.validate(datum) is not None:
                return {_branch_name(branch): _avro_json(branch, datum)}
        return None
    if isinstance(datum, bytes):
        return datum.decode("latin-1")
    if isinstance(schema, avro.schema.ArraySchema) and isinstance(datum, list):
        return [_avro_json(schema.items, v) for v in datum]
    if isinstance(schema, avro.schema.MapSchema) and isinstance(datum, dict):
        return {k: _avro_json(schema.values, v) for k, v in datum.items()}
    if isinstance(schema, avro.schema.RecordSchema) and isinstance(datum, dict):
        return {f.name: _avro_json(f.type, datum.get(f.name)) for f in schema.fields}
    if datum is None or isinstance(datum, (bool, int, float, str)):
        return datum
    return str(datum)


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


def _avro_decoder(schema: avro.schema.Schema) -> Callable[[bytes], JsonValue]:
    schema = avro.schema.make_avsc_object(_without_logical_types(schema.to_json()), avro.name.Names())
    reader = avro.io.DatumReader(schema)
    return lambda payload: _avro_json(schema, reader.read(avro.io.BinaryDecoder(io.BytesIO(payload))))


def _protobuf_decoder(text: str, references: tuple[ResolvedReference, ...]) -> Callable[[bytes], JsonValue]:
    cls = message_class(text, references)

    def decode(payload: bytes) -> JsonValue:
        if payload[:1] != FIRST_MESSAGE:
            raise NotDecodable("it names a message other than the schema's first (message indexes "
                               f"{payload[:4].hex()}), which Kelp's REST consumers do not read")
        message = cls.FromString(payload[1:])
        out: JsonValue = json_format.MessageToDict(message)
        return out
    return decode


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
        raise RegistryError(404, 40403, f"Schema {schema_id} not found")
    schema_type, text, refs = identity
    resolved = registry.resolve(state, refs, schema_type)

    def build() -> SchemaReader:  # on the CPU pool, as a writer is built
        decode: Callable[[bytes], JsonValue]
        if schema_type == "AVRO":
            parsed = registry.parse_resolved(schema_type, text, refs, resolved)
            assert isinstance(parsed, AvroSchema)
            decode = _avro_decoder(parsed.schema)
        elif schema_type == "JSON":
            decode = _json_text
        else:
            decode = _protobuf_decoder(text, resolved)
        return SchemaReader(schema_id, schema_type, decode)

    reader = await run_cpu(build)
    if len(cache) >= _CACHED_WRITERS:
        cache.clear()
    cache[schema_id] = reader
    return reader


def _json_text(payload: bytes) -> JsonValue:
    value: JsonValue = json.loads(payload.decode("utf-8"))
    return value
