"""Every Event and condition reason the operator can write is explained in docs/operator.md.

What a user relies on: `kubectl describe kc demo` shows reasons like
`ReassignmentCancelFailed`; the page says what each means and what to do.
The reasons are read from the operator's source (each `emit("Reason", ...)`,
`condition(type, status, "Reason", ...)` and restart decision), so a new one
cannot land undocumented.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EMITTED = re.compile(r'emit\(\s*(?:[\w.]+,\s*)?"([A-Z][A-Za-z]+)"')
CONDITIONS = re.compile(r'condition\(\s*"\w+",\s*[^,]+,\s*"([A-Z][A-Za-z]+)"')
DECISIONS = re.compile(r'RestartDecision\([^,]+,\s*"([A-Z][A-Za-z]+)"')


def test_every_reason_is_documented() -> None:
    documented = set(re.findall(r"`([A-Z][A-Za-z]+)`", (REPO / "docs" / "operator.md").read_text()))
    reasons: dict[str, str] = {}
    for path in sorted((REPO / "operator").rglob("*.py")):
        source = path.read_text()
        for pattern in (EMITTED, CONDITIONS, DECISIONS):
            for reason in pattern.findall(source):
                reasons.setdefault(reason, str(path.relative_to(REPO)))
    assert len(reasons) > 40, "the patterns no longer find the reasons"
    missing = {r: where for r, where in reasons.items() if r not in documented}
    assert not missing, f"reasons written by the operator but not in docs/operator.md: {missing}"
