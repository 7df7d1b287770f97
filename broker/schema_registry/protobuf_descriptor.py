"""PROTOBUF schemas as Confluent's clients send and ask for them: a serialized FileDescriptorProto, base64.

Why: confluent-kafka's ProtobufSerializer registers (and looks up) `base64(FileDescriptorProto)` rather than
`.proto` text, for the message's file and for every file it imports, and its ProtobufDeserializer reads
the writer's schema with `?format=serialized`; Confluent's registry takes both forms and answers either.
Kelp keeps `.proto` text — what `protobuf_format` parses, checks and compares — so:

- `from_serialized(text)`: a schema that is a base64 FileDescriptorProto is printed as `.proto` text when it
  comes in (`requests.schema_request`), by building the parser's own syntax tree and its printer, so it is
  stored, compared and found again as any text schema is;
- `to_serialized(text, name, references)`: `.proto` text built into a FileDescriptorProto when one is asked
  for (`?format=serialized`), every field's type resolved as `protobuf_format` resolves it (absolute names,
  message or enum), map fields as their `...Entry` types, `optional` in proto3 with its synthetic oneof,
  imports as dependencies — what the protobuf runtime's descriptor pool loads;
- `message_class(text, references)`: the schema's first message as a protobuf class, its references and the
  well-known `google/protobuf/` files loaded beside it (REST produce's PROTOBUF values, `embedded`).

Kept on the way: syntax, package, imports (public, weak), messages (nested), fields, maps, oneofs, enums,
reserved ranges and names, services, and options with a scalar value (`java_package`, `deprecated`,
`packed`, ...). Dropped, as nothing Kelp checks reads them: options with enum or message values, extensions,
groups (a serialized schema holding a group is refused, 42201).

This module must never hold a compatibility rule nor change what a schema means: it only converts.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import re

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass
from proto_schema_parser import ast
from proto_schema_parser.generator import Generator

from .errors import invalid_schema
from .parsed import ResolvedReference, flatten
from .protobuf_format import BUILTIN_PACKAGES, SCALARS, parse_tree, type_index

__all__ = ["from_serialized", "to_serialized", "looks_serialized", "message_class"]

FDP = descriptor_pb2.FileDescriptorProto
FieldProto = descriptor_pb2.FieldDescriptorProto
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
# FieldDescriptorProto.Type number <-> the .proto scalar name
_SCALAR_TYPES = {FieldProto.TYPE_DOUBLE: "double", FieldProto.TYPE_FLOAT: "float", FieldProto.TYPE_INT64: "int64",
                 FieldProto.TYPE_UINT64: "uint64", FieldProto.TYPE_INT32: "int32", FieldProto.TYPE_FIXED64: "fixed64",
                 FieldProto.TYPE_FIXED32: "fixed32", FieldProto.TYPE_BOOL: "bool", FieldProto.TYPE_STRING: "string",
                 FieldProto.TYPE_BYTES: "bytes", FieldProto.TYPE_UINT32: "uint32", FieldProto.TYPE_SFIXED32: "sfixed32",
                 FieldProto.TYPE_SFIXED64: "sfixed64", FieldProto.TYPE_SINT32: "sint32",
                 FieldProto.TYPE_SINT64: "sint64"}
_TYPE_OF_SCALAR: dict[str, FieldProto.Type.ValueType] = {name: number for number, name in _SCALAR_TYPES.items()}
_MAX_FIELD = 536870911  # 2^29 - 1: `max` in a reserved range


def looks_serialized(text: str) -> bool:
    """Whether a PROTOBUF schema string is base64 (a serialized descriptor) rather than `.proto` text."""
    stripped = text.strip()
    return bool(stripped) and _BASE64.match(stripped) is not None and len(stripped) % 4 == 0


# -- serialized -> .proto text ------------------------------------------------------------------------------
def _options(options: Message) -> list[ast.Option]:
    """The options set with a scalar value (enum-valued and message-valued ones are dropped)."""
    out: list[ast.Option] = []
    for field, value in options.ListFields():
        if field.type in (field.TYPE_ENUM, field.TYPE_MESSAGE, field.TYPE_GROUP) or field.is_repeated:
            continue
        out.append(ast.Option(name=field.name, value=value))
    return out


def _ranges(ranges: list[tuple[int, int]], exclusive_end: bool) -> list[str]:
    out = []
    for start, end in ranges:
        last = end - 1 if exclusive_end else end
        out.append(str(start) if last == start else f"{start} to {'max' if last >= _MAX_FIELD else last}")
    return out


def _field_type(f: FieldProto, what: str) -> str:
    if f.type == FieldProto.TYPE_GROUP:
        raise invalid_schema("PROTOBUF", f"{what}: field '{f.name}' is a group, which Kelp's registry does not "
                                         "take in a serialized schema; send the .proto text")
    if f.type in _SCALAR_TYPES:
        return _SCALAR_TYPES[f.type]
    return f.type_name  # absolute (".pkg.Msg") as protoc writes it; resolved again when parsed


def _message(m: descriptor_pb2.DescriptorProto, proto3: bool, what: str) -> ast.Message:
    entries = {n.name: n for n in m.nested_type if n.options.map_entry}
    elements: list[ast.MessageElement] = []
    oneofs: dict[int, ast.OneOf] = {}
    for i, decl in enumerate(m.oneof_decl):
        synthetic = all(f.proto3_optional for f in m.field if f.HasField("oneof_index") and f.oneof_index == i)
        if not synthetic:
            oneofs[i] = ast.OneOf(name=decl.name, elements=[])
    placed: set[int] = set()
    for f in m.field:
        entry = entries.get(f.type_name.rsplit(".", 1)[-1]) if f.label == FieldProto.LABEL_REPEATED else None
        if entry is not None and f.type == FieldProto.TYPE_MESSAGE:
            key, value = (next(x for x in entry.field if x.number == n) for n in (1, 2))
            elements.append(ast.MapField(name=f.name, number=f.number, key_type=_field_type(key, what),
                                         value_type=_field_type(value, what), options=_options(f.options)))
            continue
        cardinality: ast.FieldCardinality | None = None
        if f.label == FieldProto.LABEL_REPEATED:
            cardinality = ast.FieldCardinality.REPEATED
        elif f.label == FieldProto.LABEL_REQUIRED:
            cardinality = ast.FieldCardinality.REQUIRED
        elif (not proto3 and not f.HasField("oneof_index")) or f.proto3_optional:
            cardinality = ast.FieldCardinality.OPTIONAL
        field = ast.Field(name=f.name, number=f.number, type=_field_type(f, what), cardinality=cardinality,
                          options=_options(f.options))
        if f.HasField("oneof_index") and f.oneof_index in oneofs:
            group = oneofs[f.oneof_index]
            if f.oneof_index not in placed:  # a oneof sits where its first field does
                placed.add(f.oneof_index)
                elements.append(group)
            group.elements.append(field)
        else:
            elements.append(field)
    elements += [_message(n, proto3, what) for n in m.nested_type if not n.options.map_entry]
    elements += [_enum(e) for e in m.enum_type]
    if m.reserved_range:
        elements.append(ast.Reserved(ranges=_ranges([(r.start, r.end) for r in m.reserved_range], True), names=[]))
    if m.reserved_name:
        elements.append(ast.Reserved(ranges=[], names=list(m.reserved_name)))
    elements += _options(m.options)
    return ast.Message(name=m.name, elements=elements)


def _enum(e: descriptor_pb2.EnumDescriptorProto) -> ast.Enum:
    elements: list[ast.EnumElement] = [*_options(e.options)]
    elements += [ast.EnumValue(name=v.name, number=v.number, options=_options(v.options)) for v in e.value]
    if e.reserved_range:
        elements.append(ast.EnumReserved(ranges=_ranges([(r.start, r.end) for r in e.reserved_range], False),
                                         names=[]))
    if e.reserved_name:
        elements.append(ast.EnumReserved(ranges=[], names=list(e.reserved_name)))
    return ast.Enum(name=e.name, elements=elements)


def from_serialized(text: str) -> str:
    """`.proto` text of a base64 FileDescriptorProto; 42201 naming why when it is not one."""
    what = "the schema (a base64 FileDescriptorProto)"
    try:
        fdp = FDP.FromString(base64.b64decode(text.strip(), validate=True))
    except (binascii.Error, ValueError, DecodeError) as exc:
        raise invalid_schema("PROTOBUF", f"{what} does not decode: {exc}") from None
    if fdp.edition and fdp.syntax == "editions":
        raise invalid_schema("PROTOBUF", f"{what} uses protobuf editions, which Kelp's registry does not read")
    proto3 = fdp.syntax == "proto3"
    elements: list[ast.FileElement] = []
    if fdp.package:
        elements.append(ast.Package(name=fdp.package))
    for i, dep in enumerate(fdp.dependency):
        elements.append(ast.Import(name=dep, weak=i in fdp.weak_dependency, public=i in fdp.public_dependency))
    elements += _options(fdp.options)
    elements += [_message(m, proto3, what) for m in fdp.message_type]
    elements += [_enum(e) for e in fdp.enum_type]
    for s in fdp.service:
        methods: list[ast.ServiceElement] = [
            ast.Method(name=m.name, input_type=ast.MessageType(type=m.input_type, stream=m.client_streaming),
                       output_type=ast.MessageType(type=m.output_type, stream=m.server_streaming), elements=[])
            for m in s.method]
        elements.append(ast.Service(name=s.name, elements=methods))
    return Generator().generate(ast.File(syntax=fdp.syntax or "proto2", edition=None, file_elements=elements))


# -- .proto text -> serialized ------------------------------------------------------------------------------
def _set_options(target: Message, options: list[ast.Option]) -> None:
    """Options the descriptor's options message knows, with a scalar value; others are left out."""
    for option in options:
        name, value = option.name.strip("()"), option.value
        if isinstance(value, (str, int, float, bool)) and name in target.DESCRIPTOR.fields_by_name:
            try:
                setattr(target, name, value)
            except (TypeError, ValueError):
                pass  # a value of another type than the option's: not Kelp's to judge here


