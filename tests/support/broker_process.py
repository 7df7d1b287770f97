"""A real broker in a separate process, for tests that use real Kafka clients.

Why: integration tests must see what a client sees — a process listening on
loopback — and be able to kill it (-9), stop it and restart it on the same
data. `BrokerProcess` starts `python -m kelp.broker` on ephemeral ports
(port 0 for both listeners), waits (bounded) for the JSON readiness line
`{"event": "listening", "kafka": "127.0.0.1:P", "http": "127.0.0.1:Q"}` on
stdout and captures stderr (the log) for assertions.

Fixtures: `broker` (one per test, killed in teardown) and `broker_factory`
(call it for as many brokers as a test needs; all are killed in teardown).
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
from typing import Callable, Iterator

import pytest

__all__ = ["BrokerProcess", "broker", "broker_factory"]

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0


class BrokerStartError(RuntimeError):
    pass


class BrokerProcess:
    """One `python -m kelp.broker` process; `settings` are `--set key=value` pairs."""

    def __init__(
        self,
        log_dir: Path | str,
        *,
        settings: dict[str, object] | None = None,
        broker_id: int = 0,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.settings = dict(settings or {})
        self.broker_id = broker_id
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.kafka_host = "127.0.0.1"
        self.kafka_port: int | None = None
        self.http_port: int | None = None
        self.ready_info: dict | None = None
        self._log_lines: list[str] = []
        self._stdout_lines: list[str] = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- addresses ------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        assert self.kafka_port is not None, "broker not started"
        return f"{self.kafka_host}:{self.kafka_port}"

    @property
    def http_url(self) -> str:
        if self.http_port is None:
            raise RuntimeError("this broker has no HTTP listener (kelp.broker.http not installed?)")
        return f"http://127.0.0.1:{self.http_port}"

    # -- lifecycle ------------------------------------------------------
    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "kelp.broker",
            "--log-dirs", str(self.log_dir),
            "--port", "0", "--http-port", "0",
            "--broker-id", str(self.broker_id),
        ]
        for key, value in self.settings.items():
            if isinstance(value, bool):
                value = str(value).lower()
            cmd += ["--set", f"{key}={value}"]
        return cmd + self.extra_args

    def start(self, *, timeout: float = START_TIMEOUT_S) -> "BrokerProcess":
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("broker already running")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._ready.clear()
        self.ready_info = None
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.update(self.env)
        with self._lock:
            self._log_lines.append(f"--- start {' '.join(self.command())}\n")
        self.proc = subprocess.Popen(
            self.command(), cwd=str(REPO), env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )
        self._threads = [
            threading.Thread(target=self._pump_stdout, args=(self.proc,), daemon=True),
            threading.Thread(target=self._pump_stderr, args=(self.proc,), daemon=True),
        ]
        for t in self._threads:
            t.start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                for t in self._threads:
                    t.join(2)
                raise BrokerStartError(
                    f"broker exited with code {self.proc.returncode} before listening; log:\n{self.log_text()[-4000:]}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerStartError(f"broker not listening after {timeout}s; log:\n{self.log_text()[-4000:]}")
        return self

    def _pump_stdout(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._lock:
                self._stdout_lines.append(line)
            text = line.strip()
            if text.startswith("{"):
                try:
                    info = json.loads(text)
                except ValueError:
                    continue
                if info.get("event") == "listening":
                    host, _, port = info["kafka"].rpartition(":")
                    self.kafka_host, self.kafka_port = host, int(port)
                    http = info.get("http")
                    self.http_port = int(http.rpartition(":")[2]) if http else None
                    self.ready_info = info
                    self._ready.set()

    def _pump_stderr(self, proc: subprocess.Popen) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            with self._lock:
                self._log_lines.append(line)

    def log_text(self) -> str:
        with self._lock:
            return "".join(self._log_lines)

    def stdout_text(self) -> str:
        with self._lock:
            return "".join(self._stdout_lines)

    def wait_for_log(self, text: str, *, timeout: float = 10.0) -> str:
        """Wait (bounded) until `text` appears in the log; returns the line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log_text().splitlines():
                if text in line:
                    return line
            time.sleep(0.05)
        raise AssertionError(f"log line containing {text!r} not seen in {timeout}s; log:\n{self.log_text()[-3000:]}")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _wait_exit(self, timeout: float) -> int | None:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        for t in self._threads:
            t.join(2)
        return code

    def kill(self) -> None:
        """SIGKILL: no flush, no clean shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self._wait_exit(10)

    def terminate(self, *, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait for the graceful stop; SIGKILL if it does not come."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        code = self._wait_exit(timeout)
        if code is None:
            self.kill()
        return code

    def restart(self, *, kill: bool = False, timeout: float = START_TIMEOUT_S) -> "BrokerProcess":
        """Stop (SIGTERM, or SIGKILL with kill=True) and start again on the same dirs."""
        if kill:
            self.kill()
        else:
            self.terminate()
        return self.start(timeout=timeout)

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


@pytest.fixture
def broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., BrokerProcess]]:
    """`broker_factory(settings={...}, log_dir=None, start=True) -> BrokerProcess`."""
    made: list[BrokerProcess] = []

    def make(*, settings: dict[str, object] | None = None, log_dir: Path | str | None = None,
             start: bool = True, **kwargs: object) -> BrokerProcess:
        directory = Path(log_dir) if log_dir is not None else tmp_path_factory.mktemp("kelp-broker")
        bp = BrokerProcess(directory, settings=settings, **kwargs)  # type: ignore[arg-type]
        made.append(bp)
        if start:
            bp.start()
        return bp

    yield make
    for bp in made:
        bp.kill()


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """A fresh broker (auto-create on, 1 partition default) for one test."""
    return broker_factory()
