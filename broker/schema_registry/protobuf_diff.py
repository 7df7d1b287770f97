"""Protobuf compatibility: Confluent's `protobuf.diff.SchemaDiff` (Schema Registry 8.5), followed rule by rule.

Why here: no Python library decides whether one `.proto` schema can read another's data; Kelp answers as
Confluent's registry does (`tests/schema_registry/confluent_cases` holds Confluent's own cases, every one run).
`compare(...)` goes from the schema that wrote (`original`) to the one that reads (`update`) and returns the
incompatible differences, with Confluent's type names and paths: PACKAGE_CHANGED, MESSAGE_REMOVED,
FIELD_KIND_CHANGED (scalar — enums included, as Confluent treats an enum as an int32 —, message and map are the
kinds), FIELD_SCALAR_KIND_CHANGED (scalars change only within Confluent's groups: int32/int64/uint32/uint64/bool
and enums, sint32/sint64, fixed32/sfixed32, fixed64/sfixed64, string/bytes, float, double),
FIELD_NAMED_TYPE_CHANGED (a message type of another name, or one whose own fields changed incompatibly: the
message a field names is followed, into the reference that defines it, unless both sides name the same
subject and version), FIELD_NUMERIC_LABEL_CHANGED (singular <-> repeated, for numbers), REQUIRED_FIELD_ADDED,
REQUIRED_FIELD_REMOVED, ONEOF_FIELD_REMOVED (a member dropped from a oneof that is not deleted as a whole),
FIELD_MOVED_TO_EXISTING_ONEOF and MULTIPLE_FIELDS_MOVED_TO_ONEOF (a oneof of the update whose earlier members
come from more than one group of the original — a oneof, or a single field —: fields once independent made
mutually exclusive, whether by moving a field into an existing oneof, merging oneofs, or renaming one while
moving a field in). Everything else — fields added or removed, renamed, messages added, enum constants added or
removed, a oneof added or removed whole, a field moved out of a oneof — is compatible, as in Confluent.

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
    value_kind: str = "SCALAR"  # a map's value: SCALAR, MESSAGE or ENUM


@dataclass(slots=True)
class MessageInfo:
    full_name: str
    fields: dict[int, FieldInfo] = field(default_factory=dict)
    oneofs: set[str] = field(default_factory=set)
    package: str = ""  # of the file that defines it
    reference: tuple[str, int] | None = None  # (subject, version) of the reference that defines it; None: local

_GROUPS = {"int32": "GENERAL_NUMBER", "int64": "GENERAL_NUMBER", "uint32": "GENERAL_NUMBER",
           "uint64": "GENERAL_NUMBER", "bool": "GENERAL_NUMBER", "sint32": "SIGNED_NUMBER", "sint64": "SIGNED_NUMBER",
           "fixed32": "FIXED32", "sfixed32": "FIXED32", "fixed64": "FIXED64", "sfixed64": "FIXED64",
           "string": "STRING_OR_BYTES", "bytes": "STRING_OR_BYTES", "float": "FLOAT", "double": "DOUBLE"}


def _local(name: str, package: str) -> str:
    return name[len(package) + 1:] if package and name.startswith(package + ".") else name


def compare(original_package: str, original: dict[str, MessageInfo], update_package: str,
            update: dict[str, MessageInfo], original_imported: dict[str, MessageInfo] | None = None,
            update_imported: dict[str, MessageInfo] | None = None) -> list[tuple[str, str]]:
    """The incompatible differences between two files' messages (by full name; the `_imported` ones are their
    references'), as (Confluent's difference type, path)."""
    out: list[tuple[str, str]] = []
    if original_package != update_package:
        out.append(("PACKAGE_CHANGED", "#/"))
    diff = _Diff({**(original_imported or {}), **original}, {**(update_imported or {}), **update})
    updated = {_local(name, update_package): info for name, info in update.items()}
    for name, before in original.items():
        local = _local(name, original_package)
        after = updated.get(local)
        if after is None:
            out.append(("MESSAGE_REMOVED", f"#/{local}"))
        else:
            diff.message(local, before, after, out)
    return out


def _oneof_members(info: MessageInfo) -> dict[str, list[int]]:
    members: dict[str, list[int]] = {name: [] for name in info.oneofs}
    for number, f in info.fields.items():
        if f.oneof is not None:
            members.setdefault(f.oneof, []).append(number)
    return members


class _Diff:
    """One comparison: every message of both sides by full name, and the messages being compared (Confluent's
    schema scope: a message met again inside itself is not compared again)."""

    def __init__(self, original: dict[str, MessageInfo], update: dict[str, MessageInfo]) -> None:
        self.original, self.update = original, update
        self.active: set[str] = set()

    def message(self, local: str, before: MessageInfo, after: MessageInfo, out: list[tuple[str, str]]) -> None:
        if before.full_name in self.active:
            return
        self.active.add(before.full_name)
        try:
            self._message(local, before, after, out)
        finally:
            self.active.discard(before.full_name)

    def _message(self, local: str, before: MessageInfo, after: MessageInfo, out: list[tuple[str, str]]) -> None:
        old_oneofs, new_oneofs = _oneof_members(before), _oneof_members(after)
        deleted = {name for name, tags in old_oneofs.items()
                   if name not in new_oneofs and not any(t in after.fields for t in tags)}
        for name, tags in sorted(new_oneofs.items()):
            groups: set[str] = set()
            moved_in = 0
            for tag in tags:
                old = before.fields.get(tag)
                if old is None:
                    continue  # a new field: old data never set it
                if old.oneof is not None:
                    groups.add(f"oneof:{old.oneof}")
                else:
                    groups.add(f"field:{tag}")
                    moved_in += 1
            if len(groups) > 1:
                out.append(("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF",
                            f"#/{local}/{name}"))
        for number in sorted(set(before.fields) | set(after.fields)):
            old, new = before.fields.get(number), after.fields.get(number)
            if new is None:
                assert old is not None
                if old.oneof is not None:
                    if old.oneof not in deleted:
                        out.append(("ONEOF_FIELD_REMOVED", f"#/{local}/{old.oneof}/{number}"))
                elif old.label == "REQUIRED":
                    out.append(("REQUIRED_FIELD_REMOVED", f"#/{local}/{number}"))
            elif old is None:
                if new.oneof is None and new.label == "REQUIRED":
                    out.append(("REQUIRED_FIELD_ADDED", f"#/{local}/{number}"))
            else:
                path = f"#/{local}/{new.oneof}/{number}" if new.oneof is not None else f"#/{local}/{number}"
                self.field(old, new, path, out)

    def field(self, old: FieldInfo, new: FieldInfo, path: str, out: list[tuple[str, str]]) -> None:
        if _kind(old) != _kind(new):
            out.append(("FIELD_KIND_CHANGED", path))
        elif old.kind == "MAP":
            self._types("SCALAR", old.key_type or "", "SCALAR", new.key_type or "", "", "", path, out)
            self._types(old.value_kind, old.type_name, new.value_kind, new.type_name, "", "", path, out)
        else:
            self._types(old.kind, old.type_name, new.kind, new.type_name, old.label, new.label, path, out)

    def _types(self, old_kind: str, old_type: str, new_kind: str, new_type: str, old_label: str, new_label: str,
               path: str, out: list[tuple[str, str]]) -> None:
        if (old_kind == "MESSAGE") != (new_kind == "MESSAGE"):
            out.append(("FIELD_KIND_CHANGED", path))
        elif old_kind != "MESSAGE":
            old_group = "GENERAL_NUMBER" if old_kind == "ENUM" else _GROUPS.get(old_type)
            new_group = "GENERAL_NUMBER" if new_kind == "ENUM" else _GROUPS.get(new_type)
            if old_group != new_group:
                out.append(("FIELD_SCALAR_KIND_CHANGED", path))
            elif (old_label == "REPEATED") != (new_label == "REPEATED") and old_group != "STRING_OR_BYTES":
                out.append(("FIELD_NUMERIC_LABEL_CHANGED", path))
        else:
            self._messages(old_type, new_type, path, out)

    def _messages(self, old_type: str, new_type: str, path: str, out: list[tuple[str, str]]) -> None:
        before, after = self.original.get(old_type), self.update.get(new_type)
        if before is None or after is None:  # a built-in type (google.protobuf...): by name
            if old_type != new_type:
                out.append(("FIELD_NAMED_TYPE_CHANGED", path))
            return
        old_local, new_local = _local(old_type, before.package), _local(new_type, after.package)
        if old_local != new_local:
            out.append(("FIELD_NAMED_TYPE_CHANGED", path))
        elif before.reference is None or after.reference is None or before.reference != after.reference:
            inner: list[tuple[str, str]] = []
            self.message(old_local, before, after, inner)
            if inner:
                out.extend(inner)
                out.append(("FIELD_NAMED_TYPE_CHANGED", path))


def _kind(f: FieldInfo) -> str:
    return "MAP" if f.kind == "MAP" else "MESSAGE" if f.kind == "MESSAGE" else "SCALAR"

