"""Tier 5: Spark's own Kafka connector (`format("kafka")`, the Java client) against real Kelp brokers.

Why: every Spark user already writes `spark.readStream.format("kafka")`; it
must work against Kelp unchanged. These tests drive the connector through
the session's jars (no download) against one broker process shared by the
module — every test uses its own topics — and once against a 3-broker
replicated cluster: batch reads (schema, values, offsets and timestamps
exact), streaming reads that resume from a checkpoint under
`maxOffsetsPerTrigger`, `subscribePattern` picking up a new topic,
headers, batch writes read back by another client, and a streaming
Kafka-to-Kafka job.

Every wait is bounded: streaming queries run with `trigger(availableNow=True)`
and `awaitTermination(timeout)`; topics are checked by their high
watermarks, not by polling until quiet.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support.broker_process import BrokerProcess

# The first test also starts the JVM (SparkSession, one per tier): more than the default 120 s on a loaded machine.
pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

QUERY_TIMEOUT_S = 60
BASE_TS = 1_700_000_000_000

KAFKA_SCHEMA = [("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
                ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
HEADERS_TYPE = "array<struct<key:string,value:binary>>"


# -- fixtures and helpers ----------------------------------------------------

@pytest.fixture(scope="module")
def kelp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module (topics are per test): a broker start is not what these tests measure."""
    broker = BrokerProcess(tmp_path_factory.mktemp("kelp-spark-broker")).start()
    try:
        yield broker
    finally:
        broker.kill()


