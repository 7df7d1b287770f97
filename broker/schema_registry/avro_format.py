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
    return AvroSchema(parsed, json.dumps(data, separators=(",", ":")))
