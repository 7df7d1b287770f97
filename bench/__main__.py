"""`python -m bench`: Kelp beside Apache Kafka and this machine's limits, all measured in the same run.

One Kelp broker and one Apache Kafka KRaft node (bench/kafka_ref.py: its
jars from Maven, Kafka's default settings and JVM flags) run side by side.
After a warm-up of both (JIT, page cache), every case is measured against
each broker in turn, alternating which goes first, `--runs` times (each
run once both brokers have settled, bench/cluster/sides.py's `settle`), and the
median is reported: produce with acks=1 and with acks=all, then consume
from offset 0 (at least 1,000,000 records of a topic produced once, with
the consuming process's own CPU per million records beside the broker's),
for 100 B and 1 KiB records, one partition, confluent-kafka as the client
of both. Broker CPU is utime+stime of the broker's process
tree read from /proc before and after each case, per GB of stored log.
Also cold start (exec to the first Metadata response that lists the broker),
resident memory after the workload, end-to-end latency at a fixed rate
(bench/latency.py), 1,000 partitions with 10 producers and a consumer group
(bench/partitions.py) and 5,000 idle connections (bench/connections.py).

The limit column is what the machine does without a broker, measured in
the same run: writing the same log bytes sequentially in chunks of the
broker's mean batch size (page cache, no fsync — like both brokers between
flushes), and reading that file over loopback TCP with sendfile.
MB/s is 10^6 bytes of stored log (batches as on disk) per second.

After the broker cases: PLAINTEXT, SSL and SASL_SSL listeners of both with the
same certificate and SCRAM users, and the cost of 1,000 ACLs against no
authorizer (bench/security/section.py), consumer groups (bench/groups.py), three brokers of
each with RF=3 (bench/cluster/replication.py), Spark reading and writing through
`format("kelp")` beside `format("kafka")` (bench/spark.py), recovery after
SIGKILL with N GB of log on disk (bench/recovery.py) and 1, 2, 4 Kelp
brokers against one Kafka broker under the same client load
(bench/cluster/scaling.py).
Then five sections of their own: transactions on three brokers of each (bench/transactions/section.py), group
rebalances of the classic and KIP-848 protocols, one broker of each (bench/rebalance/section.py), REST
Proxy v2 against the Kafka protocol on Kelp (bench/rest.py; Kafka has no REST proxy), Kafka's own
ProducerPerformance and ConsumerPerformance against both (bench/kafka_perf.py), and partition scale:
10,000 partitions on one broker and 3,000 at RF 3 on three, each broker started alone
(bench/cluster/partition_scale.py). Then the loop-lag guard's long form (bench/loop_guard.py): the longest
event-loop step of every request on a broker holding 10,000 topics and transactional ids and 1,000 SCRAM users
behind a SASL_SSL listener and the authorizer. Last, attacks (bench/attacks/section.py): an honest acks=all
producer and consumer group beside each attack of issue 33, their p99 under attack over unattacked and records
lost, Kelp beside Kafka where Kafka has the same surface. Then the event loops (bench/event_loop.py): the same
Kelp broker on asyncio's loop and on uvloop's, alternating, on the throughput, TLS, latency and connection cases.

`--no-kafka` skips Apache Kafka (one line says so); `--profile` runs the
Kelp broker under cProfile and prints its hottest functions.
`--bootstrap-server HOST:PORT` with `--client-config FILE` (Kafka client
properties: security.protocol, sasl.mechanism, sasl.jaas.config, ...) and
`-X KEY=VALUE` measures an existing, possibly secured, cluster instead (the
produce/consume workload of bench/security/section.py alone).

It must never report a figure without its reference measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from kelp.records.header import iter_headers

from . import clients, emit, probe, reference
from .broker import BenchBroker
from .cluster.sides import settle

LIMIT_GOAL = 0.40  # Kelp's share of the machine's limit on the 1 KiB cases
WARMUP_RECORDS = 100_000
# The consume cases read at least this many records (a topic produced once, untimed): with fewer, a
# run is ~20 fetches and one scheduling stall of the shared machine decides the ratio.
CONSUME_MIN_RECORDS = 1_000_000
LATENCY_P99_GOAL_MS = 20
IDLE_LATENCY_S = 5.0  # latency measured beside the idle connections


@dataclass
class Target:
    """A running broker the cases are measured against."""

    name: str
    bootstrap: str
    log_dir: Path
    pids: Callable[[], list[int]]
    cold_start_s: float
    rss_after_bytes: int = 0
    latency: dict[str, Any] | None = None
    idle: dict[str, Any] | None = None
    partitions: dict[str, Any] | None = None


@dataclass
class Measure:
    """One broker's figures for one case: medians over the runs, and every run."""

    seconds: float
    log_bytes: int
    broker_cpu_s: float
    runs_s: list[float] = field(default_factory=list)
    runs_cpu_s: list[float] = field(default_factory=list)
    client_cpu_s: float | None = None  # consume cases: the consumer process's CPU (median)

    @property
    def mb_s(self) -> float:
        return self.log_bytes / 1e6 / self.seconds

    @property
    def cpu_s_per_gb(self) -> float:
        return self.broker_cpu_s / (self.log_bytes / 1e9) if self.log_bytes else float("nan")


