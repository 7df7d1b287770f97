"""JSON Schema compatibility: Confluent's documented difference rules (its `json.diff.SchemaDiff`).

Why here: no well-kept Python library decides JSON Schema compatibility, so this follows Confluent's
documented rules, with the names of its difference types (`TYPE_NARROWED`, `REQUIRED_ATTRIBUTE_ADDED`,
`PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL`...), under its STRICT policy. `compare(original, update)` lists the
differences going from the schema that wrote the data (`original`) to the one reading it (`update`); the
update can read the original's data when every difference is a compatible one.

What is compared: boolean schemas; `type` (extended compatible, narrowed or changed not; `integer` read as
`number` is an extension); string, number, array and object bounds (`maxLength`, `minimum`, `maxItems`,
`maxProperties`... — relaxing or removing one is compatible, tightening or adding one is not); `pattern`,
`multipleOf`, `uniqueItems`; `enum` (extended compatible); `properties` against the content model
(`additionalProperties` false: closed, absent or true: open, a schema: partially open — a property added to
an open model is incompatible unless its schema is empty, one removed from an open model is compatible, and
the other way round for a closed one; a partially open model covers a property whose schema it accepts),
`required` (added without a default: incompatible), `additionalProperties` itself, `items`
(a schema or a tuple), `anyOf`/`oneOf` (extended compatible), `allOf` (narrowed compatible), `not`, `$ref`
(by its text: the referenced schemas are compared where they are registered). Annotations (`title`,
`description`, `default`, `examples`, `$id`, `$schema`, `$comment`) never matter. Any other keyword that
differs is reported as `KEYWORD_CHANGED`, incompatible: when in doubt, refuse.

This module must never read or write anything: schemas in, differences out.
"""

from __future__ import annotations

from dataclasses import dataclass

from kelp.json_types import JsonValue

__all__ = ["Difference", "compare"]

# Confluent's COMPATIBLE_CHANGES_STRICT (the types this module reports).
COMPATIBLE = frozenset({
    "ID_CHANGED", "DESCRIPTION_CHANGED", "TITLE_CHANGED", "DEFAULT_CHANGED", "TYPE_EXTENDED",
    "MAX_LENGTH_INCREASED", "MAX_LENGTH_REMOVED", "MIN_LENGTH_DECREASED", "MIN_LENGTH_REMOVED", "PATTERN_REMOVED",
    "MAXIMUM_INCREASED", "MAXIMUM_REMOVED", "MINIMUM_DECREASED", "MINIMUM_REMOVED", "EXCLUSIVE_MAXIMUM_INCREASED",
    "EXCLUSIVE_MAXIMUM_REMOVED", "EXCLUSIVE_MINIMUM_DECREASED", "EXCLUSIVE_MINIMUM_REMOVED", "MULTIPLE_OF_REMOVED",
    "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", "REQUIRED_ATTRIBUTE_REMOVED", "MAX_PROPERTIES_INCREASED",
    "MAX_PROPERTIES_REMOVED", "MIN_PROPERTIES_DECREASED", "MIN_PROPERTIES_REMOVED", "ADDITIONAL_PROPERTIES_ADDED",
    "ADDITIONAL_PROPERTIES_EXTENDED", "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
    "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL",
    "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL",
    "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "MAX_ITEMS_INCREASED", "MAX_ITEMS_REMOVED",
    "MIN_ITEMS_DECREASED", "MIN_ITEMS_REMOVED", "UNIQUE_ITEMS_REMOVED", "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL",
    "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL", "ENUM_ARRAY_EXTENDED", "SUM_TYPE_EXTENDED", "PRODUCT_TYPE_NARROWED",
    "SCHEMA_REMOVED",
})
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$id", "$schema", "$comment", "id",
                          "definitions", "$defs"})
# keyword: the stem of its difference names
_BOUNDS = {
    "maxLength": "MAX_LENGTH", "minLength": "MIN_LENGTH", "maximum": "MAXIMUM", "minimum": "MINIMUM",
    "exclusiveMaximum": "EXCLUSIVE_MAXIMUM", "exclusiveMinimum": "EXCLUSIVE_MINIMUM", "maxItems": "MAX_ITEMS",
    "minItems": "MIN_ITEMS", "maxProperties": "MAX_PROPERTIES", "minProperties": "MIN_PROPERTIES",
}
_HANDLED = frozenset(_BOUNDS) | _ANNOTATIONS | {
    "type", "enum", "const", "pattern", "multipleOf", "uniqueItems", "properties", "required",
    "additionalProperties", "items", "additionalItems", "anyOf", "oneOf", "allOf", "not", "$ref"}


@dataclass(frozen=True, slots=True)
class Difference:
    kind: str
    path: str

    @property
    def compatible(self) -> bool:
        return self.kind in COMPATIBLE

    @property
    def description(self) -> str:
        verdict = "compatible" if self.compatible else "incompatible"
        return f"{self.kind} at path '{self.path}' ({verdict} under the STRICT policy)"


