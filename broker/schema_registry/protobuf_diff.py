"""Protobuf compatibility: Confluent's documented rules (its `protobuf.diff.SchemaDiff`), re-implemented.

Why here: no Python library decides whether one `.proto` schema can read another's data; Confluent's rules
are documented by its difference types, and this module reports the same ones. `compare(original, update)`
goes from the schema that wrote (`original`) to the one that reads (`update`) and returns the incompatible
differences: PACKAGE_CHANGED, MESSAGE_REMOVED, FIELD_KIND_CHANGED (scalar, message, enum and map are
kinds), FIELD_SCALAR_KIND_CHANGED (scalars change only within Confluent's groups: int32/int64/uint32/uint64/
bool, sint32/sint64, fixed32/sfixed32, fixed64/sfixed64, string/bytes, float, double),
FIELD_NAMED_TYPE_CHANGED, FIELD_NUMERIC_LABEL_CHANGED (singular <-> repeated, for numbers),
REQUIRED_FIELD_ADDED, REQUIRED_FIELD_REMOVED, ONEOF_FIELD_REMOVED, FIELD_MOVED_TO_EXISTING_ONEOF and
MULTIPLE_FIELDS_MOVED_TO_ONEOF. Everything else — fields added or removed, renamed, messages added, enum
constants added or removed, a oneof added, a string field made repeated — is compatible, as in Confluent.
A message is matched by its name within the package and a field by its number; a message type a field
names is compared by its name within its package (message bodies are compared where they are defined).

This module must never parse: `protobuf_format` hands it the parsed messages (`MessageInfo`, `FieldInfo`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["compare", "FieldInfo", "MessageInfo"]


@dataclass(frozen=True, slots=True)
class FieldInfo:
    name: str
    number: int
    kind: str  # SCALAR, MESSAGE, ENUM or MAP
    type_name: str  # the scalar, or the full name of the message or enum (a map: its value's)
    label: str  # REQUIRED, REPEATED or "" (singular)
    oneof: str | None = None
    key_type: str | None = None  # a map's key


@dataclass(slots=True)
class MessageInfo:
    full_name: str
    fields: dict[int, FieldInfo] = field(default_factory=dict)
    oneofs: set[str] = field(default_factory=set)

_GROUPS = {"int32": "GENERAL_NUMBER", "int64": "GENERAL_NUMBER", "uint32": "GENERAL_NUMBER",
           "uint64": "GENERAL_NUMBER", "bool": "GENERAL_NUMBER", "sint32": "SIGNED_NUMBER", "sint64": "SIGNED_NUMBER",
           "fixed32": "FIXED32", "sfixed32": "FIXED32", "fixed64": "FIXED64", "sfixed64": "FIXED64",
           "string": "STRING_OR_BYTES", "bytes": "STRING_OR_BYTES", "float": "FLOAT", "double": "DOUBLE"}


def _local(name: str, package: str) -> str:
    return name[len(package) + 1:] if package and name.startswith(package + ".") else name


def compare(original_package: str, original: dict[str, MessageInfo], update_package: str,
            update: dict[str, MessageInfo]) -> list[tuple[str, str]]:
    """The incompatible differences between two files' messages (by full name), as (Confluent's difference
    type, path)."""
    out: list[tuple[str, str]] = []
    if original_package != update_package:
        out.append(("PACKAGE_CHANGED", "#/"))
    updated = {_local(name, update_package): info for name, info in update.items()}
    for name, before in original.items():
        local = _local(name, original_package)
        after = updated.get(local)
        if after is None:
            out.append(("MESSAGE_REMOVED", f"#/{local}"))
        else:
            _compare_message((original_package, update_package), local, before, after, out)
    return out


def _compare_message(packages: tuple[str, str], local: str, before: MessageInfo, after: MessageInfo,
                     out: list[tuple[str, str]]) -> None:
    moved_to_new_oneof = 0
    for number in sorted(set(before.fields) | set(after.fields)):
        path = f"#/{local}/{number}"
        old, new = before.fields.get(number), after.fields.get(number)
        if new is None:
            assert old is not None
            if old.label == "REQUIRED":
                out.append(("REQUIRED_FIELD_REMOVED", path))
            elif old.oneof is not None:
                out.append(("ONEOF_FIELD_REMOVED", path))
            continue
        if old is None:
            if new.label == "REQUIRED":
                out.append(("REQUIRED_FIELD_ADDED", path))
            continue
        if old.oneof is None and new.oneof is not None:
            if new.oneof in before.oneofs:
                out.append(("FIELD_MOVED_TO_EXISTING_ONEOF", path))
            else:
                moved_to_new_oneof += 1
        _compare_field(packages, old, new, path, out)
    if moved_to_new_oneof > 1:
        out.append(("MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"#/{local}"))


def _compare_field(packages: tuple[str, str], old: FieldInfo, new: FieldInfo, path: str,
                   out: list[tuple[str, str]]) -> None:
    if old.kind != new.kind:
        out.append(("FIELD_KIND_CHANGED", path))
        return
    if old.kind == "MAP" and old.key_type != new.key_type:
        out.append(("FIELD_KIND_CHANGED", path))
        return
    if old.kind == "SCALAR" or (old.kind == "MAP" and old.type_name in _GROUPS):
        if _GROUPS.get(old.type_name) != _GROUPS.get(new.type_name):
            out.append(("FIELD_SCALAR_KIND_CHANGED", path))
        elif old.kind == "SCALAR" and (old.label == "REPEATED") != (new.label == "REPEATED") \
                and _GROUPS[old.type_name] != "STRING_OR_BYTES":
            out.append(("FIELD_NUMERIC_LABEL_CHANGED", path))
        return
    if _local(old.type_name, packages[0]) != _local(new.type_name, packages[1]):
        out.append(("FIELD_NAMED_TYPE_CHANGED", path))
