"""confluent-kafka's Schema Registry client and serializers against a Kelp broker: register, evolve, refuse
an incompatible change with 409, and round-trip records through Kelp with Avro, JSON Schema and Protobuf (its
`_pb2` modules generated at test time with grpcio-tools' protoc, the serializer registering the import too)."""

from __future__ import annotations

import importlib
import json
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from types import ModuleType

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

pytestmark = [pytest.mark.clients, pytest.mark.timeout(90)]

USER_V1 = {"type": "record", "name": "User", "namespace": "kelp.test",
           "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}
USER_V2 = {**USER_V1, "fields": USER_V1["fields"] + [{"name": "email", "type": "string", "default": ""}]}
USER_BAD = {**USER_V1, "fields": USER_V1["fields"] + [{"name": "phone", "type": "string"}]}


def _consume(bootstrap: str, topic: str, n: int, *, timeout_s: float = 30.0) -> list[bytes]:
    """The first `n` values of `topic`, read by assigning its partitions (no group to join: faster)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(partitions)])
        while len(out) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(msg.value())
    finally:
        consumer.close()
    assert len(out) == n, f"consumed {len(out)} of {n} records from {topic}"
    return out


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def test_avro_register_evolve_and_round_trip(kelp) -> None:
    client = SchemaRegistryClient({"url": kelp.http_url})
    topic = f"users-{uuid.uuid4().hex[:8]}"
    subject = f"{topic}-value"
    serializer = AvroSerializer(client, json.dumps(USER_V1))
    records = [{"name": "ada", "age": 36}, {"name": "alan", "age": 41}]
    values = [serializer(r, SerializationContext(topic, MessageField.VALUE)) for r in records]
    schema_id = int.from_bytes(values[0][1:5], "big")
    assert values[0][0] == 0 and schema_id == client.get_latest_version(subject).schema_id
    assert client.get_contexts() == ["."]  # issue 37, item 8: it failed on a missing route
    _produce(kelp.bootstrap, topic, values)

    # the same schema again: the same id, no new version; a compatible change (a field with a default) accepted
    assert client.register_schema(subject, Schema(json.dumps(USER_V1), "AVRO")) == schema_id
    v2 = client.register_schema(subject, Schema(json.dumps(USER_V2), "AVRO"))
    assert v2 != schema_id and client.get_versions(subject) == [1, 2]
    # an incompatible one (a new field without a default, under BACKWARD) refused with Confluent's 409
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(USER_BAD), "AVRO"))
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    assert "incompatible with an earlier schema" in refused.value.error_message
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in refused.value.error_message
    assert client.test_compatibility(subject, Schema(json.dumps(USER_BAD), "AVRO")) is False
    assert client.test_compatibility(subject, Schema(json.dumps(USER_V2), "AVRO")) is True

    # consumed through Kelp and read back by the schema each record names (the v1 id, looked up by id)
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": kelp.http_url}))
    got = [deserializer(v, SerializationContext(topic, MessageField.VALUE)) for v in _consume(kelp.bootstrap, topic, 2)]
    assert got == records
    # a v2 record, and a v2 reader reading v1 data (the default fills the new field)
    v2_serializer = AvroSerializer(SchemaRegistryClient({"url": kelp.http_url}), json.dumps(USER_V2))
    ctx = SerializationContext(topic, MessageField.VALUE)
    raw = v2_serializer({"name": "grace", "age": 85, "email": "g@navy"}, ctx)
    assert int.from_bytes(raw[1:5], "big") == v2
    reader = AvroDeserializer(client, json.dumps(USER_V2))
    assert reader(values[0], SerializationContext(topic, MessageField.VALUE)) == {**records[0], "email": ""}


PERSON = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Person", "type": "object",
          "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
          "required": ["name"], "additionalProperties": False}


def test_json_schema_register_evolve_and_round_trip(kelp) -> None:
    client = SchemaRegistryClient({"url": kelp.http_url})
    topic = f"people-{uuid.uuid4().hex[:8]}"
    subject = f"{topic}-value"
    serializer = JSONSerializer(json.dumps(PERSON), client)
    people = [{"name": "ada", "age": 36}, {"name": "alan"}]
    values = [serializer(p, SerializationContext(topic, MessageField.VALUE)) for p in people]
    _produce(kelp.bootstrap, topic, values)
    registered = client.get_latest_version(subject)
    assert registered.schema.schema_type == "JSON" and registered.version == 1

    # closed content model: an optional property added is compatible; a property's type changed is not
    wider = {**PERSON, "properties": {**PERSON["properties"], "email": {"type": "string"}}}
    assert client.register_schema(subject, Schema(json.dumps(wider), "JSON")) > registered.schema_id
    changed = {**PERSON, "properties": {**PERSON["properties"], "age": {"type": "string"}}}
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(changed), "JSON"))
    assert refused.value.http_status_code == 409 and "TYPE_CHANGED" in refused.value.error_message

    deserializer = JSONDeserializer(None, schema_registry_client=client)
    got = [deserializer(v, SerializationContext(topic, MessageField.VALUE)) for v in _consume(kelp.bootstrap, topic, 2)]
    assert got == people


COMMON_PROTO = 'syntax = "proto3";\npackage kelp.common;\nmessage Money { string currency = 1; int64 units = 2; }\n'
ORDER_PROTO = ('syntax = "proto3";\npackage kelp.orders;\nimport "kelp/common/money.proto";\n'
               'message Order { string id = 1; kelp.common.Money total = 2; repeated string items = 3; }\n')


def test_protobuf_with_a_reference(kelp) -> None:
    client = SchemaRegistryClient({"url": kelp.http_url})
    suffix = uuid.uuid4().hex[:8]
    money_id = client.register_schema(f"money-{suffix}", Schema(COMMON_PROTO, "PROTOBUF"))
    ref = SchemaReference("kelp/common/money.proto", f"money-{suffix}", 1)
    order_id = client.register_schema(f"orders-{suffix}-value", Schema(ORDER_PROTO, "PROTOBUF", [ref]))
    assert order_id != money_id
    fetched = client.get_schema(order_id)
    assert fetched.schema_type == "PROTOBUF"
    assert [(r.name, r.subject, r.version) for r in fetched.references] == [(ref.name, ref.subject, 1)]
    # a field's type changed across scalar groups (string -> int64): incompatible
    bad = ORDER_PROTO.replace("string id = 1", "int64 id = 1")
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"orders-{suffix}-value", Schema(bad, "PROTOBUF", [ref]))
    assert refused.value.http_status_code == 409 and "FIELD_SCALAR_KIND_CHANGED" in refused.value.error_message
    # the referenced version cannot be deleted while the order schema uses it
    with pytest.raises(SchemaRegistryError) as in_use:
        client.delete_version(f"money-{suffix}", 1)
    assert in_use.value.error_code == 42206
    # a reference that does not resolve, and an import no reference names: 42201
    for refs in ([SchemaReference("kelp/common/money.proto", f"nobody-{suffix}", 1)], []):
        with pytest.raises(SchemaRegistryError) as unresolved:
            client.register_schema(f"orders2-{suffix}-value", Schema(ORDER_PROTO, "PROTOBUF", refs))
        assert unresolved.value.http_status_code == 422 and unresolved.value.error_code == 42201
        assert "money.proto" in unresolved.value.error_message


def _generated_modules(tmp_path: Path, protos: dict[str, str]) -> dict[str, ModuleType]:
    """The `_pb2` modules of `protos` (path -> text), generated now with grpcio-tools' protoc into `tmp_path`
    (nothing generated is checked in) and imported from there; keyed by proto path."""
    from grpc_tools import protoc

    for rel, text in protos.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert protoc.main(["protoc", f"-I{tmp_path}", f"--python_out={tmp_path}", *protos]) == 0
    modules: dict[str, ModuleType] = {}
    sys.path.insert(0, str(tmp_path))
    try:
        for rel in protos:
            modules[rel] = importlib.import_module(rel.removesuffix(".proto").replace("/", ".") + "_pb2")
    finally:
        sys.path.remove(str(tmp_path))
    return modules


def test_protobuf_serializer_registers_the_import_and_round_trips(kelp, tmp_path: Path) -> None:
    """confluent-kafka's ProtobufSerializer with a message importing another file: it registers the import under
    its path as subject ("pb.../common/money.proto", URL-encoded) and the message with a reference to it; the
    records go through Kelp and ProtobufDeserializer reads them back."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    suffix = uuid.uuid4().hex[:8]
    # A package and a directory of their own per run: the protobuf runtime keeps one descriptor pool per process,
    # and Python one module per name ("kelp" is taken).
    root = f"pb{suffix}"
    common = COMMON_PROTO.replace("kelp.common", f"{root}.common")
    order = ORDER_PROTO.replace("kelp.common", f"{root}.common").replace("kelp.orders", f"{root}.orders")
    money_path, order_path = f"{root}/common/money.proto", f"{root}/orders/order.proto"
    order = order.replace("kelp/common/money.proto", money_path)
    modules = _generated_modules(tmp_path, {money_path: common, order_path: order})
    Order, Money = modules[order_path].Order, modules[money_path].Money

    client = SchemaRegistryClient({"url": kelp.http_url})
    topic = f"orders-pb-{suffix}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    serializer = ProtobufSerializer(Order, client, {"use.deprecated.format": False})
    orders = [Order(id="o-1", total=Money(currency="EUR", units=12), items=["tea", "cake"]),
              Order(id="o-2", total=Money(currency="USD", units=3))]
    values = [serializer(o, ctx) for o in orders]
    assert client.get_subjects().count(money_path) == 1  # the import, registered under its own path
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "PROTOBUF"
    assert [(r.name, r.subject, r.version) for r in registered.schema.references] == [(money_path, money_path, 1)]
    assert values[0][0] == 0 and int.from_bytes(values[0][1:5], "big") == registered.schema_id
    _produce(kelp.bootstrap, topic, values)

    deserializer = ProtobufDeserializer(Order, {"use.deprecated.format": False})
    got = [deserializer(v, ctx) for v in _consume(kelp.bootstrap, topic, 2)]
    assert got == orders
    # the schema the registry gives back by id parses to the same message (what a reader without _pb2 uses)
    fetched = client.get_schema(registered.schema_id)
    assert "message Order" in fetched.schema_str and f"import \"{money_path}\"" in fetched.schema_str


def _post(url: str, body: object, ctype: str) -> tuple[int, object]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as exc:
        text, status = exc.read().decode(), exc.code
    docs = [json.loads(line) for line in text.splitlines() if line.strip()]
    return status, docs[0] if len(docs) == 1 else docs


def test_rest_produce_in_avro_jsonschema_and_protobuf_is_read_by_confluents_deserializers(kelp) -> None:
    """REST v2 (`application/vnd.kafka.{avro,jsonschema,protobuf}.v2+json`) and v3 (`"type": "AVRO"`...) write
    records in Confluent's wire format with the registry's schemas; confluent-kafka's deserializers read them.
    A record that does not match its schema, or a schema not found, is refused naming it."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

    base, suffix = kelp.http_url, uuid.uuid4().hex[:8]
    client = SchemaRegistryClient({"url": base})
    cid = json.loads(urllib.request.urlopen(f"{base}/v3/clusters", timeout=10).read())["data"][0]["cluster_id"]

    # v2 Avro: the schema given inline is registered under <topic>-value; a union written as {"type": value}
    avro_topic = f"rest-avro-{suffix}"
    schema = {**USER_V1, "fields": USER_V1["fields"] + [{"name": "nick", "type": ["null", "string"],
                                                          "default": None}]}
    status, body = _post(f"{base}/topics/{avro_topic}", {"value_schema": json.dumps(schema), "records": [
        {"value": {"name": "ada", "age": 36, "nick": {"string": "countess"}}}, {"value": {"name": "alan", "age": 41}}]},
        "application/vnd.kafka.avro.v2+json")
    assert status == 200 and body["value_schema_id"] == client.get_latest_version(f"{avro_topic}-value").schema_id
    status, bad = _post(f"{base}/topics/{avro_topic}", {"value_schema_id": body["value_schema_id"],
                                                        "records": [{"value": {"name": "x", "age": "old"}}]},
                        "application/vnd.kafka.avro.v2+json")
    assert status == 422 and bad["error_code"] == 42203 and "records[0].value.age" in bad["message"], bad
    status, bad = _post(f"{base}/topics/{avro_topic}", {"records": [{"value": {"name": "x"}}]},
                        "application/vnd.kafka.avro.v2+json")
    assert status == 422 and bad["error_code"] == 42202 and "value_schema" in bad["message"], bad
    ctx = SerializationContext(avro_topic, MessageField.VALUE)
    got = [AvroDeserializer(client)(v, ctx) for v in _consume(kelp.bootstrap, avro_topic, 2)]
    assert got == [{"name": "ada", "age": 36, "nick": "countess"}, {"name": "alan", "age": 41, "nick": None}]

    # v3 JSON Schema: the latest schema of <topic>-value; a record breaking it is that record's error alone
    json_topic = f"rest-json-{suffix}"
    client.register_schema(f"{json_topic}-value", Schema(json.dumps(PERSON), "JSON"))
    _post(f"{base}/v3/clusters/{cid}/topics", {"topic_name": json_topic, "partitions_count": 1}, "application/json")
    status, reports = _post(f"{base}/v3/clusters/{cid}/topics/{json_topic}/records", {
        "value": {"type": "JSONSCHEMA", "data": {"name": "grace", "age": 85}}}, "application/json")
    assert status == 200 and reports["error_code"] == 200 and reports["value"]["type"] == "JSONSCHEMA", reports
    # The report names the schema as Confluent's ProduceResponseData does: subject, id and version.
    assert (reports["value"]["subject"], reports["value"]["schema_version"]) == (f"{json_topic}-value", 1), reports
    status, reports = _post(f"{base}/v3/clusters/{cid}/topics/{json_topic}/records", {
        "value": {"type": "JSONSCHEMA", "data": {"name": "bob", "age": -1}}}, "application/json")
    assert reports["error_code"] == 400 and "data.age" in reports["message"] and "minimum" in reports["message"]
    status, reports = _post(f"{base}/v3/clusters/{cid}/topics/{json_topic}/records", {
        "value": {"type": "AVRO", "subject": f"nobody-{suffix}", "data": {}}}, "application/json")
    assert reports["error_code"] == 404 and f"nobody-{suffix}" in reports["message"], reports
    got = [JSONDeserializer(None, schema_registry_client=client)(v, SerializationContext(json_topic,
                                                                                          MessageField.VALUE))
           for v in _consume(kelp.bootstrap, json_topic, 1)]
    assert got == [{"name": "grace", "age": 85}]

    # v3 Protobuf by schema id (an import by reference), and v2 Protobuf: ProtobufDeserializer reads both
    pb_topic = f"rest-pb-{suffix}"
    money = client.register_schema(f"money-rest-{suffix}", Schema(COMMON_PROTO, "PROTOBUF"))
    assert money > 0
    ref = SchemaReference("kelp/common/money.proto", f"money-rest-{suffix}", 1)
    order_id = client.register_schema(f"{pb_topic}-value", Schema(ORDER_PROTO, "PROTOBUF", [ref]))
    _post(f"{base}/v3/clusters/{cid}/topics", {"topic_name": pb_topic, "partitions_count": 1}, "application/json")
    order = {"id": "o-1", "total": {"currency": "EUR", "units": "12"}, "items": ["tea"]}
    status, reports = _post(f"{base}/v3/clusters/{cid}/topics/{pb_topic}/records", {
        "value": {"schema_id": order_id, "data": order}}, "application/json")
    assert reports["error_code"] == 200 and reports["value"]["type"] == "PROTOBUF", reports
    assert reports["value"]["schema_id"] == order_id and reports["value"]["subject"] == f"{pb_topic}-value"
    assert reports["value"]["schema_version"] == 1, reports
    status, body = _post(f"{base}/topics/{pb_topic}", {"value_schema_id": order_id, "records": [
        {"value": {"id": "o-2", "items": ["cake", "jam"]}}]}, "application/vnd.kafka.protobuf.v2+json")
    assert status == 200 and body["value_schema_id"] == order_id, body
    status, bad = _post(f"{base}/topics/{pb_topic}", {"value_schema_id": order_id, "records": [
        {"value": {"id": "o-3", "colour": "red"}}]}, "application/vnd.kafka.protobuf.v2+json")
    assert status == 422 and bad["error_code"] == 42203 and "colour" in bad["message"], bad
    raw = _consume(kelp.bootstrap, pb_topic, 2)
    assert raw[0][:6] == b"\x00" + order_id.to_bytes(4, "big") + b"\x00"  # Confluent's framing, message index [0]
    reader = ProtobufDeserializer(_order_class(), {"use.deprecated.format": False})
    ctx = SerializationContext(pb_topic, MessageField.VALUE)
    got_pb = [reader(v, ctx) for v in raw]
    assert [(o.id, o.total.units, list(o.items)) for o in got_pb] == [("o-1", 12, ["tea"]), ("o-2", 0, ["cake", "jam"])]


def _order_class() -> type:
    """ORDER_PROTO's Order as a protobuf class, built from the registry's own serialized form of the schema."""
    from kelp.broker.schema_registry.parsed import ResolvedReference
    from kelp.broker.schema_registry.protobuf_descriptor import message_class

    return message_class(ORDER_PROTO, (ResolvedReference("kelp/common/money.proto", "money", 1, "PROTOBUF",
                                                         COMMON_PROTO),))


def _v2(method: str, url: str, body: object = None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/vnd.kafka.v2+json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_rest_consumers_read_avro_and_protobuf_values_as_json(kelp) -> None:
    """A v2 consumer instance created with format avro (protobuf) answers each value decoded with the schema it
    names, as the produce side takes it; a value that is not in that format stops it there (406, 40601)."""
    base, suffix = kelp.http_url, uuid.uuid4().hex[:8]
    client = SchemaRegistryClient({"url": base})
    topic = f"rest-read-{suffix}"
    serializer = AvroSerializer(client, json.dumps(USER_V2))
    ctx = SerializationContext(topic, MessageField.VALUE)
    _produce(kelp.bootstrap, topic, [serializer({"name": "ada", "age": 36, "email": "a@b"}, ctx), b"plain text"])
    status, inst = _v2("POST", f"{base}/consumers/r-{suffix}", {"format": "avro", "auto.offset.reset": "earliest"})
    assert status == 200, inst
    uri = inst["base_uri"]  # type: ignore[index]  # the create answer
    assert _v2("POST", f"{uri}/assignments", {"partitions": [{"topic": topic, "partition": 0}]})[0] == 204
    seen: list[object] = []
    deadline = time.monotonic() + 20
    refused: object = None
    while time.monotonic() < deadline and refused is None:
        status, got = _v2("GET", f"{uri}/records?timeout=500")
        if status == 406:
            refused = got
        else:
            assert status == 200, got
            seen += [r["value"] for r in got]  # type: ignore[union-attr, index]  # a list of records
    assert seen == [{"name": "ada", "age": 36, "email": "a@b"}]
    assert isinstance(refused, dict) and refused["error_code"] == 40601 and refused["offset"] == 1
    assert "wire format" in refused["message"] and "format=avro" in refused["message"]
    assert _v2("DELETE", uri)[0] == 204

    pb_topic = f"rest-read-pb-{suffix}"
    client.register_schema(f"money-read-{suffix}", Schema(COMMON_PROTO, "PROTOBUF"))
    ref = SchemaReference("kelp/common/money.proto", f"money-read-{suffix}", 1)
    order_id = client.register_schema(f"{pb_topic}-value", Schema(ORDER_PROTO, "PROTOBUF", [ref]))
    order = {"id": "o-9", "total": {"currency": "EUR", "units": "5"}, "items": ["tea"]}
    assert _post(f"{base}/topics/{pb_topic}", {"value_schema_id": order_id, "records": [{"value": order}]},
                 "application/vnd.kafka.protobuf.v2+json")[0] == 200
    status, inst = _v2("POST", f"{base}/consumers/p-{suffix}", {"format": "protobuf", "auto.offset.reset": "earliest"})
    uri = inst["base_uri"]  # type: ignore[index]  # the create answer
    assert _v2("POST", f"{uri}/assignments", {"partitions": [{"topic": pb_topic, "partition": 0}]})[0] == 204
    got_pb: list[object] = []
    deadline = time.monotonic() + 20
    while not got_pb and time.monotonic() < deadline:
        status, records = _v2("GET", f"{uri}/records?timeout=500")
        assert status == 200, records
        got_pb += [r["value"] for r in records]  # type: ignore[union-attr, index]  # a list of records
    assert got_pb == [order]  # protobuf's JSON mapping: an int64 as a string
    assert _v2("DELETE", uri)[0] == 204
    status, bad = _v2("POST", f"{base}/consumers/r-{suffix}", {"format": "thrift"})
    assert status == 422 and bad["error_code"] == 42204 and "protobuf" in bad["message"]  # type: ignore[index]