def compare(original: JsonValue, update: JsonValue, path: str = "#") -> list[Difference]:
    out: list[Difference] = []
    _compare(original, update, path, out)
    return out


def _types(schema: dict[str, JsonValue]) -> set[str] | None:
    raw = schema.get("type")
    if raw is None:
        return None
    return {str(t) for t in raw} if isinstance(raw, list) else {str(raw)}


def _is_empty(schema: JsonValue) -> bool:
    return schema is True or schema == {}


def _compare(original: JsonValue, update: JsonValue, path: str, out: list[Difference]) -> None:
    if original == update:
        return
    if isinstance(original, bool) or isinstance(update, bool) or not isinstance(original, dict) \
            or not isinstance(update, dict):
        if _is_empty(update):
            out.append(Difference("TYPE_EXTENDED", path))
        elif original is False:
            out.append(Difference("TYPE_EXTENDED", path))
        else:
            out.append(Difference("TYPE_CHANGED", path))
        return
    _compare_types(original, update, path, out)
    for key, stem in _BOUNDS.items():
        _compare_bound(original.get(key), update.get(key), stem, path, out)
    _compare_plain(original, update, path, out)
    _compare_objects(original, update, path, out)
    _compare_items(original, update, path, out)
    _compare_combined(original, update, path, out)
    for key in sorted((set(original) | set(update)) - _HANDLED):
        if original.get(key) != update.get(key):
            out.append(Difference("KEYWORD_CHANGED", f"{path}/{key}"))


def _compare_types(original: dict[str, JsonValue], update: dict[str, JsonValue], path: str,
                   out: list[Difference]) -> None:
    before, after = _types(original), _types(update)
    if before == after:
        return
    if after is None:
        out.append(Difference("TYPE_EXTENDED", path))
        return
    if before is None:
        out.append(Difference("TYPE_NARROWED", path))
        return
    widened = after | ({"integer"} if "number" in after else set())
    if before <= widened:
        out.append(Difference("TYPE_EXTENDED", path))
    elif before & widened:
        out.append(Difference("TYPE_NARROWED", path))
    else:
        out.append(Difference("TYPE_CHANGED", path))


def _compare_bound(before: JsonValue, after: JsonValue, stem: str, path: str,
                   out: list[Difference]) -> None:
    if before == after:
        return
    if after is None:
        out.append(Difference(f"{stem}_REMOVED", path))
    elif before is None:
        out.append(Difference(f"{stem}_ADDED", path))
    elif isinstance(before, (int, float)) and isinstance(after, (int, float)) and not isinstance(before, bool):
        # MAX..._INCREASED and MIN..._DECREASED are the compatible ones (COMPATIBLE)
        out.append(Difference(f"{stem}_{'INCREASED' if after > before else 'DECREASED'}", path))
    else:
        out.append(Difference("KEYWORD_CHANGED", path))  # draft-4 boolean exclusiveMaximum and the like


def _compare_plain(original: dict[str, JsonValue], update: dict[str, JsonValue], path: str,
                   out: list[Difference]) -> None:
    for key, stem in (("pattern", "PATTERN"), ("multipleOf", "MULTIPLE_OF"), ("const", "CONST")):
        before, after = original.get(key), update.get(key)
        if before == after:
            continue
        out.append(Difference(f"{stem}_REMOVED" if after is None else f"{stem}_ADDED" if before is None
                              else f"{stem}_CHANGED", path))
    if original.get("uniqueItems", False) != update.get("uniqueItems", False):
        out.append(Difference("UNIQUE_ITEMS_REMOVED" if not update.get("uniqueItems") else "UNIQUE_ITEMS_ADDED",
                              path))
    before_enum, after_enum = original.get("enum"), update.get("enum")
    if before_enum != after_enum:
        if after_enum is None:
            out.append(Difference("ENUM_ARRAY_EXTENDED", path))
        elif before_enum is None or not isinstance(before_enum, list) or not isinstance(after_enum, list):
            out.append(Difference("ENUM_ARRAY_NARROWED", path))
        elif all(v in after_enum for v in before_enum):
            out.append(Difference("ENUM_ARRAY_EXTENDED", path))
        else:
            out.append(Difference("ENUM_ARRAY_CHANGED", path))
    before_ref, after_ref = original.get("$ref"), update.get("$ref")
    if before_ref != after_ref:
        out.append(Difference("TYPE_CHANGED", f"{path}/$ref"))
    if original.get("not") != update.get("not"):
        out.append(Difference("NOT_TYPE_CHANGED", f"{path}/not"))


def _content_model(schema: dict[str, JsonValue]) -> JsonValue:
    """True: open; False: closed; a schema: partially open."""
    extra = schema.get("additionalProperties", True)
    return True if _is_empty(extra) else extra


