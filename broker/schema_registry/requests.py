"""What a registry request carries, checked: subject names, versions, schema bodies, levels and modes.

Why: every route takes a subject and many a version or a schema body; checking them in one place gives
every bad input the same Confluent code and a message naming what was wrong — 42208 for a subject name,
42202 for a version, 42201 for a schema body (an unknown `schemaType`, malformed `references`, a missing
`schema`, a schema over `MAX_SCHEMA_BYTES`), 42203 for a compatibility level, 42204 for a mode.

Subject names: Confluent's rule (not empty, no control characters) plus no `/` or `\\`, `.` or `..`, since a
subject is a path segment of this API: a name that cannot be written in a URL without encoding a
separator is refused at registration rather than made unreachable by proxies that decode it.

This module must never look at the registry's state.
"""

from __future__ import annotations

from dataclasses import dataclass

from kelp.json_types import JsonValue

from .errors import (
    Code,
    RegistryError,
    invalid_schema,
    invalid_subject,
    invalid_version,
)
from .model import LEVELS, MAX_VERSION, MODES, SCHEMA_TYPES, Reference, contract_text

__all__ = ["SchemaRequest", "check_subject", "parse_version", "schema_request", "level_of", "mode_of", "LATEST",
           "MAX_SCHEMA_BYTES"]

# The largest schema text (UTF-8) Kelp registers or checks: Confluent's registry takes no request body over
# `size.limit.filter.max.request.body.size`, 1,048,576 bytes by default. A schema of 30,000 Avro fields is ~1 MB and
# parses for seconds (on the CPU pool: never on the loop); past the limit it is refused before it is parsed.
MAX_SCHEMA_BYTES = 1_048_576

LATEST = -1
MAX_SUBJECT_CHARS = 4096


@dataclass(frozen=True, slots=True)
class SchemaRequest:
    """A register, lookup or compatibility body."""

    schema: str
    schema_type: str
    references: tuple[Reference, ...]
    schema_id: int | None = None  # IMPORT mode: the id to register with
    version: int | None = None  # IMPORT mode: the version to register as
    metadata: str | None = None  # the data contract's metadata, canonical JSON text (`model.contract_text`)
    rule_set: str | None = None  # the data contract's ruleSet, likewise


def check_subject(subject: str) -> str:
    if not subject:
        raise invalid_subject(subject, "it is empty")
    if len(subject) > MAX_SUBJECT_CHARS:
        raise invalid_subject(subject[:100] + "...", f"it is longer than {MAX_SUBJECT_CHARS} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in subject):
        raise invalid_subject(subject.encode("unicode_escape").decode(), "it holds control characters")
    # '/' is allowed, as Confluent's registry allows it: the Protobuf serializers name a reference's subject
    # after its import path ("kelp/common/money.proto") and send it URL-encoded (%2F), which routes as one
    # segment. A backslash, and a name that is a whole relative path segment, are refused.
    if "\\" in subject or subject in (".", ".."):
        raise invalid_subject(subject, "a subject name may not hold '\\' nor be '.' or '..' (a path segment "
                                       "of the API; send '/' URL-encoded as %2F)")
    return subject


def parse_version(raw: str) -> int:
    """A version path segment: 1..2^31-1, or `latest` (and Confluent's -1 for it) as LATEST; 42202 otherwise."""
    if raw == "latest":
        return LATEST
    try:
        version = int(raw)
    except ValueError:
        raise invalid_version(raw) from None
    if version == LATEST:
        return LATEST
    if not 1 <= version <= MAX_VERSION:
        raise invalid_version(raw)
    return version


def _int_field(body: dict[str, JsonValue], name: str, low: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_VERSION:
        if name == "version":
            raise invalid_version(str(value))
        raise RegistryError(422, Code.INVALID_SCHEMA,
                            f"'{name}' must be an integer {low}..{MAX_VERSION}, got {value!r}")
    return value


def schema_request(body: JsonValue) -> SchemaRequest:
    if not isinstance(body, dict):
        raise invalid_schema("AVRO", f"the request body must be a JSON object with a 'schema', got "
                                     f"{type(body).__name__}")
    schema_type = body.get("schemaType") or "AVRO"
    if schema_type not in SCHEMA_TYPES:
        raise invalid_schema(str(schema_type), f"unknown schemaType {schema_type!r}: use AVRO, JSON or PROTOBUF")
    schema_type = str(schema_type)
    schema = body.get("schema")
    if not isinstance(schema, str) or not schema.strip():
        raise invalid_schema(schema_type, "the request body needs 'schema', the schema as a non-empty string, "
                                          f"got {schema!r}"[:300])
    size = len(schema) if len(schema) * 4 <= MAX_SCHEMA_BYTES else len(schema.encode("utf-8", "surrogatepass"))
    if size > MAX_SCHEMA_BYTES:
        raise invalid_schema(schema_type, f"the schema is {size} bytes, over the limit of {MAX_SCHEMA_BYTES} bytes "
                                          "(1 MiB: Confluent's size.limit.filter.max.request.body.size default)")
    if schema_type == "PROTOBUF":
        from .protobuf_descriptor import from_serialized, looks_serialized  # protobuf on first use (issue 38)

        if looks_serialized(schema):  # confluent-kafka's serializers send this form
            schema = from_serialized(schema)
    raw_refs = body.get("references") or []
    if not isinstance(raw_refs, list):
        raise invalid_schema(schema_type, "'references' must be a list of {name, subject, version}")
    refs: list[Reference] = []
    for i, item in enumerate(raw_refs):
        name, subject, version = (item.get(k) for k in ("name", "subject", "version")) \
            if isinstance(item, dict) else (None, None, None)
        if not isinstance(name, str) or not name or not isinstance(subject, str) or not subject \
                or isinstance(version, bool) or not isinstance(version, int) \
                or not (version == LATEST or 1 <= version <= MAX_VERSION):
            raise invalid_schema(schema_type, f"references[{i}] must be {{\"name\": string, \"subject\": string, "
                                              f"\"version\": 1..{MAX_VERSION} or -1}}, got {item!r}")
        refs.append(Reference(name, subject, version))
    if len({r.name for r in refs}) != len(refs):
        raise invalid_schema(schema_type, "two references have the same name")
    try:
        metadata = contract_text(body.get("metadata"), "metadata")
        rule_set = contract_text(body.get("ruleSet"), "ruleSet")
    except ValueError as exc:
        raise invalid_schema(schema_type, str(exc)) from None
    return SchemaRequest(schema, schema_type, tuple(refs), _int_field(body, "id", 1), _int_field(body, "version", 1),
                         metadata, rule_set)


def level_of(body: JsonValue) -> str:
    raw = body.get("compatibility", body.get("compatibilityLevel")) if isinstance(body, dict) else None
    level = raw.upper() if isinstance(raw, str) else raw
    if level not in LEVELS:
        raise RegistryError(422, Code.INVALID_COMPATIBILITY_LEVEL,
                            "Invalid compatibility level. Valid values are none, "
                            "backward, forward, full, backward_transitive, forward_transitive, and full_transitive "
                            f"(the body's 'compatibility' is {raw!r})")
    return str(level)


def mode_of(body: JsonValue) -> str:
    raw = body.get("mode") if isinstance(body, dict) else None
    mode = raw.upper() if isinstance(raw, str) else raw
    if mode not in MODES:
        raise RegistryError(422, Code.INVALID_MODE, "Invalid mode. Valid values are READWRITE, READONLY, "
                                               f"READONLY_OVERRIDE and IMPORT (the body's 'mode' is {raw!r})")
    return str(mode)
