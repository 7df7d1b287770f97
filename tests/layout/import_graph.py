"""Kelp's own modules and the imports between them, read from the source with `ast`.

Shared by the layer test and the cycle test. `broker/` is `kelp.broker` and
`operator/` is `kelp.operator` (setup.py maps them), so module names are
computed from that mapping, not from the directory layout. Every `import` and
`from ... import` counts, wherever it stands: at module level, inside a
function, or under `if TYPE_CHECKING:` (a deferred import hides a dependency,
it does not remove it). Relative imports are resolved against the importing
module.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = {"kelp": ROOT / "kelp", "kelp.broker": ROOT / "broker", "kelp.operator": ROOT / "operator"}


def _module_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for package, directory in PACKAGE_DIRS.items():
        for path in directory.rglob("*.py"):
            rel = path.relative_to(directory).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if name.startswith("kelp.") and name.split(".")[1] in {"broker", "operator"} and package == "kelp":
                continue  # kelp/broker would shadow the mapping; never expected
            files[name] = path
    return files


FILES = _module_files()


@cache
def _statements(name: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each import statement of module `name` as (module, names): `import a.b` is ("a.b", ()),
    `from a import b, c` is ("a", ("b", "c")), relative modules resolved."""
    path = FILES[name]
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((module, tuple(alias.name for alias in node.names)))
    return tuple(found)


def imports(name: str) -> set[str]:
    """Every dotted name module `name` imports: the modules, and `module.name` for each `from` import
    (which is a module or an attribute of one; the layer rules match both by prefix)."""
    found: set[str] = set()
    for module, names in _statements(name):
        found.add(module)
        found.update(f"{module}.{n}" for n in names)
    return found


def kelp_imports(name: str) -> set[str]:
    """The Kelp modules module `name` imports: `from pkg import sub` counts as importing `pkg.sub` when
    that is a module, else as importing `pkg`. A parent package that Python initialises on the way is not
    counted (every submodule would otherwise "import" its own package)."""
    found: set[str] = set()
    for module, names in _statements(name):
        targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in FILES]
        if len(targets) < len(names) or not names:
            targets.append(module)
        found.update(t for t in targets if t in FILES and t != name)
    return found


def graph() -> dict[str, set[str]]:
    """Kelp module -> the Kelp modules it imports."""
    return {name: kelp_imports(name) for name in FILES}
