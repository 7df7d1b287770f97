"""Run mypy over the checkout laid out as the installed `kelp` distribution (`make typecheck`).

Why it exists: `kelp.broker` lives in `broker/` and `kelp.operator` in `operator/` (setup.py's
`package_dir`). The editable install maps them with an import hook, which mypy cannot follow (it
never runs code), and mypy names a file after its directories: checked as they are, `broker/app.py`
would be a module `broker.app`, and every `from kelp.broker...` import would be missing. So this
builds a tree of symlinks in which each package sits where its name says —
`.mypy_cache/tree/kelp/broker -> broker/`, `.mypy_cache/tree/kelp/operator -> operator/`, the
rest of `kelp/` linked entry by entry — runs mypy with `[tool.mypy]` of pyproject.toml (whose
`files` and `mypy_path` name that tree), and prints its findings with the checkout's own paths.

The tree sits at a fixed place, so mypy's cache (`.mypy_cache`) stays valid from run to run. It
is rebuilt on every run (links only, milliseconds) and links directories, so a new module is
checked without any step. Arguments go to mypy; a path among them inside the checkout (`broker/
storage`, `kelp/records/`) is translated into the tree: `scripts/typecheck.py broker/storage`.

It must never copy, write or move a source file: the tree only points at the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / ".mypy_cache" / "tree"
# setup.py's `package_dir`: an installed package name and the checkout directory it is built from
# (tests/layout/test_typecheck.py keeps the two in step).
MAPPED = {"kelp.broker": "broker", "kelp.operator": "operator"}
# Checked beside `kelp` as they are: top-level in the checkout and in the tree alike.
TOP_LEVEL = ("pyspark_kelp.py", "bench")
SKIP = {"__pycache__"}


def build_tree() -> dict[Path, Path]:
    """Lay the tree out anew; return {checkout path: its path in the tree}, most specific first."""
    shutil.rmtree(TREE, ignore_errors=True)
    (TREE / "kelp").mkdir(parents=True)
    places: dict[Path, Path] = {}
    for package, directory in MAPPED.items():
        places[ROOT / directory] = TREE.joinpath(*package.split("."))
    mapped_names = {package.split(".")[1] for package in MAPPED}
    for entry in sorted((ROOT / "kelp").iterdir()):
        if entry.name not in SKIP and entry.name not in mapped_names:
            places[entry] = TREE / "kelp" / entry.name
    for name in TOP_LEVEL:
        places[ROOT / name] = TREE / name
    for source, link in places.items():
        link.symlink_to(os.path.relpath(source, link.parent))
    places[ROOT / "kelp"] = TREE / "kelp"
    return places


def in_tree(arg: str, places: dict[Path, Path]) -> str:
    """`arg` itself, or its place in the tree when it names a file or directory the tree links."""
    if arg.startswith("-") or not os.path.exists(arg):
        return arg
    path = Path(arg).resolve()
    for source, link in places.items():
        if path == source or source in path.parents:
            return str(link / path.relative_to(source))
    return arg


def main(argv: list[str]) -> int:
    places = build_tree()
    args = [in_tree(arg, places) for arg in argv]  # before the chdir: paths are the caller's
    os.chdir(ROOT)
    # mypy prints paths relative to the working directory: turn each tree prefix back into the checkout's.
    tail = {True: os.sep, False: ""}
    prefixes = sorted(
        (
            (os.path.relpath(link) + tail[source.is_dir()], os.path.relpath(source) + tail[source.is_dir()])
            for source, link in places.items()
        ),
        key=lambda pair: -len(pair[0]),
    )
    with subprocess.Popen([sys.executable, "-m", "mypy", *args], stdout=subprocess.PIPE, text=True) as mypy:
        assert mypy.stdout is not None
        for line in mypy.stdout:
            for prefix, replacement in prefixes:
                line = line.replace(prefix, replacement)
            sys.stdout.write(line)
    return mypy.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
