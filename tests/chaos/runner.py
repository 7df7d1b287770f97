"""`make chaos`: run the fault suite — three brokers, clients, a seeded nemesis — then check the history it wrote.

Usage (from the checkout; `make chaos SEED=7 SECONDS=600` does the first):

    python -m tests.chaos.runner --seed 7 --seconds 600     # the full schedule for 600 s of faults
    python -m tests.chaos.runner --seed 1 --short           # each targeted fault once + the regression list
    python -m tests.chaos.runner --replay data/chaos/<run>/history.jsonl.gz

A run: sweep what dead runs left, build the topology (network namespaces
when root, else loopback), start the brokers, create the topics (`chaos`: 6
partitions, RF 3, min.insync 2; `chaos-moves`: 3 partitions, RF 2,
min.insync 1), start the producers and groups, apply the faults one after
the other — each healed, then a bounded wait for the cluster to be whole —
and at the end: heal, wait for every ISR, stop the producers (bounded
flush), let the groups catch up, record the partition states, stop every
broker with SIGTERM at once (bounded), read every replica from disk, and
check. The table goes to stdout and `<run>/verdict.txt`; the exit code is 1
when a violation was found. Everything started is stopped and everything
created is removed in a `finally`, also on Ctrl-C or SIGTERM.

It must never weaken a check to pass: a violation is reported with its seed.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .checker import check
from .cluster import BROKER_SETTINGS, AdminError, ChaosCluster
from .history import History, read_history
from .nemesis import STOP_BOUND_S, Ctx, kind_at, run_fault, schedule, short_schedule
from .replicas import collect
from .topology import make_topology
from .workload import CHURN_PRODUCER, CHURN_TOPICS, GROUPS, TOPICS, Workload

__all__ = ["main", "run", "load_regressions"]

REPO = Path(__file__).resolve().parents[2]
REGRESSIONS = Path(__file__).with_name("regressions.json")
RECOVERY_BOUND_S = 60.0
FINAL_HEALTH_BOUND_S = 120.0
DRAIN_BOUND_S = 90.0
ALL_TOPICS = [*TOPICS, *CHURN_TOPICS, "__consumer_offsets"]
METADATA_CONVERGE_S = 30.0

log = logging.getLogger("chaos")


def say(text: str) -> None:
    line = f"chaos {time.strftime('%H:%M:%S')} {text}"
    print(line, file=sys.stderr, flush=True)
    log.info(text)


def load_regressions(path: Path = REGRESSIONS) -> list[dict[str, Any]]:
    """The seeds (and fault indices) that ever found a bug; each entry names what it found."""
    if not path.exists():
        return []
    entries = json.loads(path.read_text())
    for e in entries:
        missing = {"seed", "index", "kind", "found"} - set(e)
        if missing:
            raise ValueError(f"{path}: entry {e} lacks {sorted(missing)}")
    return entries


def _plan(args: argparse.Namespace,
          capabilities: frozenset[str]) -> tuple[list[tuple[int, int, str]] | None, list[str]]:
    """Short mode: [(seed, index, kind)] of the targeted faults and the regression list; full mode: None."""
    notes = []
    if not args.short:
        return None, notes
    kinds = args.kinds.split(",") if args.kinds else None
    plan = [(args.seed, i, k) for i, k in short_schedule(args.seed, capabilities, kinds)]
    if args.regressions:
        for e in load_regressions():
            kind = kind_at(int(e["seed"]), capabilities, int(e["index"]))
            if kind != e["kind"]:
                notes.append(f"regression seed {e['seed']} #{e['index']} ({e['kind']}) needs "
                             f"{e.get('network', 'netns')} faults this run cannot do; not run")
                continue
            if (int(e["seed"]), int(e["index"]), kind) not in plan:
                plan.append((int(e["seed"]), int(e["index"]), kind))
    return plan, notes


def run_capabilities(topology: frozenset[str], settings: dict[str, Any]) -> frozenset[str]:
    """What the run can do: the topology's, and `fsync-each` when every record is fsynced before its answer."""
    fsync_each = str(settings.get("log.flush.interval.messages", "")) == "1"
    return topology | ({"fsync-each"} if fsync_each else frozenset())


def _create_topics(cluster: ChaosCluster) -> None:
    for name, (partitions, rf, min_isr) in {**TOPICS, **CHURN_TOPICS}.items():
        cluster.admin("/admin/v1/topics", "POST", {"name": name, "partitions": partitions, "replication_factor": rf,
                                                   "configs": {"min.insync.replicas": str(min_isr)}}, timeout_s=30)


def _state(cluster: ChaosCluster) -> dict[str, list]:
    ctl = cluster.controller()
    out: dict[str, list] = {}
    for topic in ALL_TOPICS:
        try:
            parts = cluster.describe(topic, via=ctl if ctl >= 0 else None)
        except AdminError:
            parts = cluster.describe(topic)
        out[topic] = [[q["partition"], q["leader"], q["replicas"], q["isr"], q["high_watermark"], q["log_end_offset"]]
                      for q in parts]
    return out


