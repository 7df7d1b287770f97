"""Child processes of the kube tier: each in its own process group, logging to a file.

Why this exists: the control-plane fixture and the node fixture start many
long-running programs; both need the same start/stop/log-tail behaviour and
free-port helper. It must never leave a process running after ``stop`` or pick
a fixed port.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


@dataclass
class Component:
    """One child process (etcd, an API-server component, containerd, kubelet) in its own process group."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def start_component(name: str, argv: list[str], tmp: Path) -> Component:
    log = tmp / f"{name}.log"
    fh = open(log, "wb")
    try:
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=tmp,
        )
    finally:
        fh.close()
    (tmp / f"{name}.cmd").write_text(shlex.join(argv) + "\n")
    return Component(name=name, proc=proc, log=log)
