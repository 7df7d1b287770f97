"""`kelp dev-cluster`: a cluster of brokers on this machine, the embedded default behind `make run`.

Why: design §1 — `make run` gives a user a real replicated cluster without
Kubernetes: N broker processes on localhost (Kafka ports P, P+1, ...; HTTP
Q, Q+1, ...; data in `<data-dir>/broker-<id>`) that share
`<data-dir>/cluster` for their file leases and metadata store. It says the
cluster is up (one JSON line on stdout, two lines on stderr) only once the
controller has registered every broker, so a topic created at once with the
default replication factor is placed on all of them. A broker that exits is
restarted on the same ports after a bounded backoff while the others keep
serving (`--no-restart`: stop everything instead); brokers die with the
supervisor, even when it is SIGKILLed (supervisor.py). Ctrl-C (or SIGTERM)
stops them all at once, each with a controlled shutdown, and SIGKILLs any
broker still running after STOP_TIMEOUT_S.

It must never implement broker behaviour: each broker is `python -m kelp.broker`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .errors import CliError
from .supervisor import Child, ChildFailed, Interrupted, RestartBackoff, Supervisor

__all__ = ["register", "wait_registered", "START_TIMEOUT_S", "STOP_TIMEOUT_S"]

START_TIMEOUT_S = 60.0   # every broker listening, then the controller registering all of them
STOP_TIMEOUT_S = 60.0    # Ctrl-C: a broker flushes within 56 s (docs/replication.md "Failover"); SIGKILL after


def _command(broker_id: int, args: argparse.Namespace, data: Path):
    n = args.brokers

    def command(child: Child) -> list[str]:
        # A restarted broker keeps the ports it had, so the bootstrap list printed once stays true.
        kafka = child.pinned.get("kafka_port", args.kafka_port + broker_id if args.kafka_port else 0)
        http = child.pinned.get("http_port", args.http_port + broker_id if args.http_port else 0)
        cmd = [
            sys.executable, "-m", "kelp.broker",
            "--broker-id", str(broker_id),
            "--log-dirs", str(data / f"broker-{broker_id}"),
            "--port", str(kafka),
            "--http-port", str(http),
            "--set", f"cluster.dir={data / 'cluster'}",
            "--set", f"default.replication.factor={min(3, n)}",
            "--set", f"min.insync.replicas={min(2, n)}",
            "--set", f"offsets.topic.replication.factor={min(3, n)}",
        ]
        for item in args.set or []:
            cmd += ["--set", item]
        return cmd

    return command


def _get_json(url: str, timeout_s: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def wait_registered(http_by_id: dict[int, str], *, timeout_s: float, stop: threading.Event | None = None) -> int:
    """Wait until the controller lists every broker of `http_by_id` ({id: "host:port"}); returns the controller's id.

    The controller's own broker list (`GET /admin/v1/brokers` on it) is what
    it places replicas on; asking any other broker could answer from a view
    the controller has not reached yet.
    """
    want = set(http_by_id)
    deadline = time.monotonic() + timeout_s
    last = "no broker answered yet"
    while True:
        for bid in sorted(http_by_id):
            try:
                controller = int(_get_json(f"http://{http_by_id[bid]}/admin/v1/cluster", 2.0)["controller"])
                if controller not in http_by_id:
                    last = f"broker {bid} knows no controller yet" if controller < 0 else \
                        f"broker {bid} names controller {controller}, not one of ours"
                    continue
                listed = _get_json(f"http://{http_by_id[controller]}/admin/v1/brokers", 2.0)["brokers"]
                seen = {int(b["id"]) for b in listed}
                if want <= seen:
                    return controller
                last = f"the controller (broker {controller}) has registered broker(s) {sorted(seen)} of {sorted(want)}"
                break
            except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
                last = f"broker {bid}: {getattr(exc, 'reason', exc)}"
        if stop is not None and stop.is_set():
            raise Interrupted()
        if time.monotonic() > deadline:
            raise CliError(f"the cluster did not form within {timeout_s:.0f}s: {last}")
        if stop is not None:
            stop.wait(0.1)
        else:
            time.sleep(0.1)


class DevSupervisor(Supervisor):
    def on_back(self, child: Child) -> None:
        info = child.info or {}
        self.say(f"{child.name} is back (pid {child.pid}): kafka {info.get('kafka')}, http {info.get('http')}")
        print(json.dumps({"event": "broker-restarted", "broker_id": info.get("broker_id"), "pid": child.pid,
                          "kafka": info.get("kafka"), "http": info.get("http"), "restarts": child.restarts}),
              flush=True)


def cmd_dev_cluster(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise CliError("--brokers must be at least 1")
    data = Path(args.data_dir).resolve()
    (data / "cluster").mkdir(parents=True, exist_ok=True)
    env = {"PYTHONSAFEPATH": "1", "PYTHONUNBUFFERED": "1"}
    children = [Child(name=f"broker {i}", command=_command(i, args, data), env=env,
                      backoff=RestartBackoff(initial_s=args.restart_backoff_s))
                for i in range(args.brokers)]
    sup = DevSupervisor(children, restart=not args.no_restart, start_timeout_s=START_TIMEOUT_S)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        sup.start_all()
        infos = sup.wait_listening(stop=stop)
        for child in children:
            info = child.info or {}
            child.pinned["kafka_port"] = int(str(info["kafka"]).rpartition(":")[2])
            if info.get("http"):
                child.pinned["http_port"] = int(str(info["http"]).rpartition(":")[2])
        ordered = [infos[c.name] for c in children]
        wait_registered({int(i["broker_id"]): i["http"] for i in ordered if i.get("http")},
                        timeout_s=START_TIMEOUT_S, stop=stop)
        bootstrap = ",".join(i["kafka"] for i in ordered)
        http = ",".join(f"http://{i['http']}" for i in ordered if i.get("http"))
        print(json.dumps({"event": "cluster-listening", "bootstrap": bootstrap, "http": http,
                          "brokers": len(ordered), "pids": [c.pid for c in children], "data_dir": str(data)}),
              flush=True)
        print(f"kelp: {len(ordered)} broker(s) up, all registered with the controller. bootstrap servers: {bootstrap}",
              file=sys.stderr, flush=True)
        restarting = ("a broker that exits is restarted" if sup.restart
                      else "--no-restart: the first broker to exit stops all")
        print(f"kelp: HTTP: {http}   ({restarting}; Ctrl-C stops them all)", file=sys.stderr, flush=True)
        while not stop.wait(0.2):
            exited = sup.poll()
            if exited and not sup.restart:
                print(f"kelp: {', '.join(c.name for c in exited)} exited; stopping the others (--no-restart)",
                      file=sys.stderr, flush=True)
                return 1
        return 0
    except Interrupted:
        return 0
    except ChildFailed as exc:
        raise CliError(str(exc)) from None
    finally:
        sup.stop_all(STOP_TIMEOUT_S)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("dev-cluster", help="run a cluster of brokers on this machine (what `make run` does)")
    p.add_argument("--brokers", "-n", type=int, default=3, help="number of brokers (3)")
    p.add_argument("--data-dir", default="./data", help="data directory: broker-<id>/ and cluster/ (./data)")
    p.add_argument("--kafka-port", type=int, default=9092,
                   help="first broker's Kafka port, the next get +1 (0 = ephemeral)")
    p.add_argument("--http-port", type=int, default=8080,
                   help="first broker's HTTP port, the next get +1 (0 = ephemeral)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a broker property for every broker, repeatable")
    p.add_argument("--no-restart", action="store_true",
                   help="stop every broker when one exits, instead of restarting it (fail fast)")
    p.add_argument("--restart-backoff", dest="restart_backoff_s", type=_positive_float, default=0.5, metavar="SECONDS",
                   help="first restart delay of a broker that exited; doubles per quick exit up to 30 s, "
                        "back to this after 60 s up (0.5)")
    p.set_defaults(func=cmd_dev_cluster)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value > 3600:
        raise argparse.ArgumentTypeError(f"expected seconds in (0, 3600], got {text!r}")
    return value
