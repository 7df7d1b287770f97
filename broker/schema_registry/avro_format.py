"""AVRO schemas with the Apache `avro` package: parsing (references as named types) and compatibility.

Why Apache `avro`: it is the Avro project's own Python implementation and carries the project's
reader/writer compatibility checker (`avro.compatibility.ReaderWriterCompatibilityChecker`, a port of
Java's `SchemaCompatibility` that Confluent's registry uses), so AVRO compatibility here is Avro's own
rules, not a re-implementation.

References: each referenced schema is parsed first, into the same `avro.name.Names`, so the schema can name
the types they define (Confluent's AVRO references). The canonical text is the schema's JSON written
compactly (whitespace removed, nothing reordered), so the same schema sent twice is found again.

`_Checker` is Avro's checker with one change: its record step looked each reader field up in a dictionary of the
writer's fields that `RecordSchema.fields_dict` rebuilds on every access — quadratic, minutes for a record of
26,000 fields (issue 37); here the dictionary is built once per record pair. The rules are Avro's, unchanged.

This module must never hold a compatibility rule of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import avro.errors
import avro.name
import avro.schema
from avro.compatibility import (
    CompatibleResult,
    ReaderWriterCompatibilityChecker,
    SchemaCompatibilityResult,
    SchemaCompatibilityType,
    SchemaIncompatibilityType,
    incompatible,
    merge,
)

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
        if previous.schema is self.schema:  # one parse (the registry's cache): a schema reads its own data, and
            return []                       # avro's memo hashes a pair as id(reader) ^ id(writer), 0 for all of it
        checker = _Checker()  # type: ignore[no-untyped-call]  # avro 1.12: no annotation
        result = checker.get_compatibility(reader=self.schema, writer=previous.schema)
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        kinds = sorted({i.name.upper() for i in result.incompatibilities}) or ["INCOMPATIBLE"]
        paths = ", ".join(sorted(result.locations))
        return [f"{{errorType:'{kind}', description:'The new schema cannot read data written with the old one "
                f"at path(s) {paths}', additionalInfo:'{'; '.join(sorted(result.messages))}'}}" for kind in kinds]


class _Checker(ReaderWriterCompatibilityChecker):
    """`ReaderWriterCompatibilityChecker` with the writer's fields indexed once per record pair (see the module
    docstring); `check_reader_writer_record_fields` is avro 1.12's, its lookup (`lookup_writer_field`) inlined."""

    def check_reader_writer_record_fields(self, reader: avro.schema.RecordSchema, writer: avro.schema.RecordSchema,
                                          location: list[str]) -> SchemaCompatibilityResult:
        by_name = {f.name: f for f in writer.fields}
        result = CompatibleResult
        for i, reader_field in enumerate(reader.fields):
            where = [*location, "fields", str(i)]
            writer_field = by_name.get(reader_field.name)
            aliases = reader_field.props.get("aliases")
            if writer_field is None and isinstance(aliases, list):
                writer_field = next((by_name[a] for a in aliases if a in by_name), None)
            if writer_field is not None:
                result = merge(result, self.get_compatibility(reader_field.type, writer_field.type, "type", where))
            elif reader_field.has_default:
                continue
            elif reader_field.type.type == "enum" and reader_field.type.props.get("default"):
                result = merge(result, self.get_compatibility(reader_field.type, writer, "type", where))
            else:
                result = merge(result, incompatible(SchemaIncompatibilityType.reader_field_missing_default_value,
                                                    reader_field.name, where))
        return result


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