def _drain(cluster: ChaosCluster, work: Workload) -> str | None:
    """Wait (bounded) until every group committed every partition's high watermark; None, or what was missing."""
    deadline = time.monotonic() + DRAIN_BOUND_S
    missing = "no state read"
    while time.monotonic() < deadline:
        try:
            state = {t: _state_topic(cluster, t) for t in TOPICS}
        except AdminError as exc:
            missing = str(exc)
            cluster.sleep(1)
            continue
        pos = work.group_positions()
        behind = [f"{g} {t}-{p} at {pos.get((g, t, p), 0)} of {hw}"
                  for g in GROUPS for t, parts in state.items() for p, hw in parts if pos.get((g, t, p), 0) != hw]
        if not behind:
            return None
        missing = ", ".join(behind[:6])
        cluster.sleep(1)
    return missing


def _metadata(cluster: ChaosCluster) -> tuple[dict[int, list], dict[str, str]]:
    """Every broker's applied metadata (offset, digest), once they agree (bounded), and the topics the controller
    holds with their ids: what the checker compares the answered metadata changes with."""
    deadline = time.monotonic() + METADATA_CONVERGE_S
    seen: dict[int, list] = {}
    while True:
        seen = {}
        for i in range(cluster.n):
            try:
                d = cluster.admin("/admin/v1/cluster", via=i, timeout_s=5)
                seen[i] = [d.get("metadata_offset"), d.get("metadata_digest")]
            except AdminError as exc:
                seen[i] = [None, str(exc)[:100]]
        if len({tuple(x) for x in seen.values()}) == 1 or time.monotonic() > deadline:
            break
        cluster.sleep(0.5)
    topics: dict[str, str] = {}
    try:
        ctl = cluster.controller()
        listed = cluster.admin("/admin/v1/topics", via=ctl if ctl >= 0 else None, timeout_s=10)["topics"]
        topics = {t["name"]: t.get("topic_id") for t in listed}
    except (AdminError, KeyError, TypeError) as exc:
        say(f"the final topic list could not be read: {exc}")
    return seen, topics


def _state_topic(cluster: ChaosCluster, topic: str) -> list[tuple[int, int]]:
    return [(q["partition"], q["high_watermark"]) for q in cluster.describe(topic)]


