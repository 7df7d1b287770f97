"""docs/architecture.md against the tree: every path it names exists, every package is named in it.

Why: the page is the first one a newcomer reads, and it went stale silently — it left out
`broker/transactions/` and `broker/schema_registry/` and miscounted the users of the client core while
packages were added and split (issue 35). The tree is read when the test runs, so a package added, moved or
split fails here until the page says where it went:

- each span in backticks that looks like a repository path names something that exists: `broker/cluster/`
  and `kelp/records/header.py` from the checkout's root, `handlers/registry.py` as the end of some path,
  `log.py` as some file's name, `kelp.broker.cluster.leases` as a module or package (a last component that
  is not a module must be a name defined in the module before it, `kelp.spark.wire.KafkaWire`);
- each top-level directory of the checkout, and each package directly under `broker/`, `kelp/` and
  `operator/`, is named on the page, as a path (`broker/groups/`) or as a module (`kelp.broker.groups`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"

# Directories of a working checkout that are not part of the project: caches, the venv, `make run`'s data.
NOT_PROJECT = {"data", "build", "dist", "node_modules", "__pycache__"}
# Where a dotted `kelp.` name lives in the checkout (the editable install maps broker/ and operator/).
MODULE_ROOTS = (("kelp.broker", "broker"), ("kelp.operator", "operator"), ("kelp", "kelp"))
# Dotted spans that start with `kelp.` and are not modules: the CRDs' API group.
NOT_MODULES = {"kelp.dev"}
FILE_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".json", ".java", ".txt")
PATHLIKE = re.compile(r"^[A-Za-z0-9_.\-/]+$")


def _project_dir(name: str) -> bool:
    return not name.startswith(".") and name not in NOT_PROJECT and not name.endswith(".egg-info")


def _tree() -> set[str]:
    """Every file and directory of the project, as paths relative to the root (directories end with '/')."""
    found: set[str] = set()
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if _project_dir(d)]
        rel = Path(root).relative_to(REPO).as_posix()
        prefix = "" if rel == "." else rel + "/"
        found.update(prefix + d + "/" for d in dirs)
        found.update(prefix + f for f in files)
    return found


def _doc_text() -> str:
    """The page without its fenced blocks (the picture has no backticks to read)."""
    return re.sub(r"^```.*?^```", "", DOC.read_text(), flags=re.S | re.M)


def _spans(text: str) -> list[str]:
    return [s for s in re.findall(r"`([^`\n]+)`", text) if PATHLIKE.match(s)]


def _module_file(dotted: str) -> Path | None:
    """The file or package directory of a dotted module name, or None."""
    for prefix, directory in MODULE_ROOTS:
        if dotted == prefix or dotted.startswith(prefix + "."):
            rest = dotted[len(prefix):].lstrip(".")
            base = REPO / directory / Path(*rest.split(".")) if rest else REPO / directory
            if (base / "__init__.py").exists():
                return base
            if base.with_suffix(".py").exists():
                return base.with_suffix(".py")
            return None
    return None


def _module_defines(module: Path, name: str) -> bool:
    source = module / "__init__.py" if module.is_dir() else module
    return re.search(rf"^\s*(class|def|async def)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*[:=]|"
                     rf"\bimport\b.*\b{re.escape(name)}\b",
                     source.read_text(), re.M) is not None


def _missing_path(span: str, tree: set[str], top: set[str]) -> str | None:
    """Why `span` names nothing in the tree, or None when it does (or is not a repository path)."""
    if span.startswith("/") or "//" in span:
        return None  # an HTTP route or a URL
    if "/" in span:
        wanted = span if span.endswith("/") or not (REPO / span).is_dir() else span + "/"
        if span.split("/", 1)[0] + "/" in top:
            return None if (REPO / span).exists() else "no such path from the checkout's root"
        if any(p == wanted or p.endswith("/" + wanted) for p in tree):
            return None
        if any(p.endswith("/" + span.rstrip("/") + "/") for p in tree):
            return None
        return "no path in the tree ends so"
    if span.startswith("kelp.") or span == "kelp":
        if span in NOT_MODULES:
            return None
        if _module_file(span) is not None:
            return None
        head, _, attr = span.rpartition(".")
        module = _module_file(head)
        if module is None:
            return "no such module or package"
        return None if _module_defines(module, attr) else f"{head} defines no {attr}"
    if span.endswith(FILE_SUFFIXES) and not span.startswith("."):
        if any(p == span or p.endswith("/" + span) for p in tree):
            return None
        return "no file of that name in the tree"
    return None


def test_every_path_the_page_names_exists() -> None:
    tree = _tree()
    top = {p for p in tree if p.count("/") == 1 and p.endswith("/")}
    missing = sorted({f"`{span}`: {why}" for span in _spans(_doc_text())
                      if (why := _missing_path(span, tree, top)) is not None})
    assert not missing, ("docs/architecture.md names what the tree does not have (moved or renamed? say where "
                         "it went):\n" + "\n".join(missing))


def _packages() -> list[str]:
    """Top-level directories, and the packages directly under broker/, kelp/ and operator/, as paths."""
    found = [d.name + "/" for d in REPO.iterdir() if d.is_dir() and _project_dir(d.name)]
    for parent in ("broker", "kelp", "operator"):
        found += [f"{parent}/{d.name}/" for d in (REPO / parent).iterdir()
                  if d.is_dir() and (d / "__init__.py").exists()]
    return sorted(found)


def _named(path: str, text: str) -> bool:
    parts = path.rstrip("/").split("/")
    forms = [re.escape("/".join(parts)) + r"(?![\w.-])"]
    if parts[0] in ("broker", "operator", "kelp"):
        dotted = {"broker": "kelp.broker", "operator": "kelp.operator", "kelp": "kelp"}[parts[0]]
        forms.append(r"(?<![\w.])" + re.escape(".".join([dotted, *parts[1:]])) + r"(?!\w)")
    return any(re.search(form, text) for form in forms)


def test_every_package_and_top_level_directory_is_named() -> None:
    text = DOC.read_text()
    unnamed = [p for p in _packages() if not _named(p, text)]
    assert not unnamed, ("docs/architecture.md does not say what these own (add them to 'What each package "
                         "owns'): " + ", ".join(unnamed))


def test_the_checks_catch_what_they_are_for() -> None:
    tree = _tree()
    top = {p for p in tree if p.count("/") == 1 and p.endswith("/")}
    assert _missing_path("broker/no_such_package/", tree, top)
    assert _missing_path("kelp.broker.no_such_module", tree, top)
    assert _missing_path("kelp.spark.wire.NoSuchClass", tree, top)
    assert _missing_path("no_such_file.py", tree, top)
    assert _missing_path("handlers/no_such.py", tree, top)
    assert _missing_path("broker/storage/", tree, top) is None
    assert _missing_path("kelp.spark.wire.KafkaWire", tree, top) is None
    assert _missing_path("handlers/registry.py", tree, top) is None
    assert _named("broker/groups/", "`kelp.broker.groups` owns")
    assert not _named("broker/groups/", "`kelp.broker.groups_x` owns")
    assert not _named("e2e/", "nothing here")
