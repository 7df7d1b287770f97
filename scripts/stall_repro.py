"""Reproduce issue 23's tail latency: Kafka's ProducerPerformance against three Kelp brokers.

Why: the stalls only show under a steady acks=all stream across a replicated
cluster, so they are found (and a fix judged) with exactly that load: three
brokers on loopback (ids 0..2, ephemeral ports, `make run`'s replication
settings), a topic of 6 partitions with replication factor 3, and
`org.apache.kafka.tools.ProducerPerformance` offering RATE records/s of SIZE
bytes with acks=all and linger.ms=1 for SECONDS seconds. It prints the tool's
summary (p50/p95/p99/p99.9), each broker's event-loop lag histogram
(`kelp_event_loop_lag_seconds` from /metrics, when the brokers have it) and
the broker log lines that name a stall.

`--pythonpath DIR` runs the brokers from another source tree (a `kelp`
package laid out as installed, e.g. an export of main) for before/after
runs; `--profile` records each broker with py-spy (non-blocking sampling,
so the profiler itself does not pause the brokers) into the output
directory. Every wait is bounded; the brokers are killed at the end.

Run: `PYTHONSAFEPATH=1 .venv/bin/python scripts/stall_repro.py --seconds 60`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))

from kelp import kafka_tools  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.cluster import Cluster  # noqa: E402

SUMMARY = re.compile(r"(\d+) records sent, ([\d.]+) records/sec .*?([\d.]+) ms avg latency, ([\d.]+) ms max latency, "
                     r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def lag_histogram(http_url: str) -> dict[str, float]:
    """Cumulative bucket counts of kelp_event_loop_lag_seconds (le -> count), empty when absent."""
    try:
        with urllib.request.urlopen(http_url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r'kelp_event_loop_lag_seconds_bucket\{le="([^"]+)"\} ([\d.e+]+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
        m = re.match(r"(kelp_event_loop_lag_seconds_(?:count|sum)|kelp_event_loop_lag_max_seconds) ([\d.e+-]+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
        m = re.match(r'kelp_gc_pause_seconds_(count|sum)\{generation="(\d)"\} ([\d.e+-]+)', line)
        if m:
            out[f"gc{m.group(2)}_{m.group(1)}"] = float(m.group(3))
        m = re.match(r'kelp_gc_pause_seconds_bucket\{generation="2",le="0.05"\} ([\d.e+-]+)', line)
        if m:
            out["gc2_le_50ms"] = float(m.group(1))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (/proc), 0 when gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def over(hist: dict[str, float], le: str) -> float:
    """Samples above bucket `le`."""
    return hist.get("+Inf", 0.0) - hist.get(le, 0.0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--rate", type=int, default=10_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--out", default="/tmp/kelp-stalls")
    p.add_argument("--label", default="run")
    p.add_argument("--pythonpath", default="", help="source tree to run the brokers from (before/after runs)")
    p.add_argument("--profile", action="store_true", help="py-spy record every broker for the run")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra broker setting")
    args = p.parse_args()

    out = Path(args.out) / args.label
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    settings: dict[str, object] = {"cluster.dir": str(out / "cluster"), "default.replication.factor": 3,
                                   "min.insync.replicas": 2, "offsets.topic.replication.factor": 3}
    for item in args.set:
        k, _, v = item.partition("=")
        settings[k] = v
    env = {"PYTHONPATH": args.pythonpath} if args.pythonpath else {}
    brokers = [BrokerProcess(out / f"broker-{i}", settings=settings, broker_id=i, env=env) for i in range(3)]
    cluster = Cluster(out, brokers)
    spies: list[subprocess.Popen[bytes]] = []
    try:
        for b in brokers:
            b.start(timeout=60)
        cluster.wait_for("3 brokers", lambda: len(cluster.admin("/admin/v1/brokers")["brokers"]) == 3, timeout=60)
        cluster.admin("/admin/v1/topics", "POST", {"name": "perf", "partitions": args.partitions,
                                                   "replication_factor": 3})
        cluster.wait_fully_replicated("perf", timeout=60)
        before = [lag_histogram(b.http_url) for b in brokers]
        cpu0 = [cpu_seconds(b.proc.pid) if b.proc else 0.0 for b in brokers]
        n = int(args.rate * args.seconds)
        cmd = kafka_tools.java_command(
            "org.apache.kafka.tools.ProducerPerformance", "--topic", "perf", "--num-records", str(n),
            "--record-size", str(args.size), "--throughput", str(args.rate), "--producer-props",
            f"bootstrap.servers={cluster.bootstrap}", "acks=all", "linger.ms=1")
        cmd = [c for c in cmd if c not in ("-Xmx256m",)]
        cmd.insert(1, "-Xmx1g")
        if args.profile:
            spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            for b in brokers:
                assert b.proc is not None
                spies.append(subprocess.Popen(
                    [spy, "record", "--pid", str(b.proc.pid), "--duration", str(int(args.seconds)), "--rate", "200",
                     "--nonblocking", "--format", "raw", "--output", str(out / f"pyspy-{b.broker_id}.txt")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        started = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds * 3 + 120)
        elapsed = time.monotonic() - started
        (out / "producer-performance.txt").write_text(done.stdout + "\n--- stderr\n" + done.stderr)
        summary = SUMMARY.findall(done.stdout)
        after = [lag_histogram(b.http_url) for b in brokers]
        cpu1 = [cpu_seconds(b.proc.pid) if b.proc else 0.0 for b in brokers]
        for s in spies:
            try:
                s.wait(timeout=60)
            except subprocess.TimeoutExpired:
                s.kill()
        result: dict[str, object] = {"label": args.label, "elapsed_s": round(elapsed, 1),
                                     "load_avg": os.getloadavg(), "rc": done.returncode}
        if summary:
            sent, rate, avg, mx, p50, p95, p99, p999 = summary[-1]
            result.update(sent=int(sent), rate=float(rate), avg_ms=float(avg), max_ms=float(mx), p50=int(p50),
                          p95=int(p95), p99=int(p99), p999=int(p999))
        else:
            result["stdout_tail"] = done.stdout[-1500:] + done.stderr[-1500:]
        lags = []
        for b, h0, h1 in zip(brokers, before, after, strict=True):
            if not h1:
                continue
            delta = {k: h1.get(k, 0.0) - h0.get(k, 0.0) for k in h1}
            lags.append({"broker": b.broker_id, "samples": delta.get("+Inf"),
                         "over_20ms": over(delta, "0.02"), "over_50ms": over(delta, "0.05"),
                         "over_100ms": over(delta, "0.1"), "max_s": h1.get("kelp_event_loop_lag_max_seconds")})
        result["loop_lag"] = lags
        result["broker_cpu_pct"] = [round((c1 - c0) / elapsed * 100) for c0, c1 in zip(cpu0, cpu1, strict=True)]
        gcs = {}
        for key in ("gc0_count", "gc1_count", "gc2_count", "gc2_sum", "gc2_le_50ms"):
            gcs[key] = [round(h1.get(key, 0.0) - h0.get(key, 0.0), 3) for h0, h1 in zip(before, after, strict=True)]
        result["gc"] = gcs
        for b in brokers:
            (out / f"broker-{b.broker_id}.log").write_text(b.log_text())
        result["lag_log_lines"] = sum(b.log_text().count("event loop blocked") for b in brokers)
        print(json.dumps(result))
        with open(Path(args.out) / "results.jsonl", "a") as f:
            f.write(json.dumps(result) + "\n")
        return 0
    finally:
        for s in spies:
            if s.poll() is None:
                s.kill()
        for b in brokers:
            b.kill()


if __name__ == "__main__":
    sys.exit(main())
