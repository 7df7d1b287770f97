"""`kelp dev-cluster`: a cluster of brokers on this machine, the embedded default behind `make run`.

Why: design §1 — `make run` gives a user a real replicated cluster without
Kubernetes: N broker processes on localhost (Kafka ports P, P+1, ...; HTTP
Q, Q+1, ...; data in `<data-dir>/broker-<id>`) that share
`<data-dir>/cluster` for their file leases and metadata store. It prints the
bootstrap list once every broker listens; Ctrl-C (or SIGTERM) stops them
all cleanly (each does a controlled shutdown), SIGKILL after a bound.

It must never implement broker behaviour: each broker is `python -m kelp.broker`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .errors import CliError

__all__ = ["register"]

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 45.0


def _start(broker_id: int, args: argparse.Namespace, data: Path) -> subprocess.Popen:
    n = args.brokers
    cmd = [
        sys.executable, "-m", "kelp.broker",
        "--broker-id", str(broker_id),
        "--log-dirs", str(data / f"broker-{broker_id}"),
        "--port", str(args.kafka_port + broker_id if args.kafka_port else 0),
        "--http-port", str(args.http_port + broker_id if args.http_port else 0),
        "--set", f"cluster.dir={data / 'cluster'}",
        "--set", f"default.replication.factor={min(3, n)}",
        "--set", f"min.insync.replicas={min(2, n)}",
        "--set", f"offsets.topic.replication.factor={min(3, n)}",
    ]
    for item in args.set or []:
        cmd += ["--set", item]
    env = dict(os.environ, PYTHONSAFEPATH="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)


def _wait_listening(proc: subprocess.Popen, broker_id: int) -> dict[str, Any]:
    assert proc.stdout is not None
    found: dict[str, Any] = {}
    done = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not found and line.startswith("{"):
                try:
                    info = json.loads(line)
                except ValueError:
                    continue
                if info.get("event") == "listening":
                    found.update(info)
                    done.set()
        done.set()

    threading.Thread(target=pump, daemon=True).start()
    if not done.wait(START_TIMEOUT_S) or not found:
        raise CliError(f"broker {broker_id} did not start within {START_TIMEOUT_S:.0f}s (exit code {proc.poll()}); see its log above")
    return found


def _stop_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def cmd_dev_cluster(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise CliError("--brokers must be at least 1")
    data = Path(args.data_dir).resolve()
    (data / "cluster").mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        infos = []
        for broker_id in range(args.brokers):
            proc = _start(broker_id, args, data)
            procs.append(proc)
        for broker_id, proc in enumerate(procs):
            infos.append(_wait_listening(proc, broker_id))
        bootstrap = ",".join(i["kafka"] for i in infos)
        http = ",".join(f"http://{i['http']}" for i in infos if i.get("http"))
        print(json.dumps({"event": "cluster-listening", "bootstrap": bootstrap, "http": http,
                          "brokers": len(infos), "data_dir": str(data)}), flush=True)
        print(f"kelp: {len(infos)} broker(s) up. bootstrap servers: {bootstrap}", file=sys.stderr, flush=True)
        print(f"kelp: HTTP: {http}   (Ctrl-C stops them all)", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            dead = [i for i, p in enumerate(procs) if p.poll() is not None]
            if dead:
                print(f"kelp: broker(s) {dead} exited; stopping the others", file=sys.stderr, flush=True)
                return 1
        return 0
    finally:
        _stop_all(procs)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("dev-cluster", help="run a cluster of brokers on this machine (what `make run` does)")
    p.add_argument("--brokers", "-n", type=int, default=3, help="number of brokers (3)")
    p.add_argument("--data-dir", default="./data", help="data directory: broker-<id>/ and cluster/ (./data)")
    p.add_argument("--kafka-port", type=int, default=9092, help="first broker's Kafka port, the next get +1 (0 = ephemeral)")
    p.add_argument("--http-port", type=int, default=8080, help="first broker's HTTP port, the next get +1 (0 = ephemeral)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a broker property for every broker, repeatable")
    p.set_defaults(func=cmd_dev_cluster)
