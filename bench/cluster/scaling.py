"""Scaling beyond one core: 1, 2 and 4 Kelp brokers on this machine against one Apache Kafka broker, same client load.

Why: a Kelp broker is one Python process whose request path runs on one
event-loop thread, so one broker uses at most about one core however many the
machine has; Kelp scales on a many-core node by running more brokers. This
measures what that buys on this machine: for each broker count N, a cluster
of N Kelp brokers (shared `cluster.dir`, file leases, as `kelp dev-cluster`)
gets a topic of 2N partitions with replication factor 1, whose leaders the
controller spreads evenly (checked: each broker leads 2); four producer
processes (confluent-kafka, acks=1, 1 KiB records, linger.ms=5) start
together and each spread their records round-robin over every partition.
One Apache Kafka KRaft node gets the same topics (2, 4, 8 partitions) and the
same producers, in the same run, alternating with Kelp which goes first (the
JVM stays up, idle, while Kelp runs), each after the same warm-up. The rate is every record over the time
from the first producer's start to the last one's final acknowledgement;
CPU is utime+stime of the broker processes (and of the producers) over the
run, also shown as cores (CPU-seconds per wall second), with the busiest
single broker's share — the figure that shows where one process stops.

`python -m bench.cluster.scaling [--brokers 1,2,4]` runs it alone; `make bench` runs
it last (`--scaling-brokers`, empty skips).

It must never report a rate before every record was acknowledged, nor a
cluster whose partition leaders are not spread evenly without saying so.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from .. import clients, emit, probe
from ..broker import BenchBroker

__all__ = ["run", "print_report", "main"]

PRODUCERS = 4
RECORD_BYTES = 1024
PARTITIONS_PER_BROKER = 2
WARMUP_RECORDS = 20_000  # per producer process, before the timed runs of each configuration


def _producer(bootstrap: str, topic: str, count: int, partitions: int, first: int, gate: Any, out: Any) -> None:
    cpu0: list[float] = []

    def start() -> None:  # the client is up and its records are made: its CPU from here on is the load's
        gate.wait(120)
        cpu0.append(time.process_time())

    elapsed = clients.produce(bootstrap, topic, count=count, size=RECORD_BYTES, acks=1, partitions=partitions,
                              first_partition=first, start_gate=start)
    end = time.monotonic()
    out.put((end - elapsed, end, time.process_time() - cpu0[0]))


def _load(bootstrap: str, topic: str, partitions: int, records: int,
          broker_cpu: Callable[[], list[float]]) -> dict[str, Any]:
    """PRODUCERS processes x `records` over every partition of `topic`, started together; rate and CPU."""
    ctx = mp.get_context("spawn")
    gate, out = ctx.Barrier(PRODUCERS + 1), ctx.Queue()
    procs = [ctx.Process(target=_producer, args=(bootstrap, topic, records, partitions, i % partitions, gate, out))
             for i in range(PRODUCERS)]
    for p in procs:
        p.start()
    gate.wait(120)  # every producer has its client up: the brokers' CPU is read just before they start
    cpu0 = broker_cpu()
    spans = [out.get(timeout=600) for _ in procs]
    cpu1 = broker_cpu()
    for p in procs:
        p.join(30)
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a producer process failed (exit codes {[p.exitcode for p in procs]})")
    seconds = max(end for _, end, _ in spans) - min(start for start, _, _ in spans)
    per_broker = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    return {"seconds": seconds, "mb_s": PRODUCERS * records * RECORD_BYTES / 1e6 / seconds,
            "broker_cpu_s": sum(per_broker), "max_broker_cpu_s": max(per_broker),
            "client_cpu_s": sum(c for _, _, c in spans)}


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partitions each broker leads (Metadata through confluent-kafka)."""
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30).topics[topic]
    return dict(Counter(p.leader for p in meta.partitions.values()))


