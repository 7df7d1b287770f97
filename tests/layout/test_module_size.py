"""No source module passes 600 lines, and each says why it exists (a module docstring).

Why: the project splits a module by role when it passes ~600 lines (docs/development.md), and issue 35's
acceptance names the bound. Merges of parallel branches pushed two modules past it unnoticed
(`broker/groups/consumer/coordinator.py` 607, `broker/app.py` 602); this catches the next one at its commit.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("broker", "kelp", "operator", "bench")
MAX_LINES = 600


def _modules() -> list[Path]:
    return [p for top in TREES for p in sorted((ROOT / top).rglob("*.py")) if "__pycache__" not in p.parts]


def test_no_module_passes_600_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by role (over {MAX_LINES} lines): {long}"


def test_every_module_with_code_has_a_docstring() -> None:
    missing = []
    for p in _modules():
        tree = ast.parse(p.read_text())
        if tree.body and ast.get_docstring(tree) is None and any(
                isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body):
            missing.append(str(p.relative_to(ROOT)))
    assert not missing, f"modules with code but no docstring saying why they exist: {missing}"
