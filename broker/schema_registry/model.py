"""What the registry holds — schema versions, references, compatibility levels, modes — and how each is
written in `_schemas`.

Why: the records of `_schemas` are the registry's only storage, so their format is its data model. They
follow Confluent's: a JSON key naming the record (`{"keytype":"SCHEMA","subject":"s","version":1,
"magic":1}`, `{"keytype":"CONFIG","subject":null,"magic":0}`, `{"keytype":"MODE",...}`, `NOOP`) and a JSON
value (the schema version with its id, type, references and `deleted` flag; `{"compatibilityLevel":
"FULL"}`; `{"mode":"IMPORT"}`), a null value deleting the key (a permanent delete; a subject's level or mode
removed). The topic is compacted, so the last record of each key is what the registry holds, and a log
written by Confluent's registry reads here too (`DELETE_SUBJECT` and `CLEAR_SUBJECT` are understood).

This module must never do I/O: it is values and their JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kelp.bounded_json import loads_bounded
from kelp.json_types import JsonObject, JsonValue

__all__ = ["SCHEMA_TYPES", "LEVELS", "MODES", "DEFAULT_LEVEL", "DEFAULT_MODE", "Reference", "SchemaVersion",
           "RecordKey", "schema_key", "config_key", "mode_key", "encode", "decode_key", "decode_version",
           "MAX_VERSION", "READ_ONLY_MODES", "contract_text", "add_contract"]

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
# READONLY_OVERRIDE is READONLY that a subject's own mode cannot lift when it is the global mode (Confluent's
# getModeInScope): the way to freeze a whole registry, e.g. while it is migrated.
READ_ONLY_MODES = frozenset({"READONLY", "READONLY_OVERRIDE"})
DEFAULT_LEVEL = "BACKWARD"
DEFAULT_MODE = "READWRITE"
MAX_VERSION = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema's import of another: `name` as the schema refers to it, and the subject version that is it."""

    name: str
    subject: str
    version: int

    def to_json(self) -> JsonObject:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One version of a subject: the schema (as stored), its global id, type and references."""

    subject: str
    version: int
    schema_id: int
    schema: str
    schema_type: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False
    # Data contracts (Confluent's `metadata` and `ruleSet`), as canonical JSON text: part of what the schema is
    metadata: str | None = None
    rule_set: str | None = None

    def to_api(self) -> JsonObject:
        """Confluent's answer shape: `schemaType` only when not AVRO, `references`, `metadata` and `ruleSet` only
        when there are some."""
        out: JsonObject = {"subject": self.subject, "version": self.version, "id": self.schema_id}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        add_contract(out, self.metadata, self.rule_set)
        out["schema"] = self.schema
        return out

    def value_json(self) -> JsonObject:
        out: JsonObject = {"subject": self.subject, "version": self.version, "id": self.schema_id,
                           "schemaType": self.schema_type, "references": [r.to_json() for r in self.references],
                           "schema": self.schema, "deleted": self.deleted}
        add_contract(out, self.metadata, self.rule_set)
        return out


def contract_text(value: JsonValue, what: str) -> str | None:
    """A data contract's `metadata` or `ruleSet` as canonical JSON text (None when absent or null); ValueError
    naming `what` when it is not a JSON object."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"'{what}' must be a JSON object, got {json.dumps(value)[:100]}")
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def add_contract(out: JsonObject, metadata: str | None, rule_set: str | None) -> None:
    """`metadata` and `ruleSet` into an answer, when the schema has them."""
    if metadata is not None:
        out["metadata"] = json.loads(metadata)
    if rule_set is not None:
        out["ruleSet"] = json.loads(rule_set)


@dataclass(frozen=True, slots=True)
class RecordKey:
    """The key of a `_schemas` record: `keytype` SCHEMA (with subject and version), CONFIG or MODE (subject
    None: the global one), NOOP, DELETE_SUBJECT or CLEAR_SUBJECT."""

    keytype: str
    subject: str | None = None
    version: int | None = None


def schema_key(subject: str, version: int) -> bytes:
    return encode({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    return encode({"keytype": "CONFIG", "subject": subject, "magic": 0})


def mode_key(subject: str | None) -> bytes:
    return encode({"keytype": "MODE", "subject": subject, "magic": 0})


def encode(value: JsonObject) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def decode_key(raw: bytes) -> RecordKey:
    """The key of a record; ValueError naming what is wrong for one this registry cannot read."""
    data: JsonValue = loads_bounded(raw.decode("utf-8"))  # BodyError is a ValueError
    if not isinstance(data, dict) or not isinstance(data.get("keytype"), str):
        raise ValueError(f"a _schemas key must be a JSON object with a string 'keytype', got {raw[:200]!r}")
    keytype = str(data["keytype"])
    subject = data.get("subject")
    version = data.get("version")
    if subject is not None and not isinstance(subject, str):
        raise ValueError(f"the 'subject' of a _schemas key must be a string or null, got {subject!r}")
    if keytype == "SCHEMA" and (subject is None or not isinstance(version, int) or isinstance(version, bool)):
        raise ValueError(f"a SCHEMA key needs a subject and an integer version, got {raw[:200]!r}")
    return RecordKey(keytype, subject, version if isinstance(version, int) else None)


def decode_version(raw: bytes) -> SchemaVersion:
    """The value of a SCHEMA record (ValueError naming what is wrong)."""
    data: JsonValue = loads_bounded(raw.decode("utf-8"))  # BodyError is a ValueError
    if not isinstance(data, dict):
        raise ValueError("a SCHEMA value must be a JSON object")
    subject, version, sid, schema = data.get("subject"), data.get("version"), data.get("id"), data.get("schema")
    if not isinstance(subject, str) or not isinstance(version, int) or not isinstance(sid, int) \
            or not isinstance(schema, str):
        raise ValueError("a SCHEMA value needs a string subject and schema and integer version and id")
    schema_type = data.get("schemaType") or "AVRO"
    if schema_type not in SCHEMA_TYPES:
        raise ValueError(f"unknown schemaType {schema_type!r}")
    refs: list[Reference] = []
    raw_refs = data.get("references") or []
    if not isinstance(raw_refs, list):
        raise ValueError("'references' must be a list")
    for item in raw_refs:
        name, ref_subject, ref_version = (item.get(k) for k in ("name", "subject", "version")) \
            if isinstance(item, dict) else (None, None, None)
        if not isinstance(name, str) or not isinstance(ref_subject, str) or not isinstance(ref_version, int):
            raise ValueError(f"a reference needs a string name and subject and an integer version, got {item!r}")
        refs.append(Reference(name, ref_subject, ref_version))
    return SchemaVersion(subject, version, sid, schema, str(schema_type), tuple(refs), bool(data.get("deleted")),
                         contract_text(data.get("metadata"), "metadata"), contract_text(data.get("ruleSet"), "ruleSet"))
