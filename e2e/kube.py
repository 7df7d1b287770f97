"""kubectl for the e2e suite: bounded calls, bounded waits, client pods, and diagnostics.

Why this exists: every step of an end-to-end run talks to a real cluster
that can be slow or broken; each call here has a subprocess timeout and a
server-side `--request-timeout`, every wait has a deadline, and a wait that
runs out says what it last saw plus the namespace's state (pods, Kelp
resources, events, operator log) so a failure can be read without the
cluster.

Kafka clients run inside the cluster (`run_client_pod`): brokers advertise
per-pod DNS names (`<pod>.<cluster>-brokers.<ns>.svc`) that only resolve
there. A client pod runs one of `e2e/pod_scripts` with the Kelp image's
Python and kafka-python.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .pod_scripts import parse_result, script
from .target import Target

T = TypeVar("T")

REQUEST_TIMEOUT = "30s"
CLIENT_UID = 10001  # the image's user


class KubectlError(AssertionError):
    pass


class Kubectl:
    def __init__(self, target: Target, namespace: str):
        self.target = target
        self.namespace = namespace
        self.env = {**os.environ, "KUBECONFIG": target.kubeconfig}

    # -- calls --------------------------------------------------------------------
    def run(self, *args: str, timeout: float = 60.0, check: bool = True, stdin: str | None = None,
            namespaced: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [self.target.kubectl, f"--request-timeout={REQUEST_TIMEOUT}"]
        if self.target.context:
            cmd += ["--context", self.target.context]
        if namespaced:
            cmd += ["--namespace", self.namespace]
        cmd += list(args)
        try:
            proc = subprocess.run(cmd, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout, env=self.env)
        except subprocess.TimeoutExpired as exc:
            raise KubectlError(f"`{' '.join(cmd)}` did not finish within {timeout:.0f}s") from exc
        if check and proc.returncode != 0:
            raise KubectlError(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stderr}\n{proc.stdout}")
        return proc

    def get(self, kind: str, name: str, *, namespaced: bool = True) -> dict[str, Any] | None:
        """The object as a dict, or None when it does not exist."""
        out = self.run("get", kind, name, "-o", "json", "--ignore-not-found", namespaced=namespaced).stdout
        return json.loads(out) if out.strip() else None

    def items(self, kind: str, *selector: str) -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json"] + (["-l", ",".join(selector)] if selector else [])
        return json.loads(self.run(*args).stdout).get("items", [])

    def apply(self, manifest: dict[str, Any] | str, *, timeout: float = 60.0) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        self.run("apply", "-f", "-", stdin=text, timeout=timeout)

    def logs(self, pod: str, *, tail: int | None = None, timeout: float = 60.0) -> str:
        args = ["logs", pod] + ([f"--tail={tail}"] if tail is not None else [])
        proc = self.run(*args, timeout=timeout, check=False)
        return proc.stdout if proc.returncode == 0 else ""

    # -- waits --------------------------------------------------------------------
    def wait_until(self, what: str, probe: Callable[[], T | None], *, timeout: float,
                   interval: float = 3.0) -> T:
        """Call ``probe`` until it returns something truthy (returned) or ``timeout`` passes (fails).

        A probe may return a ``Pending(detail)`` to say what it saw; a probe that raises is retried
        (the cluster may be mid-change) and its error becomes the detail.
        """
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                value = probe()
            except (KubectlError, KeyError, TypeError, ValueError) as exc:
                value, last = None, f"{type(exc).__name__}: {exc}"
            if isinstance(value, Pending):
                value, last = None, value.detail
            if value:
                return value
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what}: not within {timeout:.0f}s; last seen: {last}\n\n{self.diagnostics()}")
            time.sleep(interval)

    # -- client pods --------------------------------------------------------------
    def start_client_pod(self, name: str, script_name: str, *args: str) -> None:
        """Start pod ``name`` running ``e2e/pod_scripts/<script_name>.py args...`` once (restartPolicy Never)."""
        self.run("delete", "pod", name, "--ignore-not-found", "--wait=true", timeout=120)
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "kelp-e2e-client"}},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 5,
                "securityContext": {"runAsNonRoot": True, "runAsUser": CLIENT_UID, "runAsGroup": CLIENT_UID,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "client",
                    "image": self.target.image,
                    "imagePullPolicy": "IfNotPresent",
                    # `command` replaces the image's ENTRYPOINT (tini -- kelp); python is the image's venv.
                    "command": ["python", "-c", script(script_name)],
                    "args": list(args),
                    "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                }],
            },
        }
        self.run("create", "-f", "-", stdin=json.dumps(pod))

    def client_pod_result(self, name: str, *, timeout: float) -> dict[str, Any]:
        """Wait for client pod ``name`` to end; its result JSON, or fail with its log."""
        def ended() -> str | Pending:
            pod = self.get("pod", name)
            phase = ((pod or {}).get("status") or {}).get("phase")
            return phase if phase in ("Succeeded", "Failed") else Pending(f"pod {name} phase {phase}")

        phase = self.wait_until(f"client pod {name} to finish", ended, timeout=timeout, interval=2.0)
        log = self.logs(name)
        result = parse_result(log)
        if phase != "Succeeded" or result is None:
            raise AssertionError(f"client pod {name} ended {phase} without a result; its log:\n{log[-4000:]}")
        return result

    def run_client_pod(self, name: str, script_name: str, *args: str, timeout: float) -> dict[str, Any]:
        self.start_client_pod(name, script_name, *args)
        return self.client_pod_result(name, timeout=timeout)

    # -- what a failure report shows ----------------------------------------------
    def diagnostics(self) -> str:
        sections = [
            ("Kelp resources, workloads, pods, claims", ["get", "kelp,statefulsets,deployments,pods,pvc,leases",
                                                         "-o", "wide"]),
            ("events (newest last)", ["get", "events", "--sort-by=.lastTimestamp"]),
            ("operator log (tail)", ["logs", "-l", "app.kubernetes.io/component=operator", "--tail=60",
                                     "--prefix", "--all-containers"]),
        ]
        out = [f"--- diagnostics of namespace {self.namespace} ---"]
        for title, args in sections:
            try:
                proc = self.run(*args, timeout=30, check=False)
                text = (proc.stdout + proc.stderr).strip()
            except KubectlError as exc:
                text = str(exc)
            lines = text.splitlines()
            out.append(f"# {title}\n" + "\n".join(lines[-60:]))
        return "\n\n".join(out)


class Pending:
    """A probe's "not yet", with what it saw."""

    def __init__(self, detail: str):
        self.detail = detail

    def __bool__(self) -> bool:
        return False


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    """The status condition ``type_`` of ``obj`` ({} when absent)."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return {}
