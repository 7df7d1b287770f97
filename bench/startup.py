"""Start-up alone: an empty broker's cold start to its first Metadata answer and its resident memory.

Why: `python -m bench` measures the cold start once, inside a run of an hour,
and no empty-broker RSS at all (its RSS is read after the workload). Issue 38's
goals (an empty broker <= 40 MiB, cold start <= 0.3x Kafka's) need both, often,
while modules are moved to first use. Here a Kelp broker on a fresh data
directory is started `--runs` times (exec to the first Metadata response that
lists it, `probe.wait_serving`, as `python -m bench` times it; beside it the
CPU seconds the broker used until then, a figure a loaded machine inflates
less than the wall clock), its RSS read once it has served and settled; then, unless `--no-kafka`, one Apache Kafka
KRaft node the same way (bench/kafka_ref.py). Medians are printed.

It must never report a cold start that did not end with a Metadata answer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from . import probe, section_main
from .broker import BenchBroker

__all__ = ["run", "print_report", "main"]

SETTLE_S = 1.0  # after the first Metadata answer, before RSS is read: start-up's last tasks finish


def _kelp_once(work: Path) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    with BenchBroker(work) as kelp:
        proc = kelp.proc
        assert proc is not None
        serving = probe.wait_serving(kelp.bootstrap, alive=lambda: proc.poll() is None)
        cpu = probe.cpu_seconds([proc.pid])
        time.sleep(SETTLE_S)  # a measurement window, not a synchronisation
        return serving - t0, cpu, probe.rss_bytes([proc.pid])


def _kafka_once(work: Path, version: str) -> tuple[float, int]:
    from .kafka_ref import KafkaCluster

    with KafkaCluster(work, version=version) as kafka:
        time.sleep(SETTLE_S)
        return kafka.cold_start_s, kafka.rss_bytes()


def run(*, runs: int, work: Path, kafka_version: str | None) -> dict[str, Any]:
    if runs < 1:
        raise ValueError("--runs must be at least 1")
    load0 = os.getloadavg()[0]
    sides: dict[str, dict[str, Any]] = {}
    kelp = [_kelp_once(work / f"kelp-{i}") for i in range(runs)]
    sides["kelp"] = {"cold_start_s": [s for s, _, _ in kelp], "cpu_s": [c for _, c, _ in kelp],
                     "rss_bytes": [r for _, _, r in kelp]}
    if kafka_version is not None:
        kafka = [_kafka_once(work / f"kafka-{i}", kafka_version) for i in range(runs)]
        sides["kafka"] = {"cold_start_s": [s for s, _ in kafka], "rss_bytes": [r for _, r in kafka]}
    return {"sides": sides, "runs": runs, "load_average": [load0, os.getloadavg()[0]], "cpus": os.cpu_count()}


def print_report(res: dict[str, Any]) -> None:
    med = {name: (statistics.median(s["cold_start_s"]), statistics.median(s["rss_bytes"]))
           for name, s in res["sides"].items()}
    for name, s in res["sides"].items():
        starts = ", ".join(f"{x:.2f}" for x in s["cold_start_s"])
        cpu = f", CPU to serve median {statistics.median(s['cpu_s']):.2f} s" if "cpu_s" in s else ""
        print(f"{name}: cold start (exec to Metadata) median {med[name][0]:.2f} s ({starts}){cpu}; "
              f"empty RSS median {med[name][1] / 2**20:.1f} MiB")
    if "kafka" in med:
        print(f"cold start {med['kelp'][0] / med['kafka'][0]:.2f}x Kafka's (goal <= 0.3x); "
              f"empty RSS {med['kelp'][1] / med['kafka'][1]:.3f}x Kafka's")
    else:
        print("Apache Kafka reference skipped (--no-kafka)")
    ok = med["kelp"][1] <= 40 * 2**20
    print(f"goal empty broker <= 40 MiB: {'met' if ok else 'MISSED'}")
    print(f"load average {res['load_average'][0]:.2f} before, {res['load_average'][1]:.2f} after, {res['cpus']} CPUs")


def _add_arguments(p: argparse.ArgumentParser) -> None:
    """No options of its own: `--runs`, `--no-kafka`, `--json` come from `section_main`."""


def main(argv: list[str] | None = None) -> int:
    return section_main("startup", __doc__ or "", argv, add_arguments=_add_arguments,
                        run_from_args=lambda args, **kw: run(runs=args.runs, **kw), report=print_report)


if __name__ == "__main__":
    raise SystemExit(main())
