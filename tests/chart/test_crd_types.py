"""The operator's types of its custom resources name exactly the fields the CRDs define.

Why: `kelp.operator.model.objects_kelp` types each resource's spec, status and
conditions (TypedDicts, checked by mypy); the API server knows only the CRDs
in crds/, and structural pruning silently drops a status field they lack. A
field added to one and not the other would type-check and still be lost, so
every TypedDict here is compared with its schema, field by field, as deep as
both go (a part the operator keeps free-form, `JsonObject`, ends the walk).
"""

from __future__ import annotations

import types
import typing
from typing import Any

import pytest

from kelp import json_types
from kelp.operator.model import objects_kelp as objects
from tests.chart.crd_schema import load_crds, openapi_schema

RESOURCES = {"Cluster": objects.ClusterResource, "Topic": objects.TopicResource,
             "ConsumerGroup": objects.ConsumerGroupResource, "KelpUser": objects.KelpUserResource}


def _hints(typed: type) -> dict[str, Any]:
    # JSON's alias is recursive: its own name must resolve where a field's type is evaluated.
    return typing.get_type_hints(typed, localns=vars(json_types))


def _typed_dict(hint: Any) -> type | None:
    """The TypedDict a field's type is, holds a list of, or is with None; None for anything else."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        found = [t for t in (_typed_dict(a) for a in typing.get_args(hint)) if t is not None]
        return found[0] if len(found) == 1 else None
    if typing.get_origin(hint) in (typing.Required, typing.NotRequired):
        return _typed_dict(typing.get_args(hint)[0])
    if typing.get_origin(hint) is list:
        return _typed_dict(typing.get_args(hint)[0])
    return hint if typing.is_typeddict(hint) else None


def _mismatches(typed: type, schema: dict[str, Any], where: str) -> list[str]:
    if schema.get("type") == "array":
        schema = schema["items"]
    fields = _hints(typed)
    properties = schema.get("properties") or {}
    out = [f"{where}.{name}: in {typed.__name__}, not in the CRD" for name in sorted(set(fields) - set(properties))]
    out += [f"{where}.{name}: in the CRD, not in {typed.__name__}" for name in sorted(set(properties) - set(fields))]
    for name in sorted(set(fields) & set(properties)):
        inner = _typed_dict(fields[name])
        if inner is not None:
            out += _mismatches(inner, properties[name], f"{where}.{name}")
    return out


@pytest.mark.parametrize("kind", sorted(RESOURCES))
@pytest.mark.parametrize("part", ["spec", "status"])
def test_the_types_name_the_crd_fields(kind: str, part: str) -> None:
    schema = openapi_schema(load_crds()[kind])["properties"][part]
    typed = _typed_dict(_hints(RESOURCES[kind])[part])
    assert typed is not None
    assert _mismatches(typed, schema, f"{kind}.{part}") == []
