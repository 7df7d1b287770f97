"""Fixtures of the e2e suite: the target cluster, the image, one namespace per run, the operator
installed by helm, and the example resources applied and Ready.

Why: an end-to-end run is one long story on a real cluster (kind, or any
reachable kubeconfig, see target.py); the fixtures are session-scoped so each
step happens once, in order, and everything the run created goes with its
namespace at the end (KELP_E2E_KEEP=1 keeps it for a post-mortem).

Where there is no cluster, test_e2e.py skips itself at import with one line
(the reason from target.py), these fixtures are never reached, and the run
exits 0 (`pytest_sessionfinish` below); KELP_E2E_REQUIRE=1 makes it an error.

What it must never do: wait without a deadline, leave the namespace behind
(unless asked), or read or write the user's helm configuration (helm runs
through tests/chart/helm.py, confined to a temporary HOME).
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .deploy import (
    BROKERS,
    BUILD_TIMEOUT_S,
    CHART,
    CLUSTER,
    CRDS,
    EXAMPLES,
    HELM_TIMEOUT_S,
    LOAD_TIMEOUT_S,
    NAMESPACE_GONE_TIMEOUT_S,
    READY_TIMEOUT_S,
    RELEASE,
    REPO,
    cluster_ready,
    example_manifests,
    helm,
)
from .kube import Kubectl, KubectlError
from .target import Target, find_target, flag, require_target


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed e2e test's report ends with the namespace's state (pods, resources, events, operator log)."""
    outcome = yield
    rep = outcome.get_result()
    kube = getattr(item, "funcargs", {}).get("kube")
    if rep.when == "call" and rep.failed and isinstance(kube, Kubectl) and "diagnostics of namespace" not in str(
            rep.longrepr):
        try:
            rep.sections.append(("kelp e2e diagnostics", kube.diagnostics()))
        except Exception as exc:  # a report must never fail because the cluster went away
            rep.sections.append(("kelp e2e diagnostics", f"unavailable: {exc!r}"))


def _run_tool(cmd: list[str], *, timeout: float, cwd: Path | None = None) -> None:
    print(f"e2e: {' '.join(cmd)}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(cmd)}` did not finish within {timeout:.0f}s", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}",
                    pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run that skipped the suite for want of a cluster succeeded (pytest would say "no tests ran": 5)."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and isinstance(find_target(), str) \
            and not flag("KELP_E2E_REQUIRE"):
        session.exitstatus = pytest.ExitCode.OK


@pytest.fixture(scope="session")
def target() -> Target:
    """The cluster under test (test_e2e.py has skipped already when there is none)."""
    return require_target()


@pytest.fixture(scope="session")
def image(target: Target) -> str:
    """The image the operator and brokers run; on kind, built from this checkout and loaded first."""
    if target.build_image:
        _run_tool(["docker", "build", "-t", target.image, "."], cwd=REPO, timeout=BUILD_TIMEOUT_S)
        _run_tool(["kind", "load", "docker-image", target.image, "--name", str(target.kind_cluster)],
                  timeout=LOAD_TIMEOUT_S)
    return target.image


@pytest.fixture(scope="session")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture(scope="session")
def namespace(target: Target, helm_home: Path) -> Any:
    """A fresh namespace for this run; at the end, the release and the namespace are removed (bounded)."""
    name = f"kelp-e2e-{secrets.token_hex(3)}"
    kube = Kubectl(target, name)
    kube.run("create", "namespace", name, namespaced=False)
    kube.run("label", "namespace", name, "kelp.dev/e2e=true", namespaced=False)
    yield name
    if flag("KELP_E2E_KEEP"):
        print(f"e2e: KELP_E2E_KEEP is set: namespace {name} and release {RELEASE} are left in place",
              file=sys.stderr)
        return
    try:
        if kube.get("namespace", name, namespaced=False) is None:
            return
        helm(target, helm_home, "uninstall", RELEASE, "--namespace", name, "--wait", "--timeout",
             f"{HELM_TIMEOUT_S}s", check=False)
        kube.run("delete", "namespace", name, "--wait=false", "--ignore-not-found", namespaced=False, check=False)
        deadline = time.monotonic() + NAMESPACE_GONE_TIMEOUT_S
        while kube.get("namespace", name, namespaced=False) is not None:
            if time.monotonic() >= deadline:
                print(f"e2e: namespace {name} still exists {NAMESPACE_GONE_TIMEOUT_S:.0f}s after its deletion",
                      file=sys.stderr)
                return
            time.sleep(5)
    except (KubectlError, subprocess.TimeoutExpired, AssertionError) as exc:
        print(f"e2e: cleaning up namespace {name} failed: {exc}", file=sys.stderr)


@pytest.fixture(scope="session")
def kube(target: Target, namespace: str) -> Kubectl:
    return Kubectl(target, namespace)


@pytest.fixture(scope="session")
def operator_release(target: Target, image: str, helm_home: Path, namespace: str) -> str:
    """The chart installed into the run's namespace, watching only that namespace; the release name.

    helm installs the chart's CRDs only where they are missing and never
    upgrades them; CRDs left by an earlier run or release are brought to this
    checkout's crds/ first (server-side apply, as docs/operator.md says).
    """
    probe = Kubectl(target, namespace)
    if probe.get("customresourcedefinition", "clusters.kelp.dev", namespaced=False) is not None:
        probe.run("apply", "--server-side", "--force-conflicts", "-f", str(CRDS), namespaced=False)
    helm(target, helm_home, "install", RELEASE, str(CHART), "--namespace", namespace,
         "--set", f"watchNamespaces={{{namespace}}}",
         "--set", f"image.repository={target.image_repository}", "--set", f"image.tag={target.image_tag}",
         "--wait", "--timeout", f"{HELM_TIMEOUT_S}s")
    return RELEASE


@pytest.fixture(scope="session")
def demo(kube: Kubectl, target: Target, operator_release: str) -> dict[str, Any]:
    """examples/ applied in the run's namespace, and the Cluster `demo` Ready (its object)."""
    rendered = example_manifests(target)
    if rendered is None:
        kube.run("apply", "-f", str(EXAMPLES))
    else:
        kube.apply(rendered)
    return kube.wait_until(f"Cluster {CLUSTER} Ready with {BROKERS} brokers", lambda: cluster_ready(kube),
                           timeout=READY_TIMEOUT_S, interval=5.0)
