"""Pure: replaying `_schemas` records into the registry's state, and the JSON Schema and Protobuf rules."""

from __future__ import annotations

import json

from kelp.broker.schema_registry.formats import parse
from kelp.broker.schema_registry.json_diff import compare
from kelp.broker.schema_registry.model import SchemaVersion, config_key, encode, mode_key, schema_key
from kelp.broker.schema_registry.parsed import ResolvedReference
from kelp.broker.schema_registry.state import RegistryState


def test_replay_builds_versions_ids_levels_and_modes() -> None:
    state = RegistryState()
    v1 = SchemaVersion("s", 1, 5, '"int"', "AVRO")
    records = [
        (schema_key("s", 1), encode(v1.value_json())),
        (schema_key("t", 1), encode(SchemaVersion("t", 1, 5, '"int"', "AVRO").value_json())),
        (config_key(None), encode({"compatibilityLevel": "FULL"})),
        (mode_key("s"), encode({"mode": "READONLY"})),
        (b"not json", b"{}"),  # skipped, never fatal
        (schema_key("s", 1), encode(SchemaVersion("s", 1, 5, '"int"', "AVRO", deleted=True).value_json())),
        (schema_key("t", 1), None),
        (encode({"keytype": "NOOP", "magic": 0}), None),
    ]
    for offset, (key, value) in enumerate(records):
        state.apply(offset, key, value)
    assert state.next_offset == len(records)
    assert state.versions("s") == [] and [sv.version for sv in state.versions("s", deleted=True)] == [1]
    assert state.subject_names() == [] and state.subject_names(deleted=True) == ["s"]
    assert state.ids[5] == ("AVRO", '"int"', (), None, None) and state.max_id == 5  # no data contract
    assert state.level("s") == "FULL" and state.mode("s") == "READONLY" and state.mode("t") == "READWRITE"
    state.apply(len(records), schema_key("s", 1), None)
    assert 5 not in state.ids and state.max_id == 5  # ids are never reused


def test_json_schema_strict_rules() -> None:
    closed = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    opened = {"type": "object", "properties": {"a": {"type": "string"}}}
    kinds = {d.kind: d.compatible for d in compare(opened, {**opened, "properties": {"a": {"type": "string"},
                                                                                      "b": {"type": "integer"}}})}
    assert kinds == {"OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL": False}
    kinds = {d.kind: d.compatible for d in compare(closed, {**closed, "properties": {}})}
    assert kinds == {"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL": False}
    assert all(d.compatible for d in compare({"type": "integer", "maximum": 5}, {"type": "number"}))
    narrowed = compare({"enum": ["a", "b"]}, {"enum": ["a"]})
    assert [(d.kind, d.compatible) for d in narrowed] == [("ENUM_ARRAY_NARROWED", False)]
    required = compare(opened, {**opened, "required": ["a"]})
    assert [(d.kind, d.compatible) for d in required] == [("REQUIRED_ATTRIBUTE_ADDED", False)]


def test_protobuf_rules() -> None:
    base = 'syntax = "proto3"; package p; message M { int32 a = 1; string b = 2; %s }'
    old = parse("PROTOBUF", base % "")
    assert parse("PROTOBUF", base % "bool c = 3;").compatibility_errors(old) == []  # a field added
    renamed = parse("PROTOBUF", base.replace("int32 a", "int64 renamed") % "")
    assert renamed.compatibility_errors(old) == []  # same scalar group, a new name: compatible
    repeated = parse("PROTOBUF", base.replace("int32 a", "repeated int32 a") % "")
    assert "FIELD_NUMERIC_LABEL_CHANGED" in json.dumps(repeated.compatibility_errors(old))
    moved = parse("PROTOBUF", base.replace("package p", "package q") % "")
    assert "PACKAGE_CHANGED" in json.dumps(moved.compatibility_errors(old))


def test_json_schema_recursive_and_referenced_schemas_are_followed() -> None:
    """A `$ref` is compared by what it names (Confluent: `items: {$ref}` whose definition changed string -> number
    is incompatible; Kelp compared the `$ref` text and accepted it), a recursive one ends, and a schema in a
    reference is followed too."""
    def linked(value_type: str) -> dict[str, object]:
        return {"$ref": "#/definitions/node", "definitions": {"node": {
            "type": "object", "properties": {"value": {"type": value_type}, "next": {"$ref": "#/definitions/node"}}}}}
    assert compare(linked("string"), linked("string")) == []
    changed = compare(linked("string"), linked("number"))  # found where it is, and again one `next` down
    assert {d.kind for d in changed} == {"TYPE_CHANGED"} and "#/properties/value" in {d.path for d in changed}

    def with_ref(ref_type: str) -> list[str]:
        old = parse("JSON", '{"type": "array", "items": {"$ref": "item.json"}}',
                    (ResolvedReference("item.json", "item", 1, "JSON", '{"type": "string"}'),))
        new = parse("JSON", '{"type": "array", "items": {"$ref": "item.json"}}',
                    (ResolvedReference("item.json", "item", 2, "JSON", f'{{"type": "{ref_type}"}}'),))
        return new.compatibility_errors(old)
    assert with_ref("string") == []
    assert "TYPE_CHANGED" in with_ref("number")[0]
