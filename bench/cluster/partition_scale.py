"""Partition scale (issue 23): 10,000 partitions on one broker at RF 1, 3,000 at RF 3 on three brokers, beside Kafka.

Why: per-partition costs — an open file, a timer, a task, a few kilobytes of objects, a partition in every
follower fetch — are invisible with six partitions and decide whether a broker holds thousands. For each
case Kelp and then Apache Kafka (bench/kafka_ref.py, Kafka's defaults) are started alone on this machine
(one after the other, so neither's idle figures include the other's work) and measured:

- creation: CreateTopics with up to 5,000 partitions, then CreatePartitions 5,000 at a time (Kafka refuses
  one operation of more than 10,000 metadata records), each until every partition has a leader;
- idle CPU: the broker processes' CPU over `idle_s` seconds after `settle_s` seconds of settling, in % of
  one core (per broker: the cluster's total over its brokers);
- RSS: resident memory of the broker processes after that window and after the produce below (per broker);
- produce latency across the partitions: one 1 KiB record to each of `latency_records` partitions spread
  evenly over the topic (every one with 0), in turn, one in flight (confluent-kafka, linger.ms=0; acks=1 at
  RF 1, acks=all at RF 3), twice: the first record of each (its first append has one-off costs on both
  brokers) and a second round; p50, p99 and max.

Three brokers at RF 3 put every partition on every broker: 3,000 partitions are 3,000 replicas per broker,
1,000 of them leaders. `python -m bench.cluster.partition_scale` runs this alone; `make bench` runs it with the
issue's sizes (`--scale-partitions`, `--scale-rf3-partitions`; 0 skips a case).

It must never report a figure of Kelp without Kafka's from the same run (unless Kafka is skipped, said so),
nor a latency before the record was acknowledged.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from .. import clients, probe, section_main
from .sides import load_average

__all__ = ["run", "measure", "produce_each", "print_report", "add_arguments", "run_from_args", "main"]

TOPIC = "scale"
SIZE = 1024
ACK_TIMEOUT_S = 30.0  # one record's acknowledgement, bounded
STEP = 5_000  # partitions per CreateTopics / CreatePartitions (KRaft caps one operation at 10,000 records)


def produce_each(bootstrap: str, topic: str, *, partitions: int, acks: int, records: int | None = None) -> list[float]:
    """Milliseconds from produce() to the acknowledgement of one 1 KiB record to each partition in turn, or to
    `records` partitions spread evenly over them (every partitions/records-th)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0, "enable.idempotence": False,
                         "compression.type": "none"})
    value = os.urandom(SIZE)
    done: list[str | None] = []

    def delivered(err: Any, _msg: Any) -> None:
        done.append(None if err is None else str(err))

    latencies = []
    try:
        count = partitions if records is None else max(1, min(records, partitions))
        for p in (i * partitions // count for i in range(count)):
            done.clear()
            start = time.perf_counter()
            producer.produce(topic, value, partition=p, on_delivery=delivered)
            deadline = start + ACK_TIMEOUT_S
            while not done:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{topic}-{p}: no acknowledgement within {ACK_TIMEOUT_S:.0f} s")
                producer.poll(0.5)
            if done[0] is not None:
                raise RuntimeError(f"{topic}-{p}: produce failed: {done[0]}")
            latencies.append((time.perf_counter() - start) * 1000)
    finally:
        producer.flush(5)
    return latencies


def create_partitions(bootstrap: str, *, partitions: int, rf: int) -> None:
    """The topic with `partitions` partitions: CreateTopics with up to STEP of them, then CreatePartitions up
    STEP at a time, each until every partition has a leader (KRaft refuses one operation of more than
    10,000 metadata records: "Unable to perform excessively large batch operation")."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    timeout_s = max(120.0, STEP / 20)
    count = min(partitions, STEP)
    clients.create_topic(bootstrap, TOPIC, partitions=count, replication_factor=rf, timeout_s=timeout_s)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while count < partitions:
        count = min(partitions, count + STEP)
        for future in admin.create_partitions([NewPartitions(TOPIC, count)], request_timeout=timeout_s).values():
            future.result(timeout_s)
        # Every poll is a Metadata request for all of them: a few a second, not clients.create_topic's 20.
        probe.poll_until(functools.partial(_leaders_missing, admin, count), what=f"{count:,} partitions with leaders",
                         timeout_s=timeout_s, interval_s=0.25)


def _leaders_missing(admin: Any, count: int) -> str | None:
    meta = admin.list_topics(TOPIC, timeout=30).topics.get(TOPIC)
    if meta is None or meta.error is not None:
        return f"topic {TOPIC}: {meta.error if meta is not None else 'absent'}"
    led = sum(1 for p in meta.partitions.values() if p.leader >= 0)
    return None if len(meta.partitions) == count and led == count else f"{led:,} of {count:,} partitions have a leader"


def _percentiles(ms: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else [ms[0]] * 99
    return {"p50_ms": cuts[49], "p99_ms": cuts[98], "max_ms": max(ms), "records": len(ms)}


def measure(bootstrap: str, pids: Callable[[], list[int]], *, brokers: int, partitions: int, rf: int,
            idle_s: float, settle_s: float, latency_records: int | None = None) -> dict[str, Any]:
    """One running cluster's figures for a topic of `partitions` partitions at replication factor `rf`."""
    t0 = time.perf_counter()
    create_partitions(bootstrap, partitions=partitions, rf=rf)
    create_s = time.perf_counter() - t0
    rss_created = probe.rss_bytes(pids())
    time.sleep(settle_s)  # a measurement window, not a synchronisation: the broker settles after the creation
    cpu0, w0 = probe.cpu_seconds(pids()), time.monotonic()
    time.sleep(idle_s)
    idle_cpu = (probe.cpu_seconds(pids()) - cpu0) / (time.monotonic() - w0)
    rss_idle = probe.rss_bytes(pids())
    acks = 1 if rf == 1 else -1
    first = produce_each(bootstrap, TOPIC, partitions=partitions, acks=acks, records=latency_records)
    second = produce_each(bootstrap, TOPIC, partitions=partitions, acks=acks, records=latency_records)
    return {"create_s": create_s, "idle_cpu_pct_per_broker": 100 * idle_cpu / brokers,
            "rss_created_bytes_per_broker": rss_created // brokers, "rss_idle_bytes_per_broker": rss_idle // brokers,
            "rss_after_produce_bytes_per_broker": probe.rss_bytes(pids()) // brokers,
            "first_record": _percentiles(first), "second_record": _percentiles(second)}


def _cases(partitions: int, rf3_partitions: int) -> list[dict[str, Any]]:
    cases = []
    if partitions > 0:
        cases.append({"name": f"{partitions:,} partitions, RF 1, 1 broker", "brokers": 1, "rf": 1,
                      "partitions": partitions})
    if rf3_partitions > 0:
        cases.append({"name": f"{rf3_partitions:,} partitions, RF 3, 3 brokers", "brokers": 3, "rf": 3,
                      "partitions": rf3_partitions})
    return cases


def _run_side(name: str, case: dict[str, Any], *, work: Path, kafka_version: str | None, idle_s: float,
              settle_s: float, latency_records: int | None = None) -> dict[str, Any]:
    """Start `name`'s cluster for `case`, measure it, stop it."""
    with ExitStack() as stack:
        if name == "kelp":
            from ..broker import BenchBroker
            from .replication import start_kelp_cluster

            if case["brokers"] == 1:
                one = BenchBroker(work / "kelp")
                stack.callback(one.stop)
                one.start()
                started = [one]
            else:
                started = start_kelp_cluster(work, brokers=case["brokers"], name="kelp")
                for b in started:
                    stack.callback(b.stop)
            bootstrap = ",".join(b.bootstrap for b in started)
            procs = [b.proc for b in started]

            def pids() -> list[int]:
                return [p.pid for p in procs if p is not None and p.poll() is None]
        else:
            from ..kafka_ref import KafkaCluster

            kafka = KafkaCluster(work / "kafka", nodes=case["brokers"], version=kafka_version or "")
            stack.callback(kafka.stop)
            try:
                kafka.start()
            except (FileNotFoundError, RuntimeError) as exc:
                raise RuntimeError(f"{exc}\n(`--no-kafka` runs without Apache Kafka)") from None
            bootstrap = kafka.bootstrap

            def pids() -> list[int]:
                return kafka.pids
        return measure(bootstrap, pids, brokers=case["brokers"], partitions=case["partitions"], rf=case["rf"],
                       idle_s=idle_s, settle_s=settle_s, latency_records=latency_records)


def run(*, partitions: int, rf3_partitions: int, work: Path, kafka_version: str | None, idle_s: float = 30.0,
        settle_s: float = 5.0, latency_records: int | None = None) -> dict[str, Any]:
    """Each case against Kelp, then Kafka (unless `kafka_version` is None), each started alone."""
    load0 = load_average()
    names = ["kelp", "kafka"] if kafka_version is not None else ["kelp"]
    out = []
    for i, case in enumerate(_cases(partitions, rf3_partitions)):
        sides = {name: _run_side(name, case, work=work / f"case-{i}-{name}", kafka_version=kafka_version,
                                 idle_s=idle_s, settle_s=settle_s, latency_records=latency_records)
                 for name in names}
        out.append({**case, "sides": sides})
    return {"cases": out, "idle_s": idle_s, "settle_s": settle_s, "size": SIZE, "latency_records": latency_records,
            "kafka": kafka_version is not None,
            "cpus": os.cpu_count(), "load_average": [load0, load_average()]}


def print_report(res: dict[str, Any]) -> None:
    from kelp.cli.output import print_table

    print(f"\npartition scale: one topic, created {STEP:,} partitions per request; idle CPU over "
          f"{res['idle_s']:.0f} s after {res['settle_s']:.0f} s of settling; then one {res['size']:,} B record to "
          f"each of {_spread(res)} in turn, one in flight (acks=1 at RF 1, acks=all at RF 3), twice; each broker "
          "started alone")
    if not res["kafka"]:
        print("Apache Kafka reference skipped (--no-kafka)")
    table = []
    for case in res["cases"]:
        for name, s in case["sides"].items():
            first, second = s["first_record"], s["second_record"]
            table.append([case["name"], name, f"{s['create_s']:,.1f}", f"{s['idle_cpu_pct_per_broker']:.1f}",
                          f"{s['rss_idle_bytes_per_broker'] / 2**20:,.0f}",
                          f"{s['rss_after_produce_bytes_per_broker'] / 2**20:,.0f}",
                          f"{first['p50_ms']:.1f} / {first['p99_ms']:.1f}",
                          f"{second['p50_ms']:.1f} / {second['p99_ms']:.1f} / {second['max_ms']:,.0f}"])
    print_table(table, ["CASE", "BROKER", "CREATE s", "IDLE CPU % of a core per broker", "RSS MiB per broker",
                        "RSS AFTER PRODUCE", "1ST RECORD p50 / p99 ms", "2ND RECORD p50 / p99 / max ms"])
    for case in res["cases"]:
        kelp, kafka = case["sides"]["kelp"], case["sides"].get("kafka")
        idle_ok = kelp["idle_cpu_pct_per_broker"] <= 5
        line = f"{case['name']}: Kelp idle CPU <= 5% of a core: {'met' if idle_ok else 'MISSED'}"
        if kafka is not None:
            rss = kelp["rss_idle_bytes_per_broker"] / kafka["rss_idle_bytes_per_broker"]
            line += f"; RSS <= 0.1x Kafka's: {'met' if rss <= 0.1 else 'MISSED'} ({rss:.3f}x)"
        print(line)
    print(f"load average {res['load_average'][0]} before, {res['load_average'][1]} after, {res['cpus']} CPUs")


def _spread(res: dict[str, Any]) -> str:
    n = res.get("latency_records")
    return "the partitions" if not n else f"{n:,} partitions spread over the topic"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options `python -m bench.cluster.partition_scale` and `python -m bench` share."""
    p.add_argument("--scale-partitions", type=int, default=10_000,
                   help="partitions of the one-broker RF 1 case (10000; 0 skips it)")
    p.add_argument("--scale-rf3-partitions", type=int, default=3_000,
                   help="partitions of the three-broker RF 3 case: replicas per broker (3000; 0 skips it)")
    p.add_argument("--scale-idle-seconds", type=float, default=30.0,
                   help="seconds of the idle-CPU window after creation (30)")
    p.add_argument("--scale-settle-seconds", type=float, default=5.0,
                   help="seconds between the creation and the idle-CPU window (5)")
    p.add_argument("--scale-latency-records", type=int, default=2_000,
                   help="records per latency round, to partitions spread evenly over the topic (2000; 0: one to "
                        "every partition)")


def run_from_args(args: argparse.Namespace, *, work: Path, kafka_version: str | None) -> dict[str, Any] | None:
    if args.scale_partitions <= 0 and args.scale_rf3_partitions <= 0:
        return None
    if args.scale_idle_seconds <= 0:
        raise ValueError("--scale-idle-seconds must be positive")
    return run(partitions=args.scale_partitions, rf3_partitions=args.scale_rf3_partitions, work=work,
               kafka_version=kafka_version, idle_s=args.scale_idle_seconds,
               settle_s=max(0.0, args.scale_settle_seconds), latency_records=args.scale_latency_records or None)


def main(argv: list[str] | None = None) -> int:
    return section_main("partition_scale", __doc__ or "", argv, add_arguments=add_arguments,
                        run_from_args=run_from_args, report=print_report, module="bench.cluster.partition_scale")


if __name__ == "__main__":
    raise SystemExit(main())
