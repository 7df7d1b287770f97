"""The `kelp` PySpark data source against a real broker: parity with Spark's Kafka source, offsets, restarts.

What a pipeline relies on when it switches `format("kafka")` to
`format("kelp")`: the same rows and columns for the same options, a
streaming query that resumes from its checkpoint reading every record
exactly once, new partitions and topics picked up, failOnDataLoss as Spark
defines it, bad options named in the error, and a sink whose keyed records
land in the partitions Kafka's own partitioner picks.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.broker.helpers import list_offset
from tests.broker.helpers import produce as produce_batch
from tests.support.broker_process import BrokerProcess
from tests.support.kafka_wire import WireClient, make_batch

# The first test also starts the JVM (SparkSession, one per tier): more than the default 120 s on a loaded machine.
pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def kelp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module (each test uses its own topics); fast retention checks for the data-loss test.
    The read_committed test writes transactional batches and markers raw, as a leader sees them, with no
    transaction coordinator behind them: KIP-890's verification is off, as in Kafka's own log tests."""
    b = BrokerProcess(tmp_path_factory.mktemp("spark-broker"), settings={
        "log.retention.check.interval.ms": 200, "auto.create.topics.enable": False,
        "transaction.partition.verification.enable": False})
    b.start()
    yield b
    b.kill()


def admin(b: BrokerProcess, path: str, body: Any = None, method: str = "POST") -> Any:
    req = urllib.request.Request(b.http_url + "/admin/v1" + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=15) as resp:
        return json.loads(resp.read() or b"null")


def produce(b: BrokerProcess, topic: str, partition: int, records: list[tuple[bytes | None, bytes]], *,
            headers: list[tuple[str, bytes]] | None = None, timestamp_ms: int | None = None) -> None:
    with WireClient(b.bootstrap) as c:
        err, _ = produce_batch(c, topic, make_batch(records, headers=headers, timestamp_ms=timestamp_ms),
                               partition=partition, acks=-1)
        assert err == 0


def reader(spark, fmt: str, b: BrokerProcess, **options: str):
    r = spark.read.format(fmt).option("kafka.bootstrap.servers", b.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=lambda r: (r[2], r[3], r[4]))


def test_batch_reads_give_the_rows_and_schema_of_sparks_kafka_source(spark, kelp) -> None:
    admin(kelp, "/topics", {"name": "par", "partitions": 3})
    for p in range(3):
        produce(kelp, "par", p, [(f"k{p}-{i}".encode(), f"v{p}-{i}".encode()) for i in range(20)],
                headers=[("source", b"test"), ("p", str(p).encode())])
        produce(kelp, "par", p, [(None, b"keyless"), (b"k", b"")])
    for options in ({"subscribe": "par", "includeHeaders": "true"},
                    {"assign": json.dumps({"par": [0, 2]})},
                    {"subscribePattern": "pa.", "startingOffsets": json.dumps({"par": {"0": 5, "1": -2, "2": 21}}),
                     "endingOffsets": json.dumps({"par": {"0": 7, "1": -1, "2": 22}})}):
        ours = reader(spark, "kelp", kelp, **options)
        theirs = reader(spark, "kafka", kelp, **options)
        assert ours.schema == theirs.schema, options
        mine, spark_rows = rows(ours), rows(theirs)
        assert mine == spark_rows, options
        assert mine, options
    got = rows(reader(spark, "kelp", kelp, subscribe="par", includeHeaders="true"))
    assert len(got) == 66
    first = got[0]
    assert (first[0], first[1], first[2], first[3], first[4]) == (b"k0-0", b"v0-0", "par", 0, 0)
    assert first[6] == 0 and [tuple(h) for h in first[7]] == [("source", b"test"), ("p", b"0")]
    assert [r[1] for r in got if r[3] == 1][-2:] == [b"keyless", b""]


