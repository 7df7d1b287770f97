"""Confluent's own compatibility cases, run through Kelp's checker: every case, no skips, no expected failures.

Why: Kelp's registry claims Confluent's compatibility behaviour (issue 37). The cases are Confluent's data, vendored
in `confluent_cases/` (see its README for the commit and the version Kelp follows): the JSON Schema and Protobuf
`diff-schema-examples` files of `SchemaDiffTest`, and `AvroCompatibilityTest`'s assertions transcribed as data.
A case disagrees when Kelp's verdict (compatible or not) differs from Confluent's — and, for JSON Schema, when
Kelp's list of differences (type and JSON path) is not Confluent's; the test fails naming every disagreement, so
one failing run shows the whole list.

The verdict is the one the registry acts on: `check_level` over parsed schemas, as a registration decides it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kelp.broker.schema_registry.compat import check_level
from kelp.broker.schema_registry.formats import parse
from kelp.broker.schema_registry.json_diff import compare
from kelp.broker.schema_registry.parsed import ParsedSchema, ResolvedReference

CASES = Path(__file__).parent / "confluent_cases"


def _load(name: str) -> Any:
    return json.loads((CASES / name).read_text(encoding="utf-8"))


def _backward_compatible(original: ParsedSchema, update: ParsedSchema) -> bool:
    return not check_level("BACKWARD", update, [original])


def json_disagreements(name: str) -> list[str]:
    out = []
    for case in _load(name):
        original = parse("JSON", json.dumps(case["original_schema"]))
        update = parse("JSON", json.dumps(case["update_schema"]))
        kelp = _backward_compatible(original, update)
        if kelp != case["compatible"]:
            out.append(f"{case['description']!r}: Confluent {case['compatible']}, Kelp {kelp} "
                       f"({check_level('BACKWARD', update, [original])})")
        # Confluent's test also pins the differences themselves (type and JSON path): so does this one
        changes = sorted(f"{d.kind} {d.path}" for d in compare(case["original_schema"], case["update_schema"]))
        if changes != sorted(case["changes"]):
            out.append(f"{case['description']!r}: Confluent's differences {sorted(case['changes'])}, Kelp's {changes}")
    return out


def _proto_refs(case: dict[str, Any], side: str) -> tuple[ResolvedReference, ...]:
    """The case's references with their texts; one without a text is a file Confluent ships (`confluent/`,
    `google/protobuf/`), which Kelp knows without a reference."""
    deps = {d["name"]: d.get("dependency") for d in case.get(f"{side}_dependencies", [])}
    return tuple(ResolvedReference(r["name"], r["subject"], r["version"], "PROTOBUF", deps[r["name"]])
                 for r in case.get(f"{side}_references", []) if deps.get(r["name"]) is not None)


def _proto_text(schema: str) -> str:
    """A schema, or (as Confluent's test reads it) the path of a `.proto` file beside the cases."""
    return (CASES / "protobuf" / schema.rsplit("/", 1)[-1]).read_text(encoding="utf-8") \
        if schema.endswith(".proto") else schema


def protobuf_disagreements(name: str) -> list[str]:
    out = []
    for case in _load(name):
        original = parse("PROTOBUF", _proto_text(case["original_schema"]), _proto_refs(case, "original"))
        update = parse("PROTOBUF", _proto_text(case["update_schema"]), _proto_refs(case, "update"))
        kelp = _backward_compatible(original, update)
        if kelp != case["compatible"]:
            out.append(f"{case['description']!r}: Confluent {case['compatible']}, Kelp {kelp} "
                       f"({check_level('BACKWARD', update, [original])})")
    return out


def avro_disagreements() -> list[str]:
    data = _load("avro-compatibility-cases.json")
    schemas = {name: parse("AVRO", text) for name, text in data["schemas"].items()}
    out = []
    for case in data["cases"]:
        found = check_level(case["level"], schemas[case["schema"]], [schemas[p] for p in case["previous"]])
        if (not found) != case["compatible"]:
            out.append(f"{case['level']} {case['schema']} after {case['previous']} ({case['description']}): "
                       f"Confluent {case['compatible']}, Kelp {not found} ({found})")
    return out


@pytest.mark.parametrize("name", ["json-diff-schema-examples.json", "json-diff-combined-schema-examples.json"])
def test_json_schema_cases_agree_with_confluent(name: str) -> None:
    assert len(_load(name)) > 0
    disagreements = json_disagreements(name)
    assert not disagreements, f"{len(disagreements)} of {len(_load(name))} disagree:\n" + "\n".join(disagreements)


@pytest.mark.parametrize("name", ["protobuf-diff-schema-examples.json", "protobuf-diff-schema-examples-with-meta.json"])
def test_protobuf_cases_agree_with_confluent(name: str) -> None:
    disagreements = protobuf_disagreements(name)
    assert not disagreements, f"{len(disagreements)} of {len(_load(name))} disagree:\n" + "\n".join(disagreements)


def test_protobuf_proto_files_case() -> None:
    """`SchemaDiffTest.checkCompatibilityUsingProtoFiles`: TestProto -> TestProto2 changes field 2 from int32 to
    string, FIELD_SCALAR_KIND_CHANGED at #/TestMessage/2 (and the package: incompatible twice over)."""
    original = parse("PROTOBUF", _proto_text("TestProto.proto"))
    update = parse("PROTOBUF", _proto_text("TestProto2.proto"))
    found = check_level("BACKWARD", update, [original])
    assert any("FIELD_SCALAR_KIND_CHANGED" in f and "#/TestMessage/2" in f for f in found), found


def test_avro_cases_agree_with_confluent() -> None:
    data = _load("avro-compatibility-cases.json")
    disagreements = avro_disagreements()
    assert not disagreements, f"{len(disagreements)} of {len(data['cases'])} disagree:\n" + "\n".join(disagreements)
