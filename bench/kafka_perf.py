"""Latency and throughput with Kafka's own tools (issue 23): ProducerPerformance and ConsumerPerformance.

Why: Kafka users judge a broker with `kafka-producer-perf-test` and `kafka-consumer-perf-test`; their
figures, from the Java client, are what such a user will compare. This runs the tools' main classes
(`org.apache.kafka.tools.ProducerPerformance` and `ConsumerPerformance` from kafka-tools 4.3.1, fetched by
`make kafka-tools` into ~/.cache/kelp, kelp/kafka_tools.py) against Kelp and Apache Kafka started side by
side (bench/cluster/sides.py), with the JVM flags of Kafka's perf-test scripts (512 MiB heap, G1, 20 ms pause
target), alternating which broker goes first, `runs` times, each run starting once both clusters have
settled (under 5% of a CPU per broker for a second, 30 s at most: the last run's followers caught up):

- 3 brokers of each, a topic of 6 partitions, RF 3, min.insync.replicas=2: ProducerPerformance at a fixed
  10,000 records/s of 1 KiB, acks=all, linger.ms=1, for `seconds` s after 2 s of warm-up records
  (`--warmup-records`: its steady-state line is the one read);
- 1 broker of each, 6 partitions, RF 1: the same at 20,000 records/s with acks=1;
- on the single brokers: ConsumerPerformance reading `consume_records` 1 KiB records (a topic of 6
  partitions filled once by ProducerPerformance, unthrottled) with a fresh group each run; its fetch rate
  (`fetch.MB.sec`, after the group's join and Kafka's default group.initial.rebalance.delay.ms=3000 on both)
  is the figure, the whole rate beside it.

Printed: p50, p95, p99, p99.9 and max latency (ms, the tool's own: send() to the acknowledgement callback)
and the achieved rate, medians over the runs; MB/s of consume. Then, for each Kelp broker, the largest
event-loop delay its /metrics histogram recorded during the latency runs (a metric whose name holds
`event_loop_lag`, `loop_lag` or `loop_delay`: `kelp_event_loop_lag_seconds`), or that the broker does not
expose one. And what shared the machine during each case: the idle cluster's CPU while the other ran,
and the hypervisor's steal time (/proc/stat).

`python -m bench.kafka_perf` runs this alone; `make bench` runs it (`--perf-seconds`, 0 skips;
`--perf-consume-records`, 0 skips the consume case).

It must never print a percentile without the achieved rate, nor a Kelp figure without Kafka's from the
same run (unless Kafka is skipped, said so).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from . import clients, probe, section_main
from .cluster.sides import SETTLED_PER_BROKER, Side, alternating, load_average, settle, start_sides

__all__ = ["CASES", "producer_perf", "consumer_perf", "parse_producer", "parse_consumer", "scrape_loop_lag",
           "loop_lag_between", "run", "print_report", "main"]

PRODUCER = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER = "org.apache.kafka.tools.ConsumerPerformance"
# kafka-producer-perf-test.sh / kafka-consumer-perf-test.sh (KAFKA_HEAP_OPTS) and kafka-run-class.sh's
# KAFKA_JVM_PERFORMANCE_OPTS.
JVM_FLAGS = ("-Xmx512M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
             "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true")
CASES = (
    {"name": "RF 3, acks=all, 3 brokers", "brokers": 3, "rf": 3, "acks": "all", "rate": 10_000},
    {"name": "RF 1, acks=1, 1 broker", "brokers": 1, "rf": 1, "acks": "1", "rate": 20_000},
)
PARTITIONS = 6
SIZE = 1024
WARMUP_S = 2
LAG_WORDS = ("event_loop_lag", "loop_lag", "loop_delay")

_SUMMARY = re.compile(
    r"(?P<records>\d+) (?P<steady>steady state )?records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, "
    r"(?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th")


def java_command(main_class: str, *args: str) -> list[str]:
    """`java <perf-test flags> -cp <kafka-tools jars> <main class> args...` (FileNotFoundError when not fetched)."""
    import shutil

    from kelp import kafka_tools

    java = shutil.which("java")
    if java is None:
        raise FileNotFoundError("a Java runtime (`java`) is needed to run Kafka's perf tools")
    config = kafka_tools.tools_home() / "log4j2.properties"
    return [java, *JVM_FLAGS, f"-Dlog4j2.configurationFile={config}", "-cp", kafka_tools.classpath(), main_class,
            *args]


def _tool(main_class: str, *args: str, timeout_s: float) -> str:
    done = subprocess.run(java_command(main_class, *args), capture_output=True, text=True, timeout=timeout_s,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{main_class.rsplit('.', 1)[-1]} exited {done.returncode}:\n{done.stdout[-1500:]}\n"
                           f"{done.stderr[-2500:]}")
    return done.stdout


def parse_producer(out: str) -> dict[str, Any]:
    """ProducerPerformance's steady-state summary (its whole-run summary when no warm-up was asked)."""
    found = [m for m in _SUMMARY.finditer(out)]
    if not found:
        raise RuntimeError(f"no ProducerPerformance summary in its output:\n{out[-1500:]}")
    m = next((m for m in found if m["steady"]), found[-1])
    return {"records": int(m["records"]), "records_s": float(m["rate"]), "mb_s": float(m["mb"]) * 2**20 / 1e6,
            "avg_ms": float(m["avg"]), "max_ms": float(m["max"]), "p50_ms": float(m["p50"]),
            "p95_ms": float(m["p95"]), "p99_ms": float(m["p99"]), "p999_ms": float(m["p999"])}


