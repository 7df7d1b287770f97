"""Kelp's CRDs as files, and their structural schemas as plain JSON Schema and a defaulter.

Why this exists: tests check examples and documents against the CRDs without
an API server, so they need the same two things the API server does with a
structural schema: validation (here through `jsonschema`, after turning the
Kubernetes dialect into plain JSON Schema) and defaulting (the API server's
algorithm: fill missing fields from `default`, then descend, so a defaulted
`{}` gets its own fields' defaults). The kube tier checks the real thing.

What it must never do: change the input (every function is pure), or accept
an unknown field the API server would silently prune — in a sample that is a
typo, so the converter closes objects that do not preserve unknown fields.
"""

from __future__ import annotations

import copy
import datetime
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "crds"
CHART_DIR = REPO / "charts" / "kelp"
EXAMPLES_DIR = REPO / "examples"
GROUP, VERSION = "kelp.dev", "v1alpha1"
KINDS = ("Cluster", "Topic", "ConsumerGroup", "KelpUser")


def crd_files() -> list[Path]:
    """Every CRD file of the repository, sorted by name."""
    return sorted(CRD_DIR.glob("*.yaml"))


def load_crds() -> dict[str, dict[str, Any]]:
    """The CRDs of crds/ keyed by kind; each file must hold exactly one CRD."""
    crds: dict[str, dict[str, Any]] = {}
    for path in crd_files():
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        if len(docs) != 1 or docs[0].get("kind") != "CustomResourceDefinition":
            raise ValueError(f"{path}: expected exactly one CustomResourceDefinition, found {len(docs)} documents")
        kind = docs[0]["spec"]["names"]["kind"]
        if kind in crds:
            raise ValueError(f"{path}: a second CRD for kind {kind}")
        crds[kind] = docs[0]
    return crds


def version_of(crd: dict[str, Any], version: str = VERSION) -> dict[str, Any]:
    """The entry of spec.versions named ``version``."""
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return entry
    raise KeyError(f"CRD {crd['metadata']['name']} has no version {version}")


def openapi_schema(crd: dict[str, Any], version: str = VERSION) -> dict[str, Any]:
    """The openAPIV3Schema of one version."""
    return version_of(crd, version)["schema"]["openAPIV3Schema"]


def to_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Turn a structural (Kubernetes OpenAPI v3) schema into plain JSON Schema.

    - `x-kubernetes-int-or-string` becomes `type: [integer, string]`;
    - `nullable: true` adds `"null"` to the type;
    - objects with properties that neither preserve unknown fields nor say
      `additionalProperties` are closed (`additionalProperties: false`): the
      API server would prune unknown fields, and in a sample that hides a typo;
    - every other `x-kubernetes-*` key (CEL rules, list types, ...) is dropped.
    """
    return _convert(schema)


def _convert(node: Any) -> Any:
    if isinstance(node, list):
        return [_convert(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {name: _convert(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[key] = _convert(value)
        else:
            out[key] = copy.deepcopy(value)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("anyOf", None)
        out["type"] = ["integer", "string"]
    if node.get("nullable") and "type" in out:
        kinds = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*kinds, "null"]
    if ("properties" in node and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def format_checker() -> jsonschema.FormatChecker:
    """Checks the formats the CRDs use; `date-time` is RFC 3339 as the API server reads it.

    jsonschema checks date-time only with an optional package; this one needs none.
    """
    checker = jsonschema.FormatChecker(formats=())

    @checker.checks("date-time", raises=ValueError)
    def _date_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        if not _RFC3339.match(value):
            return False
        datetime.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
        return True

    return checker


def apply_defaults(obj: Any, schema: dict[str, Any]) -> Any:
    """Return ``obj`` with the schema's defaults applied, as the API server applies them.

    A missing property with a `default` gets a copy of it; then every present
    property (defaulted ones included) is defaulted by its own schema; array
    items and `additionalProperties` values likewise.
    """
    return _default(copy.deepcopy(obj), schema)


def _default(obj: Any, schema: dict[str, Any]) -> Any:
    if isinstance(obj, dict):
        props = schema.get("properties", {})
        for name, sub in props.items():
            if "default" in sub and (name not in obj or (obj[name] is None and not sub.get("nullable"))):
                obj[name] = copy.deepcopy(sub["default"])
        extra = schema.get("additionalProperties")
        for name, value in obj.items():
            if name in props:
                obj[name] = _default(value, props[name])
            elif isinstance(extra, dict):
                obj[name] = _default(value, extra)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [_default(item, schema["items"]) for item in obj]
    return obj


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every (path, sub-schema) of a schema reached through properties, items and additionalProperties."""
    found = [(path or ".", schema)]
    for name, sub in schema.get("properties", {}).items():
        found += walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        found += walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        found += walk(schema["additionalProperties"], f"{path}{{}}")
    return found


def load_examples() -> list[tuple[Path, dict[str, Any]]]:
    """(file, document) for every Kelp resource in examples/*.yaml (not examples/spark/)."""
    found = []
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                found.append((path, doc))
    return found
