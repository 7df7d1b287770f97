"""What every schema format shares: a resolved reference, and what a parsed schema answers.

Why a module of its own: `formats` dispatches to the format modules, and they all need these types;
keeping them here leaves the imports one way (formats -> avro_format/json_format/protobuf_format -> parsed).

This module must never hold a format's rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["ResolvedReference", "ParsedSchema", "flatten", "MAX_SCHEMA_DEPTH"]

# The deepest nesting of JSON a schema text may have (Kelp's bound; a request body may nest 512): the format
# libraries walk a schema recursively (jsonschema's checks, Avro's parser), and a JSON Schema 400 levels deep
# exhausted Python's stack there, answering 500. Real schemas nest a few dozen levels at most.
MAX_SCHEMA_DEPTH = 128


@dataclass(frozen=True, slots=True)
class ResolvedReference:
    """A reference with the schema it names, and that schema's own references, resolved."""

    name: str
    subject: str
    version: int
    schema_type: str
    schema: str
    references: tuple[ResolvedReference, ...] = ()


def flatten(refs: tuple[ResolvedReference, ...]) -> list[ResolvedReference]:
    """Every reference, transitively, dependencies before the schemas that use them, each once (by name)."""
    out: list[ResolvedReference] = []
    seen: set[str] = set()

    def visit(ref: ResolvedReference) -> None:
        if ref.name in seen:
            return
        seen.add(ref.name)
        for inner in ref.references:
            visit(inner)
        out.append(ref)

    for ref in refs:
        visit(ref)
    return out


class ParsedSchema(Protocol):
    @property
    def schema_type(self) -> str: ...

    @property
    def canonical(self) -> str: ...  # stored, and compared to find the same schema registered again

    def compatibility_errors(self, previous: ParsedSchema) -> list[str]:
        """Why this schema cannot read data written with `previous` (empty: it can): Confluent's
        `isBackwardCompatible(previous)`."""
        ...