def parse_consumer(out: str) -> dict[str, Any]:
    """ConsumerPerformance's CSV line (header `start.time, end.time, data.consumed.in.MB, ...`)."""
    lines = [line for line in out.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("start.time"):
            header = [h.strip() for h in line.split(",")]
            values = [v.strip() for v in lines[i + 1].split(",")]
            row = dict(zip(header, values, strict=True))
            return {"records": int(row["data.consumed.in.nMsg"]), "mb_s": float(row["MB.sec"]) * 2**20 / 1e6,
                    "records_s": float(row["nMsg.sec"]), "rebalance_ms": float(row["rebalance.time.ms"]),
                    "fetch_ms": float(row["fetch.time.ms"]), "fetch_mb_s": float(row["fetch.MB.sec"]) * 2**20 / 1e6,
                    "fetch_records_s": float(row["fetch.nMsg.sec"])}
    raise RuntimeError(f"no ConsumerPerformance result in its output:\n{out[-1500:]}")


def producer_perf(bootstrap: str, topic: str, *, records: int, rate: int, acks: str, warmup: int = 0,
                  timeout_s: float | None = None) -> dict[str, Any]:
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records), "--throughput",
            str(rate), "--record-size", str(SIZE), "--command-property", f"acks={acks}", "linger.ms=1"]
    if warmup:
        args += ["--warmup-records", str(warmup)]
    # A broker that cannot keep up stretches the run: bounded as if it managed 500 records/s.
    bound = timeout_s if timeout_s is not None else 120 + records / 500
    return parse_producer(_tool(PRODUCER, *args, timeout_s=bound))


def consumer_perf(bootstrap: str, topic: str, *, records: int) -> dict[str, Any]:
    out = _tool(CONSUMER, "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
                "--group", f"kelp-bench-perf-{uuid.uuid4().hex[:8]}", "--timeout", "30000",
                timeout_s=180 + records / 5_000)
    got = parse_consumer(out)
    if got["records"] < records:
        raise RuntimeError(f"ConsumerPerformance read {got['records']} of {records} records from {topic}")
    return got


# -- the event loop's lag, from Kelp's /metrics ---------------------------------------------------------------------


def _labels(metric: str) -> dict[str, str]:
    inside = metric.partition("{")[2].rstrip("}")
    return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', inside))


