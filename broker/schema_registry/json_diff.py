"""JSON Schema compatibility: Confluent's `json.diff.SchemaDiff`, followed rule by rule, over `json_model`'s nodes.

Why here: no well-kept Python library decides JSON Schema compatibility, and Kelp answers as Confluent's registry
does (Confluent Schema Registry 8.5, its STRICT policy; `tests/schema_registry/confluent_cases` holds Confluent's
own cases and every one is run). `compare(original, update)` lists the differences going from the schema that
wrote the data (`original`) to the one reading it (`update`), with Confluent's type names and JSON paths; the
update reads the original's data when every difference is in `COMPATIBLE`.

How Confluent compares, and so this module: two schemas of different kinds differ by TYPE_CHANGED (a false
original or an empty update excepted), except that a non-combined schema may become a oneOf/anyOf one of whose
branches it is compatible with (SUM_TYPE_EXTENDED) and an allOf may become a schema one of its branches is
compatible with (PRODUCT_TYPE_NARROWED); two combined schemas are matched branch to branch (a maximum bipartite
matching over the compatible pairs must cover the smaller side); `$ref`s are followed to what they name; object
properties are judged against the content model (`additionalProperties` and `patternProperties`: open, closed or
partially open); pairs already compared are remembered (by node identity) and a pair met again inside itself (a
recursive schema) is assumed compatible, then the whole comparison is repeated with the pairs found incompatible
until nothing changes, as Confluent's fixpoint does.

This module must never read or write anything: schemas in, differences out.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from kelp.json_types import JsonValue

from .json_model import EMPTY_KINDS, Loader, Node, canonical
from .json_object_diff import bound, compare_array, compare_object

__all__ = ["Difference", "compare", "COMPATIBLE", "Context"]

# Confluent's COMPATIBLE_CHANGES_STRICT.
COMPATIBLE = frozenset({
    "ID_CHANGED", "DESCRIPTION_CHANGED", "TITLE_CHANGED", "DEFAULT_CHANGED", "SCHEMA_REMOVED", "TYPE_EXTENDED",
    "MAX_LENGTH_INCREASED", "MAX_LENGTH_REMOVED", "MIN_LENGTH_DECREASED", "MIN_LENGTH_REMOVED", "PATTERN_REMOVED",
    "MAXIMUM_INCREASED", "MAXIMUM_REMOVED", "MINIMUM_DECREASED", "MINIMUM_REMOVED", "EXCLUSIVE_MAXIMUM_INCREASED",
    "EXCLUSIVE_MAXIMUM_REMOVED", "EXCLUSIVE_MINIMUM_DECREASED", "EXCLUSIVE_MINIMUM_REMOVED", "MULTIPLE_OF_REDUCED",
    "MULTIPLE_OF_REMOVED", "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", "REQUIRED_ATTRIBUTE_REMOVED",
    "DEPENDENCY_ARRAY_NARROWED", "DEPENDENCY_ARRAY_REMOVED", "DEPENDENCY_SCHEMA_REMOVED", "MAX_PROPERTIES_INCREASED",
    "MAX_PROPERTIES_REMOVED", "MIN_PROPERTIES_DECREASED", "MIN_PROPERTIES_REMOVED", "ADDITIONAL_PROPERTIES_ADDED",
    "ADDITIONAL_PROPERTIES_EXTENDED", "UNEVALUATED_PROPERTIES_ADDED", "UNEVALUATED_PROPERTIES_EXTENDED",
    "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
    "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL",
    "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
    "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL", "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "MAX_ITEMS_INCREASED", "MAX_ITEMS_REMOVED",
    "MIN_ITEMS_DECREASED", "MIN_ITEMS_REMOVED", "MAX_CONTAINS_INCREASED", "MAX_CONTAINS_REMOVED",
    "MIN_CONTAINS_DECREASED", "MIN_CONTAINS_REMOVED", "UNIQUE_ITEMS_REMOVED", "ADDITIONAL_ITEMS_ADDED",
    "ADDITIONAL_ITEMS_EXTENDED", "UNEVALUATED_ITEMS_ADDED", "UNEVALUATED_ITEMS_EXTENDED",
    "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL",
    "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL",
    "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "ENUM_ARRAY_EXTENDED", "COMBINED_TYPE_EXTENDED", "PRODUCT_TYPE_NARROWED", "SUM_TYPE_EXTENDED", "NOT_TYPE_NARROWED",
})

Pair = tuple[int, int]


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


class _Shared:
    """What every context of one comparison pass shares (Confluent's memo, in-progress set and seed)."""

    def __init__(self, original: Loader, update: Loader, seed: dict[Pair, list[Difference]]) -> None:
        self.original, self.update = original, update
        self.memo: dict[Pair, list[Difference]] = {}
        self.in_progress: set[Pair] = set()
        self.seed = seed
        self.optimism_used = False


class Context:
    """Confluent's `Context`: the current JSON path and the differences found under it."""

    def __init__(self, shared: _Shared, path: list[str] | None = None) -> None:
        self.shared = shared
        self.path = list(path or [])
        self.diffs: list[Difference] = []

    def sub(self) -> Context:
        return Context(self.shared, self.path)

    def add(self, kind: str, attribute: str | None = None) -> None:
        parts = self.path + ([attribute] if attribute is not None else [])
        self.diffs.append(Difference(kind, "#/" + "/".join(parts)))

    def extend(self, diffs: list[Difference]) -> None:
        self.diffs.extend(diffs)

    def compatible(self) -> bool:
        return all(d.kind in COMPATIBLE for d in self.diffs)

    def covered(self, before: Node, after: Node, yes: str, no: str) -> None:
        """`yes` when `after` reads what `before` wrote (the differences between them kept too), else `no`."""
        sub = self.sub()
        sub.compare(before, after)
        self.extend(sub.diffs)
        self.add(yes if sub.compatible() else no)

    def enter(self, part: str) -> _Scope:
        return _Scope(self, part)

    def compare(self, original: Node | None, update: Node | None) -> None:
        """Confluent's `SchemaDiff.compare(ctx, original, update)`."""
        if original is None and update is None:
            return
        if original is None:
            self.add("SCHEMA_ADDED")
            return
        if update is None:
            self.add("SCHEMA_REMOVED")
            return
        original = self.shared.original.target(original) if original.kind == "ref" else original
        update = self.shared.update.target(update) if update.kind == "ref" else update
        key = (id(original), id(update))
        shared = self.shared
        found = shared.memo.get(key)
        if found is None:
            if key in shared.in_progress:  # a recursive schema met itself: known incompatible, or assumed fine
                found = shared.seed.get(key)
                if found is None:
                    shared.optimism_used = True
                    return
            else:
                shared.in_progress.add(key)
                try:
                    pair = Context(shared)
                    _compare_types(pair, original, update)
                    found = pair.diffs
                    shared.memo[key] = found
                finally:
                    shared.in_progress.discard(key)
        prefix = "#/" + "/".join(self.path)
        for diff in found:
            rebased = prefix if len(diff.path) <= 2 else (prefix + "/" + diff.path[2:] if self.path else diff.path)
            self.diffs.append(Difference(diff.kind, rebased))


class _Scope:
    def __init__(self, ctx: Context, part: str) -> None:
        self.ctx, self.part = ctx, part

    def __enter__(self) -> Context:
        self.ctx.path.append(self.part)
        return self.ctx

    def __exit__(self, *exc: object) -> None:
        self.ctx.path.pop()


def compare(original: JsonValue, update: JsonValue, original_refs: dict[str, JsonValue] | None = None,
            update_refs: dict[str, JsonValue] | None = None) -> list[Difference]:
    """The differences from `original` to `update` (their references: name -> document), Confluent's list."""
    loaders = Loader(original, original_refs), Loader(update, update_refs)
    seed: dict[Pair, list[Difference]] = {}
    while True:
        shared = _Shared(*loaders, seed)
        ctx = Context(shared)
        ctx.compare(loaders[0].root(), loaders[1].root())
        found = {key: diffs for key, diffs in shared.memo.items() if any(d.kind not in COMPATIBLE for d in diffs)}
        if not shared.optimism_used or found.keys() == seed.keys():
            return ctx.diffs
        seed = found


def _same_class(a: Node, b: Node) -> bool:
    return a.kind == b.kind


def _compare_types(ctx: Context, original: Node, update: Node) -> None:
    if original.kind != "combined" and update.kind == "combined":
        if len(update.subschemas) == 1:
            sub = ctx.sub()
            sub.compare(original, update.subschemas[0])
            if sub.compatible():
                ctx.extend(sub.diffs)
                return
        elif update.criterion in ("anyOf", "oneOf"):
            for branch in update.subschemas:
                sub = ctx.sub()
                sub.compare(original, branch)
                if sub.compatible():
                    ctx.extend(sub.diffs)
                    ctx.add("SUM_TYPE_EXTENDED")
                    return
    elif original.kind == "combined" and update.kind != "combined":
        if len(original.subschemas) == 1:
            sub = ctx.sub()
            sub.compare(original.subschemas[0], update)
            if sub.compatible():
                ctx.extend(sub.diffs)
                return
        elif original.criterion == "allOf":
            for branch in original.subschemas:
                sub = ctx.sub()
                sub.compare(branch, update)
                if sub.compatible():
                    ctx.extend(sub.diffs)
                    ctx.add("PRODUCT_TYPE_NARROWED")
                    return
    if not _same_class(original, update):
        if original.kind == "false" or update.kind in EMPTY_KINDS:
            return
        if original.connect_type == "bytes" and update.connect_type == "bytes":
            return
        ctx.add("TYPE_CHANGED")
        return
    if original.schema_id != update.schema_id:
        ctx.add("ID_CHANGED")
    if original.title != update.title:
        ctx.add("TITLE_CHANGED")
    if original.description != update.description:
        ctx.add("DESCRIPTION_CHANGED")
    if original.has_default != update.has_default or canonical(original.default) != canonical(update.default):
        ctx.add("DEFAULT_CHANGED")
    kind = original.kind
    if kind == "string":
        _compare_string(ctx, original, update)
    elif kind == "number":
        _compare_number(ctx, original, update)
    elif kind == "const":
        if original.values != update.values:
            ctx.add("ENUM_ARRAY_CHANGED", "const")
    elif kind == "enum":
        if original.values != update.values:
            ctx.add("ENUM_ARRAY_EXTENDED" if update.values >= original.values else
                    "ENUM_ARRAY_NARROWED" if original.values >= update.values else "ENUM_ARRAY_CHANGED", "enum")
    elif kind == "combined":
        _compare_combined(ctx, original, update)
    elif kind == "not":
        with ctx.enter("not"):
            sub = ctx.sub()
            sub.compare(update.must_not, original.must_not)  # reversed: what must not match
            ctx.add("NOT_TYPE_NARROWED" if sub.compatible() else "NOT_TYPE_EXTENDED")
    elif kind == "object":
        compare_object(ctx, original, update)
    elif kind == "array":
        compare_array(ctx, original, update)


def _compare_string(ctx: Context, original: Node, update: Node) -> None:
    bound(ctx, "maxLength", "MAX_LENGTH", original.max_length, update.max_length)
    bound(ctx, "minLength", "MIN_LENGTH", original.min_length, update.min_length)
    if original.pattern is None and update.pattern is not None:
        ctx.add("PATTERN_ADDED", "pattern")
    elif original.pattern is not None and update.pattern is None:
        ctx.add("PATTERN_REMOVED", "pattern")
    elif original.pattern != update.pattern:
        ctx.add("PATTERN_CHANGED", "pattern")


def _decimal(value: float | int | None) -> Decimal | None:
    try:
        return None if value is None else Decimal(str(value))
    except InvalidOperation:
        return None


def _compare_number(ctx: Context, original: Node, update: Node) -> None:
    bound(ctx, "maximum", "MAXIMUM", original.maximum, update.maximum)
    bound(ctx, "minimum", "MINIMUM", original.minimum, update.minimum)
    bound(ctx, "exclusiveMaximum", "EXCLUSIVE_MAXIMUM", original.exclusive_maximum, update.exclusive_maximum)
    bound(ctx, "exclusiveMinimum", "EXCLUSIVE_MINIMUM", original.exclusive_minimum, update.exclusive_minimum)
    before, after = _decimal(original.multiple_of), _decimal(update.multiple_of)
    if before != after:
        if before is None:
            ctx.add("MULTIPLE_OF_ADDED", "multipleOf")
        elif after is None:
            ctx.add("MULTIPLE_OF_REMOVED", "multipleOf")
        elif before != 0 and after % before == 0:
            ctx.add("MULTIPLE_OF_EXPANDED", "multipleOf")
        elif after != 0 and before % after == 0:
            ctx.add("MULTIPLE_OF_REDUCED", "multipleOf")
        else:
            ctx.add("MULTIPLE_OF_CHANGED", "multipleOf")
    if original.requires_integer != update.requires_integer:
        ctx.add("TYPE_EXTENDED" if original.requires_integer else "TYPE_NARROWED")


def _distinct(nodes: list[Node]) -> list[Node]:
    """Branches with the same JSON once (Confluent collapses them through a set)."""
    seen: set[str] = set()
    out = []
    for node in nodes:
        key = f"{node.kind}:{node.requires_integer}:{node.criterion}:{canonical(node.raw)}"
        if key not in seen:
            seen.add(key)
            out.append(node)
    return out


def _compare_combined(ctx: Context, original: Node, update: Node) -> None:
    if original.criterion != update.criterion:
        o1, u1 = len(original.subschemas) == 1, len(update.subschemas) == 1
        if (update.criterion == "anyOf" or (o1 and u1) or (o1 and update.criterion == "oneOf")
                or (u1 and original.criterion == "allOf")):
            ctx.add("COMBINED_TYPE_EXTENDED")
        else:
            ctx.add("COMBINED_TYPE_CHANGED")
            return
    before, after = _distinct(original.subschemas), _distinct(update.subschemas)
    if len(before) < len(after):
        ctx.add("PRODUCT_TYPE_EXTENDED" if update.criterion == "allOf" else "SUM_TYPE_EXTENDED")
    elif len(before) > len(after):
        ctx.add("SUM_TYPE_NARROWED" if original.criterion in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
    edges: dict[int, dict[int, list[Difference]]] = {}
    for i, branch in enumerate(before):
        with ctx.enter(f"{original.criterion}/{i}"):
            for j, other in enumerate(after):
                sub = ctx.sub()
                sub.compare(branch, other)
                if sub.compatible():
                    edges.setdefault(i, {})[j] = sub.diffs
    matching = _maximum_matching(edges)
    for i, j in sorted(matching.items()):
        ctx.extend(edges[i][j])
    if len(matching) < min(len(before), len(after)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _maximum_matching(edges: dict[int, dict[int, list[Difference]]]) -> dict[int, int]:
    """A maximum bipartite matching (left -> right) by augmenting paths: the branches are few."""
    right_of: dict[int, int] = {}
    owner: dict[int, int] = {}

    def augment(left: int, seen: set[int]) -> bool:
        for right in edges.get(left, {}):
            if right in seen:
                continue
            seen.add(right)
            if right not in owner or augment(owner[right], seen):
                owner[right] = left
                right_of[left] = right
                return True
        return False

    for left in edges:
        augment(left, set())
    return {left: right for right, left in owner.items()}