def _measure(name: str, bootstrap: str, brokers: int, partitions: int, *, records: int, runs: int,
             broker_cpu: Callable[[], list[float]]) -> dict[str, Any]:
    """Warm-up, then `runs` timed loads, each on a topic of its own; medians."""
    warm = f"scaling-warm-{brokers}-{partitions}"
    clients.create_topic(bootstrap, warm, partitions=partitions)
    _load(bootstrap, warm, partitions, WARMUP_RECORDS, broker_cpu)
    got = []
    leaders: dict[int, int] = {}
    for run in range(runs):
        topic = f"scaling-{brokers}-{partitions}-{run}"
        clients.create_topic(bootstrap, topic, partitions=partitions)
        leaders = _leaders(bootstrap, topic)
        got.append(_load(bootstrap, topic, partitions, records, broker_cpu))
    med = {key: statistics.median(g[key] for g in got) for key in got[0]}
    return {"name": name, "brokers": brokers, "partitions": partitions, "records": PRODUCERS * records,
            "leaders": {str(k): v for k, v in sorted(leaders.items())},
            "even": len(leaders) == brokers and len(set(leaders.values())) == 1,
            **med, "broker_cores": med["broker_cpu_s"] / med["seconds"],
            "max_broker_cores": med["max_broker_cpu_s"] / med["seconds"],
            "client_cores": med["client_cpu_s"] / med["seconds"],
            "runs_mb_s": [round(g["mb_s"], 1) for g in got]}


def run_kelp(brokers: int, *, records: int, runs: int, work: Path) -> dict[str, Any]:
    """N Kelp brokers in one cluster (file leases under a shared cluster.dir), RF=1 topics of 2N partitions."""
    from kelp.cli.http_client import AdminClient

    settings = {"cluster.dir": str(work / f"scaling-{brokers}-cluster"), "default.replication.factor": 1}
    nodes = [BenchBroker(work / f"scaling-{brokers}-{i}", settings=settings, broker_id=i) for i in range(brokers)]
    try:
        for b in nodes:
            b.start()
        admin = AdminClient(nodes[0].http_url)
        deadline = time.monotonic() + 30
        while len(admin.get("/admin/v1/brokers")["brokers"]) < brokers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {brokers} brokers did not join one cluster within 30 s")
            time.sleep(0.2)
        bootstrap = ",".join(b.bootstrap for b in nodes)
        return _measure("kelp", bootstrap, brokers, brokers * PARTITIONS_PER_BROKER, records=records, runs=runs,
                        broker_cpu=lambda: [probe.cpu_seconds([b.proc.pid]) for b in nodes if b.proc])
    finally:
        for b in nodes:
            b.stop()


def run(*, brokers: list[int], records: int, runs: int, work: Path, kafka_version: str | None) -> dict[str, Any]:
    """For each N: N Kelp brokers, and the one Kafka node (kept running) on 2N partitions; alternating who goes
    first."""
    from ..kafka_ref import KafkaCluster

    kelp, kafka_rows = [], []
    with tempfile.TemporaryDirectory(prefix="scaling-", dir=work) as tmp:
        kafka = KafkaCluster(Path(tmp) / "kafka", version=kafka_version) if kafka_version else None
        try:
            if kafka is not None:
                kafka.start()
            for i, n in enumerate(brokers):
                for which in (("kafka", "kelp") if i % 2 == 0 else ("kelp", "kafka")):
                    if which == "kelp":
                        with tempfile.TemporaryDirectory(prefix=f"kelp-{n}-", dir=tmp) as kelp_tmp:
                            kelp.append(run_kelp(n, records=records, runs=runs, work=Path(kelp_tmp)))
                    elif kafka is not None:
                        kafka_rows.append(_measure("kafka", kafka.bootstrap, 1, n * PARTITIONS_PER_BROKER,
                                                   records=records, runs=runs,
                                                   broker_cpu=lambda: [kafka.cpu_seconds()]))
        finally:
            if kafka is not None:
                kafka.stop(timeout_s=10)
    return {"producers": PRODUCERS, "records_per_producer": records, "runs": runs, "cpus": os.cpu_count(),
            "load_average": os.getloadavg()[0], "kelp": kelp, "kafka": kafka_rows}


