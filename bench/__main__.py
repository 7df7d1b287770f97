"""`python -m bench`: Kelp produce/consume throughput beside this machine's reference rates.

For each record size (100 B, 1 KiB): create a one-partition topic, produce N
records with confluent-kafka (acks=1), consume them from offset 0, then in
the same run measure (a) writing the same log bytes sequentially to a file
in chunks of the broker's mean batch size (page cache, no fsync — like the
broker between flushes) and (b) reading that file over loopback TCP with
sendfile. MB/s is 10^6 bytes of stored log (batches as on disk) per second.

`--profile` runs the broker under cProfile and prints its hottest functions.

It must never report a figure without the reference measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from kelp.cli.http_client import AdminClient
from kelp.records import iter_headers

from . import clients, reference
from .broker import BenchBroker

GOAL = 0.40


@dataclass
class Row:
    case: str
    records: int
    log_bytes: int
    seconds: float
    mb_s: float
    records_s: float
    reference: str
    reference_mb_s: float
    ratio: float
    broker_cpu_s: float

    @property
    def cpu_bound_mb_s(self) -> float:
        """MB/s if the broker had a core to itself: stored MB per broker CPU-second."""
        return self.log_bytes / 1e6 / self.broker_cpu_s if self.broker_cpu_s > 0 else float("nan")


def _log_stats(log_dir: Path, topic: str) -> tuple[int, int]:
    """(bytes, batches) stored in the topic's partition 0."""
    total = batches = 0
    for seg in sorted((log_dir / f"{topic}-0").glob("*.log")):
        data = seg.read_bytes()
        for info in iter_headers(data):
            total += info.size
            batches += 1
    return total, batches


def run(*, sizes: dict[int, int], profile: Path | None, work: Path) -> tuple[list[Row], Path | None]:
    rows: list[Row] = []
    prof = profile.resolve() if profile is not None else None
    log_dir = work / "data"
    with BenchBroker(log_dir, profile_to=prof) as broker:
        admin = AdminClient(broker.http_url)
        for size, count in sizes.items():
            topic = f"bench-{size}"
            admin.post("/admin/v1/topics", {"name": topic, "partitions": 1})
            cpu0 = broker.cpu_seconds()
            t_prod = clients.produce(broker.bootstrap, topic, count=count, size=size)
            cpu1 = broker.cpu_seconds()
            end = admin.get(f"/admin/v1/topics/{topic}")["partitions"][0]["log_end_offset"]
            if end != count:
                raise RuntimeError(f"{topic}: log end offset {end} after producing {count} records")
            cpu2 = broker.cpu_seconds()
            t_cons = clients.consume(broker.bootstrap, topic, count=count)
            cpu3 = broker.cpu_seconds()
            log_bytes, batches = _log_stats(log_dir, topic)
            ref_file = work / f"reference-{size}.bin"
            t_write = reference.sequential_write(ref_file, total_bytes=log_bytes,
                                                 chunk_bytes=max(1, log_bytes // max(1, batches)))
            t_read = reference.loopback_read(ref_file)
            ref_file.unlink()
            label = f"{size} B" if size < 1024 else f"{size // 1024} KiB"
            mb = log_bytes / 1e6
            rows.append(Row(f"produce {label}", count, log_bytes, t_prod, mb / t_prod, count / t_prod,
                            f"seq write ({log_bytes // max(1, batches)} B chunks)", mb / t_write,
                            t_write / t_prod, cpu1 - cpu0))
            rows.append(Row(f"consume {label}", count, log_bytes, t_cons, mb / t_cons, count / t_cons,
                            "loopback read (sendfile)", mb / t_read, t_read / t_cons, cpu3 - cpu2))
    return rows, prof


def print_table(rows: list[Row]) -> None:
    from kelp.cli.output import print_table as table

    table(
        [[r.case, f"{r.records:,}", f"{r.mb_s:,.1f}", f"{r.records_s:,.0f}", r.reference,
          f"{r.reference_mb_s:,.1f}", f"{r.ratio:.1%}", f"{r.broker_cpu_s:.2f}", f"{r.cpu_bound_mb_s:,.0f}"]
         for r in rows],
        ["CASE", "RECORDS", "KELP MB/s", "KELP REC/s", "REFERENCE", "REF MB/s", "RATIO", "BROKER CPU s",
         "MB/BROKER-CPU-s"],
    )
    for r in rows:
        if "KiB" in r.case:
            verdict = "meets" if r.ratio >= GOAL else "misses"
            print(f"{r.case}: {r.ratio:.1%} of {r.reference} — {verdict} the {GOAL:.0%} goal")
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, load average {load:.1f} (client, broker and reference share them); "
          "MB/BROKER-CPU-s is the rate the broker would reach with a core to itself")


def print_profile(path: Path, *, top: int = 25) -> None:
    print(f"\nbroker profile (cProfile, {path}): top {top} by internal time")
    stats = pstats.Stats(str(path), stream=sys.stdout)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--records-100", type=int, default=400_000, help="records of 100 B (400000)")
    p.add_argument("--records-1k", type=int, default=200_000, help="records of 1 KiB (200000)")
    p.add_argument("--profile", nargs="?", const="kelp-broker.prof", metavar="FILE",
                   help="run the broker under cProfile, keep the stats in FILE (kelp-broker.prof), print hot spots")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--group-records", type=int, default=200_000,
                   help="records of 100 B for the consumer-group figures (200000; 0 skips them)")
    p.add_argument("--replication-records", type=int, default=100_000,
                   help="records of 1 KiB for the three-broker replication figures (100000; 0 skips them)")
    args = p.parse_args(argv)
    sizes = {100: args.records_100, 1024: args.records_1k}
    with tempfile.TemporaryDirectory(prefix="kelp-bench-") as tmp:
        rows, prof = run(sizes=sizes, profile=Path(args.profile) if args.profile else None, work=Path(tmp))
        if args.json:
            print(json.dumps([{**asdict(r), "cpu_bound_mb_s": r.cpu_bound_mb_s} for r in rows], indent=2))
        else:
            print_table(rows)
        if prof is not None and prof.exists():
            print_profile(prof)
        if args.group_records:
            from . import groups

            result = groups.run(records=args.group_records, work=Path(tmp))
            if args.json:
                print(json.dumps(result, indent=2))
            else:
                print("\nconsumer groups")
                groups.print_report(result)
        if args.replication_records:
            from . import replication

            rep = replication.run(records=args.replication_records, work=Path(tmp))
            if args.json:
                print(json.dumps(rep, indent=2))
            else:
                print("\nreplication (three brokers on this machine)")
                replication.print_report(rep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
