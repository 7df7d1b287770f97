"""Run `consumer_proc.py` as child processes and watch their JSON lines.

Why: the group tests need consumers that can be SIGKILLed like a crashed
application; each child's stdout is collected by a thread and the test waits
on conditions over what they reported (bounded, never a bare sleep).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

SCRIPT = Path(__file__).with_name("consumer_proc.py")
REPO = Path(__file__).resolve().parents[2]


class ConsumerProc:
    def __init__(self, *, client: str, bootstrap: str, group: str, topic: str, session_ms: int = 3000,
                 instance_id: str | None = None, reset: str = "earliest", commit: bool = True,
                 idle_exit: float = 0.0, group_protocol: str = "classic") -> None:
        cmd = [sys.executable, str(SCRIPT), "--client", client, "--bootstrap", bootstrap, "--group", group,
               "--topic", topic, "--session-ms", str(session_ms), "--reset", reset]
        if instance_id:
            cmd += ["--instance-id", instance_id]
        if commit:
            cmd.append("--commit")
        if idle_exit:
            cmd += ["--idle-exit", str(idle_exit)]
        if group_protocol != "classic":
            cmd += ["--group-protocol", group_protocol]
        self.name = f"{client}:{instance_id or group}"
        self.lines: list[dict] = []
        self.stderr: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(cmd, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self.lines.append(obj)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    # -- views ----------------------------------------------------------
    @property
    def assignment(self) -> list[int]:
        with self._cond:
            for obj in reversed(self.lines):
                if obj["event"] == "assigned":
                    return obj["partitions"]
        return []

    def records(self) -> list[tuple[int, int, str]]:
        with self._cond:
            return [tuple(i) for obj in self.lines if obj["event"] == "records" for i in obj["items"]]

    def errors(self) -> list[str]:
        with self._cond:
            return [obj["error"] for obj in self.lines if obj["event"] == "error"]

    def wait(self, predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.name}: timed out after {timeout}s waiting for {what}; "
                                         f"last lines {self.lines[-5:]}; stderr {''.join(self.stderr)[-2000:]}")
                self._cond.wait(min(left, 0.2))

    # -- lifecycle ------------------------------------------------------
    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_all(procs: list[ConsumerProc], predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            state = {p.name: (p.assignment, len(p.records()), p.proc.poll(), p.errors()[-2:]) for p in procs}
            raise AssertionError(f"timed out after {timeout}s waiting for {what}: {state}")
        for p in procs:
            with p._cond:
                p._cond.wait(0.05)
