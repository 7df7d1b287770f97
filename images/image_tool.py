"""Small, pure-stdlib helpers for `images/build-image.sh`, where bash would be fragile.

Why this exists: the image build needs three things that are JSON or TOML
work — pinning every runtime dependency (direct and transitive) from
`pyproject.toml` into `images/requirements.txt`, refusing to build from a
lock that no longer matches `pyproject.toml`, and naming the image inside
an OCI layout so that `ctr images import` registers it under its full
reference. The Dockerfile and the no-Docker build both install from the same
lock, so both images carry the same dependency versions.

What it must never do: import anything outside the standard library (it runs
with the host's plain `python3` before any venv exists), touch the network
except through `pip` in `lock`, or write anywhere but the paths it is given.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

LOCK_HEADER = """\
# Every runtime dependency of Kelp, pinned: direct ones from pyproject.toml, transitive
# ones as resolved for CPython 3.11 on Linux. Both images install exactly this list
# (the Dockerfile and images/build-image.sh), with --no-deps and binary wheels only.
# Regenerate after changing [project.dependencies]: images/build-image.sh --lock
"""

_NAME_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;#]+)")


def canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project(pyproject: Path) -> dict:
    return tomllib.loads(pyproject.read_text())["project"]


def direct_pins(pyproject: Path) -> dict[str, str]:
    """{canonical name: version} of `[project.dependencies]`; every one must be pinned with ==."""
    pins: dict[str, str] = {}
    for spec in project(pyproject).get("dependencies", []):
        match = _NAME_RE.match(spec)
        if not match:
            raise SystemExit(f"image_tool: dependency {spec!r} in {pyproject} is not pinned with '=='; "
                             "the images install pinned versions only")
        pins[canonical(match.group(1))] = match.group(2)
    return pins


def read_lock(lock: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _NAME_RE.match(line)
        if not match:
            raise SystemExit(f"image_tool: line {line!r} of {lock} is not 'name==version'")
        pins[canonical(match.group(1))] = match.group(2)
    return pins


def lock_problems(pyproject: Path, lock: Path) -> list[str]:
    """Why `lock` does not match `pyproject`'s direct pins; empty when it does."""
    if not lock.exists():
        return [f"{lock} does not exist"]
    locked = read_lock(lock)
    problems = []
    for name, version in sorted(direct_pins(pyproject).items()):
        if name not in locked:
            problems.append(f"{name}=={version} is in {pyproject.name} but not in {lock.name}")
        elif locked[name] != version:
            problems.append(f"{pyproject.name} pins {name}=={version}, {lock.name} has {name}=={locked[name]}")
    return problems


def render_lock(report: dict) -> str:
    """The lock file's text from a `pip install --dry-run --report` JSON report."""
    items = sorted(report["install"], key=lambda item: canonical(item["metadata"]["name"]))
    return LOCK_HEADER + "".join(f"{item['metadata']['name']}=={item['metadata']['version']}\n"
                                 for item in items)


def cmd_lock(args: argparse.Namespace) -> int:
    # Resolved by the given interpreter for its own platform: run it with a CPython 3.11 on
    # glibc Linux x86_64, like both images (Debian bookworm, python:3.11-slim-bookworm).
    specs = [f"{name}=={version}" for name, version in direct_pins(args.pyproject).items()]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [args.python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--only-binary=:all:", "--report", str(report), *specs]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"image_tool: resolving {len(specs)} pinned dependencies failed:\n{proc.stderr.strip()}",
                  file=sys.stderr)
            return 1
        text = render_lock(json.loads(report.read_text()))
    args.lock.write_text(text)
    print(f"image_tool: wrote {args.lock} ({len(text.splitlines()) - LOCK_HEADER.count(chr(10))} pins)")
    return 0


def cmd_check_lock(args: argparse.Namespace) -> int:
    problems = lock_problems(args.pyproject, args.lock)
    if problems:
        print(f"image_tool: {args.lock} is stale: " + "; ".join(problems)
              + ". Run images/build-image.sh --lock and commit the result.", file=sys.stderr)
        return 1
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    print(project(args.pyproject)["version"])
    return 0


def name_image(index: dict, ref: str) -> dict:
    """Give the layout's single manifest the full reference `ref`, for OCI tools and containerd."""
    manifests = index.get("manifests", [])
    if len(manifests) != 1:
        raise SystemExit(f"image_tool: expected one manifest in the OCI index, found {len(manifests)}")
    annotations = dict(manifests[0].get("annotations") or {})
    annotations["org.opencontainers.image.ref.name"] = ref
    annotations["io.containerd.image.name"] = ref
    return {**index, "manifests": [{**manifests[0], "annotations": annotations}]}


def cmd_name(args: argparse.Namespace) -> int:
    path = args.layout / "index.json"
    path.write_text(json.dumps(name_image(json.loads(path.read_text()), args.ref)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="image_tool.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lock = sub.add_parser("lock", help="pin every runtime dependency into the lock file")
    lock.add_argument("--python", default=sys.executable, help="interpreter whose pip resolves")
    check = sub.add_parser("check-lock", help="exit 1 naming the mismatch when the lock is stale")
    version = sub.add_parser("version", help="print the project version")
    for p in (lock, check, version):
        p.add_argument("--pyproject", type=Path, required=True)
    for p in (lock, check):
        p.add_argument("--lock", type=Path, required=True)
    name = sub.add_parser("name", help="set the image reference in an OCI layout's index.json")
    name.add_argument("--layout", type=Path, required=True)
    name.add_argument("--ref", required=True)
    args = parser.parse_args(argv)
    handlers = {"lock": cmd_lock, "check-lock": cmd_check_lock, "version": cmd_version, "name": cmd_name}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
