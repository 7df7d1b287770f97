"""The churn suite's per-case table: records acked, lost, duplicated, the longest stall, time to Ready.

Why this exists: issue 18 asks for these figures per case at the end of a
run, passed or failed, so a regression in availability (a longer stall, a
slower roll) is visible even when nothing was lost. Each case fills one
`CaseRow` inside `record_case`, which appends it whatever happens;
`tests/kube/conftest.py` prints the table in pytest's terminal summary and,
with `KELP_CHURN_REPORT=<path>`, it is also written to that file.

What it must never do: decide a test's outcome (the case asserts; this only
records what the case measured and how it ended).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from tests.kube.churn_check import Verdict

__all__ = ["CaseRow", "ROWS", "record_case", "table"]


@dataclass
class CaseRow:
    case: str
    form: str
    acked: int | None = None
    lost: int | None = None
    duplicated: int | None = None
    reordered: int | None = None
    divergent: int | None = None
    unconsumed: int | None = None
    replicas_differ: int | None = None
    delivery_errors: int | None = None
    hung_stops: int | None = None  # broker pods killed at the end of their termination grace period
    longest_stall_s: float | None = None
    ready_s: list[tuple[str, float]] = field(default_factory=list)
    outcome: str = "not run"
    notes: list[str] = field(default_factory=list)

    def take(self, verdict: Verdict) -> None:
        self.acked = verdict.acked
        self.lost, self.duplicated = len(verdict.lost), len(verdict.duplicated)
        self.reordered, self.divergent = len(verdict.reordered), len(verdict.divergent)
        self.unconsumed, self.replicas_differ = len(verdict.unconsumed), len(verdict.replicas)

    def ready(self, phase: str, seconds: float) -> None:
        self.ready_s.append((phase, seconds))


ROWS: list[CaseRow] = []

_COLUMNS = ("case", "form", "acked", "lost", "dup", "reord", "diverg", "unconsumed", "replicas≠", "errors",
            "hung stops", "longest stall", "time to Ready", "outcome")


def _cells(row: CaseRow) -> list[str]:
    num = lambda v: "-" if v is None else str(v)  # noqa: E731
    ready = ", ".join(f"{phase} {s:.1f}s" for phase, s in row.ready_s) or "-"
    stall = "-" if row.longest_stall_s is None else f"{row.longest_stall_s:.1f}s"
    return [row.case, row.form, num(row.acked), num(row.lost), num(row.duplicated), num(row.reordered),
            num(row.divergent), num(row.unconsumed), num(row.replicas_differ), num(row.delivery_errors),
            num(row.hung_stops), stall,
            ready, row.outcome]


def table(rows: list[CaseRow]) -> list[str]:
    """The rows as aligned text lines, then each case's notes."""
    cells = [list(_COLUMNS)] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in rows:
        lines.extend(f"  {r.case}: {note}" for note in r.notes)
    return lines


@contextmanager
def record_case(case: str, form: str) -> Iterator[CaseRow]:
    """Yield the case's row; whatever happens inside, the row ends in ROWS with how the case ended."""
    row = CaseRow(case=case, form=form)
    try:
        yield row
        row.outcome = "passed"
    except BaseException as exc:
        lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
        row.outcome = f"FAILED: {' / '.join(lines[:2]) or type(exc).__name__}"[:160]
        raise
    finally:
        ROWS.append(row)
        target = os.environ.get("KELP_CHURN_REPORT")
        if target:
            Path(target).write_text("\n".join(table(ROWS)) + "\n")