@dataclass
class Row:
    case: str
    records: int
    kelp: Measure
    kafka: Measure | None
    limit: str
    limit_mb_s: float

    @property
    def vs_kafka(self) -> float:
        """Kelp's rate over Kafka's (same records, so Kafka's time over Kelp's)."""
        return self.kafka.seconds / self.kelp.seconds if self.kafka else float("nan")

    @property
    def vs_limit(self) -> float:
        return self.kelp.mb_s / self.limit_mb_s


def _log_stats(log_dir: Path, topic: str) -> tuple[int, int]:
    """(bytes, batches) stored in the topic's partition 0 (Kelp and Kafka store the same RecordBatch v2 files)."""
    total = batches = 0
    for seg in sorted((log_dir / f"{topic}-0").glob("*.log")):
        data = seg.read_bytes()
        for info in iter_headers(data):
            total += info.size
            batches += 1
    return total, batches


def _timed(target: Target, action: Callable[[], float], *, among: Sequence[Target] = ()) -> tuple[float, float]:
    """(seconds the action reports, broker CPU-seconds it cost), started once every broker of `among` has
    settled (`sides.settle`: what the previous case left behind — a JVM's collector, a log flush — is not
    this one's)."""
    if among:
        settle(among)
    cpu0 = probe.cpu_seconds(target.pids())
    seconds = action()
    return seconds, probe.cpu_seconds(target.pids()) - cpu0


def _warm_up(target: Target) -> None:
    """JIT, page cache and connection set-up out of the timed runs: WARMUP_RECORDS each way, both sizes."""
    for size in (100, 1024):
        topic = f"warm-up-{size}"
        clients.create_topic(target.bootstrap, topic)
        clients.produce(target.bootstrap, topic, count=WARMUP_RECORDS, size=size)
        clients.consume(target.bootstrap, topic, count=WARMUP_RECORDS)


