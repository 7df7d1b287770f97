"""The layer rules of docs/internals.md, checked on every test run.

import-linter cannot see `kelp.broker` and `kelp.operator` (they are mapped
from `broker/` and `operator/`, which its graph builder does not follow), so
the rules are checked here from the source: each module's imports are read
with `ast` and followed transitively through Kelp's own modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = {"kelp": ROOT / "kelp", "kelp.broker": ROOT / "broker", "kelp.operator": ROOT / "operator"}

NETWORKING = ("asyncio", "socket", "aiohttp", "kafka.net", "kafka.producer", "kafka.consumer", "http", "urllib")


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


def _imports(name: str) -> set[str]:
    path = FILES[name]
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _closure(start: str) -> dict[str, str]:
    """Every module reachable from `start`, mapped to the Kelp module that imports it."""
    seen: dict[str, str] = {}
    stack = [m for m in FILES if m == start or m.startswith(start + ".")]
    visited: set[str] = set()
    while stack:
        current = stack.pop()
        if current in visited:
            continue
        visited.add(current)
        for imported in _imports(current):
            seen.setdefault(imported, current)
            if imported in FILES and imported not in visited:
                stack.append(imported)
    return seen


def _violations(start: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{importer} imports {imported}"
        for imported, importer in _closure(start).items()
        if any(imported == f or imported.startswith(f + ".") for f in forbidden)
    )


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("kelp.broker.storage", NETWORKING + ("kelp.broker.kafka", "kelp.broker.http", "kelp.broker.groups",
                                              "kelp.operator", "kelp.cli")),
        ("kelp.records", NETWORKING + ("kelp.broker",)),
        # The cluster layer is called by the request handlers, never the other way round.
        ("kelp.broker.cluster", ("kelp.broker.kafka", "kelp.broker.http", "kelp.broker.groups", "kelp.operator",
                                 "kelp.cli")),
        # Replication's per-partition rules are state and futures only: no sockets, no HTTP, no cluster calls.
        ("kelp.broker.partition", tuple(n for n in NETWORKING if n != "asyncio")
         + ("kelp.broker.kafka", "kelp.broker.http", "kelp.broker.cluster.member")),
        # The operator's builders, spec reader and status shaping are pure: no Kubernetes, no kopf, no I/O
        # (the broker config validator they share reads the host name through `socket`, nothing more).
        *[(m, tuple(n for n in NETWORKING if n != "socket")
           + ("kubernetes", "kopf", "kelp.operator.kube", "kelp.operator.brokers", "kelp.operator.handlers",
              "kelp.broker.cluster"))
          for m in ("kelp.operator.builders", "kelp.operator.spec", "kelp.operator.status")],
        # The Spark data source is a client: it speaks the Kafka protocol and never reaches into the broker.
        ("kelp.spark", ("kelp.broker", "kelp.operator", "kelp.cli")),
        # Its option rules and column codec run anywhere: no sockets, no Spark.
        *[(m, NETWORKING + ("pyspark", "kelp.spark.wire")) for m in ("kelp.spark.codec", "kelp.spark.options")],
    ],
)
def test_layer_imports_only_downwards(layer: str, forbidden: tuple[str, ...]) -> None:
    assert any(m == layer or m.startswith(layer + ".") for m in FILES), f"{layer} has no modules"
    assert _violations(layer, forbidden) == []


def test_the_checker_sees_a_violation() -> None:
    """Guards the guard: the HTTP layer does import aiohttp, so the checker must say so."""
    if not any(m.startswith("kelp.broker.http.") for m in FILES):
        pytest.skip("kelp.broker.http has no modules yet")
    assert _violations("kelp.broker.http", ("aiohttp",))