def test_starting_timestamp_picks_the_first_record_at_or_after_it(spark, kelp) -> None:
    admin(kelp, "/topics", {"name": "ts", "partitions": 1})
    base = int(time.time() * 1000) - 60_000
    for i in range(6):
        produce(kelp, "ts", 0, [(None, f"r{i}".encode())], timestamp_ms=base + i * 1000)
    options = {"subscribe": "ts", "startingTimestamp": str(base + 2500)}
    ours = rows(reader(spark, "kelp", kelp, **options))
    assert [r[1] for r in ours] == [b"r3", b"r4", b"r5"]
    assert ours == rows(reader(spark, "kafka", kelp, **options))
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        reader(spark, "kelp", kelp, subscribe="ts", startingTimestamp=str(base + 3_600_000)).collect()
    assert rows(reader(spark, "kelp", kelp, subscribe="ts", startingTimestamp=str(base + 3_600_000),
                       startingOffsetsByTimestampStrategy="latest")) == []


def txn_produce(b: BrokerProcess, topic: str, values: list[bytes], *, pid: int = -1, seq: int = -1) -> None:
    """Records of producer `pid`'s transaction (raw, as a transactional producer writes them), or plain ones."""
    from kafka.protocol.producer import ProduceRequest

    from kelp.records.build import build_batch
    from kelp.records.record import Record

    T = ProduceRequest.TopicProduceData
    data = build_batch([Record(None, v) for v in values], producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                       base_sequence=seq, is_transactional=pid >= 0)
    with WireClient(b.bootstrap) as c:
        resp = c.request(ProduceRequest(transactional_id="tx" if pid >= 0 else None, acks=-1, timeout_ms=5000,
                                        topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(
                                            index=0, records=data)])]), 9)
    assert resp.responses[0].partition_responses[0].error_code == 0, resp


def txn_end(b: BrokerProcess, topic: str, pid: int, commit: bool) -> None:
    """The COMMIT or ABORT marker a coordinator has the leader write (WriteTxnMarkers)."""
    from kafka.protocol.producer import WriteTxnMarkersRequest

    M = WriteTxnMarkersRequest.WritableTxnMarker
    with WireClient(b.bootstrap) as c:
        resp = c.request(WriteTxnMarkersRequest(markers=[M(
            producer_id=pid, producer_epoch=0, transaction_result=commit, coordinator_epoch=0,
            topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])]), 1)
    assert resp.markers[0].topics[0].partitions[0].error_code == 0, resp


def test_read_committed_reads_committed_transactions_only_as_sparks_kafka_source(spark, kelp) -> None:
    admin(kelp, "/topics", {"name": "txns", "partitions": 1})
    txn_produce(kelp, "txns", [b"plain-1"])
    txn_produce(kelp, "txns", [b"aborted-1", b"aborted-2"], pid=5000, seq=0)
    txn_produce(kelp, "txns", [b"committed-1"], pid=5001, seq=0)
    txn_produce(kelp, "txns", [b"aborted-3"], pid=5000, seq=2)
    txn_end(kelp, "txns", 5000, False)
    txn_end(kelp, "txns", 5001, True)
    txn_produce(kelp, "txns", [b"plain-2"])
    txn_produce(kelp, "txns", [b"open-1"], pid=5002, seq=0)  # still open: read_committed stops before it
    txn_produce(kelp, "txns", [b"plain-3"])
    committed = {"subscribe": "txns", "kafka.isolation.level": "read_committed"}
    ours = rows(reader(spark, "kelp", kelp, **committed))
    assert [r[1] for r in ours] == [b"plain-1", b"committed-1", b"plain-2"]
    assert ours == rows(reader(spark, "kafka", kelp, **committed))
    everything = [r[1] for r in rows(reader(spark, "kelp", kelp, subscribe="txns",
                                            **{"kafka.isolation.level": "read_uncommitted"}))]
    assert everything == [b"plain-1", b"aborted-1", b"aborted-2", b"committed-1", b"aborted-3", b"plain-2",
                          b"open-1", b"plain-3"]
    assert [r[1] for r in rows(reader(spark, "kelp", kelp, subscribe="txns"))] == everything  # the default
    txn_end(kelp, "txns", 5002, True)
    assert [r[1] for r in rows(reader(spark, "kelp", kelp, **committed))] == [
        b"plain-1", b"committed-1", b"plain-2", b"open-1", b"plain-3"]