def scrape_loop_lag(http_url: str, *, timeout_s: float = 10.0, text: str | None = None) -> dict[str, Any] | None:
    """The broker's event-loop lag from /metrics, or None when it has no such metric: a histogram (buckets
    summed over label sets, count, sum) and a gauge of the largest delay (`..._max_seconds`, since start).

    prometheus_client's `_created` samples are skipped.
    """
    if text is None:
        with urllib.request.urlopen(f"{http_url}/metrics", timeout=timeout_s) as resp:
            text = resp.read().decode()
    found: dict[str, Any] = {"metric": None, "gauge": None, "buckets": {}, "count": 0.0, "sum": 0.0, "max": None}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        metric, _, value = line.rpartition(" ")
        name = metric.partition("{")[0]
        if not any(word in name for word in LAG_WORDS) or name.endswith("_created"):
            continue
        try:
            number = float(value)
        except ValueError:
            continue
        kind = next((k for k in ("bucket", "count", "sum") if name.endswith(f"_{k}")), None)
        if kind is None:  # a gauge: the largest delay it reports
            found["gauge"] = found["gauge"] or name
            found["max"] = number if found["max"] is None else max(found["max"], number)
            continue
        found["metric"] = found["metric"] or name[: -len(kind) - 1]
        if kind == "bucket":
            le = _labels(metric).get("le", "+Inf")
            bound = float("inf") if le in ("+Inf", "Inf") else float(le)
            found["buckets"][bound] = found["buckets"].get(bound, 0.0) + number
        else:
            found[kind] += number
    return found if found["metric"] or found["gauge"] else None


def loop_lag_between(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What the histogram recorded between two scrapes: observations, the bucket bounds of the largest one
    (it lies in (max_above_s, max_at_most_s]), their mean; and the gauge's largest delay since start."""
    observed = after["count"] - before["count"]
    above = 0.0
    at_most = float("inf")
    for bound in sorted(after["buckets"]):
        delta = after["buckets"][bound] - before["buckets"].get(bound, 0.0)
        if delta >= observed:
            at_most = bound
            break
        above = bound
    return {"metric": after["metric"] or after["gauge"], "observations": observed,
            "max_above_s": above if observed else 0.0, "max_at_most_s": at_most if observed else 0.0,
            "max_gauge_s": after["max"], "mean_s": (after["sum"] - before["sum"]) / observed if observed else None}


def _scrape_all(side: Side) -> list[dict[str, Any] | None]:
    out = []
    for url in side.http_urls:
        try:
            out.append(scrape_loop_lag(url))
        except OSError:
            out.append(None)
    return out


# -- the section ---------------------------------------------------------------------------------------------------


def _create(side: Side, topic: str, rf: int) -> None:
    clients.create_topic(side.bootstrap, topic, partitions=PARTITIONS, replication_factor=rf,
                         configs={"min.insync.replicas": "2"} if rf >= 3 else {})


def _median(cells: list[dict[str, Any]], key: str) -> float:
    median: float = statistics.median(c[key] for c in cells)
    return median


def run_case(case: dict[str, Any], *, seconds: float, runs: int, work: Path, kafka_version: str | None,
             consume_records: int, warm_up: bool = True) -> dict[str, Any]:
    rate, acks, rf = case["rate"], case["acks"], case["rf"]
    out: dict[str, Any] = {**case, "seconds": seconds, "runs": {}, "loop_lag": {}, "consume": None}
    with ExitStack() as stack:
        sides = start_sides(stack, work, brokers=case["brokers"], kafka_version=kafka_version,
                            label=f"perf-rf{rf}")
        for side in sides if warm_up else []:  # JIT of both brokers: 2 s at the rate, untimed
            topic = f"perf-warm-{uuid.uuid4().hex[:6]}"
            _create(side, topic, rf)
            producer_perf(side.bootstrap, topic, records=rate * WARMUP_S, rate=rate, acks=acks)
        topics = {}
        for side in sides:
            topics[side.name] = f"perf-rf{rf}-{uuid.uuid4().hex[:6]}"
            _create(side, topics[side.name], rf)
        lag: dict[str, list[dict[str, Any]]] = {}
        for _, order in alternating(sides, runs):
            for side in order:
                settled = settle(sides)
                before = _scrape_all(side) if side.name == "kelp" else []
                others = [o for o in sides if o is not side]
                t0, idle0, steal0 = time.monotonic(), sum(o.cpu_seconds() for o in others), probe.steal_seconds()
                got = producer_perf(side.bootstrap, topics[side.name], records=int(rate * (seconds + WARMUP_S)),
                                    rate=rate, acks=acks, warmup=rate * WARMUP_S)
                took = time.monotonic() - t0
                got["settled_cpu"] = settled
                got["idle_side_cpu"] = (sum(o.cpu_seconds() for o in others) - idle0) / took if others else None
                got["steal_cpu"] = (probe.steal_seconds() - steal0) / took
                out["runs"].setdefault(side.name, []).append(got)
                for i, (b, a) in enumerate(zip(before, _scrape_all(side) if before else [], strict=False)):
                    if b is not None and a is not None:
                        lag.setdefault(f"kelp broker {i}", []).append(loop_lag_between(b, a))
                    else:
                        lag.setdefault(f"kelp broker {i}", [])
        for name, seen in lag.items():
            out["loop_lag"][name] = None if not seen else {
                "metric": seen[0]["metric"], "observations": sum(s["observations"] for s in seen),
                "max_above_s": max(s["max_above_s"] for s in seen),
                "max_at_most_s": max(s["max_at_most_s"] for s in seen),
                "max_gauge_s": max((s["max_gauge_s"] for s in seen if s["max_gauge_s"] is not None), default=None)}
        if consume_records > 0 and case["brokers"] == 1:
            topic = f"perf-consume-{uuid.uuid4().hex[:6]}"
            for side in sides:
                _create(side, topic, rf)
                producer_perf(side.bootstrap, topic, records=consume_records, rate=-1, acks="1")
                if warm_up:
                    consumer_perf(side.bootstrap, topic, records=min(consume_records, 50_000))  # untimed
            got_consume: dict[str, list[dict[str, Any]]] = {}
            for _, order in alternating(sides, runs):
                for side in order:
                    got_consume.setdefault(side.name, []).append(
                        consumer_perf(side.bootstrap, topic, records=consume_records))
            out["consume"] = {"records": consume_records, "runs": got_consume}
    out["summary"] = {name: {key: _median(cells, key) for key in ("records_s", "mb_s", "p50_ms", "p95_ms", "p99_ms",
                                                                  "p999_ms", "max_ms", "avg_ms")}
                      for name, cells in out["runs"].items()}
    if out["consume"]:
        out["consume"]["summary"] = {name: {key: _median(cells, key) for key in ("mb_s", "records_s", "fetch_mb_s",
                                                                                 "fetch_records_s", "rebalance_ms")}
                                     for name, cells in out["consume"]["runs"].items()}
    return out


def run(*, seconds: float, runs: int, work: Path, kafka_version: str | None, consume_records: int,
        cases: tuple[dict[str, Any], ...] = CASES, warm_up: bool = True) -> dict[str, Any]:
    """Every case of `cases` (both of CASES); `warm_up` False (tests only) skips the untimed warm-up runs."""
    load0 = load_average()
    res = [run_case(case, seconds=seconds, runs=runs, work=work / f"case-{i}", kafka_version=kafka_version,
                    consume_records=consume_records, warm_up=warm_up) for i, case in enumerate(cases)]
    return {"cases": res, "runs": runs, "seconds": seconds, "size": SIZE, "partitions": PARTITIONS,
            "kafka": kafka_version is not None, "cpus": os.cpu_count(), "load_average": [load0, load_average()]}


def _ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _share(values: list[float]) -> str:
    lo, hi = min(values) * 100, max(values) * 100
    return f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f}%"


