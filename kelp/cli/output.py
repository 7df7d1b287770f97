"""Human-readable aligned tables and `--json` output.

Why: people read aligned columns; scripts parse `--json`. Both come from
the same rows so they never disagree.

This module must never talk to a broker.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Sequence, TextIO

__all__ = ["print_table", "print_json", "format_table"]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def format_table(rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(columns)).rstrip()]
    for row in cells:
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
    return "\n".join(lines)


def print_table(rows: Sequence[Sequence[Any]], columns: Sequence[str], *, out: TextIO | None = None) -> None:
    print(format_table(rows, columns), file=out or sys.stdout)


def print_json(data: Any, *, out: TextIO | None = None) -> None:
    print(json.dumps(data, indent=2, sort_keys=False), file=out or sys.stdout)
