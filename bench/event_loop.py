"""Event loops: the same Kelp broker on asyncio's loop and on uvloop's, alternating, on the cases of `make bench`.

Why: issue 38 asks whether uvloop (libuv underneath, its own TLS transport) makes the broker faster than the
standard library's loop, and to choose the default of `event.loop` (broker/event_loop.py) from the figures.
Two Kelp brokers run side by side, alike but for `event.loop` (each says in its ready line which loop it
runs; a broker that runs another is an error, not a figure), each with PLAINTEXT, SSL and SASL_SSL
(SCRAM-SHA-512) listeners and the same certificate (bench/security/pki.py). Then, alternating which
broker goes first, `runs` times each, medians:

- throughput: bench/security/section.py's workload (`measure`) — produce with acks=1 and acks=all to a topic of
  one partition per run, and consume from offset 0 of a topic produced once — for 100 B records over
  PLAINTEXT and for 1 KiB records over PLAINTEXT, SSL and SASL_SSL (the throughput cases of `make bench` and
  of its security section), broker CPU per GB beside;
- end-to-end latency at a fixed offered rate (bench/latency.py): p50 and p99;
- idle connections (bench/connections.py, once per broker): RSS per connection, and the latency beside them.

The ratio column is uvloop's rate over asyncio's (latency: asyncio's over uvloop's, so above 1 is uvloop
better everywhere), with the per-run ratios of runs measured back to back: the noise to read it against on a
shared machine (the load average is printed).

`python -m bench.event_loop` runs this alone; `make bench` runs it last (`--event-loops asyncio,uvloop`; empty
skips it). It must never report a figure of one loop without the other's measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from . import clients, connections, latency, probe, section_main
from .broker import BenchBroker
from .security.section import ADMIN, USER, _endpoints, _kelp_format, _pids_of, kelp_settings, measure

__all__ = ["LOOPS", "run", "run_from_args", "print_report", "add_arguments", "main"]

LOOPS = ("asyncio", "uvloop")
MODES = ("PLAINTEXT", "SSL", "SASL_SSL")


def _latency_runs(brokers: dict[str, BenchBroker], *, runs: int, mb_s: float, seconds: float) -> dict[str, Any]:
    """Each broker's end-to-end latency, alternating which goes first; medians of p50 and p99."""
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in brokers}
    names = list(brokers)
    for run in range(runs):
        for name in names if run % 2 == 0 else names[::-1]:
            got[name].append(latency.run(brokers[name].bootstrap, topic=f"loop-latency-{run}", mb_s=mb_s,
                                         seconds=seconds))
    return {name: {"p50_ms": statistics.median(r["p50_ms"] for r in rs),
                   "p99_ms": statistics.median(r["p99_ms"] for r in rs),
                   "runs_p50_ms": [round(r["p50_ms"], 2) for r in rs],
                   "runs_p99_ms": [round(r["p99_ms"], 2) for r in rs]} for name, rs in got.items()}


def run(*, loops: list[str], runs: int, records_100: int, records_1k: int, consume_records: int,
        latency_mb_s: float, latency_s: float, idle_connections: int, work: Path) -> dict[str, Any]:
    from .security.pki import make_pki

    load0 = os.getloadavg()
    unknown = [name for name in loops if name not in LOOPS]
    if unknown or len(set(loops)) != len(loops):
        raise ValueError(f"--event-loops {','.join(loops)}: expected distinct loops of {', '.join(LOOPS)}")
    pki = make_pki(work / "pki")
    result: dict[str, Any] = {"loops": loops, "runs": runs, "cpus": os.cpu_count(), "rows": []}
    with ExitStack() as stack:
        brokers: dict[str, BenchBroker] = {}
        for name in loops:
            log_dir = work / f"kelp-{name}"
            log_dir.mkdir(parents=True, exist_ok=True)
            _kelp_format(log_dir, (USER, ADMIN))
            settings = {**kelp_settings(pki, listeners=("SSL", "SASL_SSL")), "event.loop": name}
            broker = brokers[name] = stack.enter_context(BenchBroker(log_dir, settings=settings))
            if broker.ready.get("event_loop") != name:
                raise RuntimeError(f"the broker started with event.loop={name} runs {broker.ready.get('event_loop')}")
        pids = {name: b.proc.pid for name, b in brokers.items() if b.proc is not None}
        for size, records, modes in ((100, records_100, ("PLAINTEXT",)), (1024, records_1k, MODES)):
            if records <= 0:
                continue
            endpoints = [ep for name, b in brokers.items()
                         for ep in _endpoints(name, b.listeners, list(modes), pki.ca_file, _pids_of(pids[name]))]
            topics = {}
            for name, b in brokers.items():
                topic = topics[name] = f"loop-consume-{size}"
                clients.create_topic(b.bootstrap, topic)
                clients.produce(b.bootstrap, topic, count=consume_records, size=size)
            for row in measure(endpoints, records=records, consume_records=consume_records, size=size, runs=runs,
                               consume_topics=topics, label=f"loop-{size}"):
                result["rows"].append({"size": size, **row})
        if latency_s > 0:
            result["latency"] = {"offered_mb_s": latency_mb_s, "seconds": latency_s,
                                 **_latency_runs(brokers, runs=runs, mb_s=latency_mb_s, seconds=latency_s)}
        if idle_connections > 0:
            result["idle"] = {name: connections.run(b.bootstrap, _pids_of(pids[name]), count=idle_connections,
                                                    latency_s=min(latency_s, 5.0) or 5.0, mb_s=latency_mb_s)
                              for name, b in brokers.items()}
        result["rss_after_bytes"] = {name: probe.rss_bytes([pid]) for name, pid in pids.items()}
    result["load_average"] = [round(load0[0], 2), round(os.getloadavg()[0], 2)]
    return result