def create_topics(bootstrap: str, topics: dict[str, int], *, replication: int = 1,
                  config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, n, replication, config=dict(config or {}))
                                   for name, n in topics.items()], operation_timeout=15)
    for future in futures.values():
        future.result(20)


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    """Each record: value, and optionally key, partition, ts (ms), headers; acks=all, flushed (bounded)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for r in records:
        kwargs: dict[str, Any] = {"key": r.get("key"), "value": r["value"]}
        for name, arg in (("partition", "partition"), ("ts", "timestamp"), ("headers", "headers")):
            if r.get(name) is not None:
                kwargs[arg] = r[name]
        producer.produce(topic, **kwargs)
    assert producer.flush(20) == 0, f"records to {topic} not acknowledged within 20 s"


def read_topic(bootstrap: str, topic: str, partitions: int, *, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Every record of `topic` with another client (confluent-kafka): exactly what the high watermarks count."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        expected = 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            expected += high - low
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append({"key": m.key(), "value": m.value(), "partition": m.partition(), "offset": m.offset(),
                        "headers": [(k, v) for k, v in (m.headers() or [])]})
        assert len(out) == expected, f"read {len(out)} of the {expected} records in {topic} within {timeout} s"
        return out
    finally:
        consumer.close()


def kafka_reader(spark: Any, bootstrap: str, *, stream: bool = False, **options: str) -> Any:
    reader = (spark.readStream if stream else spark.read).format("kafka").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def run_available_now(writer: Any, checkpoint: Path) -> Any:
    """Start a streaming query with trigger(availableNow=True); wait (bounded) until it has read everything."""
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    try:
        done = query.awaitTermination(QUERY_TIMEOUT_S)
    finally:
        if query.isActive:
            query.stop()
    assert done, f"query still running after {QUERY_TIMEOUT_S} s: {query.lastProgress}"
    return query


def batch_sizes(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def schema_of(df: Any) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


def kafka_rows(df: Any) -> list[tuple]:
    """(topic, partition, offset, key, value, timestamp ms, timestampType), in (topic, partition, offset) order."""
    rows = df.selectExpr("topic", "partition", "offset", "key", "value", "unix_millis(timestamp) AS ts",
                         "timestampType").collect()
    return sorted((r.topic, r.partition, r.offset, None if r.key is None else bytes(r.key), bytes(r.value), r.ts,
                   r.timestampType) for r in rows)


# -- batch read ----------------------------------------------------------------

def test_batch_read_schema_values_offsets_and_timestamps(spark: Any, kelp: BrokerProcess) -> None:
    """Every field exact: keys (null too), binary values, partitions, offsets, CreateTime and LogAppendTime."""
    create_topics(kelp.bootstrap, {"batch-read": 3})
    create_topics(kelp.bootstrap, {"batch-append": 1}, config={"message.timestamp.type": "LogAppendTime"})
    records = [{"partition": p, "key": None if i == 2 else f"k{p}-{i}".encode(),
                "value": bytes([p, i, 0, 255]) + f"v{p}-{i}".encode(), "ts": BASE_TS + 100 * p + i}
               for p in range(3) for i in range(5)]
    produce(kelp.bootstrap, "batch-read", records)
    before_append = int(time.time() * 1000)
    produce(kelp.bootstrap, "batch-append", [{"key": b"a", "value": b"appended", "ts": 1000}])

    df = kafka_reader(spark, kelp.bootstrap, subscribe="batch-read,batch-append")
    assert schema_of(df) == KAFKA_SCHEMA
    rows = kafka_rows(df)
    expected = [("batch-read", r["partition"], i % 5, r["key"], r["value"], r["ts"], 0)
                for i, r in enumerate(records)]
    assert [r for r in rows if r[0] == "batch-read"] == expected
    [appended] = [r for r in rows if r[0] == "batch-append"]
    assert appended[:5] == ("batch-append", 0, 0, b"a", b"appended")
    assert appended[6] == 1, "LogAppendTime topic: timestampType 1"
    assert before_append - 1000 <= appended[5] <= int(time.time() * 1000) + 1000, appended

    # Offset bounds, per partition, in Spark's JSON: -2 earliest, -1 latest, ends exclusive.
    bounded = kafka_reader(spark, kelp.bootstrap, subscribe="batch-read",
                           startingOffsets=json.dumps({"batch-read": {"0": 1, "1": -2, "2": 3}}),
                           endingOffsets=json.dumps({"batch-read": {"0": 3, "1": -1, "2": 5}}))
    got = [(r[1], r[2]) for r in kafka_rows(bounded)]
    assert got == [(0, 1), (0, 2)] + [(1, o) for o in range(5)] + [(2, 3), (2, 4)]

    # Starting offsets by timestamp (ListOffsets with a timestamp): the first record at or after it; none
    # after the last record (offset -1 in the answer) means latest under this strategy.
    by_time = kafka_reader(spark, kelp.bootstrap, subscribe="batch-read", startingOffsetsByTimestamp=json.dumps(
        {"batch-read": {"0": BASE_TS + 2, "1": BASE_TS + 103, "2": BASE_TS + 300}}),
        startingOffsetsByTimestampStrategy="latest")
    got = [(r[1], r[2]) for r in kafka_rows(by_time)]
    assert got == [(0, 2), (0, 3), (0, 4), (1, 3), (1, 4)]


def test_headers(spark: Any, kelp: BrokerProcess) -> None:
    """includeHeaders: repeated keys in order, null and empty values; a record without headers has null."""
    create_topics(kelp.bootstrap, {"headers": 1})
    headers = [("a", b"1"), ("b", None), ("a", b"2"), ("empty", b"")]
    produce(kelp.bootstrap, "headers", [{"value": b"with", "headers": headers}, {"value": b"without"}])

    df = kafka_reader(spark, kelp.bootstrap, subscribe="headers", includeHeaders="true")
    assert schema_of(df) == KAFKA_SCHEMA + [("headers", HEADERS_TYPE)]
    rows = sorted(df.select("offset", "value", "headers").collect())
    assert [(r.offset, bytes(r.value)) for r in rows] == [(0, b"with"), (1, b"without")]
    assert [(h.key, None if h.value is None else bytes(h.value)) for h in rows[0].headers] == headers
    assert rows[1].headers is None
    assert schema_of(kafka_reader(spark, kelp.bootstrap, subscribe="headers")) == KAFKA_SCHEMA


# -- streaming read --------------------------------------------------------------

def test_streaming_read_resumes_from_checkpoint_under_max_offsets_per_trigger(
        spark: Any, kelp: BrokerProcess, tmp_path: Path) -> None:
    """maxOffsetsPerTrigger=10 over 2×20 records: 4 micro-batches; a restart reads only what came since."""
    topic = "stream-in"
    create_topics(kelp.bootstrap, {topic: 2})
    produce(kelp.bootstrap, topic, [{"partition": i % 2, "key": str(i).encode(), "value": f"v{i}".encode()}
                                    for i in range(40)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> Any:
        stream = kafka_reader(spark, kelp.bootstrap, stream=True, subscribe=topic, startingOffsets="earliest",
                              maxOffsetsPerTrigger="10")
        return run_available_now(stream.selectExpr("CAST(key AS STRING) AS key", "partition", "offset")
                                 .writeStream.format("parquet").option("path", str(out)), checkpoint)

    first = run()
    assert batch_sizes(first) == [10, 10, 10, 10]
    assert json.loads(first.lastProgress["sources"][0]["endOffset"]) == {topic: {"0": 20, "1": 20}}

    produce(kelp.bootstrap, topic, [{"partition": i % 2, "key": str(i).encode(), "value": f"v{i}".encode()}
                                    for i in range(40, 55)])
    second = run()  # 8 + 7 pending, prorated per partition: two batches of at most 10
    assert len(batch_sizes(second)) == 2 and sum(batch_sizes(second)) == 15 and max(batch_sizes(second)) <= 10

    rows = spark.read.parquet(str(out)).collect()
    assert sorted(int(r.key) for r in rows) == list(range(55)), "every record exactly once"
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        [(0, o) for o in range(28)] + [(1, o) for o in range(27)])


def test_subscribe_pattern_reads_matching_topics_and_picks_up_new_ones(
        spark: Any, kelp: BrokerProcess, tmp_path: Path) -> None:
    """subscribePattern `pat-.*`; a matching topic created between two runs is read from its start.

    Spark matches with `Regex.findFirstIn` (a search, not a full match), so
    the topic left out must not contain `pat-` anywhere.
    """
    create_topics(kelp.bootstrap, {"pat-a": 2, "pat-b": 1, "skip-c": 1})
    for topic in ("pat-a", "pat-b", "skip-c"):
        produce(kelp.bootstrap, topic, [{"value": f"{topic}-{i}".encode()} for i in range(3)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> Any:
        stream = kafka_reader(spark, kelp.bootstrap, stream=True, subscribePattern="pat-.*",
                              startingOffsets="earliest")
        return run_available_now(stream.selectExpr("topic", "CAST(value AS STRING) AS value")
                                 .writeStream.format("parquet").option("path", str(out)), checkpoint)

    def values() -> list[str]:
        return sorted(r.value for r in spark.read.parquet(str(out)).collect())

    run()
    assert values() == [f"{t}-{i}" for t in ("pat-a", "pat-b") for i in range(3)]

    create_topics(kelp.bootstrap, {"pat-new": 2})
    produce(kelp.bootstrap, "pat-new", [{"value": f"pat-new-{i}".encode(), "partition": i % 2} for i in range(4)])
    assert batch_sizes(run()) == [4]
    assert values() == [f"{t}-{i}" for t in ("pat-a", "pat-b") for i in range(3)] + [f"pat-new-{i}" for i in range(4)]


# -- writes --------------------------------------------------------------------

def test_batch_write_keys_headers_and_topic_column(spark: Any, kelp: BrokerProcess) -> None:
    """df.write.format("kafka") with a topic column: keys kept (one key, one partition), headers kept."""
    create_topics(kelp.bootstrap, {"written-a": 3, "written-b": 1})
    rows = [("written-a" if i < 24 else "written-b", None if i % 12 == 11 else f"key-{i % 4}", f"value-{i}",
             [("n", str(i).encode())]) for i in range(30)]
    df = spark.createDataFrame(rows, f"topic string, key string, value string, headers {HEADERS_TYPE}")
    df.write.format("kafka").option("kafka.bootstrap.servers", kelp.bootstrap).save()

    for topic, partitions in (("written-a", 3), ("written-b", 1)):
        got = read_topic(kelp.bootstrap, topic, partitions)
        sent = [(k, v, h) for t, k, v, h in rows if t == topic]
        assert sorted(((None if r["key"] is None else r["key"].decode(), r["value"].decode(), r["headers"])
                       for r in got), key=repr) == sorted(sent, key=repr)
        by_key: dict[bytes, set[int]] = {}
        for r in got:
            if r["key"] is not None:
                by_key.setdefault(r["key"], set()).add(r["partition"])
        assert all(len(p) == 1 for p in by_key.values()), by_key


def test_streaming_kafka_to_kafka(spark: Any, kelp: BrokerProcess, tmp_path: Path) -> None:
    """readStream kafka → transform → writeStream kafka into another topic; keys kept, values transformed."""
    create_topics(kelp.bootstrap, {"k2k-in": 2, "k2k-out": 2})
    produce(kelp.bootstrap, "k2k-in", [{"partition": i % 2, "key": f"k{i}".encode(),
                                        "value": json.dumps({"n": i}).encode()} for i in range(20)])
    stream = kafka_reader(spark, kelp.bootstrap, stream=True, subscribe="k2k-in", startingOffsets="earliest",
                          maxOffsetsPerTrigger="8")
    doubled = stream.selectExpr("key", "to_json(named_struct('n2', get_json_object(CAST(value AS STRING), '$.n') * 2))"
                                " AS value")
    query = run_available_now(doubled.writeStream.format("kafka").option("kafka.bootstrap.servers", kelp.bootstrap)
                              .option("topic", "k2k-out"), tmp_path / "checkpoint")
    assert sum(batch_sizes(query)) == 20

    got = read_topic(kelp.bootstrap, "k2k-out", 2)
    assert sorted((r["key"].decode(), json.loads(r["value"])["n2"]) for r in got) == \
        sorted((f"k{i}", 2 * i) for i in range(20))


# -- replicated cluster ----------------------------------------------------------

def test_replicated_cluster_write_then_read(spark: Any, cluster_factory: Any) -> None:
    """3 brokers, RF=3: a Spark write (acks=all, idempotent) lands on every replica; a batch read sees it all."""
    cluster = cluster_factory(3)
    create_topics(cluster.bootstrap, {"replicated": 3}, replication=3)
    cluster.wait_fully_replicated("replicated")

    rows = [(f"key-{i % 7}", f"value-{i}") for i in range(60)]
    (spark.createDataFrame(rows, "key string, value string").write.format("kafka")
     .option("kafka.bootstrap.servers", cluster.bootstrap).option("kafka.acks", "all")
     .option("topic", "replicated").save())
    described = cluster.wait_fully_replicated("replicated")
    assert sum(p["high_watermark"] for p in described["partitions"]) == 60

    df = kafka_reader(spark, cluster.bootstrap, subscribe="replicated")
    got = df.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset").collect()
    assert sorted((r.key, r.value) for r in got) == sorted(rows)
    by_partition: dict[int, list[int]] = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(r.offset)
    assert {p: sorted(o) for p, o in by_partition.items()} == {
        p["partition"]: list(range(p["high_watermark"])) for p in described["partitions"] if p["high_watermark"]}
