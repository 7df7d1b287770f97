"""Confluent-framed Avro values read by the `kelp` source and decoded with Spark's own `from_avro`
(docs/spark-avro.md): a topic written by confluent-kafka's AvroSerializer against Kelp's Schema Registry.

What a pipeline relies on: the value is magic byte 0, the 4-byte big-endian schema id, the Avro body; with
spark-avro on the session, `from_avro(expr("substring(value, 6)"), <the writer schema>)` gives the struct the
serializer wrote, the id column says which schema wrote each record, and records of several versions read
into one shape by decoding each id with its own schema and `avroSchema` set to the newest.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.broker_process import BrokerProcess

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"},
                       {"name": "tags", "type": {"type": "array", "items": "string"}}]}
ORDER_V2 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [
    {"name": "note", "type": ["null", "string"], "default": None}]}


@pytest.fixture(scope="module")
def kelp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("spark-avro"), settings={"num.partitions": 2})
    b.start()
    yield b
    b.kill()


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        producer.produce(topic, value=v)
    assert producer.flush(30) == 0


def _schema_of(base: str, schema_id: int) -> str:
    """GET /schemas/ids/{id}: the writer schema a record names (what a pipeline fetches once per id)."""
    with urllib.request.urlopen(f"{base}/schemas/ids/{schema_id}", timeout=15) as resp:
        return str(json.loads(resp.read())["schema"])


def test_from_avro_decodes_confluent_framed_values(spark, kelp) -> None:
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.functions import col, expr

    topic = f"orders-{uuid.uuid4().hex[:8]}"
    client = SchemaRegistryClient({"url": kelp.http_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = AvroSerializer(client, json.dumps(ORDER_V1))
    v1_records = [{"id": f"o{i}", "qty": i, "tags": ["a"] * (i % 3)} for i in range(10)]
    values = [v1(r, ctx) for r in v1_records]
    _produce(kelp.bootstrap, topic, values)
    v1_id = int.from_bytes(values[0][1:5], "big")
    assert v1_id == client.get_latest_version(f"{topic}-value").schema_id

    raw = (spark.read.format("kelp").option("kafka.bootstrap.servers", kelp.bootstrap).option("subscribe", topic)
           .load())
    framed = raw.select(
        expr("substring(value, 1, 1) = X'00'").alias("confluent"),
        # bytes 2..5: the schema id, big-endian (conv of the hex gives its decimal)
        expr("cast(conv(hex(substring(value, 2, 4)), 16, 10) as int)").alias("schema_id"),
        expr("substring(value, 6)").alias("avro"))
    assert {(r.confluent, r.schema_id) for r in framed.select("confluent", "schema_id").collect()} == {(True, v1_id)}
    decoded = framed.select(from_avro(col("avro"), _schema_of(kelp.http_url, v1_id)).alias("order")) \
        .select("order.*")
    assert [f.name for f in decoded.schema.fields] == ["id", "qty", "tags"]
    assert sorted((r.id, r.qty, list(r.tags)) for r in decoded.collect()) == sorted(
        (r["id"], r["qty"], r["tags"]) for r in v1_records)

    # a second version (a nullable field with a default): each record decodes by the schema its id names,
    # read as the newest (`avroSchema`, Spark's option for an evolved reader schema), into one DataFrame
    v2 = AvroSerializer(SchemaRegistryClient({"url": kelp.http_url}), json.dumps(ORDER_V2))
    v2_records = [{"id": "n1", "qty": 7, "tags": [], "note": "gift"}, {"id": "n2", "qty": 8, "tags": ["b"],
                                                                        "note": None}]
    values = [v2(r, ctx) for r in v2_records]
    _produce(kelp.bootstrap, topic, values)
    v2_id = int.from_bytes(values[0][1:5], "big")
    assert v2_id != v1_id
    framed = (spark.read.format("kelp").option("kafka.bootstrap.servers", kelp.bootstrap).option("subscribe", topic)
              .load().select(expr("cast(conv(hex(substring(value, 2, 4)), 16, 10) as int)").alias("schema_id"),
                             expr("substring(value, 6)").alias("avro")))
    ids = sorted(r.schema_id for r in framed.select("schema_id").distinct().collect())
    assert ids == sorted([v1_id, v2_id])
    newest = json.dumps(ORDER_V2)
    parts = [framed.where(col("schema_id") == i)
             .select(from_avro(col("avro"), _schema_of(kelp.http_url, i), {"avroSchema": newest}).alias("order"))
             .select("order.*") for i in ids]
    everything = parts[0].unionByName(parts[1])
    assert [f.name for f in everything.schema.fields] == ["id", "qty", "tags", "note"]
    got = sorted((r.id, r.qty, list(r.tags), r.note) for r in everything.collect())
    assert got == sorted([(r["id"], r["qty"], r["tags"], None) for r in v1_records]
                         + [(r["id"], r["qty"], r["tags"], r["note"]) for r in v2_records])
