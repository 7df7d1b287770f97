"""Kafka Connect 4.3.1 processes for the tests: a distributed worker and MirrorMaker 2's dedicated driver.

Why: Kafka Connect (a distributed worker: compacted config, offset and status topics, a consumer group of
workers, exactly-once source tasks) and MirrorMaker 2 are the ecosystem most Kafka users run besides
clients; "Kelp runs them" is believable only with the real jars (`kelp.kafka_connect`, fetched once into
~/.cache/kelp). `Worker` writes a worker's properties file, starts `ConnectDistributed` on a loopback REST
port, waits (bounded) for its REST API, talks to it and SIGKILLs it; `MirrorMakerProcess` runs
`MirrorMaker` on an `mm2.properties` file.

It must never sleep to synchronise: waits poll a condition with a deadline.
"""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from kelp import kafka_connect
from tests.transactions.system_support import wait_until

__all__ = ["Worker", "MirrorMakerProcess", "free_port", "write_properties"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_properties(path: Path, props: dict[str, object]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


class _Process:
    """A Connect JVM whose stdout and stderr go to a log file."""

    def __init__(self, command: list[str], log_path: Path) -> None:
        self.command = command
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, open transactions left for the next worker to fence."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Worker(_Process):
    """One distributed Connect worker (`ConnectDistributed worker.properties`) with a REST API on loopback."""

    def __init__(self, work_dir: Path, bootstrap: str, *, group: str, extra: dict[str, object] | None = None,
                 name: str = "worker") -> None:
        self.port = free_port()
        props: dict[str, object] = {
            "bootstrap.servers": bootstrap, "group.id": group,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{group}-configs", "offset.storage.topic": f"{group}-offsets",
            "status.storage.topic": f"{group}-status", "offset.storage.partitions": 3,
            "status.storage.partitions": 3,
            "listeners": f"http://127.0.0.1:{self.port}", "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": self.port, "plugin.discovery": "only_scan",
            # A restarted worker gets the tasks of its dead predecessor at once, not after 5 minutes.
            "scheduled.rebalance.max.delay.ms": 0, "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
            "offset.flush.interval.ms": 1000, **(extra or {}),
        }
        self.properties = write_properties(work_dir / f"{name}.properties", props)
        super().__init__(kafka_connect.java_command(kafka_connect.CONNECT_DISTRIBUTED, str(self.properties)),
                         work_dir / f"{name}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rest(self, path: str, method: str = "GET", body: Any = None, *, timeout: float = 30.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def ready(self) -> bool:
        """The REST API answers and the worker joined its group (GET /connectors works only then)."""
        try:
            self.rest("/connectors", timeout=5)
            return True
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_ready(self, timeout: float = 120.0) -> None:
        def up() -> bool:
            assert self.alive(), f"the Connect worker exited {self.proc and self.proc.poll()}:\n{self.log_tail()}"
            return self.ready()
        wait_until("the Connect worker's REST API", up, timeout=timeout, interval=0.25, detail=self.log_tail)

    def status(self, connector: str) -> dict[str, Any] | None:
        try:
            return self.rest(f"/connectors/{connector}/status", timeout=10)
        except (urllib.error.URLError, OSError, ValueError):
            return None


class MirrorMakerProcess(_Process):
    """MirrorMaker 2 in its dedicated mode (`MirrorMaker mm2.properties`)."""

    def __init__(self, work_dir: Path, props: dict[str, object]) -> None:
        self.properties = write_properties(work_dir / "mm2.properties", props)
        super().__init__(kafka_connect.java_command(kafka_connect.MIRROR_MAKER, str(self.properties)),
                         work_dir / "mm2.log")
