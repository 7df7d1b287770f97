"""What the e2e run deploys and how it tells that it is up: names, bounds, helm, examples, readiness.

Shared by conftest.py (which deploys) and test_e2e.py (which checks and
tears down); no fixtures here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.chart.helm import run_helm

from .kube import Kubectl, Pending, condition
from .target import DEFAULT_IMAGE, Target

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "kelp"
EXAMPLES = REPO / "examples"
CRDS = REPO / "crds"
RELEASE = "kelp"          # the chart's full name is then `kelp`; cluster-scoped objects `kelp-<namespace>`
CLUSTER = "demo"          # examples/cluster.yaml
BROKERS = 3

BUILD_TIMEOUT_S = 1800.0
LOAD_TIMEOUT_S = 600.0
HELM_TIMEOUT_S = 300
READY_TIMEOUT_S = 600.0
NAMESPACE_GONE_TIMEOUT_S = 420.0


def helm(target: Target, home: Path, *args: str, timeout: float = HELM_TIMEOUT_S + 60,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    """The venv's helm against the target cluster, confined to ``home`` (tests/chart/helm.py)."""
    context = ["--kube-context", target.context] if target.context else []
    return run_helm(*args, *context, home=home, kubeconfig=Path(target.kubeconfig), timeout=timeout, check=check)


def example_manifests(target: Target) -> str | None:
    """examples/ as one YAML stream when the run changes the Cluster; None to apply the directory as is.

    KELP_E2E_IMAGE other than kelp:0.1.0 becomes the Cluster's broker image;
    KELP_E2E_BROKER_CPU (e.g. 250m) lowers each broker's CPU request for a
    small machine (the example asks one core per broker).
    """
    cpu = os.environ.get("KELP_E2E_BROKER_CPU", "").strip()
    if target.image == DEFAULT_IMAGE and not cpu:
        return None
    docs: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            if doc.get("kind") == "Cluster":
                doc["spec"]["image"] = target.image
                if cpu:
                    doc["spec"].setdefault("resources", {}).setdefault("requests", {})["cpu"] = cpu
            docs.append(doc)
    return yaml.safe_dump_all(docs, sort_keys=False)


def cluster_ready(kube: Kubectl) -> dict[str, Any] | Pending:
    """The Cluster when Ready=True with every broker ready and a controller; else what it shows."""
    obj = kube.get("cluster", CLUSTER)
    status = (obj or {}).get("status") or {}
    ready = condition(obj, "Ready")
    if ready.get("status") == "True" and status.get("brokers") == BROKERS and status.get("controller", -1) >= 0:
        return obj  # type: ignore[return-value]
    return Pending(f"Ready={ready.get('status')} ({ready.get('reason')}: {ready.get('message')}), "
                   f"brokers={status.get('brokers')}, controller={status.get('controller')}")