def _interference(case: dict[str, Any], names: list[str]) -> str:
    """What else ran during the case's runs: the idle cluster's CPU, the hypervisor's steal, and how quiet
    both clusters were when each run started (`settle`)."""
    cells = [(name, r) for name in names for r in case["runs"][name]]
    parts = [f"each run started once both clusters used under {SETTLED_PER_BROKER:.0%} of a CPU per broker for 1 s "
             f"(30 s at most; the last second before a start: {_share([r['settled_cpu'] for _, r in cells])} of a "
             "CPU)"]
    if len(names) > 1:
        for name in names:
            idle = [r["idle_side_cpu"] for r in case["runs"][name] if r.get("idle_side_cpu") is not None]
            other = next(n for n in names if n != name)
            if idle:
                parts.append(f"during {name}'s runs the idle {other} cluster used {_share(idle)} of a CPU")
    parts.append(f"steal (CPU the hypervisor gave elsewhere) {_share([r['steal_cpu'] for _, r in cells])} of a CPU")
    return "; ".join(parts)


def print_report(res: dict[str, Any]) -> None:
    from kelp.cli.output import print_table

    names = ["kelp", "kafka"] if res["kafka"] else ["kelp"]
    print(f"\nKafka's own tools (kafka-tools 4.3.1, Java client): ProducerPerformance at a fixed rate, "
          f"{res['size']:,} B records, {res['partitions']} partitions, linger.ms=1, {res['seconds']:.0f} s after "
          f"{WARMUP_S} s of warm-up records; medians of {res['runs']} run(s), alternating which broker goes first")
    if not res["kafka"]:
        print("Apache Kafka reference skipped (--no-kafka)")
    table = []
    for case in res["cases"]:
        for name in names:
            s = case["summary"][name]
            table.append([case["name"], name, f"{case['rate']:,} / {s['records_s']:,.0f}", _ms(s["p50_ms"]),
                          _ms(s["p95_ms"]), _ms(s["p99_ms"]), _ms(s["p999_ms"]), _ms(s["max_ms"]),
                          " ".join(_ms(r["p99_ms"]) for r in case["runs"][name])])
    print_table(table, ["CASE", "BROKER", "OFFERED / ACHIEVED rec/s", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms",
                        "max ms", "p99 PER RUN"])
    print("latency: the tool's own, send() to the acknowledgement, steady state (after --warmup-records); "
          "the tool prints whole milliseconds")
    for case in res["cases"]:
        print(f"interference ({case['name']}): " + _interference(case, names))
    consume = [(case, case["consume"]) for case in res["cases"] if case.get("consume")]
    for case, c in consume:
        rows = [[name, f"{c['summary'][name]['fetch_mb_s']:,.1f}", f"{c['summary'][name]['fetch_records_s']:,.0f}",
                 f"{c['summary'][name]['mb_s']:,.1f}", f"{c['summary'][name]['rebalance_ms']:,.0f}"] for name in names]
        print_table(rows, [f"ConsumerPerformance ({c['records']:,} x 1 KiB, {case['name']})", "FETCH MB/s",
                           "FETCH rec/s", "WHOLE MB/s", "JOIN ms"])
        if res["kafka"]:
            k, f = c["summary"]["kelp"], c["summary"]["kafka"]
            print(f"consume Kelp/Kafka: {k['fetch_mb_s'] / f['fetch_mb_s']:.2f}x (fetch rate: after the group's join, "
                  "group.initial.rebalance.delay.ms=3000 on both; WHOLE includes it)")
    for case in res["cases"]:
        lag = case["loop_lag"]
        seen = {b: v for b, v in lag.items() if v}
        if not seen:
            print(f"event-loop lag ({case['name']}): not available — the Kelp brokers' /metrics has no event-loop lag "
                  "histogram (kelp_event_loop_lag_seconds)")
            continue
        parts = []
        for broker, v in seen.items():
            part = broker
            if v["observations"]:
                part += (f" largest in ({v['max_above_s'] * 1e3:g}, {v['max_at_most_s'] * 1e3:g}] ms over "
                         f"{v['observations']:,.0f} samples")
            if v["max_gauge_s"] is not None:
                part += f" (largest since its start {v['max_gauge_s'] * 1e3:.1f} ms)"
            parts.append(part)
        print(f"event-loop lag during the latency runs ({case['name']}, {next(iter(seen.values()))['metric']}): "
              + "; ".join(parts))
    load = res["load_average"]
    print(f"machine: {res['cpus']} CPUs, load average {load[0]:.1f} at the start, {load[1]:.1f} at the end "
          "(tools and brokers share them)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options `python -m bench.kafka_perf` and `python -m bench` share."""
    p.add_argument("--perf-seconds", type=float, default=20.0,
                   help="seconds of each ProducerPerformance latency run after 2 s of warm-up (20; 0 skips the "
                        "Kafka-tools section)")
    p.add_argument("--perf-consume-records", type=int, default=500_000,
                   help="1 KiB records ConsumerPerformance reads per run (500000; 0 skips it)")


def run_from_args(args: argparse.Namespace, *, work: Path, kafka_version: str | None) -> dict[str, Any] | None:
    if args.perf_seconds <= 0:
        return None
    return run(seconds=args.perf_seconds, runs=max(1, args.runs), work=work, kafka_version=kafka_version,
               consume_records=max(0, args.perf_consume_records))


def main(argv: list[str] | None = None) -> int:
    return section_main("kafka_perf", __doc__ or "", argv, add_arguments=add_arguments, run_from_args=run_from_args,
                        report=print_report)


if __name__ == "__main__":
    sys.exit(main())