@pytest.mark.parametrize("options, named", [
    ({"subscrbe": "x"}, "subscrbe"),
    ({"subscribe": "x", "assign": '{"x": [0]}'}, "exactly one of"),
    ({"subscribe": "x", "startingOffsets": "latest"}, "startingOffsets"),
    ({"subscribe": "x", "endingOffsets": '{"x": {"0": -2}}'}, "endingOffsets"),
    ({"subscribe": "x", "startingOffsets": "{not json"}, "startingOffsets"),
    ({"subscribe": "x", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"subscribe": "x", "kafka.security.protocol": "SASL_SSL"}, "kafka.sasl.mechanism"),
    ({"subscribe": "x", "kafka.isolation.level": "serializable"}, "kafka.isolation.level"),
])
def test_a_bad_option_fails_the_query_with_an_error_naming_it(spark, kelp, options, named) -> None:
    with pytest.raises(Exception, match=named):
        reader(spark, "kelp", kelp, **options).collect()


def test_no_bootstrap_servers_is_named(spark) -> None:
    with pytest.raises(Exception, match="kafka.bootstrap.servers"):
        spark.read.format("kelp").option("subscribe", "x").load().collect()


def stream(spark, b: BrokerProcess, **options: str):
    r = spark.readStream.format("kelp").option("kafka.bootstrap.servers", b.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_available_now(df, out: Path, checkpoint: Path) -> Any:
    query = (df.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value").writeStream
             .format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the availableNow query did not finish within 120 s"
    if query.exception() is not None:
        raise query.exception()
    return query


def test_a_restarted_stream_reads_every_record_once_in_bounded_micro_batches(spark, kelp, tmp_path) -> None:
    admin(kelp, "/topics", {"name": "once", "partitions": 2})
    for p in range(2):
        produce(kelp, "once", p, [(None, f"a{p}-{i}".encode()) for i in range(120)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = stream(spark, kelp, subscribe="once", startingOffsets="earliest", maxOffsetsPerTrigger="100")
    first = run_available_now(df, out, checkpoint)
    sizes = [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]]
    assert sizes and max(sizes) <= 100 and sum(sizes) == 240, sizes
    assert json.loads(first.lastProgress["sources"][0]["endOffset"]) == {"once": {"0": 120, "1": 120}}
    # the query stopped between batches; more records arrive, and a partition is added
    admin(kelp, "/topics/once/partitions", {"partitions": 3})
    for p in range(3):
        produce(kelp, "once", p, [(None, f"b{p}-{i}".encode()) for i in range(30)])
    run_available_now(df, out, checkpoint)
    read = spark.read.parquet(str(out)).collect()
    seen = sorted((r.partition, r.offset) for r in read)
    expected = sorted([(p, o) for p in range(2) for o in range(150)] + [(2, o) for o in range(30)])
    assert seen == expected  # every record, none twice
    assert {r.value for r in read if r.partition == 2} == {f"b2-{i}" for i in range(30)}


def test_subscribe_pattern_picks_up_topics_created_while_the_query_runs(spark, kelp, tmp_path) -> None:
    admin(kelp, "/topics", {"name": "evt-a", "partitions": 1})
    produce(kelp, "evt-a", 0, [(None, b"a0")])
    df = stream(spark, kelp, subscribePattern="evt-.*", startingOffsets="earliest")
    query = (df.selectExpr("topic", "CAST(value AS STRING) AS value").writeStream.format("memory")
             .queryName("evt_pattern").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        def seen() -> set:
            return {(r.topic, r.value) for r in spark.sql("SELECT * FROM evt_pattern").collect()}

        deadline = time.monotonic() + 60
        while ("evt-a", "a0") not in seen() and time.monotonic() < deadline:
            query.awaitTermination(0.2)
        admin(kelp, "/topics", {"name": "evt-b", "partitions": 1})
        produce(kelp, "evt-b", 0, [(None, b"b0")])
        produce(kelp, "evt-a", 0, [(None, b"a1")])
        while len(seen()) < 3 and time.monotonic() < deadline:
            query.awaitTermination(0.2)
        assert seen() == {("evt-a", "a0"), ("evt-a", "a1"), ("evt-b", "b0")}
        assert query.exception() is None
    finally:
        query.stop()


def test_fail_on_data_loss_when_retention_deleted_offsets_the_query_needs(spark, kelp, tmp_path) -> None:
    admin(kelp, "/topics", {"name": "ret", "partitions": 1,
                            "configs": {"retention.ms": "60000", "segment.bytes": "2000"}})
    old = int(time.time() * 1000) - 3_600_000
    produce(kelp, "ret", 0, [(None, b"first")], timestamp_ms=old)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(stream(spark, kelp, subscribe="ret", startingOffsets="earliest"), out, checkpoint)
    for _ in range(5):
        produce(kelp, "ret", 0, [(None, bytes(900))], timestamp_ms=old)
    # A fresh record too large to share a segment (segment.bytes 2000) starts one of its own, so retention's
    # end state is known: every old segment gone, the log starting at 6 (waiting for "> 1" raced a later pass).
    produce(kelp, "ret", 0, [(None, b"fresh" + bytes(1500))])
    deadline = time.monotonic() + 20
    while (earliest := list_offset(kelp.bootstrap, "ret", 0, -2)[1]) < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert earliest == 6, f"retention did not delete the old segments (log start {earliest})"
    with pytest.raises(Exception, match="failOnDataLoss"):
        run_available_now(stream(spark, kelp, subscribe="ret", startingOffsets="earliest"), out, checkpoint)
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, "kelp", kelp, subscribe="ret", startingOffsets='{"ret": {"0": 1}}').collect()
    skipped = reader(spark, "kelp", kelp, subscribe="ret", startingOffsets='{"ret": {"0": 1}}', failOnDataLoss="false")
    assert [r[4] for r in rows(skipped)] == list(range(earliest, 7))
    run_available_now(stream(spark, kelp, subscribe="ret", startingOffsets="earliest", failOnDataLoss="false"),
                      out, checkpoint)
    offsets = sorted(r.offset for r in spark.read.parquet(str(out)).collect())
    assert offsets == [0] + list(range(earliest, 7))


def test_the_sink_writes_keys_headers_and_partitions_as_sparks_kafka_sink_does(spark, kelp) -> None:
    for name in ("sink-kelp", "sink-kafka"):
        admin(kelp, "/topics", {"name": name, "partitions": 4})
    df = spark.createDataFrame(
        [(f"user-{i}", f"event-{i}", [("trace", f"t{i}".encode())] if i % 3 else None) for i in range(200)]
        + [(None, "keyless", None)],
        "key string, value string, headers array<struct<key:string,value:binary>>")
    (df.write.format("kelp").mode("append").option("kafka.bootstrap.servers", kelp.bootstrap)
     .option("topic", "sink-kelp").save())
    (df.write.format("kafka").mode("append").option("kafka.bootstrap.servers", kelp.bootstrap)
     .option("topic", "sink-kafka").save())

    def placed(topic: str) -> dict:
        got = reader(spark, "kafka", kelp, subscribe=topic, includeHeaders="true").collect()
        return {(r.key, r.value, tuple(tuple(h) for h in r.headers or ())): (r.partition if r.key else None)
                for r in got}

    assert placed("sink-kelp") == placed("sink-kafka")
    assert len(placed("sink-kelp")) == 201
    with pytest.raises(Exception, match="'value' column"):
        spark.createDataFrame([("k",)], "key string").write.format("kelp").mode("append") \
            .option("kafka.bootstrap.servers", kelp.bootstrap).option("topic", "sink-kelp").save()
    with pytest.raises(Exception, match="auto.create.topics.enable"):  # this broker does not auto-create
        df.write.format("kelp").mode("append").option("kafka.bootstrap.servers", kelp.bootstrap) \
            .option("topic", "no-such-topic").save()


def test_the_sink_lets_a_broker_that_auto_creates_topics_create_one(spark, broker) -> None:
    spark.createDataFrame([("k", "v")], "key string, value string").write.format("kelp").mode("append") \
        .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "made-by-the-sink").save()
    got = reader(spark, "kelp", broker, subscribe="made-by-the-sink").collect()
    assert [(r.key, r.value) for r in got] == [(b"k", b"v")]


def test_stream_from_kelp_to_kelp(spark, kelp, tmp_path) -> None:
    admin(kelp, "/topics", {"name": "pipe-in", "partitions": 2})
    admin(kelp, "/topics", {"name": "pipe-out", "partitions": 2})
    for p in range(2):
        produce(kelp, "pipe-in", p, [(f"k{i}".encode(), f"{p}:{i}".encode()) for i in range(50)])
    query = (stream(spark, kelp, subscribe="pipe-in", startingOffsets="earliest")
             .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
             .writeStream.format("kelp").option("kafka.bootstrap.servers", kelp.bootstrap).option("topic", "pipe-out")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    out = rows(reader(spark, "kelp", kelp, subscribe="pipe-out"))
    assert sorted(r[1] for r in out) == sorted(f"{p}:{i}".upper().encode() for p in range(2) for i in range(50))


def test_kelp_reads_and_writes_a_replicated_topic_across_a_leader_failure(spark, cluster_factory) -> None:
    cluster = cluster_factory(3)
    everyone = ",".join(b.bootstrap for b in cluster.brokers)
    cluster.admin("/admin/v1/topics", "POST", {"name": "rep", "partitions": 2, "replication_factor": 3,
                                               "configs": {"min.insync.replicas": "2"}})
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(300)], "key string, value string")
    df.write.format("kelp").mode("append").option("kafka.bootstrap.servers", everyone).option("topic", "rep").save()
    cluster.wait_fully_replicated("rep")
    leader = cluster.topic("rep")["partitions"][0]["leader"]
    cluster[leader].kill()  # the client first asks a dead broker, and partition 0 must move
    cluster.wait_for("a new leader of rep-0",
                     lambda: cluster.topic("rep")["partitions"][0]["leader"] not in (-1, leader))
    got = (spark.read.format("kelp").option("kafka.bootstrap.servers", everyone).option("subscribe", "rep").load()
           .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v").collect())
    assert sorted((r.k, r.v) for r in got) == sorted((f"k{i}", f"v{i}") for i in range(300))


def test_min_offsets_per_trigger_waits_for_enough_records_or_max_trigger_delay(kelp) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMinRows

    from kelp.spark.options import parse_read_options
    from kelp.spark.reader import KelpStreamReader

    admin(kelp, "/topics", {"name": "minrows", "partitions": 1})
    source = KelpStreamReader(parse_read_options({"kafka.bootstrap.servers": kelp.bootstrap, "subscribe": "minrows",
                                                  "startingOffsets": "earliest", "minOffsetsPerTrigger": "5",
                                                  "maxTriggerDelay": "300ms"}, streaming=True))
    assert isinstance(source.getDefaultReadLimit(), ReadMinRows)
    start = source.initialOffset()
    assert start == {"minrows": {"0": 0}}
    produce(kelp, "minrows", 0, [(None, b"x")] * 3)
    assert source.latestOffset(start, ReadMinRows(5)) == start  # 3 < 5 and the delay has not passed
    assert source.latestOffset(start, ReadAllAvailable()) == {"minrows": {"0": 3}}  # Trigger.Once ignores it
    produce(kelp, "minrows", 0, [(None, b"x")] * 2)
    end = source.latestOffset(start, ReadMinRows(5))
    assert end == {"minrows": {"0": 5}}
    produce(kelp, "minrows", 0, [(None, b"x")])
    began = time.monotonic()
    deadline = began + 10
    while (nxt := source.latestOffset(end, ReadMinRows(5))) == end and time.monotonic() < deadline:
        time.sleep(0.05)
    assert nxt == {"minrows": {"0": 6}} and time.monotonic() - began >= 0.25  # released by maxTriggerDelay


def test_available_now_never_reads_past_the_offsets_of_its_start(kelp) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from kelp.spark.options import parse_read_options
    from kelp.spark.reader import KelpStreamReader

    admin(kelp, "/topics", {"name": "avnow", "partitions": 2})
    for p in range(2):
        produce(kelp, "avnow", p, [(None, b"x")] * 10)
    source = KelpStreamReader(parse_read_options({"kafka.bootstrap.servers": kelp.bootstrap, "subscribe": "avnow",
                                                  "startingOffsets": "earliest", "maxOffsetsPerTrigger": "8"},
                                                 streaming=True))
    source.prepareForTriggerAvailableNow()
    produce(kelp, "avnow", 0, [(None, b"late")] * 5)  # after the query started: not this run's
    offset, batches = source.initialOffset(), 0
    while (nxt := source.latestOffset(offset, source.getDefaultReadLimit())) != offset and batches < 10:
        assert sum(nxt["avnow"].values()) - sum(offset["avnow"].values()) <= 8
        offset, batches = nxt, batches + 1
    assert offset == {"avnow": {"0": 10, "1": 10}} and batches == 3
    assert isinstance(source.getDefaultReadLimit(), ReadMaxRows)