def _git_rev() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def run(args: argparse.Namespace) -> int:
    out = Path(args.out or REPO / "data" / "chaos" / f"seed-{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out / "runner.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    topo = make_topology(out, 3, seed=args.seed, want=args.network, disk_mb=args.disk_mb)
    history = History(out / "history.jsonl.gz")
    settings = {**BROKER_SETTINGS, **dict(s.split("=", 1) for s in args.set or [])}
    capabilities = run_capabilities(topo.capabilities, settings)
    plan, notes = _plan(args, capabilities)
    if "power" in capabilities and "fsync-each" not in capabilities:
        notes.append("power-loss-all is not scheduled: it needs --set log.flush.interval.messages=1 (at the default "
                     "settings a power loss of every broker may lose what none fsynced, as Kafka's would)")
    say(f"run {out}: seed {args.seed}, {'short' if plan is not None else f'{args.seconds} s'}, network {topo.kind}"
        + (f" ({topo.why_limited})" if topo.why_limited else ""))
    for note in notes:
        say(note)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, on_term)
    cluster: ChaosCluster | None = None
    work: Workload | None = None
    interrupted = None
    try:
        topo.setup()
        cluster = ChaosCluster(topo, history, settings=settings, say=say)
        cluster.start_all()
        _create_topics(cluster)
        took, why = cluster.wait_healthy(ALL_TOPICS[:2], timeout_s=60)
        if took is None:
            raise RuntimeError(f"the new cluster did not become whole within 60 s: {why}")
        work = Workload(cluster.bootstrap, history, producers=args.producers, rate=args.rate,
                        admin_urls=lambda: [cluster.http(i) for i in cluster.running()])
        work.start()
        history.add("meta", {
            "seed": args.seed, "mode": "short" if plan is not None else "full", "seconds": args.seconds,
            "network": topo.kind, "network_note": topo.why_limited, "brokers": cluster.n, "settings": settings,
            "topics": list(TOPICS), "churn_topics": list(CHURN_TOPICS), "churn_producer": CHURN_PRODUCER,
            "groups": list(GROUPS),
            "min_insync": {t: m for t, (_, _, m) in {**TOPICS, **CHURN_TOPICS}.items()},
            "producers": args.producers, "rate": args.rate,
            "workload_start": time.time(), "plan": plan, "git": _git_rev(), "out": str(out),
        })
        deadline = time.monotonic() + 90
        while work.acked() < 100 or work.delivered() < 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the workload did not get going within 90 s: acked {work.acked()}, "
                                   f"delivered {work.delivered()}")
            cluster.sleep(0.2)
        ctx = Ctx(cluster, topo, history, say)
        end_at = time.monotonic() + args.seconds
        items = iter(plan) if plan is not None else ((args.seed, i, k)
                                                     for i, k in schedule(args.seed, capabilities))
        done = 0
        for seed, index, kind in items:
            if plan is None and time.monotonic() >= end_at:
                break
            say(f"fault #{index} {kind} (seed {seed}): acked {work.acked():,}, delivered {work.delivered():,}")
            r = run_fault(ctx, seed, index, kind)
            say(f"  {kind}: {json.dumps(r['params'])} -> {json.dumps(r['outcome'])[:400]}")
            took, why = cluster.wait_healthy(ALL_TOPICS, timeout_s=RECOVERY_BOUND_S)
            history.add("recovered", time.time(), index, None if took is None else round(took, 2))
            say(f"  whole again after {took:.1f} s" if took is not None
                else f"  NOT whole within {RECOVERY_BOUND_S:.0f} s: {why}")
            done += 1
            cluster.sleep(0.5)  # the load flows a moment on the whole cluster before the next fault
        nemesis_end = time.time()
        say(f"nemesis done: {done} fault(s); final phase")
        topo.heal_network()
        cluster.restore()
        took, why = cluster.wait_healthy(ALL_TOPICS, timeout_s=FINAL_HEALTH_BOUND_S)
        if took is None:
            say(f"the cluster is not whole {FINAL_HEALTH_BOUND_S:.0f} s after the last fault: {why}")
        unknown = work.stop_producers(flush_s=90)
        behind = _drain(cluster, work)
        if behind:
            say(f"groups did not catch up within {DRAIN_BOUND_S:.0f} s: {behind}")
        work.stop_consumers()
        state = _state(cluster)
        history.add("state", time.time(), state)
        applied, final_topics = _metadata(cluster)
        history.add("metadata", time.time(), {str(b): x for b, x in applied.items()}, final_topics)
        say(f"stopping the brokers (SIGTERM to all at once, bound {STOP_BOUND_S:.0f} s)")
        for b, seconds, rc in cluster.stop_all(bound_s=STOP_BOUND_S):
            history.add("stop", time.time(), b, round(seconds, 2), rc)
            say(f"  broker {b}: " + (f"exited {rc} after {seconds:.1f} s" if rc is not None else
                                     f"did not exit within {STOP_BOUND_S:.0f} s; SIGKILLed"))
        say("reading every replica from disk")
        collect(out, state, [*TOPICS, *CHURN_TOPICS], history, compacted=["__consumer_offsets"])
        history.add("end", time.time(), {"unknown": unknown, "nemesis_end": nemesis_end, "faults": done})
    except KeyboardInterrupt as exc:
        interrupted = str(exc) or "Ctrl-C"
        say(f"interrupted ({interrupted}); cleaning up")
    except Exception as exc:
        say(f"the run failed: {type(exc).__name__}: {exc}")
        log.exception("run failed")
        interrupted = f"{type(exc).__name__}: {exc}"
    finally:
        if work is not None:
            work.stop()
        if cluster is not None:
            cluster.kill_all()
        try:
            topo.cleanup()
        finally:
            history.close()
            signal.signal(signal.SIGTERM, previous)
    verdict = check(read_history(history.path))
    text = verdict.table()
    if interrupted:
        text += f"\nthe run did not finish: {interrupted}"
    print(text, flush=True)
    (out / "verdict.txt").write_text(text + "\n")
    (out / "verdict.json").write_text(json.dumps(verdict.to_json(), indent=1) + "\n")
    say(f"history: {history.path}  (re-check: python -m tests.chaos.runner --replay {history.path})")
    return 0 if verdict.ok and not interrupted else 1


def replay(path: str) -> int:
    verdict = check(read_history(path))
    print(verdict.table(), flush=True)
    return 0 if verdict.ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.runner", description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=1, help="the schedule's seed (1)")
    p.add_argument("--seconds", type=float, default=600.0, help="how long the nemesis runs, full mode (600)")
    p.add_argument("--short", action="store_true", help="each targeted fault once, then the regression list")
    p.add_argument("--kinds", default="", help="short mode: only these targeted kinds, comma-separated")
    p.add_argument("--no-regressions", dest="regressions", action="store_false",
                   help="short mode: skip the regression list")
    p.add_argument("--replay", metavar="HISTORY", help="re-check a run's history.jsonl.gz and print its table")
    p.add_argument("--out", help="run directory (data/chaos/seed-<seed>-<time>)")
    p.add_argument("--network", choices=["auto", "netns", "loopback"], default="auto",
                   help="netns (root: network and disk faults) or loopback (process faults only); auto picks")
    p.add_argument("--producers", type=int, default=3)
    p.add_argument("--rate", type=float, default=150.0, help="records per second per producer (150)")
    p.add_argument("--disk-mb", type=int, default=512, help="each broker's tmpfs in netns mode (512)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a broker setting for every broker")
    args = p.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    if args.seconds <= 0:
        p.error("--seconds must be positive")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
