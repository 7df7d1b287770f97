"""Every source directory of the distribution is a regular package, so the installed image carries it.

Why: the editable install the tests run on resolves a directory without `__init__.py` as a namespace package,
but `setup.py`'s `find_packages` leaves it out of the built distribution — the broker image then has no
`kelp.broker.groups.share.schemas` and every broker pod crash-looped on its first share-group record load
(`ModuleNotFoundError`), which only the kube tier saw. This walks `kelp/`, `broker/` and `operator/` and
fails on a directory holding files but no `__init__.py`, and checks each such package is in the list
`setup.py` builds.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"kelp": "kelp", "kelp.broker": "broker", "kelp.operator": "operator"}


def _source_dirs() -> list[Path]:
    out = []
    for top in MAPPED.values():
        for d in sorted((ROOT / top).rglob("*")):
            if d.is_dir() and "__pycache__" not in d.parts and any(p.is_file() for p in d.iterdir()):
                out.append(d)
    return [ROOT / top for top in MAPPED.values()] + out


def test_every_source_directory_is_a_package() -> None:
    missing = [str(d.relative_to(ROOT)) for d in _source_dirs() if not (d / "__init__.py").is_file()]
    assert not missing, f"directories without __init__.py (left out of the built distribution): {missing}"


def test_setup_py_lists_every_package() -> None:
    listed = set(find_packages(str(ROOT), include=["kelp", "kelp.*"]))
    for name, directory in MAPPED.items():
        if name != "kelp":
            listed.add(name)
            listed.update(f"{name}.{sub}" for sub in find_packages(str(ROOT / directory)))
    wanted = set()
    for d in _source_dirs():
        top = d.relative_to(ROOT).parts[0]
        prefix = next(n for n, t in MAPPED.items() if t == top)
        rest = d.relative_to(ROOT / top).parts
        wanted.add(".".join((prefix, *rest)))
    assert wanted <= listed, f"not in setup.py's packages: {sorted(wanted - listed)}"
