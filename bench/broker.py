"""Start a broker (`python -m kelp.broker`) for a benchmark and stop it afterwards.

Why: the broker must run in its own process, as in production, so client
and broker do not share one interpreter. With `profile_to`, the broker runs
under cProfile and writes its stats there on SIGTERM.

It must never leave the broker process running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Mapping

__all__ = ["BenchBroker"]


class BenchBroker:
    def __init__(self, log_dir: Path, *, profile_to: Path | None = None,
                 settings: Mapping[str, object] | None = None, broker_id: int = 0) -> None:
        self.log_dir = log_dir
        self.broker_id = broker_id
        self.profile_to = profile_to
        self.settings = dict(settings or {})
        self.proc: subprocess.Popen[str] | None = None
        self.bootstrap = ""
        self.http_url = ""
        self.listeners: dict[str, str] = {}  # listener name -> address, from the ready line
        self.ready: dict[str, Any] = {}  # the ready line itself (its `event_loop`: which loop the broker runs)
        self.ports = (0, 0)  # (Kafka, HTTP) to listen on: 0 picks free ones; `restart` keeps the first start's
        self._stderr: list[str] = []

    def start(self, *, timeout_s: float = 30.0) -> "BenchBroker":
        cmd = [sys.executable]
        if self.profile_to is not None:
            cmd += ["-m", "cProfile", "-o", str(self.profile_to)]
        cmd += ["-m", "kelp.broker", "--log-dirs", str(self.log_dir), "--port", str(self.ports[0]),
                "--http-port", str(self.ports[1]),
                "--broker-id", str(self.broker_id), "--log-level", "WARNING"]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._drain, daemon=True).start()
        ready = threading.Event()
        info: dict[str, Any] = {}  # the broker's "listening" event, JSON

        def read_ready() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.startswith("{"):
                    doc = json.loads(line)
                    if doc.get("event") == "listening":
                        info.update(doc)
                        ready.set()

        threading.Thread(target=read_ready, daemon=True).start()
        if not ready.wait(timeout_s):
            self.stop()
            raise RuntimeError("broker did not start:\n" + "".join(self._stderr[-30:]))
        self.ready = info
        self.bootstrap = info["kafka"]
        self.listeners = dict(info.get("listeners") or {"PLAINTEXT": self.bootstrap})
        self.http_url = "http://" + info["http"]
        return self

    def cpu_seconds(self) -> float:
        """User + system CPU time the broker process has used so far (Linux /proc)."""
        assert self.proc is not None
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def stderr_lines(self) -> list[str]:
        """What the broker has written to stderr so far (WARNING and above)."""
        return list(self._stderr)

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def kill(self) -> None:
        """SIGKILL (failover figures): no controlled shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, *, timeout_s: float = 120.0) -> "BenchBroker":
        """Start a killed or stopped broker again on its storage and the ports it listened on (its clients'
        bootstrap list stays good); RuntimeError if it is still running or does not come up within `timeout_s`
        (longer than a first start's: it recovers its logs first, on a machine the rest of the run keeps busy)."""
        if self.proc is None or self.proc.poll() is None:
            raise RuntimeError(f"broker {self.broker_id} is not stopped")
        self.ports = (int(self.bootstrap.rsplit(":", 1)[1]), int(self.http_url.rsplit(":", 1)[1]))
        self._stderr.clear()
        return self.start(timeout_s=timeout_s)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60 if self.profile_to is not None else 20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> "BenchBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
