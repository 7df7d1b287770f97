"""mypy runs in `make test`, on the tree as installed, and every `# type: ignore` says which error and why.

mypy refuses an ignore without an error code itself (`ignore-without-code` in pyproject.toml); the
reason after it, on the same line, is checked here. scripts/typecheck.py links `broker/` and
`operator/` in as `kelp.broker` and `kelp.operator`: its mapping must stay setup.py's, or mypy would
check modules under names they are never imported by.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("kelp", "broker", "operator", "bench", "pyspark_kelp.py")
# `# type: ignore[code, ...]  # why` — the codes in brackets, then a comment of its own.
IGNORE = re.compile(r"type:\s*ignore(?P<codes>\[[^\]]+\])?(?P<rest>.*)")


def _prerequisites(target: str) -> list[str]:
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith(f"{target}:"):
            return line.split(":", 1)[1].split()
    raise AssertionError(f"the Makefile has no `{target}:` rule")


def _mapped(path: Path) -> object:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MAPPED" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.relative_to(ROOT)} defines no MAPPED")


def _sources() -> list[Path]:
    files: list[Path] = []
    for name in CHECKED:
        path = ROOT / name
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def test_make_test_runs_typecheck_right_after_lint() -> None:
    assert _prerequisites("test")[:2] == ["lint", "typecheck"]
    assert _prerequisites("typecheck") == ["venv"]


def test_the_typecheck_tree_maps_packages_as_setup_py_does() -> None:
    assert _mapped(ROOT / "scripts" / "typecheck.py") == _mapped(ROOT / "setup.py")


def test_every_type_ignore_names_its_error_code_and_why() -> None:
    bare = []
    for path in _sources():
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if token.type != tokenize.COMMENT:
                continue
            found = IGNORE.search(token.string)
            if found and (not found["codes"] or not re.match(r"\s+#\s*\S", found["rest"])):
                bare.append(f"{path.relative_to(ROOT)}:{token.start[0]}: {token.string}")
    assert not bare, "a `# type: ignore[code]` needs `  # why` after it on the same line:\n" + "\n".join(bare)


def test_the_check_sees_a_bare_ignore() -> None:
    assert IGNORE.search("# type: ignore[arg-type]  # the stubs lag the library")["rest"].strip().startswith("#")
    assert not IGNORE.search("# type: ignore")["codes"]
    assert not re.match(r"\s+#\s*\S", IGNORE.search("# type: ignore[arg-type]")["rest"])
