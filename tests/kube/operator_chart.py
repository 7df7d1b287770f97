"""The operator as the chart installs it, on the kube tier's real node: `helm install` of charts/kelp.

Why this exists: the churn suite's operator must be the product a user
installs — the chart's Deployment (two replicas by default), its RBAC, the
image's `kelp operator` with in-cluster credentials, the election Lease
`kelp-operator` — so that killing "the operator pod" is killing a container
the kubelet runs, and "a stand-by taking over" is the other pod of that
Deployment. `ChartOperators` installs the release, says which pod is active
(the Lease's holder, whose own health endpoint answers `role: active`; the
chart's holder identity is `<pod name>-<6 hex>`, new for every process, so a
container the kubelet restarted is told apart from its killed predecessor), finds
the containerd id of a pod's operator container for `KubeNode.kill_container`,
and removes the release (including its cluster-scoped RBAC) on every path.

Network rule: as for the brokers, the host reaches the operator pods only by
pod IP on the node's bridge (their health endpoint); pods reach the API
server through api_forwarder.

What it must never do: wait without a bound, or call a pod active on the
Lease alone (an expired Lease still names a dead holder).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.chart.helm import helm_binary, run_helm
from tests.kube.kube_waits import wait_for

__all__ = ["ChartOperators", "OperatorPod", "CHART", "RELEASE", "LEASE"]

CHART = Path(__file__).resolve().parents[2] / "charts" / "kelp"
RELEASE = "kelp"
LEASE = "kelp-operator"  # operator/run.py's LEASE_NAME
CONTAINER = "operator"
SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"
HEALTH_PORT = 8081  # the chart's healthPort


@dataclass(frozen=True)
class OperatorPod:
    """One operator pod as last observed: its operator container's id and restarts."""

    name: str
    uid: str
    ip: str
    container_id: str
    restarts: int

    def health(self) -> dict | None:
        """The replica's own /healthz ({"status": ..., "role": "active"|"standby"}), None if it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{self.ip}:{HEALTH_PORT}/healthz", timeout=2) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # 503: kopf stopped
            try:
                return json.loads(exc.read())
            except ValueError:
                return None
        except (urllib.error.URLError, OSError, ValueError):
            return None


class ChartOperators:
    """The chart's operator release `kelp` in one namespace, watching that namespace only."""

    def __init__(self, *, kube_api, kubeconfig: Path, namespace: str, home: Path, values: dict[str, str]) -> None:
        from kubernetes import client

        self.core, self.apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
        self.coord = client.CoordinationV1Api(kube_api)
        self.kubeconfig, self.ns, self.home, self.values = kubeconfig, namespace, home, values
        self.installed = False

    def _helm(self, *args: str, check: bool = True):
        return run_helm(*args, "--namespace", self.ns, "--kubeconfig", str(self.kubeconfig), home=self.home,
                        kubeconfig=self.kubeconfig, timeout=180, check=check)

    def install(self) -> None:
        if helm_binary() is None:
            raise AssertionError("helm not installed (test extra helm-binary): the churn stage installs the "
                                 "operator with the chart")
        sets = [f"watchNamespaces={{{self.ns}}}", *(f"{k}={v}" for k, v in self.values.items())]
        self.installed = True  # a half-done install is uninstalled too
        self._helm("install", RELEASE, str(CHART), *[a for s in sets for a in ("--set", s)])

    def uninstall(self) -> str:
        """`helm uninstall` (also the ClusterRole and its binding, which the namespace's deletion would leave)."""
        if not self.installed:
            return ""
        self.installed = False
        proc = self._helm("uninstall", RELEASE, check=False)
        return "" if proc.returncode == 0 else f"helm uninstall exited {proc.returncode}: {proc.stderr.strip()}"

    def replicas(self) -> int:
        return self.apps.read_namespaced_deployment(RELEASE, self.ns).spec.replicas

    def pods(self) -> dict[str, Any]:
        return {p.metadata.name: p for p in self.core.list_namespaced_pod(self.ns, label_selector=SELECTOR).items}

    def running(self) -> dict[str, OperatorPod]:
        """Pods whose operator container is running now (not being deleted), by name."""
        out = {}
        for name, p in self.pods().items():
            if p.metadata.deletion_timestamp is not None or not p.status.pod_ip:
                continue
            for s in p.status.container_statuses or []:
                if s.name == CONTAINER and s.container_id and s.state and s.state.running:
                    out[name] = OperatorPod(name=name, uid=p.metadata.uid, ip=p.status.pod_ip,
                                            container_id=s.container_id, restarts=s.restart_count)
        return out

    def restarted(self, name: str, *, uid: str, restarts: int) -> OperatorPod | None:
        """Pod `name` (the same pod, `uid`) running its operator container again after the kubelet restarted it
        (more than `restarts` restarts), or None."""
        pod = self.running().get(name)
        return pod if pod is not None and pod.uid == uid and pod.restarts > restarts else None

    def lease(self) -> tuple[str | None, int]:
        """(holder identity, leaseTransitions) of the election Lease; (None, 0) before it exists."""
        from kubernetes import client

        try:
            spec = self.coord.read_namespaced_lease(LEASE, self.ns).spec
        except client.ApiException as exc:
            if exc.status == 404:
                return None, 0
            raise
        return spec.holder_identity, spec.lease_transitions or 0

    @staticmethod
    def pod_of(holder: str | None, names) -> str | None:
        """Which of the pods `names` a Lease holder identity belongs to: `<pod>-<6 hex>` (a process of that pod,
        the chart's identity) or exactly `<pod>` (POD_NAME set)."""
        for name in names:
            if holder == name or re.fullmatch(re.escape(name) + r"-[0-9a-f]{6}", holder or ""):
                return name
        return None

    def active_now(self) -> OperatorPod | None:
        """The running pod that holds the Lease and says it is active, or None."""
        holder, _ = self.lease()
        running = self.running()
        pod = running.get(self.pod_of(holder, running) or "")
        if pod is not None and (pod.health() or {}).get("role") == "active":
            return pod
        return None

    def active(self, *, timeout: float) -> OperatorPod:
        return wait_for(self.active_now, timeout=timeout, interval=0.25,
                        what=f"an operator pod holding the Lease {self.ns}/{LEASE} and active")

    def ready(self) -> str | None:
        """Why the release is not at full strength (every replica running, one active, the others standing
        by), or None."""
        want = self.replicas()
        running = self.running()
        if len(running) != want:
            return f"{len(running)} of {want} operator pods running: {sorted(running)} ({self.describe()})"
        roles = {name: (pod.health() or {}).get("role") for name, pod in running.items()}
        holder, _ = self.lease()
        want_roles = ["active"] + ["standby"] * (want - 1)
        if roles.get(self.pod_of(holder, running) or "") != "active" or sorted(map(str, roles.values())) != want_roles:
            return f"Lease holder {holder}, roles {roles}"
        return None

    def wait_ready(self, *, timeout: float) -> OperatorPod:
        last: list[str | None] = [None]

        def probe() -> bool:
            last[0] = self.ready()
            return last[0] is None
        try:
            wait_for(probe, timeout=timeout, interval=0.5, what="the operator release at full strength")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {last[0]}") from None
        return self.active(timeout=5)

    def describe(self) -> str:
        """Each operator pod's phase, container state and restarts, and the Lease, for a failure's message."""
        lines = []
        try:
            for name, p in sorted(self.pods().items()):
                for s in p.status.container_statuses or []:
                    state = s.state
                    what = ("running" if state and state.running else
                            f"waiting {state.waiting.reason}" if state and state.waiting else
                            f"terminated {state.terminated.reason} ({state.terminated.exit_code})"
                            if state and state.terminated else "?")
                    lines.append(f"{name} {p.status.phase} ip={p.status.pod_ip} {s.name}: {what}, "
                                 f"restarts {s.restart_count}{' deleting' if p.metadata.deletion_timestamp else ''}")
            holder, transitions = self.lease()
            lines.append(f"Lease {LEASE}: holder {holder}, transitions {transitions}")
        except Exception as exc:  # diagnosis only: say what broke it
            lines.append(f"(operator pods not readable: {exc})")
        return "; ".join(lines)

