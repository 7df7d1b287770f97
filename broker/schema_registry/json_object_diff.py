"""JSON Schema compatibility of object and array schemas: Confluent's `ObjectSchemaDiff` and `ArraySchemaDiff`.

Why a module of its own: content models are most of Confluent's rules (a property or tuple item added to or
removed from an open, closed or partially open model, `required`, `dependencies`, `additionalProperties`,
`additionalItems`), and `json_diff` keeps the comparison's machinery and the other kinds of schema.

Content models, as Confluent: open — additional properties (items) allowed with no schema and, for objects, no
`patternProperties`; partially open — a schema covers the extra ones (the first `patternProperties` pattern that
matches the name, else `additionalProperties`/`additionalItems` given as a schema); closed — otherwise
(`additionalProperties: false`). A property added to a closed or partially open model is compatible unless it is
required without a default (or, partially open, its schema is not compatible with the covering one); one added
to an open model is incompatible under STRICT unless its schema is empty.

This module must never be used but through `json_diff.Context.compare`.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from typing import Protocol

from .json_model import EMPTY_KINDS, Node

__all__ = ["compare_object", "compare_array", "bound", "Context"]


class Context(Protocol):
    """What these comparisons ask of `json_diff.Context` (Confluent's): a protocol, so this module does not
    import the one that imports it."""

    def add(self, kind: str, attribute: str | None = None) -> None: ...

    def compare(self, original: Node | None, update: Node | None) -> None: ...

    def enter(self, part: str) -> AbstractContextManager[object]: ...

    def covered(self, before: Node, after: Node, yes: str, no: str) -> None: ...


def bound(ctx: Context, name: str, stem: str, before: float | int | None, after: float | int | None) -> None:
    """A limit keyword (`maxLength`, `minimum`...): `<stem>_ADDED`, `_REMOVED`, `_INCREASED` or `_DECREASED`."""
    if before == after:
        return
    if before is None:
        ctx.add(f"{stem}_ADDED", name)
    elif after is None:
        ctx.add(f"{stem}_REMOVED", name)
    elif before < after:
        ctx.add(f"{stem}_INCREASED", name)
    elif before > after:
        ctx.add(f"{stem}_DECREASED", name)


def _open(node: Node) -> bool:
    return node.additional_properties and node.additional_properties_schema is None and not node.pattern_properties


def _covering(node: Node, name: str) -> Node | None:
    for pattern, schema in node.pattern_properties:
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    return node.additional_properties_schema


def compare_object(ctx: Context, original: Node, update: Node) -> None:
    with ctx.enter("required"):
        for name in original.properties:
            if name in update.properties:
                was, now = name in original.required, name in update.required
                if was and not now:
                    ctx.add("REQUIRED_ATTRIBUTE_REMOVED", name)
                elif now and not was:
                    ctx.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if update.properties[name].has_default
                            else "REQUIRED_ATTRIBUTE_ADDED", name)
    with ctx.enter("properties"):
        for name in sorted(set(original.properties) | set(update.properties)):
            with ctx.enter(name):
                _compare_property(ctx, original, update, name)
    with ctx.enter("dependencies"):
        for name in sorted(set(original.property_dependencies) | set(update.property_dependencies)):
            before, after = original.property_dependencies.get(name), update.property_dependencies.get(name)
            if after is None:
                ctx.add("DEPENDENCY_ARRAY_REMOVED", name)
            elif before is None:
                ctx.add("DEPENDENCY_ARRAY_ADDED", name)
            elif before != after:
                ctx.add("DEPENDENCY_ARRAY_EXTENDED" if after >= before else
                        "DEPENDENCY_ARRAY_NARROWED" if before >= after else "DEPENDENCY_ARRAY_CHANGED", name)
        for name in sorted(set(original.schema_dependencies) | set(update.schema_dependencies)):
            was_schema, now_schema = original.schema_dependencies.get(name), update.schema_dependencies.get(name)
            with ctx.enter(name):
                if now_schema is None:
                    ctx.add("DEPENDENCY_SCHEMA_REMOVED")
                elif was_schema is None:
                    ctx.add("DEPENDENCY_SCHEMA_ADDED")
                else:
                    ctx.compare(was_schema, now_schema)
    with ctx.enter("additionalProperties"):
        if original.additional_properties != update.additional_properties:
            ctx.add("ADDITIONAL_PROPERTIES_ADDED" if update.additional_properties else "ADDITIONAL_PROPERTIES_REMOVED")
        elif original.additional_properties_schema is None and update.additional_properties_schema is not None:
            ctx.add("ADDITIONAL_PROPERTIES_NARROWED")
        elif update.additional_properties_schema is None and original.additional_properties_schema is not None:
            ctx.add("ADDITIONAL_PROPERTIES_EXTENDED")
        else:
            ctx.compare(original.additional_properties_schema, update.additional_properties_schema)
    bound(ctx, "maxProperties", "MAX_PROPERTIES", original.max_properties, update.max_properties)
    bound(ctx, "minProperties", "MIN_PROPERTIES", original.min_properties, update.min_properties)


def _compare_property(ctx: Context, original: Node, update: Node, name: str) -> None:
    before, after = original.properties.get(name), update.properties.get(name)
    if after is None:
        assert before is not None
        if _open(update):
            ctx.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
            return
        cover = _covering(update, name)
        if cover is not None:
            ctx.covered(before, cover, "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                     "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
        elif before.kind == "false":
            ctx.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
        else:
            ctx.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    elif before is None:
        required = name in update.required
        if _open(original):
            if after.kind in EMPTY_KINDS:
                ctx.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
            elif required:
                ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL" if after.has_default
                        else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
            else:
                ctx.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
            return
        cover = _covering(original, name)
        if cover is not None:
            ctx.covered(cover, after, "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                     "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
        if required:
            ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" if after.has_default
                    else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
        else:
            ctx.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
    else:
        ctx.compare(before, after)


def _items_open(node: Node) -> bool:
    return node.additional_items and node.additional_items_schema is None


def compare_array(ctx: Context, original: Node, update: Node) -> None:
    with ctx.enter("items"):
        ctx.compare(original.all_items, update.all_items)
    before, after = original.item_schemas, update.item_schemas
    for index in range(max(len(before), len(after))):
        with ctx.enter(f"items/{index}"):
            if index < len(before) and index < len(after):
                ctx.compare(before[index], after[index])
            elif index < len(before):
                if _items_open(update):
                    ctx.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
                elif update.additional_items_schema is not None:
                    ctx.covered(before[index], update.additional_items_schema,
                             "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                             "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
                else:
                    ctx.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if before[index].kind == "false"
                            else "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")
            elif _items_open(original):
                ctx.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" if after[index].kind in EMPTY_KINDS
                        else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
            elif original.additional_items_schema is not None:
                ctx.covered(original.additional_items_schema, after[index],
                         "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                         "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
            else:
                ctx.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")
    with ctx.enter("additionalItems"):
        if original.additional_items != update.additional_items:
            ctx.add("ADDITIONAL_ITEMS_REMOVED" if original.additional_items else "ADDITIONAL_ITEMS_ADDED")
        elif original.additional_items_schema is None and update.additional_items_schema is not None:
            ctx.add("ADDITIONAL_ITEMS_NARROWED")
        elif update.additional_items_schema is None and original.additional_items_schema is not None:
            ctx.add("ADDITIONAL_ITEMS_EXTENDED")
        else:
            ctx.compare(original.additional_items_schema, update.additional_items_schema)
    bound(ctx, "maxItems", "MAX_ITEMS", original.max_items, update.max_items)
    bound(ctx, "minItems", "MIN_ITEMS", original.min_items, update.min_items)
    if original.unique_items != update.unique_items:
        ctx.add("UNIQUE_ITEMS_REMOVED" if original.unique_items else "UNIQUE_ITEMS_ADDED", "uniqueItems")