def _label(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size // 1024} KiB"


def run_cases(targets: list[Target], *, sizes: dict[int, int], runs: int, work: Path) -> list[Row]:
    """Every case against every target, alternating which goes first; medians over `runs`."""
    rows: list[Row] = []
    turn = 0

    def each_target() -> list[Target]:
        nonlocal turn
        turn += 1
        return targets if turn % 2 else targets[::-1]

    for size, count in sizes.items():
        samples: dict[tuple[str, str], list[tuple[float, float, int, int]]] = {}
        client_cpu: dict[str, list[float]] = {}
        consume_count = max(count, CONSUME_MIN_RECORDS)
        consume_topic = f"consume-{size}"
        for t in targets:
            clients.create_topic(t.bootstrap, consume_topic)
            clients.produce(t.bootstrap, consume_topic, count=consume_count, size=size)
        for run in range(runs):
            for acks in ("1", "all"):
                for t in each_target():
                    topic = f"bench-{size}-acks{acks}-{run}"
                    clients.create_topic(t.bootstrap, topic)
                    seconds, cpu = _timed(t, lambda: clients.produce(
                        t.bootstrap, topic, count=count, size=size, acks=1 if acks == "1" else -1),  # noqa: B023 (_timed calls it at once)
                        among=targets)
                    end = clients.end_offset(t.bootstrap, topic)
                    if end != count:
                        raise RuntimeError(f"{t.name} {topic}: high watermark {end} after producing {count} records")
                    samples.setdefault((f"produce {_label(size)}, acks={acks}", t.name), []).append(
                        (seconds, cpu, *_log_stats(t.log_dir, topic)))
            for t in each_target():
                client: list[float] = []

                def consume() -> float:
                    seconds, cpu = clients.consume_with_cpu(t.bootstrap, consume_topic, count=consume_count)  # noqa: B023 (_timed calls it at once)
                    client.append(cpu)  # noqa: B023 (_timed calls it at once)
                    return seconds
                seconds, cpu = _timed(t, consume, among=targets)
                client_cpu.setdefault(t.name, []).extend(client)
                samples.setdefault((f"consume {_label(size)}", t.name), []).append(
                    (seconds, cpu, *_log_stats(t.log_dir, consume_topic)))
        # The limits, measured now, between this size's cases and the next (both brokers idle).
        _, _, log_bytes, batches = samples[(f"produce {_label(size)}, acks=1", "kelp")][0]
        chunk = max(1, log_bytes // max(1, batches))
        ref_file = work / f"reference-{size}.bin"
        write_mb_s = log_bytes / 1e6 / reference.sequential_write(ref_file, total_bytes=log_bytes, chunk_bytes=chunk)
        read_mb_s = log_bytes / 1e6 / reference.loopback_read(ref_file)
        ref_file.unlink()
        for case in (f"produce {_label(size)}, acks=1", f"produce {_label(size)}, acks=all", f"consume {_label(size)}"):
            measures = {}
            for t in targets:
                got = samples[(case, t.name)]
                producing = case.startswith("produce")
                measures[t.name] = Measure(seconds=statistics.median(s for s, *_ in got),
                                           log_bytes=got[0][2], broker_cpu_s=statistics.median(c for _, c, *_ in got),
                                           runs_s=[round(s, 4) for s, *_ in got],
                                           runs_cpu_s=[round(c, 3) for _, c, *_ in got],
                                           client_cpu_s=None if producing else statistics.median(client_cpu[t.name]))
            rows.append(Row(case, count if producing else consume_count, measures["kelp"], measures.get("kafka"),
                            f"seq write ({chunk} B chunks)" if producing else "loopback read (sendfile)",
                            write_mb_s if producing else read_mb_s))
    return rows


def run_latency(targets: list[Target], *, mb_s: float, seconds: float) -> None:
    """Each target's end-to-end latency at the same offered rate, one after the other; broker CPU per GB too."""
    from . import latency

    for t in targets:
        cpu0 = probe.cpu_seconds(t.pids())
        t.latency = latency.run(t.bootstrap, mb_s=mb_s, seconds=seconds)
        gb = t.latency["achieved_mb_s"] * (seconds + t.latency["warmup_s"]) / 1e3
        t.latency["broker_cpu_s_per_gb"] = (probe.cpu_seconds(t.pids()) - cpu0) / gb if gb else float("nan")


def run(*, sizes: dict[int, int], runs: int, kafka_version: str | None, profile: Path | None,
        latency_mb_s: float, latency_s: float, idle_connections: int,
        partition_records: int, work: Path) -> tuple[list[Row], list[Target], Path | None]:
    prof = profile.resolve() if profile is not None else None
    with ExitStack() as stack:
        t0 = time.perf_counter()
        kelp = stack.enter_context(BenchBroker(work / "data", profile_to=prof))
        assert kelp.proc is not None
        proc = kelp.proc
        serving = probe.wait_serving(kelp.bootstrap, alive=lambda: proc.poll() is None)
        targets = [Target("kelp", kelp.bootstrap, work / "data", lambda: [proc.pid], serving - t0)]
        if kafka_version is not None:
            from .kafka_ref import KafkaCluster

            kafka = KafkaCluster(work / "kafka", version=kafka_version)
            stack.callback(kafka.stop)
            try:
                kafka.start()
            except (FileNotFoundError, RuntimeError) as exc:
                raise RuntimeError(f"{exc}\n(`make bench BENCH_ARGS=--no-kafka` runs without Apache Kafka)") from None
            targets.append(Target("kafka", kafka.bootstrap, kafka.log_dirs[0], lambda: kafka.pids, kafka.cold_start_s))
        for t in targets:
            _warm_up(t)
        rows = run_cases(targets, sizes=sizes, runs=runs, work=work)
        if latency_s > 0:
            run_latency(targets, mb_s=latency_mb_s, seconds=latency_s)
        for t in targets:
            t.rss_after_bytes = probe.rss_bytes(t.pids())
        if partition_records > 0:
            from . import partitions

            for t in targets:
                t.partitions = partitions.run(t.bootstrap, t.pids, records=partition_records)
        if idle_connections > 0 and latency_s > 0:
            from . import connections

            for t in targets:
                t.idle = connections.run(t.bootstrap, t.pids, count=idle_connections,
                                         latency_s=min(latency_s, IDLE_LATENCY_S), mb_s=latency_mb_s)
    return rows, targets, prof


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def print_table(rows: list[Row], targets: list[Target], *, runs: int) -> None:
    from kelp.cli.output import print_table as table

    with_kafka = any(r.kafka for r in rows)
    columns: list[tuple[str, Callable[[Row], str]]] = [
        ("CASE", lambda r: r.case), ("RECORDS", lambda r: f"{r.records:,}"),
        ("KELP MB/s", lambda r: f"{r.kelp.mb_s:,.1f}"),
        ("KAFKA MB/s", lambda r: f"{r.kafka.mb_s:,.1f}" if r.kafka else "-"),
        ("KELP/KAFKA", lambda r: f"{r.vs_kafka:.2f}x" if r.kafka else "-"),
        ("KELP CPU s/GB", lambda r: f"{r.kelp.cpu_s_per_gb:.2f}"),
        ("KAFKA CPU s/GB", lambda r: f"{r.kafka.cpu_s_per_gb:.2f}" if r.kafka else "-"),
        ("LIMIT MB/s", lambda r: f"{r.limit_mb_s:,.0f}"), ("KELP/LIMIT", lambda r: f"{r.vs_limit:.1%}"),
        ("CLIENT CPU s/1M rec (kelp | kafka)", lambda r: "-" if r.kelp.client_cpu_s is None else
         f"{r.kelp.client_cpu_s / r.records * 1e6:.2f}"
         + (f" | {r.kafka.client_cpu_s / r.records * 1e6:.2f}" if r.kafka and r.kafka.client_cpu_s is not None
            else "")),
    ]
    if not with_kafka:
        columns = [c for c in columns if "KAFKA" not in c[0]]
    table([[cell(r) for _, cell in columns] for r in rows], [name for name, _ in columns])
    print("limit: the machine without a broker, same run, same bytes — produce: sequential write in the broker's "
          "mean batch size (page cache); consume: loopback read (sendfile)")
    print(f"consume: at least {CONSUME_MIN_RECORDS:,} records from offset 0 of a topic produced once (untimed); "
          "client CPU: the consuming process (librdkafka's threads and the Python loop) per million records — "
          "equal figures mean the client did the same work against both brokers")
    by_name = {t.name: t for t in targets}
    kelp, kafka = by_name["kelp"], by_name.get("kafka")
    print(f"cold start (exec to Metadata): Kelp {kelp.cold_start_s:.2f} s"
          + (f", Kafka {kafka.cold_start_s:.2f} s ({_ratio(kelp.cold_start_s, kafka.cold_start_s)})" if kafka else ""))
    print(f"RSS after the workload: Kelp {kelp.rss_after_bytes / 2**20:,.0f} MiB"
          + (f", Kafka {kafka.rss_after_bytes / 2**20:,.0f} MiB "
             f"({_ratio(kelp.rss_after_bytes, kafka.rss_after_bytes)})" if kafka else ""))
    lat = [(t.name, t.latency) for t in targets if t.latency]
    if lat:
        table([[name, f"{la['offered_mb_s']:.0f} / {la['achieved_mb_s']:.1f}",
                f"{la['measured_records']:,}", f"{la['p50_ms']:.1f}", f"{la['p99_ms']:.1f}",
                f"{la['p999_ms']:.1f}", f"{la['max_ms']:.1f}", f"{la['broker_cpu_s_per_gb']:.2f}"]
               for name, la in lat],
              ["END-TO-END LATENCY", "OFFERED / ACHIEVED MB/s", "RECORDS", "p50 ms", "p99 ms", "p99.9 ms", "max ms",
               "CPU s/GB"])
        print("latency: 1 KiB records, acks=1, librdkafka's default linger.ms=5; producer clock before produce to "
              "consumer receipt; the first 2 s dropped")
    idle = [(t.name, t.idle) for t in targets if t.idle]
    if idle:
        table([[name, f"{i['connections']:,}", f"{i['rss_before_bytes'] / 2**20:,.0f}",
                f"{i['rss_with_bytes'] / 2**20:,.0f}", f"{i['bytes_per_connection'] / 1024:,.1f}",
                f"{i['latency']['p50_ms']:.1f}", f"{i['latency']['p99_ms']:.1f}",
                f"{i['latency']['p999_ms']:.1f}"] for name, i in idle],
              ["IDLE CONNECTIONS", "OPEN", "RSS BEFORE MiB", "RSS WITH MiB", "KiB/CONNECTION", "p50 ms", "p99 ms",
               "p99.9 ms"])
        print("idle connections: one ApiVersions round trip each, then silent; latency as above, "
              f"{IDLE_LATENCY_S:.0f} s, beside them")
    many = [(t.name, t.partitions) for t in targets if t.partitions]
    if many:
        m0 = many[0][1]
        table([[name, f"{pa['create_s']:.1f}", f"{pa['prime_s']:.1f}",
                f"{pa['produce_mb_s']:,.1f}", f"{pa['produce_cpu_s_per_gb']:.1f}",
                f"{pa['join_to_first_record_s']:.1f}", f"{pa['consume_mb_s']:,.1f}",
                f"{pa['rss_bytes'] / 2**20:,.0f}"] for name, pa in many],
              [f"{m0['partitions']:,} PARTITIONS", "CREATE s", "1ST RECORD EACH s", f"{m0['producers']} PRODUCERS MB/s",
               "CPU s/GB", "JOIN->1ST s", f"{m0['consumers']} CONSUMERS MB/s", "RSS MiB"])
        print(f"partitions: {m0['records']:,} records of 1 KiB round-robin over every partition; the group's rate "
              "from its first record (join and initial rebalance delay apart)")
    if kafka is not None:
        print_goals(rows, kelp, kafka)
    for r in rows:
        if "KiB" in r.case and r.case.endswith(("acks=1", "KiB")):
            verdict = "meets" if r.vs_limit >= LIMIT_GOAL else "misses"
            print(f"{r.case}: {r.vs_limit:.1%} of {r.limit} — {verdict} the {LIMIT_GOAL:.0%} goal")
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, load average {load:.1f} (client, brokers and limits share them); "
          f"medians of {runs} run(s) per broker, alternating which broker goes first")


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def print_goals(rows: list[Row], kelp: Target, kafka: Target) -> None:
    """Issue #10's goals against Kafka, each with the figure that decides it."""
    slower = [f"{r.case} {r.vs_kafka:.2f}x" for r in rows if r.vs_kafka < 1.0]
    cpu = max(r.kelp.cpu_s_per_gb / r.kafka.cpu_s_per_gb for r in rows if r.kafka and r.case.startswith("produce"))
    start = kelp.cold_start_s / kafka.cold_start_s
    print(f"goal Kelp >= 1.0x Kafka on every case: {_verdict(not slower)}"
          + (f" (below on {', '.join(slower)})" if slower else ""))
    print(f"goal produce CPU/GB <= 0.5x Kafka's: {_verdict(cpu <= 0.5)} (worst {cpu:.2f}x)")
    print(f"goal cold start <= 0.3x Kafka's: {_verdict(start <= 0.3)} ({start:.2f}x)")
    if kelp.partitions and kafka.partitions:
        rss = kelp.partitions["rss_bytes"] / kafka.partitions["rss_bytes"]
        print(f"goal RSS with 1,000 partitions <= 0.1x Kafka's: {_verdict(rss <= 0.1)} ({rss:.3f}x)")
    if kelp.latency:
        p99 = kelp.latency["p99_ms"]
        print(f"goal p99 end-to-end latency <= {LATENCY_P99_GOAL_MS} ms: {_verdict(p99 <= LATENCY_P99_GOAL_MS)} "
              f"({p99:.1f} ms)")


def print_profile(path: Path, *, top: int = 25) -> None:
    print(f"\nbroker profile (cProfile, {path}): top {top} by internal time")
    stats = pstats.Stats(str(path), stream=sys.stdout)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)