def print_report(res: dict[str, Any]) -> None:
    from kelp.cli.output import print_table

    loops = res["loops"]
    pair = loops == list(LOOPS)
    print(f"\nevent loops: one Kelp broker per loop ({', '.join(loops)}), medians of {res['runs']} run(s), "
          "alternating which goes first")
    header = ["SECURITY", "RECORD", "CASE", *(f"{n.upper()} MB/s" for n in loops)]
    if pair:
        header += ["UVLOOP/ASYNCIO", "PER RUN (min-max)"]
    header += [f"{n.upper()} CPU s/GB" for n in loops]
    table = []
    for r in res["rows"]:
        line = [r["security"], f"{r['size']:,} B", r["case"], *(f"{r[n]['mb_s']:,.1f}" for n in loops)]
        if pair:
            paired = [u / a for a, u in zip(r["asyncio"]["runs_mb_s"], r["uvloop"]["runs_mb_s"], strict=True)]
            line += [f"{r['uvloop']['mb_s'] / r['asyncio']['mb_s']:.2f}x",
                     f"{statistics.median(paired):.2f}x ({min(paired):.2f}-{max(paired):.2f})"]
        line += ["-" if r[n]["broker_cpu_s_per_gb"] is None else f"{r[n]['broker_cpu_s_per_gb']:.2f}" for n in loops]
        table.append(line)
    print_table(table, header)
    lat = res.get("latency")
    if lat:
        rows = [[n, f"{lat[n]['p50_ms']:.1f}", f"{lat[n]['p99_ms']:.1f}",
                 " ".join(f"{p:.1f}" for p in lat[n]["runs_p99_ms"])] for n in loops]
        print_table(rows, ["LATENCY", "p50 ms", "p99 ms", "p99 PER RUN"])
        print(f"latency: 1 KiB records offered at {lat['offered_mb_s']:g} MB/s for {lat['seconds']:g} s "
              "(bench/latency.py)" + (f"; asyncio p99 over uvloop p99 "
                                      f"{lat['asyncio']['p99_ms'] / lat['uvloop']['p99_ms']:.2f}x" if pair else ""))
    idle = res.get("idle")
    if idle:
        print_table([[n, f"{i['connections']:,}", f"{i['bytes_per_connection'] / 1024:,.1f}",
                      f"{i['latency']['p50_ms']:.1f}", f"{i['latency']['p99_ms']:.1f}"] for n, i in idle.items()],
                    ["IDLE CONNECTIONS", "OPEN", "KiB/CONNECTION", "p50 ms", "p99 ms"])
    rss = res["rss_after_bytes"]
    print("RSS after the cases: " + ", ".join(f"{n} {rss[n] / 2**20:,.0f} MiB" for n in loops))
    print(f"machine: {res['cpus']} CPUs, load average {res['load_average'][0]:.1f} at the start, "
          f"{res['load_average'][1]:.1f} at the end")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options `python -m bench.event_loop` and `python -m bench` share."""
    p.add_argument("--event-loops", default=",".join(LOOPS),
                   help="the loops compared, one Kelp broker each: asyncio,uvloop (both; empty skips the section)")
    p.add_argument("--loop-records-100", type=int, default=400_000,
                   help="100 B records produced per run over PLAINTEXT (400000; 0 skips)")
    p.add_argument("--loop-records-1k", type=int, default=200_000,
                   help="1 KiB records produced per run over each listener (200000; 0 skips)")
    p.add_argument("--loop-consume-records", type=int, default=500_000,
                   help="records consumed from offset 0 per run (500000)")
    p.add_argument("--loop-latency-seconds", type=float, default=10.0, help="each latency run, seconds (10; 0 skips)")
    p.add_argument("--loop-idle-connections", type=int, default=2000,
                   help="idle connections held open on each broker (2000; 0 skips)")


def run_from_args(args: argparse.Namespace, *, work: Path) -> dict[str, Any] | None:
    loops = [name.strip() for name in args.event_loops.split(",") if name.strip()]
    if not loops:
        return None
    return run(loops=loops, runs=max(1, args.runs), records_100=args.loop_records_100,
               records_1k=args.loop_records_1k, consume_records=args.loop_consume_records,
               latency_mb_s=getattr(args, "latency_mb_s", 20.0), latency_s=args.loop_latency_seconds,
               idle_connections=args.loop_idle_connections, work=work)


def main(argv: list[str] | None = None) -> int:
    return section_main("event_loop", __doc__ or "", argv, add_arguments=add_arguments, run_from_args=run_from_args,
                        report=print_report, kafka=False)


if __name__ == "__main__":
    raise SystemExit(main())
