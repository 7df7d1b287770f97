"""`kelp operator` as a process against the kube tier's API server, for the operator's tests.

Why this exists: the operator must be proved as users run it — the console
script, a kubeconfig, the Lease election, kopf's real watches — not as
handler functions called by a test. The process logs to a file shown when a
test fails, and always stops (SIGTERM, then SIGKILL after a bound).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.kube.kube_waits import wait_for
from tests.kube.processes import free_port


class OperatorProcess:
    def __init__(self, *, kubeconfig: Path, namespace: str, log: Path, env: dict[str, str] | None = None,
                 lease_duration_s: float = 6.0) -> None:
        self.health_port = free_port()
        self.log = log
        argv = [sys.executable, "-m", "kelp.cli.main", "operator", "--namespace", namespace,
                "--lease-namespace", namespace, "--lease-duration", str(lease_duration_s),
                "--liveness", f"http://127.0.0.1:{self.health_port}/healthz"]
        full_env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONSAFEPATH": "1",
                    "KELP_OPERATOR_RESYNC_SECONDS": "2", "KELP_LOG_LEVEL": "INFO", **(env or {})}
        self._out = open(log, "ab")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, env=full_env,
                                     start_new_session=True)

    def health(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def wait_active(self, timeout: float = 60) -> None:
        def active():
            if self.proc.poll() is not None:
                raise AssertionError(f"kelp operator exited {self.proc.returncode}:\n{self.tail()}")
            h = self.health()
            return h is not None and h.get("role") == "active"
        wait_for(active, timeout=timeout, what="kelp operator active (holding its Lease)", interval=0.25)

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._out.close()
        return self.proc.returncode
