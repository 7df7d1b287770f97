"""What a compatibility level checks, over parsed schemas: which earlier versions, in which direction.

Why a module of its own: the registry (`registry.SchemaRegistry`) decides with it while registering and answering
`/compatibility`, on the CPU pool, and the Confluent-cases test (`tests/schema_registry/test_confluent_cases.py`)
runs Confluent's own level assertions through the very same function. Confluent's `CompatibilityChecker`:
BACKWARD: the new schema reads data of the latest earlier version; FORWARD: the latest reads the new one's;
FULL: both; the _TRANSITIVE levels against every earlier version (newest first), not only the latest; NONE:
nothing. `previous` is in registration order, oldest first, as Confluent's checker takes it.

This module must never read the registry's state: parsed schemas in, reasons out.
"""

from __future__ import annotations

from .parsed import ParsedSchema

__all__ = ["check_level", "first_incompatible"]


def first_incompatible(level: str, new: ParsedSchema, previous: list[ParsedSchema]
                       ) -> tuple[int, list[str]] | None:
    """(index in `previous` of the newest version `new` is incompatible with at `level`, why), or None."""
    if level == "NONE" or not previous:
        return None
    first = 0 if level.endswith("_TRANSITIVE") else len(previous) - 1
    for index in range(len(previous) - 1, first - 1, -1):
        old = previous[index]
        found: list[str] = []
        if level.startswith(("BACKWARD", "FULL")):
            found += new.compatibility_errors(old)
        if level.startswith(("FORWARD", "FULL")):
            found += old.compatibility_errors(new)
        if found:
            return index, found
    return None


def check_level(level: str, new: ParsedSchema, previous: list[ParsedSchema]) -> list[str]:
    """Why `new` may not follow `previous` at `level` (empty: it may)."""
    failed = first_incompatible(level, new, previous)
    return [] if failed is None else failed[1]
