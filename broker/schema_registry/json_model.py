"""A JSON Schema document read into the typed schemas Confluent's compatibility check compares (everit's model).

Why: Confluent decides JSON Schema compatibility (`json.diff.SchemaDiff`) not on the JSON text but on what the
everit-json-schema loader makes of it, and its verdicts follow from that model: `{"type": ["string", "null"]}` is
an `anyOf` of a string and a null schema; a schema with several kinds of keywords (`enum` beside `type`, an
`allOf` beside `properties`) is a synthetic `allOf` of one schema per kind; a schema without `type` is typed by the
keywords it has (`properties` makes an object schema, `minimum` a number schema); `true` and `{}` are empty
schemas, `false` a false schema; `additionalProperties: true` is a permission while `additionalProperties: {}` is a
schema; a `$ref` is a reference schema the comparison follows to the schema it names, in the same document or
in one of the schema's references. `json_diff` compares these nodes, as `SchemaDiff` compares everit's.

Keywords the comparison never looks at (`format`, `propertyNames`, `contains`, `if`/`then`/`else`...) are not
read. Loading never fails: a `$ref` that names nothing (parsing refused those already, `json_format`) is an
empty schema.

This module must never decide compatibility: documents in, nodes out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import unquote, urldefrag, urljoin

from kelp.json_types import JsonValue

__all__ = ["Node", "Loader", "EMPTY_KINDS"]

EMPTY_KINDS = frozenset({"empty", "true"})  # everit's EmptySchema and its subclass TrueSchema
_COMBINED = ("allOf", "anyOf", "oneOf")
_OBJECT_KEYS = ("properties", "required", "additionalProperties", "minProperties", "maxProperties",
                "dependencies", "patternProperties", "propertyNames")
_ARRAY_KEYS = ("items", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains")
_NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_STRING_KEYS = ("minLength", "maxLength", "pattern", "format")
_EXPLICIT = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null",
             "array": "array", "object": "object"}


def _number(value: JsonValue) -> float | int | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def canonical(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(eq=False)
class Node:
    """One schema of everit's model; `kind` is its class (`string`, `number`, `object`, `array`, `boolean`,
    `null`, `enum`, `const`, `combined`, `not`, `ref`, `empty`, `true`, `false`), the other fields its keywords."""

    kind: str
    raw: JsonValue = None
    title: JsonValue = None
    description: JsonValue = None
    schema_id: JsonValue = None
    default: JsonValue = None
    has_default: bool = False
    connect_type: JsonValue = None
    # string
    max_length: float | int | None = None
    min_length: float | int | None = None
    pattern: str | None = None
    # number
    maximum: float | int | None = None
    minimum: float | int | None = None
    exclusive_maximum: float | int | None = None
    exclusive_minimum: float | int | None = None
    multiple_of: float | int | None = None
    requires_integer: bool = False
    # object
    properties: dict[str, Node] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    additional_properties: bool = True
    additional_properties_schema: Node | None = None
    pattern_properties: list[tuple[str, Node]] = field(default_factory=list)
    property_dependencies: dict[str, set[str]] = field(default_factory=dict)
    schema_dependencies: dict[str, Node] = field(default_factory=dict)
    max_properties: float | int | None = None
    min_properties: float | int | None = None
    # array
    all_items: Node | None = None
    item_schemas: list[Node] = field(default_factory=list)
    additional_items: bool = True
    additional_items_schema: Node | None = None
    max_items: float | int | None = None
    min_items: float | int | None = None
    unique_items: bool = False
    # enum, const
    values: frozenset[str] = frozenset()
    # combined (criterion: allOf, anyOf or oneOf), not
    criterion: str = ""
    subschemas: list[Node] = field(default_factory=list)
    must_not: Node | None = None
    # ref: the schema it names, found on first use (`Loader.target`)
    ref: str = ""
    base: str = ""
    target: Node | None = None


class Loader:
    """Nodes of one schema document and of the documents its references name; each JSON object becomes one node
    (the same object reached twice, through two `$ref`s, is the same node: the comparison's memo and its cycle
    breaking rest on that)."""

    def __init__(self, document: JsonValue, references: dict[str, JsonValue] | None = None) -> None:
        self.document = document
        base = document.get("$id") if isinstance(document, dict) else None
        self.base = base if isinstance(base, str) else ""
        self.references = dict(references or {})
        self._nodes: dict[int, Node] = {}
        self._keep: list[JsonValue] = []  # the objects `_nodes` is keyed by, alive as long as the loader

    def root(self) -> Node:
        return self.load(self.document, self.base)

    def load(self, raw: JsonValue, base: str) -> Node:
        if isinstance(raw, bool) or not isinstance(raw, dict):
            return Node("true" if raw is True else "false" if raw is False else "empty", raw)
        node = self._nodes.get(id(raw))
        if node is None:
            self._keep.append(raw)
            here = raw.get("$id")
            if isinstance(here, str) and not here.startswith("#"):
                base = urljoin(base, here)
            node = self._build(raw, base)
            self._nodes[id(raw)] = node
        return node

    def _build(self, raw: dict[str, JsonValue], base: str) -> Node:
        if isinstance(raw.get("$ref"), str):
            node = Node("ref", raw, ref=str(raw["$ref"]), base=base)
        else:
            parts = self._extract(raw, base)
            if not parts:
                node = Node("empty", raw)
            elif len(parts) == 1:
                node = parts[0]
            else:  # several kinds of keywords: everit's synthetic allOf of one schema per kind
                node = Node("combined", raw, criterion="allOf", subschemas=parts)
        node.title, node.description = raw.get("title"), raw.get("description")
        node.schema_id = raw.get("$id", raw.get("id"))
        node.has_default, node.default = "default" in raw, raw.get("default")
        node.connect_type = raw.get("connect.type")
        return node

    def _extract(self, raw: dict[str, JsonValue], base: str) -> list[Node]:
        """everit's schema extractors, in its order: enum, combined, not, const, then by `type` or keywords."""
        out: list[Node] = []
        if isinstance(raw.get("enum"), list):
            out.append(Node("enum", raw, values=frozenset(canonical(v) for v in raw["enum"])))  # type: ignore[union-attr]  # a list: checked above
        combined = [self._combined(raw, c, base) for c in _COMBINED if isinstance(raw.get(c), list)]
        if len(combined) == 1:
            out.append(combined[0])
        elif combined:
            out.append(Node("combined", raw, criterion="allOf", subschemas=combined))
        if "not" in raw:
            out.append(Node("not", raw, must_not=self.load(raw["not"], base)))
        if "const" in raw:
            out.append(Node("const", raw, values=frozenset({canonical(raw["const"])})))
        declared = raw.get("type")
        if isinstance(declared, str):
            out.append(self._typed(raw, declared, base))
        elif isinstance(declared, list):
            out.append(Node("combined", raw, criterion="anyOf",
                            subschemas=[self._typed(raw, str(t), base) for t in declared]))
        else:
            for kind, keys in (("object", _OBJECT_KEYS), ("array", _ARRAY_KEYS), ("number", _NUMBER_KEYS),
                               ("string", _STRING_KEYS)):
                if any(k in raw for k in keys):
                    out.append(self._typed(raw, kind, base))
        return out

    def _combined(self, raw: dict[str, JsonValue], criterion: str, base: str) -> Node:
        subs = raw[criterion]
        assert isinstance(subs, list)
        return Node("combined", raw, criterion=criterion, subschemas=[self.load(s, base) for s in subs])

    def _typed(self, raw: dict[str, JsonValue], declared: str, base: str) -> Node:
        kind = _EXPLICIT.get(declared, "empty")
        node = Node(kind, raw)
        if kind == "string":
            node.max_length, node.min_length = _number(raw.get("maxLength")), _number(raw.get("minLength"))
            node.pattern = raw["pattern"] if isinstance(raw.get("pattern"), str) else None  # type: ignore[assignment]  # a str: checked
        elif kind == "number":
            node.requires_integer = declared == "integer"
            node.maximum, node.minimum = _number(raw.get("maximum")), _number(raw.get("minimum"))
            node.exclusive_maximum = _number(raw.get("exclusiveMaximum"))  # draft 4's booleans: no limit
            node.exclusive_minimum = _number(raw.get("exclusiveMinimum"))
            node.multiple_of = _number(raw.get("multipleOf"))
        elif kind == "object":
            self._object(node, raw, base)
        elif kind == "array":
            self._array(node, raw, base)
        return node

    def _object(self, node: Node, raw: dict[str, JsonValue], base: str) -> None:
        props = raw.get("properties")
        if isinstance(props, dict):
            node.properties = {k: self.load(v, base) for k, v in props.items()}
        required = raw.get("required")
        node.required = [str(r) for r in required] if isinstance(required, list) else []
        extra = raw.get("additionalProperties")
        if isinstance(extra, bool):
            node.additional_properties = extra
        elif isinstance(extra, dict):
            node.additional_properties_schema = self.load(extra, base)
        patterns = raw.get("patternProperties")
        if isinstance(patterns, dict):
            node.pattern_properties = [(k, self.load(v, base)) for k, v in patterns.items()]
        deps = raw.get("dependencies")
        if isinstance(deps, dict):
            for key, dep in deps.items():
                if isinstance(dep, list):
                    node.property_dependencies[key] = {str(d) for d in dep}
                else:
                    node.schema_dependencies[key] = self.load(dep, base)
        node.max_properties, node.min_properties = _number(raw.get("maxProperties")), _number(raw.get("minProperties"))

    def _array(self, node: Node, raw: dict[str, JsonValue], base: str) -> None:
        items = raw.get("items")
        if isinstance(items, list):
            node.item_schemas = [self.load(i, base) for i in items]
        elif isinstance(items, (dict, bool)):
            node.all_items = self.load(items, base)
        extra = raw.get("additionalItems")
        if isinstance(extra, bool):
            node.additional_items = extra
        elif isinstance(extra, dict):
            node.additional_items_schema = self.load(extra, base)
        node.max_items, node.min_items = _number(raw.get("maxItems")), _number(raw.get("minItems"))
        node.unique_items = raw.get("uniqueItems") is True

    def target(self, node: Node) -> Node:
        """The schema a reference node names (followed through references to references); an empty schema for
        one that names nothing."""
        seen: set[int] = set()
        while node.kind == "ref" and id(node) not in seen:
            seen.add(id(node))
            if node.target is None:
                node.target = self._resolve(node.ref, node.base)
            node = node.target
        return node if node.kind != "ref" else Node("empty")

    def _resolve(self, ref: str, base: str) -> Node:
        uri, fragment = urldefrag(urljoin(base, ref) if base else ref)
        document: JsonValue
        doc_base = uri
        if not uri or uri == urldefrag(self.base)[0]:
            document, doc_base = self.document, self.base
        else:
            document = self.references.get(uri)
            if document is None:
                document = next((d for name, d in self.references.items()
                                 if urljoin(self.base, name) == uri or name == ref.split("#", 1)[0]), None)
            if document is None:
                return Node("empty")
        target: JsonValue = document
        for part in (fragment.split("/")[1:] if fragment.startswith("/") else []):
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return Node("empty")
        return self.load(target, doc_base)