def print_report(res: dict[str, Any]) -> None:
    from kelp.cli.output import print_table

    print(f"\nscaling: {res['producers']} producer processes x {res['records_per_producer']:,} records of 1 KiB, "
          f"acks=1, round-robin over 2 partitions per Kelp broker (RF=1); one Kafka node, same topics; "
          f"medians of {res['runs']}")
    kafka = {k["partitions"]: k for k in res["kafka"]}
    one = res["kelp"][0] if res["kelp"] else None
    rows = []
    for r in res["kelp"]:
        k = kafka.get(r["partitions"])
        rows.append([f"{r['brokers']}", f"{r['partitions']}", f"{r['mb_s']:,.1f}",
                     f"{r['mb_s'] / res['kelp'][0]['mb_s']:.2f}x",
                     f"{r['broker_cores']:.2f}", f"{r['max_broker_cores']:.2f}", f"{r['client_cores']:.2f}",
                     f"{r['broker_cpu_s'] / (r['records'] * RECORD_BYTES / 1e9):.2f}",
                     f"{k['mb_s']:,.1f}" if k else "-", f"{r['mb_s'] / k['mb_s']:.2f}x" if k else "-",
                     f"{k['broker_cores']:.2f}" if k else "-",
                     f"{k['broker_cpu_s'] / (k['records'] * RECORD_BYTES / 1e9):.2f}" if k else "-"])
    print_table(rows, ["KELP BROKERS", "PARTITIONS", "KELP MB/s", "VS 1 BROKER", "KELP CORES", "BUSIEST BROKER",
                       "CLIENT CORES", "KELP CPU s/GB", "KAFKA (1 NODE) MB/s", "KELP/KAFKA", "KAFKA CORES",
                       "KAFKA CPU s/GB"])
    uneven = [f"{r['brokers']} brokers: leaders {r['leaders']}" for r in res["kelp"] if not r["even"]]
    if uneven:
        print("partition leaders NOT spread evenly: " + "; ".join(uneven))
    print(f"cores = CPU-seconds per wall second over the run; this machine has {res['cpus']} CPUs, shared by the "
          f"producers and every broker (load average {res['load_average']:.1f} at the end)")
    if one:
        ceiling = 1.0 / one["broker_cpu_s"] * (one["records"] * RECORD_BYTES / 1e9) * 1e3
        print(f"one Kelp broker: busiest at {one['max_broker_cores']:.2f} of the 1.0 core its event loop can use "
              f"(the GIL); at its {one['broker_cpu_s'] / (one['records'] * RECORD_BYTES / 1e9):.2f} CPU-s/GB that "
              f"core would carry about {ceiling:,.0f} MB/s of this load")
    if one and len(res["kelp"]) > 1 and res["kafka"]:
        best = max(res["kelp"], key=lambda r: r["mb_s"])
        k = kafka.get(best["partitions"])
        if k:
            verdict = "met" if best["mb_s"] >= k["mb_s"] else "MISSED"
            print(f"goal N Kelp brokers >= one Kafka broker on the same cores: {verdict} ({best['brokers']} brokers "
                  f"{best['mb_s']:,.1f} MB/s vs Kafka {k['mb_s']:,.1f} MB/s, {best['mb_s'] / k['mb_s']:.2f}x)")


def main(argv: list[str] | None = None) -> int:
    from ..kafka_ref import KAFKA_VERSION

    p = argparse.ArgumentParser(prog="python -m bench.cluster.scaling", description=__doc__.splitlines()[0])
    p.add_argument("--brokers", default="1,2,4", help="Kelp broker counts (1,2,4)")
    p.add_argument("--records", type=int, default=150_000, help="1 KiB records per producer process per run (150000)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-kafka", action="store_true")
    p.add_argument("--kafka-version", default=KAFKA_VERSION)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    brokers = [int(n) for n in args.brokers.split(",") if n.strip()]
    with tempfile.TemporaryDirectory(prefix="kelp-bench-scaling-") as tmp:
        res = run(brokers=brokers, records=args.records, runs=max(1, args.runs), work=Path(tmp),
                  kafka_version=None if args.no_kafka else args.kafka_version)
    emit("scaling", res, as_json=args.json, report=print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