def _parse_ranges(ranges: list[str]) -> list[tuple[int, int]]:
    out = []
    for raw in ranges:
        low, _, high = (part.strip() for part in raw.partition(" to "))
        out.append((int(low), _MAX_FIELD if high == "max" else int(high or low)))
    return out


class _Builder:
    """Builds one file's descriptor, resolving type names against the file and its references."""

    def __init__(self, file: ast.File, references: tuple[ResolvedReference, ...]) -> None:
        self.index = type_index(file, references)
        self.builtin = any(isinstance(e, ast.Import) and e.name.startswith(("google/", "confluent/"))
                           for e in file.file_elements)

    def type_of(self, name: str, scope: str) -> tuple[FieldProto.Type.ValueType, str]:
        if name in SCALARS:
            return _TYPE_OF_SCALAR[name], ""
        full = self.index.resolve(name, scope)
        if full is None and self.builtin and name.lstrip(".").startswith(BUILTIN_PACKAGES):
            full = name.lstrip(".")
        if full is None:
            raise invalid_schema("PROTOBUF", f"type '{name}' used in '{scope}' is defined neither in the schema "
                                             "nor in its references")
        kind = FieldProto.TYPE_ENUM if full in self.index.enums else FieldProto.TYPE_MESSAGE
        return kind, f".{full}"

    def field(self, out: FieldProto, raw: ast.Field, scope: str) -> None:
        out.name, out.number, out.json_name = raw.name, raw.number, _json_name(raw.name)
        out.type, type_name = self.type_of(raw.type, scope)
        if type_name:
            out.type_name = type_name
        card = raw.cardinality
        out.label = FieldProto.LABEL_REPEATED if card == ast.FieldCardinality.REPEATED else \
            FieldProto.LABEL_REQUIRED if card == ast.FieldCardinality.REQUIRED else FieldProto.LABEL_OPTIONAL
        _set_options(out.options, raw.options)

    def message(self, out: descriptor_pb2.DescriptorProto, raw: ast.Message, scope: str, proto3: bool) -> None:
        out.name = raw.name
        full = f"{scope}.{raw.name}" if scope else raw.name
        synthetic: list[str] = []
        for element in raw.elements:
            if isinstance(element, ast.Field):
                f = out.field.add()
                self.field(f, element, full)
                if proto3 and element.cardinality == ast.FieldCardinality.OPTIONAL:
                    f.proto3_optional = True
                    synthetic.append(f.name)
            elif isinstance(element, ast.MapField):
                entry = out.nested_type.add(name="".join(p[:1].upper() + p[1:] for p in element.name.split("_"))
                                            + "Entry")
                entry.options.map_entry = True
                for number, (fname, ftype) in enumerate((("key", element.key_type), ("value", element.value_type)),
                                                        start=1):
                    self.field(entry.field.add(), ast.Field(name=fname, number=number, type=ftype, cardinality=None,
                                                            options=[]), full)
                self._map_field(out, element, full, entry.name)
            elif isinstance(element, ast.OneOf):
                index = len(out.oneof_decl)
                out.oneof_decl.add(name=element.name)
                for choice in element.elements:
                    if isinstance(choice, ast.Field):
                        f = out.field.add()
                        self.field(f, choice, full)
                        f.oneof_index = index
            elif isinstance(element, ast.Message):
                self.message(out.nested_type.add(), element, full, proto3)
            elif isinstance(element, ast.Enum):
                _enum_proto(out.enum_type.add(), element)
            elif isinstance(element, ast.Reserved):
                for low, high in _parse_ranges(element.ranges):
                    out.reserved_range.add(start=low, end=high + 1)
                out.reserved_name.extend(element.names)
            elif isinstance(element, ast.Option):
                _set_options(out.options, [element])
            elif isinstance(element, ast.Group):
                raise invalid_schema("PROTOBUF", f"message '{full}' has a group ('{element.name}'), which Kelp "
                                                 "cannot serialize; read the schema as text")
        for name in synthetic:  # proto3 `optional`: a oneof of its own, after the real ones, as protoc does
            field = next(f for f in out.field if f.name == name)
            field.oneof_index = len(out.oneof_decl)
            out.oneof_decl.add(name=f"_{name}")

    def _map_field(self, out: descriptor_pb2.DescriptorProto, raw: ast.MapField, scope: str, entry: str) -> None:
        f = out.field.add(name=raw.name, number=raw.number, json_name=_json_name(raw.name),
                          label=FieldProto.LABEL_REPEATED, type=FieldProto.TYPE_MESSAGE, type_name=f".{scope}.{entry}")
        _set_options(f.options, raw.options)


