"""Revenue per customer per minute of event time, from the `orders` topic, streamed with Spark.

The job: read `orders` (JSON: order_id, customer, amount, ts) through
`format("kafka")` (Spark's connector) or `format("kelp")` (Kelp's Python data
source; `--source` switches the one word), parse it, drop what does not
parse, and sum `amount` per customer over 1-minute event-time windows with a
watermark. Two sinks, two queries over the same source:

- Kafka topic `orders-revenue` (update mode): every micro-batch writes the
  windows it changed, keyed `customer@window-start`, value JSON — the topic
  always holds each window's latest figure (compaction-friendly).
- Parquet under `--output` (append mode): a window's row once the watermark
  has passed its end, i.e. final.

With `--available-now` both queries read what is in the topic, stop, and the
job prints every window: final ones from the Parquet files, the ones the
watermark still holds open from their latest figure in `orders-revenue`
(read back in batch through the same format).

Locally (a session of its own, the connector jars from Kelp's cache or --jars):

    python examples/spark/orders_pipeline.py --master 'local[2]' --source kafka \\
        --bootstrap localhost:9092 --checkpoint /tmp/orders/ckpt --output /tmp/orders/out --available-now

On a Spark cluster: `spark-submit --jars <the connector's four jars> examples/spark/orders_pipeline.py ...`
(examples/spark/README.md).

A secured cluster: `--command-config client.properties` (or env `KELP_COMMAND_CONFIG`), the Kafka client
properties file a Java client uses; each property goes to both formats as the `kafka.`-prefixed option
Spark's connector takes (`kafka.security.protocol`, `kafka.sasl.jaas.config`, ...), on every read and write.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

ORDER_SCHEMA = "order_id STRING, customer STRING, amount DOUBLE, ts TIMESTAMP"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", choices=["kafka", "kelp"], default="kafka",
                   help="kafka: Spark's connector (needs its jars); kelp: Kelp's Python data source (kafka)")
    p.add_argument("--bootstrap", default="localhost:9092", help="bootstrap servers (localhost:9092)")
    p.add_argument("--topic", default="orders", help="input topic (orders)")
    p.add_argument("--output-topic", default="orders-revenue", help="results topic (orders-revenue)")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (one sub-directory per query)")
    p.add_argument("--output", required=True, help="Parquet directory for final windows")
    p.add_argument("--window", default="1 minute", help="event-time window (1 minute)")
    p.add_argument("--watermark", default="30 seconds", help="how late an event may be (30 seconds)")
    p.add_argument("--starting-offsets", default="earliest", help="first run only: earliest|latest|JSON (earliest)")
    p.add_argument("--max-offsets-per-trigger", type=int, default=0, help="records per micro-batch, 0: no limit")
    p.add_argument("--available-now", action="store_true",
                   help="read what is there, stop, print the results (otherwise run until Ctrl-C)")
    p.add_argument("--trigger", default="5 seconds", help="processing-time trigger when running on (5 seconds)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="--available-now: seconds to wait for the queries (600)")
    p.add_argument("--master", help="start a session of its own on this master, e.g. local[2] (not under spark-submit)")
    p.add_argument("--command-config", default=os.environ.get("KELP_COMMAND_CONFIG"), metavar="FILE",
                   help="Kafka client properties for a secured cluster (env KELP_COMMAND_CONFIG)")
    p.add_argument("--jars", help="with --master and --source kafka: the connector jars, comma-separated "
                                  "(default: Kelp's cache, `python -m kelp.spark.jars`)")
    return p.parse_args(argv)


def kafka_options(args: argparse.Namespace) -> dict[str, str]:
    """`kafka.bootstrap.servers` and each client property of --command-config as a `kafka.` option."""
    options = {"kafka.bootstrap.servers": args.bootstrap}
    if args.command_config:
        from kelp.kafka_client.security import read_client_properties

        try:
            properties = read_client_properties(args.command_config)
        except ValueError as exc:
            sys.exit(f"--command-config: {exc}")
        options.update({f"kafka.{key}": value for key, value in properties.items()})
    return options


def build_session(args: argparse.Namespace) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(f"orders-revenue ({args.source})")
    if args.master:
        # A session of our own (python orders_pipeline.py): it needs what spark-submit would have passed.
        builder = (builder.master(args.master).config("spark.sql.shuffle.partitions", "4")
                   .config("spark.ui.showConsoleProgress", "false").config("spark.log.level", "WARN"))
        if args.source == "kafka":
            jars = args.jars
            if not jars:
                from kelp.spark.jars import connector_jars

                jars = ",".join(str(p) for p in connector_jars())
            builder = builder.config("spark.jars", jars)
    elif args.jars:
        sys.exit("--jars goes with --master; under spark-submit pass them to spark-submit --jars")
    # UTC windows whatever the machine's zone; AQE does not apply to streaming (Spark warns and turns it off).
    spark = (builder.config("spark.sql.session.timeZone", "UTC").config("spark.sql.adaptive.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    if args.source == "kelp":
        from kelp.spark import KelpDataSource

        spark.dataSource.register(KelpDataSource)
    return spark


def revenue_per_window(spark: Any, args: argparse.Namespace) -> Any:
    from pyspark.sql import functions as F

    reader = (spark.readStream.format(args.source)
              .options(**kafka_options(args))
              .option("subscribe", args.topic)
              .option("startingOffsets", args.starting_offsets)
              .option("failOnDataLoss", "false"))
    if args.max_offsets_per_trigger > 0:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    orders = (reader.load()
              .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
              .select("o.*")
              .where(F.col("order_id").isNotNull() & F.col("customer").isNotNull()
                     & F.col("amount").isNotNull() & F.col("ts").isNotNull()))
    return (orders.withWatermark("ts", args.watermark)
            .groupBy(F.window("ts", args.window), "customer")
            .agg(F.round(F.sum("amount"), 2).alias("revenue"), F.count("*").alias("orders"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "customer", "revenue", "orders"))


def start_queries(revenue: Any, args: argparse.Namespace) -> list[Any]:
    from pyspark.sql import functions as F

    def trigger(writer: Any) -> Any:
        return writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime=args.trigger)

    def iso(column: str) -> Any:
        return F.date_format(column, "yyyy-MM-dd'T'HH:mm:ss'Z'")

    options = kafka_options(args)  # read once, not at every micro-batch

    def to_topic(batch: Any, batch_id: int) -> None:
        # Update mode through foreachBatch: a Python data source (`kelp`) takes only Append and Complete
        # streaming writes, so the changed windows of each micro-batch go out as a batch write, the same
        # code for both formats.
        (batch.select(F.concat_ws("@", "customer", iso("window_start")).alias("key"),
                      F.to_json(F.struct(iso("window_start").alias("window_start"),
                                         iso("window_end").alias("window_end"),
                                         "customer", "revenue", "orders")).alias("value"))
         .write.format(args.source).mode("append")  # Kafka: append or the default; Python sources: append/overwrite
         .options(**options)
         .option("topic", args.output_topic)
         .save())

    topic_query = trigger(revenue.writeStream.queryName("revenue_to_topic").outputMode("update")
                          .foreachBatch(to_topic)
                          .option("checkpointLocation", os.path.join(args.checkpoint, "revenue-topic")))
    parquet_query = trigger(revenue.writeStream.queryName("revenue_to_parquet").outputMode("append")
                            .format("parquet")
                            .option("path", args.output)
                            .option("checkpointLocation", os.path.join(args.checkpoint, "revenue-parquet")))
    return [topic_query.start(), parquet_query.start()]


def wait(queries: list[Any], timeout: float) -> None:
    """Until every query has stopped by itself (bounded); the first failure or overrun stops the others."""
    import time

    deadline = time.monotonic() + timeout
    try:
        for q in queries:
            if not q.awaitTermination(max(1.0, deadline - time.monotonic())):
                sys.exit(f"query {q.name} did not finish within {timeout:.0f} s: {q.lastProgress}")
    finally:
        for q in queries:
            if q.isActive:
                q.stop()


def results(spark: Any, args: argparse.Namespace) -> list[dict]:
    """Every window: final ones from Parquet, open ones from their latest figure in the results topic."""
    from pyspark.sql.utils import AnalysisException

    rows: dict[tuple[str, str], dict] = {}
    latest = (spark.read.format(args.source).options(**kafka_options(args))
              .option("subscribe", args.output_topic).load()
              .selectExpr("CAST(value AS STRING) AS value", "partition", "offset").collect())
    for r in sorted(latest, key=lambda r: (r.partition, r.offset)):  # one key, one partition: offsets order it
        v = json.loads(r.value)
        rows[(v["window_start"], v["customer"])] = {**v, "final": False}
    try:
        final = spark.read.parquet(args.output).collect()
    except AnalysisException:  # nothing final yet: no file written
        final = []
    for r in final:
        start = r.window_start.strftime("%Y-%m-%dT%H:%M:%SZ")
        rows[(start, r.customer)] = {"window_start": start, "window_end": r.window_end.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                     "customer": r.customer, "revenue": r.revenue, "orders": r.orders, "final": True}
    return [rows[k] for k in sorted(rows)]


def print_results(rows: list[dict]) -> None:
    print(f"{'window (UTC)':<23} {'customer':<10} {'orders':>6} {'revenue':>10}  state")
    for r in rows:
        window = f"{r['window_start'][:16].replace('T', ' ')}-{r['window_end'][11:16]}"
        print(f"{window:<23} {r['customer']:<10} {r['orders']:>6} {r['revenue']:>10.2f}  "
              f"{'final' if r['final'] else 'open (watermark)'}")
    totals: dict[str, float] = {}
    for r in rows:
        totals[r["customer"]] = totals.get(r["customer"], 0.0) + r["revenue"]
    print("revenue per customer, all windows:")
    for customer in sorted(totals):
        print(f"  {customer:<10} {totals[customer]:>10.2f}")
    final = sum(1 for r in rows if r["final"])
    print(f"{len(rows)} window(s): {final} final (Parquet), {len(rows) - final} still open (latest in topic)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = build_session(args)
    try:
        queries = start_queries(revenue_per_window(spark, args), args)
        if not args.available_now:
            print(f"streaming from {args.topic} to {args.output_topic} and {args.output}; Ctrl-C stops", flush=True)
            spark.streams.awaitAnyTermination()
            return 0
        wait(queries, args.timeout)
        print_results(results(spark, args))
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