def _compare_objects(original: dict[str, JsonValue], update: dict[str, JsonValue], path: str,
                     out: list[Difference]) -> None:
    before_props = original.get("properties") if isinstance(original.get("properties"), dict) else {}
    after_props = update.get("properties") if isinstance(update.get("properties"), dict) else {}
    assert isinstance(before_props, dict) and isinstance(after_props, dict)
    before_model, after_model = _content_model(original), _content_model(update)
    after_required = update.get("required") if isinstance(update.get("required"), list) else []
    before_required = original.get("required") if isinstance(original.get("required"), list) else []
    assert isinstance(after_required, list) and isinstance(before_required, list)
    for name in sorted(set(before_props) | set(after_props)):
        where = f"{path}/properties/{name}"
        if name in before_props and name in after_props:
            _compare(before_props[name], after_props[name], where, out)
        elif name in after_props:  # added: could data the original wrote already hold it, with another shape?
            prop = after_props[name]
            if before_model is False:
                out.append(Difference("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", where))
            elif before_model is True:
                out.append(Difference("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" if _is_empty(prop)
                                      else "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", where))
            else:
                covered = all(d.compatible for d in compare(before_model, prop, where))
                out.append(Difference("PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if covered
                                      else "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", where))
        else:  # removed: may the update's model still read what the original wrote there?
            prop = before_props[name]
            if after_model is True:
                out.append(Difference("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL", where))
            elif after_model is False:
                out.append(Difference("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if prop is False
                                      else "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", where))
            else:
                covered = all(d.compatible for d in compare(prop, after_model, where))
                out.append(Difference("PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if covered
                                      else "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", where))
    for name in sorted(set(map(str, after_required)) - set(map(str, before_required))):
        prop = after_props.get(name)
        has_default = isinstance(prop, dict) and "default" in prop
        out.append(Difference("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if has_default else "REQUIRED_ATTRIBUTE_ADDED",
                              f"{path}/required/{name}"))
    for name in sorted(set(map(str, before_required)) - set(map(str, after_required))):
        out.append(Difference("REQUIRED_ATTRIBUTE_REMOVED", f"{path}/required/{name}"))
    if before_model != after_model:
        where = f"{path}/additionalProperties"
        if after_model is True:
            out.append(Difference("ADDITIONAL_PROPERTIES_ADDED", where))
        elif before_model is True or after_model is False:
            out.append(Difference("ADDITIONAL_PROPERTIES_REMOVED" if after_model is False
                                  else "ADDITIONAL_PROPERTIES_NARROWED", where))
        elif before_model is False:
            out.append(Difference("ADDITIONAL_PROPERTIES_EXTENDED", where))
        else:
            inner = compare(before_model, after_model, where)
            out.append(Difference("ADDITIONAL_PROPERTIES_EXTENDED" if all(d.compatible for d in inner)
                                  else "ADDITIONAL_PROPERTIES_NARROWED", where))


def _compare_items(original: dict[str, JsonValue], update: dict[str, JsonValue], path: str,
                   out: list[Difference]) -> None:
    before, after = original.get("items"), update.get("items")
    if before == after:
        return
    where = f"{path}/items"
    if isinstance(before, list) and isinstance(after, list):
        for i in range(max(len(before), len(after))):
            if i < len(before) and i < len(after):
                _compare(before[i], after[i], f"{where}/{i}", out)
            elif i < len(after):
                out.append(Difference("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL"
                                      if original.get("additionalItems") is False
                                      else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL", f"{where}/{i}"))
            else:
                out.append(Difference("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL"
                                      if update.get("additionalItems", True) is not False
                                      else "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL", f"{where}/{i}"))
    elif before is None or after is None or isinstance(before, list) or isinstance(after, list):
        out.append(Difference("SCHEMA_REMOVED" if after is None else "TYPE_CHANGED", where))
    else:
        _compare(before, after, where, out)


def _compare_combined(original: dict[str, JsonValue], update: dict[str, JsonValue], path: str,
                      out: list[Difference]) -> None:
    for key in ("anyOf", "oneOf", "allOf"):
        before, after = original.get(key), update.get(key)
        if before == after:
            continue
        where = f"{path}/{key}"
        if not isinstance(before, list) or not isinstance(after, list):
            out.append(Difference("COMBINED_TYPE_CHANGED", where))
            continue

        if key == "allOf":
            narrowed = _matched(after, before, where)  # every remaining conjunct was there: fewer constraints
            out.append(Difference("PRODUCT_TYPE_NARROWED" if narrowed else "PRODUCT_TYPE_EXTENDED", where))
        else:
            extended = _matched(before, after, where)  # every old alternative can still be read
            out.append(Difference("SUM_TYPE_EXTENDED" if extended else "SUM_TYPE_NARROWED", where))


def _matched(subs: list[JsonValue], into: list[JsonValue], where: str) -> bool:
    """Every schema of `subs` is read by one of `into` (compatibly)."""
    return all(any(all(d.compatible for d in compare(s, t, where)) for t in into) for s in subs)