def _enum_proto(out: descriptor_pb2.EnumDescriptorProto, raw: ast.Enum) -> None:
    out.name = raw.name
    for element in raw.elements:
        if isinstance(element, ast.EnumValue):
            v = out.value.add(name=element.name, number=element.number)
            _set_options(v.options, element.options)
        elif isinstance(element, ast.EnumReserved):
            for low, high in _parse_ranges(element.ranges):
                out.reserved_range.add(start=low, end=high)
            out.reserved_name.extend(element.names)
        elif isinstance(element, ast.Option):
            _set_options(out.options, [element])


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def to_serialized(text: str, name: str, references: tuple[ResolvedReference, ...]) -> str:
    """base64 of the FileDescriptorProto of `.proto` text (named `name`), types resolved against `references`."""
    return base64.b64encode(_descriptor(text, name, references).SerializeToString()).decode("ascii")


def message_class(text: str, references: tuple[ResolvedReference, ...]) -> type[Message]:
    """The first message of a schema as a protobuf class (Confluent's REST proxy writes that one), in a
    descriptor pool of its own holding the schema, its references and the well-known files they import."""
    pool = descriptor_pool.DescriptorPool()
    loaded: set[str] = set()

    def load(name: str, schema: str, refs: tuple[ResolvedReference, ...]) -> descriptor_pb2.FileDescriptorProto:
        fdp = _descriptor(schema, name, refs)
        for dep in fdp.dependency:
            if dep.startswith("google/protobuf/") and dep not in loaded:
                try:
                    module = importlib.import_module("google.protobuf." + dep.removeprefix("google/protobuf/")
                                                     .removesuffix(".proto") + "_pb2")
                except ImportError:
                    raise invalid_schema("PROTOBUF", f"'{dep}' is not a well-known file this broker's protobuf "
                                                     "runtime has") from None
                pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
                loaded.add(dep)
        pool.Add(fdp)
        loaded.add(name)
        return fdp

    for ref in flatten(references):
        if ref.name not in loaded:
            load(ref.name, ref.schema, ref.references)
    fdp = load("kelp-embedded.proto", text, references)
    if not fdp.message_type:
        raise invalid_schema("PROTOBUF", "the schema defines no message to write")
    first = f"{fdp.package}.{fdp.message_type[0].name}" if fdp.package else fdp.message_type[0].name
    return GetMessageClass(pool.FindMessageTypeByName(first))


