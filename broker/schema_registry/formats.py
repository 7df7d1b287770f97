"""One door to the three schema formats: `parse(type, text, references)` and what a parsed schema answers.

Why: the registry treats AVRO, JSON and PROTOBUF alike — parse (42201 naming what is wrong, references
included), a canonical text that decides whether two registrations are the same schema, and "can this
schema read what that one wrote" for the compatibility levels — while each format's rules live in its own
module (`avro_format`, `json_format`, `protobuf_format`).

Each format's module (and its library: avro, jsonschema, proto-schema-parser with antlr4) is imported on
the first schema of that type, not at start: a broker whose registry is never used does not hold them
(about 14 MiB and 200 modules, issue 38). The registry parses on its CPU pool, so that import is not the
event loop's either.

This module must never hold a format's rules itself.
"""

from __future__ import annotations

from .errors import invalid_schema
from .parsed import ParsedSchema, ResolvedReference, flatten

__all__ = ["ResolvedReference", "ParsedSchema", "parse"]


def parse(schema_type: str, text: str, references: tuple[ResolvedReference, ...] = ()) -> ParsedSchema:
    """The parsed schema; 42201 naming what is wrong (in it or in one of its references)."""
    for ref in flatten(references):
        if ref.schema_type != schema_type:
            raise invalid_schema(schema_type, f"reference '{ref.name}' (subject '{ref.subject}' version "
                                              f"{ref.version}) is a {ref.schema_type} schema, not {schema_type}")
    if schema_type == "AVRO":
        from .avro_format import parse_avro

        return parse_avro(text, references)
    if schema_type == "JSON":
        from .json_format import parse_json

        return parse_json(text, references)
    if schema_type == "PROTOBUF":
        from .protobuf_format import parse_protobuf

        return parse_protobuf(text, references)
    raise invalid_schema(schema_type, f"unknown schemaType '{schema_type}': use AVRO, JSON or PROTOBUF")