class _GoalTee:
    """stdout that also keeps every line naming a goal, for the one-screen summary at the end."""

    def __init__(self, out: TextIO) -> None:
        self.out, self._partial = out, ""
        self.lines: list[str] = []

    def write(self, text: str) -> int:
        self.out.write(text)
        *done, self._partial = (self._partial + text).split("\n")
        self.lines += [line.strip() for line in done if "goal" in line.lower()]
        return len(text)

    def flush(self) -> None:
        self.out.flush()


def main(argv: list[str] | None = None) -> int:
    tee = _GoalTee(sys.stdout)
    sys.stdout = tee
    try:
        code = _main(argv)
    finally:
        sys.stdout = tee.out
    if tee.lines and "--json" not in (argv if argv is not None else sys.argv[1:]):
        print(f"\nSUMMARY — every goal of this run ({os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f} at the end)")
        for line in tee.lines:
            print(f"  {line}")
    return code


def _main(argv: list[str] | None = None) -> int:
    from .kafka_ref import KAFKA_VERSION

    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--records-100", type=int, default=400_000, help="records of 100 B per run (400000)")
    p.add_argument("--records-1k", type=int, default=200_000, help="records of 1 KiB per run (200000)")
    p.add_argument("--runs", type=int, default=3, help="runs of every case per broker; medians are printed (3)")
    p.add_argument("--no-kafka", action="store_true", help="skip Apache Kafka as the reference broker")
    p.add_argument("--kafka-version", default=KAFKA_VERSION,
                   help=f"Apache Kafka release fetched with Maven into the cache ({KAFKA_VERSION})")
    p.add_argument("--latency-seconds", type=float, default=10.0,
                   help="seconds of end-to-end latency measurement per broker, after 2 s dropped (10; 0 skips)")
    p.add_argument("--latency-mb-s", type=float, default=20.0, help="offered rate of 1 KiB records, MB/s (20)")
    p.add_argument("--idle-connections", type=int, default=5000,
                   help="idle connections held open during a shorter latency run (5000; 0 skips)")
    p.add_argument("--partition-records", type=int, default=2_000,
                   help="1 KiB records per producer (10 of them) over 1,000 partitions (2000; 0 skips)")
    p.add_argument("--profile", nargs="?", const="kelp-broker.prof", metavar="FILE",
                   help="run the broker under cProfile, keep the stats in FILE (kelp-broker.prof), print hot spots")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--group-records", type=int, default=200_000,
                   help="records of 100 B for the consumer-group figures (200000; 0 skips them)")
    p.add_argument("--replication-records", type=int, default=100_000,
                   help="records of 1 KiB for the three-broker replication figures (100000; 0 skips them)")
    p.add_argument("--spark-records", type=int, default=300_000,
                   help="records of 100 B Spark reads and writes through format(kelp) and format(kafka) "
                        "(300000; 0 skips them)")
    p.add_argument("--recovery-gb", type=float, default=5.0,
                   help="GB of 1 KiB records in one partition before the SIGKILL and restart of each broker "
                        "(5; 0 skips)")
    p.add_argument("--scaling-brokers", default="1,2,4",
                   help="Kelp broker counts measured against one Kafka broker under the same load (1,2,4; empty skips)")
    p.add_argument("--scaling-records", type=int, default=100_000,
                   help="1 KiB records per producer process (4 of them) per scaling run (100000)")
    from . import event_loop, kafka_perf, loop_guard, rest
    from .attacks import section as attacks
    from .cluster import partition_scale
    from .rebalance import section as rebalance
    from .security import section as security
    from .transactions import section as transactions

    security.add_arguments(p)
    transactions.add_arguments(p)
    rebalance.add_arguments(p)
    rest.add_arguments(p)
    kafka_perf.add_arguments(p)
    partition_scale.add_arguments(p)
    loop_guard.add_arguments(p)
    attacks.add_arguments(p)
    event_loop.add_arguments(p)
    args = p.parse_args(argv)
    if args.bootstrap_server or args.client_config or args.client_property:
        # An existing (secured) cluster: only the produce/consume workload, with the client properties given.
        try:
            res = security.run_from_args(args, kafka_version=None)
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        if res is not None:
            emit("security", res, as_json=args.json, report=security.print_report)
        return 0
    scaling_brokers = [int(n) for n in args.scaling_brokers.split(",") if n.strip() and int(n) > 0]
    sizes = {100: args.records_100, 1024: args.records_1k}
    with tempfile.TemporaryDirectory(prefix="kelp-bench-") as tmp:
        rows, targets, prof = run(sizes=sizes, runs=max(1, args.runs),
                                  kafka_version=None if args.no_kafka else args.kafka_version,
                                  profile=Path(args.profile) if args.profile else None,
                                  latency_mb_s=args.latency_mb_s, latency_s=args.latency_seconds,
                                  idle_connections=args.idle_connections,
                                  partition_records=args.partition_records, work=Path(tmp))
        if args.json:
            print(json.dumps({"rows": [{**asdict(r), "vs_kafka": r.vs_kafka} for r in rows],
                              "brokers": [{"name": t.name, "cold_start_s": t.cold_start_s,
                                           "rss_after_bytes": t.rss_after_bytes, "latency": t.latency, "idle": t.idle,
                                           "partitions": t.partitions}
                                          for t in targets]}, indent=2))
        else:
            if args.no_kafka:
                print("Apache Kafka reference skipped (--no-kafka): Kelp against the machine's limits only")
            print_table(rows, targets, runs=max(1, args.runs))
        if prof is not None and prof.exists():
            print_profile(prof)
        sec = security.run_from_args(args, kafka_version=None if args.no_kafka else args.kafka_version)
        if sec is not None:
            emit("security", sec, as_json=args.json, report=security.print_report)
        if args.group_records:
            from . import groups

            result = groups.run(records=args.group_records, work=Path(tmp))
            if args.json:
                print(json.dumps(result, indent=2))
            else:
                print("\nconsumer groups")
                groups.print_report(result)
        if args.replication_records:
            from .cluster import replication

            rep = replication.run(records=args.replication_records, work=Path(tmp))
            rep_kafka = None if args.no_kafka else replication.run_kafka(
                records=args.replication_records, work=Path(tmp), version=args.kafka_version)
            if args.json:
                print(json.dumps({"kelp": rep, "kafka": rep_kafka}, indent=2))
            else:
                print("\nreplication (three brokers on this machine)")
                replication.print_report(rep, rep_kafka)
        if args.spark_records:
            from . import spark

            res = spark.run(records=args.spark_records, runs=max(1, args.runs), work=Path(tmp))
            if args.json:
                print(json.dumps({"spark": res}, indent=2))
            else:
                spark.print_report(res)
        kafka_version = None if args.no_kafka else args.kafka_version
        if args.recovery_gb > 0:
            from . import recovery

            rec = recovery.run(gb=args.recovery_gb, work=Path(tmp), kafka_version=kafka_version)
            emit("recovery", rec, as_json=args.json, report=recovery.print_report)
        if scaling_brokers and args.scaling_records > 0:
            from .cluster import scaling

            sc = scaling.run(brokers=scaling_brokers, records=args.scaling_records, runs=max(1, args.runs),
                             work=Path(tmp), kafka_version=kafka_version)
            emit("scaling", sc, as_json=args.json, report=scaling.print_report)
        txn = transactions.run_from_args(args, work=Path(tmp) / "transactions", kafka_version=kafka_version)
        if txn is not None:
            emit("transactions", txn, as_json=args.json, report=transactions.print_report)
        reb = rebalance.run_from_args(args, work=Path(tmp) / "rebalance", kafka_version=kafka_version)
        if reb is not None:
            emit("rebalance", reb, as_json=args.json, report=rebalance.print_report)
        try:
            rst = rest.run_from_args(args, work=Path(tmp) / "rest")
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        if rst is not None:
            emit("rest", rst, as_json=args.json, report=rest.print_report)
        perf = kafka_perf.run_from_args(args, work=Path(tmp) / "kafka-perf", kafka_version=kafka_version)
        if perf is not None:
            emit("kafka_perf", perf, as_json=args.json, report=kafka_perf.print_report)
        try:
            scale = partition_scale.run_from_args(args, work=Path(tmp) / "partition-scale", kafka_version=kafka_version)
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        if scale is not None:
            emit("partition_scale", scale, as_json=args.json, report=partition_scale.print_report)
        try:
            guard = loop_guard.run_from_args(args, work=Path(tmp) / "loop-guard")
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        if guard is not None:
            emit("loop_guard", guard, as_json=args.json, report=loop_guard.print_report)
        try:
            att = attacks.run_from_args(args, work=Path(tmp) / "attacks", kafka_version=kafka_version)
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        if att is not None:
            emit("attacks", att, as_json=args.json, report=attacks.print_report)
        loops = event_loop.run_from_args(args, work=Path(tmp) / "event-loop")  # asyncio beside uvloop
        if loops is not None:
            emit("event_loop", loops, as_json=args.json, report=event_loop.print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