def _descriptor(text: str, name: str, references: tuple[ResolvedReference, ...]) -> descriptor_pb2.FileDescriptorProto:
    file = parse_tree(text, "the schema")
    builder = _Builder(file, tuple(flatten(references)))
    proto3 = file.syntax == "proto3"
    fdp = FDP(name=name, syntax=file.syntax or "proto2")
    package = ""
    for element in file.file_elements:
        if isinstance(element, ast.Package):
            package = fdp.package = element.name
        elif isinstance(element, ast.Import):
            if element.public:
                fdp.public_dependency.append(len(fdp.dependency))
            if element.weak:
                fdp.weak_dependency.append(len(fdp.dependency))
            fdp.dependency.append(element.name)
        elif isinstance(element, ast.Option):
            _set_options(fdp.options, [element])
    for element in file.file_elements:
        if isinstance(element, ast.Message):
            builder.message(fdp.message_type.add(), element, package, proto3)
        elif isinstance(element, ast.Enum):
            _enum_proto(fdp.enum_type.add(), element)
        elif isinstance(element, ast.Service):
            service = fdp.service.add(name=element.name)
            for method in element.elements:
                if isinstance(method, ast.Method):
                    _, input_type = builder.type_of(method.input_type.type, package)
                    _, output_type = builder.type_of(method.output_type.type, package)
                    service.method.add(name=method.name, input_type=input_type, output_type=output_type,
                                       client_streaming=method.input_type.stream,
                                       server_streaming=method.output_type.stream)
    return fdp
