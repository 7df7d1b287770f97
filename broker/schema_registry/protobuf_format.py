"""PROTOBUF schemas: `.proto` text parsed with `proto-schema-parser`, imports and type names resolved against
the schema's references, compatibility by Confluent's documented rules (`protobuf_diff`).

Why `proto-schema-parser`: a maintained, typed, pure-Python parser of `.proto` files (ANTLR grammar of Buf's
reference grammar) with a printer; the alternatives are protoc itself (a binary per platform, through
grpcio-tools) or Python's `protobuf`, which reads compiled descriptors, not `.proto` text. Syntax errors are
turned from ANTLR's console messages into 42201 answers naming line and column.

Resolution (checked at registration, as Confluent does): each `import` must be a reference's name, or one of
the files Confluent's registry knows without a reference (`google/protobuf/...`, `google/type/...`,
`confluent/...`); every message or enum type a field names must be defined in the schema or in a referenced
file, searched by protobuf's scoping rules (innermost scope first), or lie in a well-known package imported.
The canonical text is the schema printed back by the parser's generator, so formatting does not make a
schema new.

This module must never hold a compatibility rule: `protobuf_diff` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from antlr4.error.ErrorListener import ErrorListener
from proto_schema_parser import ast
from proto_schema_parser.generator import Generator
from proto_schema_parser.parser import Parser

from .errors import invalid_schema
from .parsed import ParsedSchema, ResolvedReference, flatten
from .protobuf_diff import FieldInfo, MessageInfo, compare

__all__ = ["parse_protobuf", "ProtobufSchema", "SCALARS", "BUILTIN_PACKAGES", "parse_tree", "type_index"]

SCALARS = frozenset({"double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
                     "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes"})
BUILTIN_IMPORTS = ("google/protobuf/", "google/type/", "confluent/")
BUILTIN_PACKAGES = ("google.protobuf.", "google.type.", "confluent.")


@dataclass(frozen=True, slots=True)
class ProtobufSchema:
    package: str
    messages: dict[str, MessageInfo]  # by full name, this file's own
    canonical: str
    schema_type: str = "PROTOBUF"
    imported: dict[str, MessageInfo] = field(default_factory=dict, compare=False)  # the references' messages

    def compatibility_errors(self, previous: ParsedSchema) -> list[str]:
        if not isinstance(previous, ProtobufSchema):
            return [f"{{errorType:'TYPE_CHANGED', description:'the old schema is {previous.schema_type}, "
                    "not PROTOBUF'}"]
        return [f"{{errorType:'{kind}', description:'{kind} at path {path}'}}"
                for kind, path in compare(previous.package, previous.messages, self.package, self.messages,
                                          previous.imported, self.imported)]


class _Raise(ErrorListener):  # type: ignore[misc]  # antlr4's runtime ships no types
    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def syntaxError(self, recognizer: object, offending: object, line: int, column: int, msg: str,
                    e: object) -> None:
        raise invalid_schema("PROTOBUF", f"{self.what} is not a valid .proto file: line {line}:{column}: {msg}")


def parse_tree(text: str, what: str) -> ast.File:
    """The syntax tree of `.proto` text; 42201 naming line and column of the first syntax error."""
    listener = _Raise(what)

    def quiet(recognizer: object) -> None:
        recognizer.removeErrorListeners()  # type: ignore[attr-defined]  # ANTLR's Recognizer, untyped
        recognizer.addErrorListener(listener)  # type: ignore[attr-defined]  # ANTLR's Recognizer, untyped

    return Parser(setup_lexer=quiet, setup_parser=quiet).parse(text)


@dataclass(slots=True)
class _Index:
    """Message and enum names (full, without the leading dot) defined so far, and what the files import."""

    messages: set[str] = field(default_factory=set)
    enums: set[str] = field(default_factory=set)
    maps: set[str] = field(default_factory=set)

    def add(self, prefix: str, elements: list[ast.MessageElement] | list[ast.FileElement]) -> None:
        for element in elements:
            if isinstance(element, ast.Message):
                name = f"{prefix}{element.name}"
                self.messages.add(name)
                self.add(f"{name}.", element.elements)
            elif isinstance(element, ast.Enum):
                self.enums.add(f"{prefix}{element.name}")

    def resolve(self, name: str, scope: str) -> str | None:
        """Protobuf's scoping: `.a.B` is absolute; otherwise the innermost enclosing scope that defines it."""
        if name.startswith("."):
            target = name[1:]
            return target if target in self.messages or target in self.enums else None
        parts = scope.split(".") if scope else []
        for depth in range(len(parts), -1, -1):
            candidate = ".".join(parts[:depth] + [name])
            if candidate in self.messages or candidate in self.enums:
                return candidate
        return None


def _package(file: ast.File) -> str:
    return next((e.name for e in file.file_elements if isinstance(e, ast.Package)), "")


