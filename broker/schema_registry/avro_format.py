"""AVRO schemas with the Apache `avro` package: parsing (references as named types) and compatibility.

Why Apache `avro`: it is the Avro project's own Python implementation and carries the project's
reader/writer compatibility checker (`avro.compatibility.ReaderWriterCompatibilityChecker`, a port of
Java's `SchemaCompatibility` that Confluent's registry uses), so AVRO compatibility here is Avro's own
rules, not a re-implementation.

References: each referenced schema is parsed first, into the same `avro.name.Names`, so the schema can name
the types they define (Confluent's AVRO references). The canonical text is the schema's JSON written
compactly (whitespace removed, nothing reordered), so the same schema sent twice is found again.

This module must never hold a compatibility rule of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import avro.errors
import avro.name
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from kelp.bounded_json import BodyError, loads_bounded

from .errors import invalid_schema
from .parsed import MAX_SCHEMA_DEPTH, ParsedSchema, ResolvedReference, flatten

__all__ = ["parse_avro", "AvroSchema"]


@dataclass(frozen=True, slots=True)
class AvroSchema:
    schema: avro.schema.Schema
    canonical: str
    schema_type: str = "AVRO"

    def compatibility_errors(self, previous: ParsedSchema) -> list[str]:
        if not isinstance(previous, AvroSchema):
            return [f"{{errorType:'TYPE_MISMATCH', description:'the old schema is {previous.schema_type}, "
                    "not AVRO'}"]
        checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]  # avro 1.12: no annotation
        result = checker.get_compatibility(reader=self.schema, writer=previous.schema)
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        kinds = sorted({i.name.upper() for i in result.incompatibilities}) or ["INCOMPATIBLE"]
        paths = ", ".join(sorted(result.locations))
        return [f"{{errorType:'{kind}', description:'The new schema cannot read data written with the old one "
                f"at path(s) {paths}', additionalInfo:'{'; '.join(sorted(result.messages))}'}}" for kind in kinds]


def _load(text: str, what: str) -> object:
    try:
        return loads_bounded(text, max_depth=MAX_SCHEMA_DEPTH)
    except BodyError as exc:  # not JSON, or nested deeper than MAX_JSON_DEPTH
        raise invalid_schema("AVRO", f"{what} is not JSON, or not JSON Kelp accepts: {exc}") from None


def parse_avro(text: str, references: tuple[ResolvedReference, ...]) -> AvroSchema:
    names = avro.name.Names()
    for ref in flatten(references):
        try:
            avro.schema.make_avsc_object(_load(ref.schema, f"reference '{ref.name}'"), names)
        except (avro.errors.AvroException, TypeError, ValueError) as exc:
            raise invalid_schema("AVRO", f"reference '{ref.name}' (subject '{ref.subject}' version "
                                         f"{ref.version}) is not a valid Avro schema: {exc}") from None
    data = _load(text, "the schema")
    try:
        parsed = avro.schema.make_avsc_object(data, names)
    except (avro.errors.AvroException, TypeError, ValueError) as exc:
        raise invalid_schema("AVRO", f"not a valid Avro schema: {exc}") from None
    bad = _invalid_default(parsed, set())
    if bad is not None:
        raise invalid_schema("AVRO", bad)
    return AvroSchema(parsed, json.dumps(data, separators=(",", ":")))


# -- field defaults, as Java's Schema.Parser validates them (validateDefaults, on by default since Avro 1.9) ------
_INT_RANGE = {"int": (-(1 << 31), 1 << 31), "long": (-(1 << 63), 1 << 63)}


def _invalid_default(schema: avro.schema.Schema, seen: set[str]) -> str | None:
    """Why a field default somewhere in `schema` does not fit its field's type (Confluent answers 42201 and a Java
    client cannot parse such a schema), or None. Each named record is walked once (recursive types)."""
    if isinstance(schema, avro.schema.RecordSchema):
        if schema.fullname in seen:
            return None
        seen.add(schema.fullname)
        for field in schema.fields:
            if field.has_default and not _fits(field.type, field.default):
                return (f"Invalid default for field {field.name}: {json.dumps(field.default)[:200]} not a "
                        f"{json.dumps(field.type.to_json())[:200]}")
            bad = _invalid_default(field.type, seen)
            if bad is not None:
                return bad
    elif isinstance(schema, avro.schema.ArraySchema):
        return _invalid_default(schema.items, seen)
    elif isinstance(schema, avro.schema.MapSchema):
        return _invalid_default(schema.values, seen)
    elif isinstance(schema, avro.schema.UnionSchema):
        for branch in schema.schemas:
            bad = _invalid_default(branch, seen)
            if bad is not None:
                return bad
    return None


def _fits(schema: avro.schema.Schema, value: object) -> bool:
    """Whether a JSON default `value` is a value of `schema` (Avro's spec: a union's default is of its first
    branch; bytes and fixed defaults are strings)."""
    kind = schema.type
    if isinstance(schema, avro.schema.EnumSchema):
        return isinstance(value, str) and value in schema.symbols
    if isinstance(schema, avro.schema.ArraySchema):
        return isinstance(value, list) and all(_fits(schema.items, v) for v in value)
    if isinstance(schema, avro.schema.MapSchema):
        return isinstance(value, dict) and all(_fits(schema.values, v) for v in value.values())
    if isinstance(schema, avro.schema.RecordSchema):
        return isinstance(value, dict) and all(
            _fits(f.type, value[f.name]) if f.name in value else f.has_default for f in schema.fields)
    if isinstance(schema, avro.schema.UnionSchema):
        return bool(schema.schemas) and _fits(schema.schemas[0], value)
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in _INT_RANGE:
        low, high = _INT_RANGE[kind]
        return isinstance(value, int) and not isinstance(value, bool) and low <= value < high
    if kind in ("float", "double"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind in ("string", "bytes", "fixed"):
        return isinstance(value, str)
    return True  # a type this check does not know: Avro's parser accepted it
