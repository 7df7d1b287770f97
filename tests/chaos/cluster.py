"""The suite's three brokers: started, killed, paused, restarted and asked about their roles, every wait bounded.

Why: the nemesis aims at roles (the leader of a partition, the controller),
not at numbers, and must know when the cluster is whole again. Brokers are
`python -m kelp.broker` processes supervised by `kelp.cli.supervisor` (the
same code as `kelp dev-cluster`): one the nemesis did not take down and
that exits anyway is restarted with backoff and reported in the history as
an `exit`; each dies with the runner (PR_SET_PDEATHSIG), and each one's log
is appended to `<run>/broker-<id>.log` across restarts.

Children are started from the thread that runs the nemesis (the main
thread): the death signal follows the thread that forked.

It must never decide a fault: it only does what the nemesis asks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Callable

from kelp.cli.dev_cluster import wait_registered
from kelp.cli.supervisor import Child, RestartBackoff, Supervisor, describe_exit

from .history import History
from .topology import Topology

__all__ = ["ChaosCluster", "AdminError", "BROKER_SETTINGS"]

# What the suite runs with beyond the broker defaults (lease 3000 ms, renewal 1000 ms stay the
# defaults: the faults' durations are set relative to them). Shorter ISR lag so a partitioned
# follower leaves the ISR in 10 s rather than 30; small segments so logs roll often; metadata
# snapshots every 16 KiB of entries.
BROKER_SETTINGS: dict[str, Any] = {
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 6,
    "group.initial.rebalance.delay.ms": 500,
    "replica.lag.time.max.ms": 10000,
    "log.segment.bytes": 1048576,
    "auto.create.topics.enable": False,
    # Snapshots (and compaction of the metadata log) every few entries, so they run during every fault —
    # controller pauses included — not once in a blue moon at the default 4 MiB (issue 31).
    "metadata.log.max.record.bytes.between.snapshots": 16384,
}
START_TIMEOUT_S = 60.0


class AdminError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


class ChaosCluster:
    def __init__(self, topo: Topology, history: History, *, settings: dict[str, Any],
                 say: Callable[[str], None]) -> None:
        self.topo = topo
        self.history = history
        self.settings = settings
        self.say = say
        self.n = topo.n
        self.paused: set[int] = set()
        self.children = [
            Child(name=f"broker {i}", command=self._command(i),
                  env={"PYTHONSAFEPATH": "1", "PYTHONUNBUFFERED": "1", **topo.env(i)},
                  stderr_path=topo.run_dir / f"broker-{i}.log",
                  backoff=RestartBackoff(initial_s=1.0, max_s=10.0, reset_after_s=30.0))
            for i in range(self.n)
        ]
        self.sup = Supervisor(self.children, restart=True, start_timeout_s=START_TIMEOUT_S,
                              say=lambda text: say(f"supervisor: {text}"))

    @property
    def lease_s(self) -> float:
        return int(self.settings.get("lease.duration.ms", 3000)) / 1000.0

    def _command(self, i: int) -> Callable[[Child], list[str]]:
        def command(child: Child) -> list[str]:
            kafka, http = self.topo.ports(i)
            kafka = child.pinned.get("kafka_port", kafka)
            http = child.pinned.get("http_port", http)
            cmd = [sys.executable, "-m", "kelp.broker", "--broker-id", str(i),
                   "--log-dirs", str(self.topo.log_dir(i)), "--port", str(kafka), "--http-port", str(http),
                   "--set", f"host={self.topo.broker_host(i)}",
                   "--set", f"cluster.dir={self.topo.cluster_dir}"]
            for key, value in self.settings.items():
                if isinstance(value, bool):
                    value = str(value).lower()
                cmd += ["--set", f"{key}={value}"]
            return self.topo.wrap(i, cmd)
        return command

    # -- addresses ---------------------------------------------------------------------------
    def http(self, i: int) -> str:
        return f"http://{self.topo.broker_host(i)}:{self.children[i].pinned['http_port']}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.topo.broker_host(i)}:{c.pinned['kafka_port']}" for i, c in enumerate(self.children))

    # -- lifecycle ---------------------------------------------------------------------------
    def start_all(self) -> None:
        import threading

        self.sup.start_all()
        self.sup.wait_listening(stop=threading.Event())
        for c in self.children:
            info = c.info or {}
            c.pinned["kafka_port"] = int(str(info["kafka"]).rpartition(":")[2])
            c.pinned["http_port"] = int(str(info["http"]).rpartition(":")[2])
        wait_registered({i: self.http(i).split("//", 1)[1] for i in range(self.n)}, timeout_s=START_TIMEOUT_S)

    def up(self, i: int) -> bool:
        return self.children[i].running and i not in self.paused

    def running(self) -> list[int]:
        return [i for i in range(self.n) if self.up(i)]

    def pid(self, i: int) -> int | None:
        return self.children[i].pid

    def kill(self, i: int) -> None:
        c = self.children[i]
        c.held = True
        if c.proc is not None and c.proc.poll() is None:
            c.proc.send_signal(signal.SIGKILL)
            c.proc.wait(10)
        self.paused.discard(i)

    def pause(self, i: int) -> None:
        c = self.children[i]
        if c.proc is not None and c.proc.poll() is None:
            c.proc.send_signal(signal.SIGSTOP)
            self.paused.add(i)

    def resume(self, i: int) -> None:
        c = self.children[i]
        if c.proc is not None and c.proc.poll() is None:
            c.proc.send_signal(signal.SIGCONT)
        self.paused.discard(i)

    def terminate(self, i: int, *, bound_s: float) -> tuple[int | None, float]:
        """SIGTERM and wait up to bound_s: (returncode, seconds); returncode None = it did not exit (then SIGKILLed)."""
        c = self.children[i]
        c.held = True
        self.resume(i)
        t0 = time.monotonic()
        if c.proc is None or c.proc.poll() is not None:
            return (c.proc.returncode if c.proc else None), 0.0
        c.proc.send_signal(signal.SIGTERM)
        try:
            code = c.proc.wait(bound_s)
        except subprocess.TimeoutExpired:
            c.proc.send_signal(signal.SIGKILL)
            c.proc.wait(10)
            return None, time.monotonic() - t0
        return code, time.monotonic() - t0

    def start(self, i: int, *, wait: bool = True) -> float:
        """Start broker i again (it must be down); with wait, until it listens. Returns seconds to listening."""
        c = self.children[i]
        if c.running:
            c.held = False
            return 0.0
        t0 = time.monotonic()
        self.sup.start(c)
        c.announced = True
        if wait:
            self.wait_listening([i])
        return time.monotonic() - t0

    def wait_listening(self, ids: list[int]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        for i in ids:
            c = self.children[i]
            while not c.listening.wait(0.1):
                if c.proc is not None and c.proc.poll() is not None:
                    self.say(f"broker {i} {describe_exit(c.proc.returncode)} while starting; see broker-{i}.log")
                    return
                if time.monotonic() > deadline:
                    self.say(f"broker {i} did not listen within {START_TIMEOUT_S:.0f}s of its start")
                    return

    def poll(self) -> None:
        """One supervision round: a broker that exited without the nemesis is reported and restarted with backoff."""
        for c in self.sup.poll():
            i = self.children.index(c)
            rc = c.proc.returncode if c.proc is not None else None
            tail = _tail(self.topo.run_dir / f"broker-{i}.log", 6)
            self.history.add("exit", time.time(), i, rc, tail)
            self.say(f"broker {i} exited by itself ({describe_exit(rc) if rc is not None else '?'}); last "
                     f"log lines:\n{tail}")

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            self.poll()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.1, left))

    def restore(self) -> list[str]:
        """Every broker running and not paused (after a fault, or a fault that failed half-way)."""
        done = []
        for i in list(self.paused):
            self.resume(i)
            done.append(f"resumed {i}")
        down = [i for i, c in enumerate(self.children) if not c.running]
        for i in down:
            self.start(i, wait=False)
            done.append(f"started {i}")
        self.wait_listening(down)
        return done

    def stop_all(self, *, bound_s: float) -> list[tuple[int, float, int | None]]:
        """SIGTERM every broker at once; (broker, seconds, returncode) each, returncode None = SIGKILLed at the
        bound."""
        for i in range(self.n):
            self.resume(i)
        t0 = time.monotonic()
        self.sup.stopping = True
        for c in self.children:
            c.held = True
            if c.running:
                assert c.proc is not None
                c.proc.send_signal(signal.SIGTERM)
        out: list[tuple[int, float, int | None]] = []
        pending = {i for i, c in enumerate(self.children) if c.proc is not None}
        exited: dict[int, tuple[float, int | None]] = {}
        while pending and time.monotonic() - t0 < bound_s:
            for i in sorted(pending):
                proc = self.children[i].proc
                assert proc is not None
                if proc.poll() is not None:
                    exited[i] = (time.monotonic() - t0, proc.returncode)
                    pending.discard(i)
            time.sleep(0.05)
        for i in pending:
            proc = self.children[i].proc
            assert proc is not None
            proc.kill()
            proc.wait(10)
            exited[i] = (time.monotonic() - t0, None)
        for i in sorted(exited):
            out.append((i, *exited[i]))
        return out

    def kill_all(self) -> None:
        """Last resort in cleanup: SIGCONT and SIGKILL whatever still runs."""
        self.sup.stopping = True
        for c in self.children:
            c.held = True
            if c.proc is not None and c.proc.poll() is None:
                try:
                    os.kill(c.proc.pid, signal.SIGCONT)
                    os.killpg(c.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                c.proc.kill()
                try:
                    c.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass

    # -- the admin API -------------------------------------------------------------------------
    def admin(self, path: str, method: str = "GET", body: Any = None, *, via: int | None = None,
              timeout_s: float = 10.0) -> Any:
        """A JSON call on `via` or any broker that is up; retried on 503/421/connection errors within timeout_s."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while True:
            targets = [via] if via is not None else self.running()
            for i in targets:
                try:
                    return _http_json(self.http(i) + path, method, body, timeout=min(5.0, timeout_s))
                except AdminError as exc:
                    if exc.status not in (503, 421, 504):
                        raise
                    last = exc
                except OSError as exc:
                    last = exc
            if time.monotonic() > deadline:
                raise AdminError(-1, f"{method} {path}: no broker answered within {timeout_s:.0f}s (last: {last})")
            self.poll()
            time.sleep(0.1)

    def controller(self) -> int:
        try:
            return int(self.admin("/admin/v1/cluster", timeout_s=5)["controller"])
        except (AdminError, KeyError, ValueError, TypeError):
            return -1

    def describe(self, topic: str, *, via: int | None = None) -> list[dict]:
        return self.admin(f"/admin/v1/topics/{topic}", via=via, timeout_s=5)["partitions"]

    def leader(self, topic: str, p: int) -> int:
        try:
            return int(self.describe(topic)[p]["leader"])
        except (AdminError, IndexError, KeyError, ValueError):
            return -1

    def wait_new_leader(self, topic: str, p: int, *, not_in: set[int], timeout_s: float) -> int | None:
        """Poll (50 ms) the brokers that are up until partition p has a leader outside `not_in`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i in self.running():
                try:
                    described = _http_json(f"{self.http(i)}/admin/v1/topics/{topic}", timeout=2)
                    leader = int(described["partitions"][p]["leader"])
                except (AdminError, OSError, KeyError, IndexError, ValueError):
                    continue
                if leader >= 0 and leader not in not_in:
                    return leader
            self.poll()
            time.sleep(0.05)
        return None

    def unhealthy(self, topics: list[str]) -> str | None:
        """Why the cluster is not whole (None when it is): a broker down or paused, the controller missing a
        broker, a partition without a leader, an ISR short of its replicas, or a reassignment still running."""
        down = [i for i in range(self.n) if not self.up(i)]
        if down:
            return f"broker(s) {down} down or paused"
        try:
            cluster = self.admin("/admin/v1/cluster", timeout_s=3)
            controller = int(cluster["controller"])
            if controller < 0:
                return "no controller"
            listed = {int(b["id"]) for b in self.admin("/admin/v1/brokers", via=controller, timeout_s=3)["brokers"]}
            if listed != set(range(self.n)):
                return f"the controller (broker {controller}) lists brokers {sorted(listed)}"
            for topic in topics:
                for part in self.describe(topic, via=controller):
                    if part["leader"] < 0:
                        return f"{topic}-{part['partition']} has no leader"
                    if sorted(part["isr"]) != sorted(part["replicas"]):
                        return f"{topic}-{part['partition']}: ISR {part['isr']} of replicas {part['replicas']}"
                    if part.get("adding") or part.get("removing"):
                        return f"{topic}-{part['partition']} is still being reassigned"
        except (AdminError, KeyError, ValueError, TypeError, IndexError) as exc:
            return f"admin API: {exc}"
        return None

    def wait_healthy(self, topics: list[str], *, timeout_s: float) -> tuple[float | None, str | None]:
        """(seconds until whole, None) or (None, the last reason) after timeout_s."""
        t0 = time.monotonic()
        reason = None
        while time.monotonic() - t0 < timeout_s:
            reason = self.unhealthy(topics)
            if reason is None:
                return time.monotonic() - t0, None
            self.sleep(0.3)
        return None, reason


def _http_json(url: str, method: str = "GET", body: Any = None, *, timeout: float = 5.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raise AdminError(exc.code, exc.read().decode("utf-8", "replace")) from None
    return json.loads(raw) if raw else None


def _tail(path: Any, lines: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 8192))
            return "\n".join(fh.read().decode("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return ""
