"""A Kelp cluster as real processes on loopback, for replication and failover tests.

Why: replication is only believable end to end — separate broker processes
sharing a cluster directory (file leases, file metadata store), real Kafka
clients, SIGKILL and SIGSTOP. `cluster_factory(n, settings=...)` starts n
brokers (ids 0..n-1, ephemeral ports) and returns a `Cluster` with helpers
that wait (bounded) on what the cluster says over its admin API.

Lease timings are shortened (duration 2 s, renewal 0.5 s) unless a test sets
its own, so failovers take seconds; every wait has a timeout and reports
what it last saw.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.support.broker_process import BrokerProcess

__all__ = ["Cluster", "cluster_factory"]

FAST = {
    "lease.duration.ms": 2000,
    "lease.renew.interval.ms": 500,
    "controller.liveness.check.interval.ms": 200,
    "replica.fetch.wait.max.ms": 200,
    "replica.fetch.backoff.ms": 100,
}


def http_json(url: str, method: str = "GET", body: Any = None, *, timeout: float = 15.0,
              context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


class Cluster:
    def __init__(self, root: Path, brokers: list[BrokerProcess]) -> None:
        self.root = root
        self.brokers = brokers
        # A secured HTTP listener (http.ssl.enabled, http.authentication.methods): how `admin` calls it.
        self.http_context: ssl.SSLContext | None = None
        self.http_headers: dict[str, str] = {}

    def http_base(self, broker: BrokerProcess) -> str:
        url = broker.http_url
        return url.replace("http://", "https://", 1) if self.http_context is not None else url

    def __getitem__(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    @property
    def running(self) -> list[BrokerProcess]:
        return [b for b in self.brokers if b.running and not getattr(b, "stopped", False)]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.running)

    def any_http(self) -> str:
        for b in self.running:
            return self.http_base(b)
        raise AssertionError("no broker is running")

    def admin(self, path: str, method: str = "GET", body: Any = None, *, via: BrokerProcess | None = None) -> Any:
        """Call the admin API on `via` (or any running broker), retrying while brokers start or elect."""
        deadline = time.monotonic() + 20
        last: Exception | None = None
        while time.monotonic() < deadline:
            targets = [via] if via is not None else self.running
            for b in targets:
                try:
                    return http_json(self.http_base(b) + path, method, body, context=self.http_context,
                                     headers=self.http_headers)
                except urllib.error.HTTPError as exc:
                    if exc.code not in (503, 504, 421):
                        raise AssertionError(f"{method} {path} -> {exc.code}: {exc.read()[:500]!r}") from None
                    last = exc
                except (urllib.error.URLError, OSError) as exc:
                    last = exc
            time.sleep(0.1)
        raise AssertionError(f"{method} {path} did not succeed within 20s: {last}")

    def wait_for(self, what: str, predicate: Callable[[], Any], *, timeout: float = 30.0, interval: float = 0.1) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
            except (AssertionError, urllib.error.URLError, OSError, KeyError, IndexError) as exc:
                last = exc
            else:
                if last:
                    return last
            time.sleep(interval)
        for b in self.brokers:  # whole logs for the post-mortem, the message keeps the tails
            (self.root / f"broker-{b.broker_id}.log").write_text(b.log_text())
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}; "
                             f"full logs in {self.root}/broker-*.log\n" + self.logs())

    def topic(self, name: str, *, via: BrokerProcess | None = None) -> dict:
        return self.admin(f"/admin/v1/topics/{name}", via=via)

    def controller(self, *, via: BrokerProcess | None = None) -> int:
        return int(self.admin("/admin/v1/cluster", via=via)["controller"])

    def wait_fully_replicated(self, name: str, *, timeout: float = 30.0) -> dict:
        def ok() -> dict | None:
            d = self.topic(name)
            for p in d["partitions"]:
                if p["leader"] < 0 or sorted(p["isr"]) != sorted(p["replicas"]):
                    return None
                if p["high_watermark"] is None or p["high_watermark"] != p["log_end_offset"]:
                    return None
            return d
        return self.wait_for(f"every partition of {name} fully in sync", ok, timeout=timeout)

    def stop_process(self, b: BrokerProcess) -> None:
        assert b.proc is not None
        b.proc.send_signal(signal.SIGSTOP)
        b.stopped = True  # type: ignore[attr-defined]

    def continue_process(self, b: BrokerProcess) -> None:
        assert b.proc is not None
        b.proc.send_signal(signal.SIGCONT)
        b.stopped = False  # type: ignore[attr-defined]

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"----- broker {b.broker_id} -----\n{b.log_text()[-tail:]}" for b in self.brokers)


@pytest.fixture
def cluster_factory(tmp_path_factory: pytest.TempPathFactory,
                    request: pytest.FixtureRequest) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(n: int = 3, *, settings: dict[str, object] | None = None, start: bool = True) -> Cluster:
        root = tmp_path_factory.mktemp("kelp-cluster")
        merged = {**FAST, "cluster.dir": str(root / "cluster"), **(settings or {})}
        brokers = [BrokerProcess(root / f"broker-{i}", settings=merged, broker_id=i) for i in range(n)]
        cluster = Cluster(root, brokers)
        made.append(cluster)
        if start:
            for b in brokers:
                b.start()
            cluster.wait_for(f"{n} brokers in the cluster",
                             lambda: len(cluster.admin("/admin/v1/brokers")["brokers"]) == n, timeout=20)
        return cluster

    yield make
    failed = getattr(request.node, "rep_call", None)
    for cluster in made:
        if failed is not None and failed.failed:
            print(cluster.logs(6000))
        for b in cluster.brokers:
            if b.proc is not None and b.proc.poll() is None:
                try:
                    os.kill(b.proc.pid, signal.SIGCONT)
                except OSError:
                    pass
            b.kill()
