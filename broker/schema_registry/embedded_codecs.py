"""The codecs behind `embedded`: JSON data to Avro, JSON Schema and Protobuf values in Confluent's wire format and back.

Why: these need Apache avro, jsonschema (with referencing) and protobuf, about 14 MiB of modules a broker
holds only once a REST request names a schema; `embedded` imports this module on that first use (on the CPU
pool, where it builds a writer or reader), so a broker whose REST proxies never see a schema does not load
them (issue 38). `encoder` and `decoder` are what `embedded`'s writers and readers are built from; the rules
(Avro's JSON encoding, JSON Schema validation, Protobuf's JSON mapping, the first-message index) are
described in `embedded`'s docstring.

This module must never find or register a schema: `embedded` does.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable

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

from .avro_format import AvroSchema
from .errors import NotDecodable, NotEncodable
from .json_format import JsonSchema
from .model import Reference
from .parsed import ResolvedReference, flatten
from .protobuf_descriptor import message_class
from .registry import SchemaRegistry

__all__ = ["encoder", "decoder"]

FIRST_MESSAGE = b"\x00"  # Confluent's message-index list [0], written as the single byte 0


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


def _json_text(payload: bytes) -> JsonValue:
    value: JsonValue = json.loads(payload.decode("utf-8"))
    return value


def encoder(registry: SchemaRegistry, schema_type: str, text: str, refs: tuple[Reference, ...],
            resolved: tuple[ResolvedReference, ...]) -> Callable[[JsonValue], bytes]:
    """The encoding (unframed) of JSON data with a registered schema, its references `resolved`; it raises
    NotEncodable. CPU work: the caller's CPU pool."""
    if schema_type == "AVRO":
        parsed = registry.parse_resolved(schema_type, text, refs, resolved)
        assert isinstance(parsed, AvroSchema)
        return _avro_encoder(parsed.schema)
    if schema_type == "JSON":
        parsed_json = registry.parse_resolved(schema_type, text, refs, resolved)
        assert isinstance(parsed_json, JsonSchema) and isinstance(parsed_json.document, (dict, bool))
        return _json_encoder(parsed_json.document, resolved)
    return _protobuf_encoder(text, resolved)


def decoder(registry: SchemaRegistry, schema_type: str, text: str, refs: tuple[Reference, ...],
            resolved: tuple[ResolvedReference, ...]) -> Callable[[bytes], JsonValue]:
    """The JSON of a value (unframed) written with a registered schema. CPU work: the caller's CPU pool."""
    if schema_type == "AVRO":
        parsed = registry.parse_resolved(schema_type, text, refs, resolved)
        assert isinstance(parsed, AvroSchema)
        return _avro_decoder(parsed.schema)
    if schema_type == "JSON":
        return _json_text
    return _protobuf_decoder(text, resolved)
