"""JSON Schema schemas: parsing and validation with `jsonschema`, references with `referencing`.

Why these libraries: `jsonschema` (python-jsonschema) is the reference Python implementation of JSON Schema
(drafts 4 to 2020-12) and `referencing` is its resolver; confluent-kafka's own `JSONSerializer` uses both.
A schema is checked against its draft's metaschema (`$schema`, draft 7 when absent, as Confluent), and
every `$ref` to another document must name one of its `references` (by the reference's name, or that name
resolved against the schema's `$id`): an unresolvable `$ref` is refused at registration, not when a
producer first meets it.

Compatibility has no well-kept Python library (the one on PyPI, jsonsubschema, is a 0.0.x research tool),
so it is Confluent's own comparison (`SchemaDiff`), followed rule by rule in `json_diff` over the schema model
Confluent's loader builds (`json_model`).

This module must never validate data: only schemas.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urljoin

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from kelp.bounded_json import BodyError, loads_bounded
from kelp.json_types import JsonValue

from .errors import invalid_schema
from .json_diff import compare
from .parsed import MAX_SCHEMA_DEPTH, ParsedSchema, ResolvedReference, flatten

__all__ = ["parse_json", "JsonSchema"]


@dataclass(frozen=True, slots=True)
class JsonSchema:
    document: JsonValue
    canonical: str
    schema_type: str = "JSON"
    references: dict[str, JsonValue] = field(default_factory=dict, compare=False)  # name -> document

    def compatibility_errors(self, previous: ParsedSchema) -> list[str]:
        if not isinstance(previous, JsonSchema):
            return [f"{{errorType:'TYPE_CHANGED', description:'the old schema is {previous.schema_type}, not JSON'}}"]
        return [f"{{errorType:'{d.kind}', description:'{d.description}'}}"
                for d in compare(previous.document, self.document, previous.references, self.references)
                if not d.compatible]


def _document(text: str, what: str) -> JsonValue:
    try:
        data: JsonValue = loads_bounded(text, max_depth=MAX_SCHEMA_DEPTH)
    except BodyError as exc:  # not JSON, or nested deeper than MAX_JSON_DEPTH
        raise invalid_schema("JSON", f"{what} is not JSON, or not JSON Kelp accepts: {exc}") from None
    if not isinstance(data, (dict, bool)):
        raise invalid_schema("JSON", f"{what} must be a JSON object or a boolean, got {type(data).__name__}")
    if isinstance(data, dict):
        validator = jsonschema.validators.validator_for(data, default=jsonschema.Draft7Validator)
        try:
            validator.check_schema(data)
        except jsonschema.exceptions.SchemaError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
            raise invalid_schema("JSON", f"{what} is not a valid JSON Schema at {where}: {exc.message}") from None
    return data


def _refs(node: JsonValue, path: str = "#") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield path, value
            elif key not in ("enum", "const", "default", "examples"):
                yield from _refs(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _refs(item, f"{path}/{i}")


def _check_refs(data: JsonValue, names: set[str], what: str) -> None:
    base = data.get("$id") if isinstance(data, dict) else None
    known = set(names) | ({urljoin(base, n) for n in names} if isinstance(base, str) else set())
    for path, ref in _refs(data):
        target = ref.split("#", 1)[0]
        if not target or target == base:
            continue
        if target not in known and (not isinstance(base, str) or urljoin(base, target) not in known):
            raise invalid_schema("JSON", f"{what}: the $ref '{ref}' at {path} names no schema reference "
                                         f"(references: {sorted(names) or 'none'})")


def parse_json(text: str, references: tuple[ResolvedReference, ...]) -> JsonSchema:
    known: set[str] = set()
    documents: dict[str, JsonValue] = {}
    for ref in flatten(references):
        ref_doc = _document(ref.schema, f"reference '{ref.name}' (subject '{ref.subject}' version {ref.version})")
        _check_refs(ref_doc, {r.name for r in flatten(ref.references)}, f"reference '{ref.name}'")
        known.add(ref.name)
        documents[ref.name] = ref_doc
    data = _document(text, "the schema")
    _check_refs(data, known, "the schema")
    return JsonSchema(data, json.dumps(data, separators=(",", ":")), references=documents)
