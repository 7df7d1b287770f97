"""Spark reading and writing a Kelp topic through `format("kelp")` beside Spark's own `format("kafka")`.

One Kelp broker, one local[2] SparkSession with Spark's Kafka connector
jars (`kelp.spark.jars`), the same topic and rows for both formats, in the
same run, after a warm-up of both (reader and writer workers, JIT): a
batch read of every record (forcing every value through
`sum(length(value))`, so neither source can skip the bytes) and a batch
write of a DataFrame of the same rows to an empty topic, each format in
turn, alternating which goes first, `runs` times; the median is reported
as records/s. The goal (issue #9): `kelp` reads within 2× of `kafka`.

`python -m bench.spark` runs it alone; `make bench` runs it after the
broker cases.

It must never time a format against data the other did not get.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import clients
from .broker import BenchBroker

__all__ = ["run", "print_report", "main"]

PARTITIONS = 2
READ_GOAL = 0.5  # kelp's read rate at least half of the kafka connector's


def _session() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from kelp.spark import KelpDataSource
    from kelp.spark.jars import fetch

    jars = ",".join(str(p) for p in fetch())
    spark = (SparkSession.builder.master("local[2]").appName("kelp-bench")
             .config("spark.jars", jars).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KelpDataSource)
    return spark


def _read(spark: Any, fmt: str, bootstrap: str, topic: str, expect: int) -> float:
    start = time.perf_counter()
    row = (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
           .selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0])
    elapsed = time.perf_counter() - start
    if row.n != expect:
        raise RuntimeError(f"format({fmt!r}) read {row.n} records of {topic}, expected {expect}")
    return elapsed


def _write(spark: Any, fmt: str, bootstrap: str, df: Any, topic: str, count: int) -> float:
    clients.create_topic(bootstrap, topic, partitions=PARTITIONS)
    start = time.perf_counter()
    df.write.format(fmt).mode("append").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()
    elapsed = time.perf_counter() - start
    written = sum(clients.end_offset(bootstrap, topic, p) for p in range(PARTITIONS))
    if written != count:
        raise RuntimeError(f"format({fmt!r}) wrote {written} records to {topic}, expected {count}")
    return elapsed


def _fill(bootstrap: str, topic: str, records: int, size: int) -> int:
    """`records` keyed records of `size` bytes spread over the partitions, in batches of 5,000."""
    from kelp.spark.codec import encode_batch
    from kelp.spark.wire import KafkaWire

    per, chunk = records // PARTITIONS, 5_000
    payload = os.urandom(size)
    with KafkaWire(bootstrap) as wire:
        for p in range(PARTITIONS):
            for start in range(0, per, chunk):
                n = min(chunk, per - start)
                keys = [str(start + i).encode() for i in range(n)]
                wire.produce(topic, p, encode_batch(keys, [payload] * n, None), acks=1)
    return per * PARTITIONS


def run(*, records: int = 500_000, size: int = 100, runs: int = 3, work: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kelp-bench-spark-", dir=work) as tmp, \
            BenchBroker(Path(tmp) / "kelp", settings={"auto.create.topics.enable": "false"}) as broker:
        bootstrap = broker.bootstrap
        clients.create_topic(bootstrap, "spark-src", partitions=PARTITIONS)
        total = _fill(bootstrap, "spark-src", records, size)
        spark = _session()
        try:
            formats = ["kelp", "kafka"]
            payload = os.urandom(size)
            df = spark.range(total).selectExpr("CAST(id AS STRING) AS key", f"unhex('{payload.hex()}') AS value")
            df = df.repartition(PARTITIONS).cache()
            df.count()
            warm = df.limit(20_000)
            for fmt in formats:  # warm-up: JIT, Python reader and writer workers, page cache
                _read(spark, fmt, bootstrap, "spark-src", total)
                _write(spark, fmt, bootstrap, warm, f"spark-warm-{fmt}", 20_000)
            reads: dict[str, list[float]] = {f: [] for f in formats}
            writes: dict[str, list[float]] = {f: [] for f in formats}
            for i in range(runs):
                order = formats if i % 2 == 0 else formats[::-1]
                for fmt in order:
                    reads[fmt].append(_read(spark, fmt, bootstrap, "spark-src", total))
                for fmt in order:
                    writes[fmt].append(_write(spark, fmt, bootstrap, df, f"spark-out-{fmt}-{i}", total))
        finally:
            spark.stop()
    return {
        "records": total, "size": size, "runs": runs,
        "read": {f: total / statistics.median(t) for f, t in reads.items()},
        "write": {f: total / statistics.median(t) for f, t in writes.items()},
    }


def print_report(res: dict[str, Any]) -> None:
    print(f"\nSpark, local[2]: {res['records']:,} records of {res['size']} B, {PARTITIONS} partitions, "
          f"median of {res['runs']} (records/s)")
    print(f"  {'case':<8} {'format(kelp)':>14} {'format(kafka)':>14} {'kelp/kafka':>11}")
    for case in ("read", "write"):
        kelp, kafka = res[case]["kelp"], res[case]["kafka"]
        print(f"  {case:<8} {kelp:>14,.0f} {kafka:>14,.0f} {kelp / kafka:>10.2f}×")
    ratio = res["read"]["kelp"] / res["read"]["kafka"]
    verdict = "met" if ratio >= READ_GOAL else "MISSED"
    print(f"  goal: kelp reads within 2× of Spark's connector (≥ {READ_GOAL:.2f}×): {ratio:.2f}× — {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    print_report(run(records=args.records, size=args.size, runs=args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
