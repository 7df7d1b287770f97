"""scripts/bootstrap-debian.sh: `make run` installs only what a broker needs, `make test` the test tiers' packages.

The script runs against stub commands (nothing installed, root, an apt-get that records its arguments),
so the test sees exactly which Debian packages each tier would install, without installing any.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bootstrap-debian.sh"
BASH = "/bin/bash"


def _stubs(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "apt.log"
    scripts = {
        "python3": "exit 1",  # no venv module: python3-venv is needed
        "dpkg": "exit 1",  # no package installed
        "id": "echo 0",  # root: no sudo
        "apt-get": f'echo "$@" >> {record}',
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!{BASH}\n{body}\n")
        path.chmod(0o755)
    return bin_dir


def _installed(tmp_path: Path, *args: str) -> list[str]:
    bin_dir = _stubs(tmp_path)
    proc = subprocess.run([BASH, str(SCRIPT), *args], env={"PATH": str(bin_dir)}, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = (tmp_path / "apt.log").read_text().splitlines()
    install = [line for line in lines if line.split()[:1] == ["install"]]
    assert len(install) == 1, lines
    return [w for w in install[0].split() if not w.startswith("-") and w != "install"]


@pytest.mark.skipif(not os.path.exists(BASH), reason="needs bash")
def test_run_tier_installs_only_what_a_broker_needs(tmp_path: Path) -> None:
    assert _installed(tmp_path, "run") == ["python3-venv"]


@pytest.mark.skipif(not os.path.exists(BASH), reason="needs bash")
def test_test_tier_installs_the_test_packages(tmp_path: Path) -> None:
    packages = _installed(tmp_path, "test")
    for wanted in ("python3-venv", "kcat", "containerd", "runc", "openjdk-17-jre-headless", "maven"):
        assert wanted in packages
    default = tmp_path / "default"
    default.mkdir()
    assert _installed(default) == packages  # no argument: the full (test) tier, as before


def test_make_run_uses_the_run_tier_and_make_test_the_test_tier() -> None:
    dry = {}
    for target in ("run", "test"):
        proc = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        dry[target] = proc.stdout
    assert "bootstrap-debian.sh run" in dry["run"] and "bootstrap-debian.sh test" not in dry["run"]
    assert "bootstrap-debian.sh test" in dry["test"]