def _check_imports(file: ast.File, names: set[str], what: str) -> bool:
    """Every import names a reference or a built-in file; whether any built-in file is imported."""
    builtin = False
    for element in file.file_elements:
        if isinstance(element, ast.Import):
            if element.name.startswith(BUILTIN_IMPORTS):
                builtin = True
            elif element.name not in names:
                raise invalid_schema("PROTOBUF", f"{what} imports '{element.name}', which is none of its "
                                                 f"references (references: {sorted(names) or 'none'})")
    return builtin


def _field(index: _Index, builtin: bool, scope: str, raw: ast.Field | ast.MapField, oneof: str | None,
           what: str) -> FieldInfo:
    def named(type_name: str) -> tuple[str, str]:
        if type_name in SCALARS:
            return "SCALAR", type_name
        full = index.resolve(type_name, scope)
        if full is not None:
            return ("ENUM" if full in index.enums else "MESSAGE"), full
        if builtin and type_name.lstrip(".").startswith(BUILTIN_PACKAGES):
            return "MESSAGE", type_name.lstrip(".")
        raise invalid_schema("PROTOBUF", f"{what}: field '{raw.name}' of message '{scope}' has type '{type_name}', "
                                         "which is defined neither in the schema nor in its references")

    if isinstance(raw, ast.MapField):
        _, key = named(raw.key_type)
        value_kind, value = named(raw.value_type)
        return FieldInfo(raw.name, raw.number, "MAP", value, "REPEATED", oneof, key, value_kind)
    kind, type_name = named(raw.type)
    label = raw.cardinality.value if raw.cardinality is not None and raw.cardinality.value != "OPTIONAL" else ""
    return FieldInfo(raw.name, raw.number, kind, type_name, label, oneof)


def _messages(index: _Index, builtin: bool, prefix: str, elements: list[ast.MessageElement] | list[ast.FileElement],
              out: dict[str, MessageInfo], what: str) -> None:
    for element in elements:
        if not isinstance(element, ast.Message):
            continue
        info = MessageInfo(f"{prefix}{element.name}")
        for member in element.elements:
            if isinstance(member, (ast.Field, ast.MapField)):
                info.fields[member.number] = _field(index, builtin, info.full_name, member, None, what)
            elif isinstance(member, ast.OneOf):
                info.oneofs.add(member.name)
                for choice in member.elements:
                    if isinstance(choice, ast.Field):
                        info.fields[choice.number] = _field(index, builtin, info.full_name, choice, member.name,
                                                            what)
        out[info.full_name] = info
        _messages(index, builtin, f"{info.full_name}.", element.elements, out, what)


def _index_references(index: _Index, references: tuple[ResolvedReference, ...]
                      ) -> list[tuple[ResolvedReference, ast.File]]:
    """Add the names every reference defines to `index`; the references with their parsed files."""
    files = []
    for ref in flatten(references):
        what = f"reference '{ref.name}' (subject '{ref.subject}' version {ref.version})"
        ref_file = parse_tree(ref.schema, what)
        _check_imports(ref_file, {r.name for r in flatten(ref.references)}, what)
        package = _package(ref_file)
        index.add(f"{package}." if package else "", ref_file.file_elements)
        files.append((ref, ref_file))
    return files


def _imported(files: list[tuple[ResolvedReference, ast.File]]) -> dict[str, MessageInfo]:
    """The messages the references define, by full name, each with its file's package and the reference's
    subject and version (Confluent follows a field's message type into the reference that defines it)."""
    out: dict[str, MessageInfo] = {}
    for ref, ref_file in files:
        what = f"reference '{ref.name}' (subject '{ref.subject}' version {ref.version})"
        builtin = _check_imports(ref_file, {r.name for r in flatten(ref.references)}, what)
        package = _package(ref_file)
        found: dict[str, MessageInfo] = {}
        _messages(type_index(ref_file, ref.references), builtin, f"{package}." if package else "",
                  ref_file.file_elements, found, what)
        for info in found.values():
            info.package, info.reference = package, (ref.subject, ref.version)
        out.update(found)
    return out


def type_index(file: ast.File, references: tuple[ResolvedReference, ...]) -> _Index:
    """The message and enum names a file can use: its own and its references' (`protobuf_descriptor`)."""
    index = _Index()
    _index_references(index, references)
    package = _package(file)
    index.add(f"{package}." if package else "", file.file_elements)
    return index


def parse_protobuf(text: str, references: tuple[ResolvedReference, ...]) -> ProtobufSchema:
    index = _Index()
    files = _index_references(index, references)
    file = parse_tree(text, "the schema")
    builtin = _check_imports(file, {r.name for r in flatten(references)}, "the schema")
    package = _package(file)
    prefix = f"{package}." if package else ""
    index.add(prefix, file.file_elements)
    messages: dict[str, MessageInfo] = {}
    _messages(index, builtin, prefix, file.file_elements, messages, "the schema")
    for info in messages.values():
        info.package = package
    return ProtobufSchema(package, messages, Generator().generate(file), imported=_imported(files))
