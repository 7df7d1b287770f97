"""Confluent REST Proxy v2 data API: produce over HTTP and stateless partition reads.

Why: tools that cannot speak the Kafka protocol (shell scripts, web hooks)
produce with `POST /topics/{t}` exactly as they would to Confluent's proxy,
and read a partition from an offset without joining a group.

Produce: the whole body is validated first (JSON shape, base64, partition
numbers) so a bad request stores nothing. In a schema's format
(`application/vnd.kafka.{avro,jsonschema,protobuf}.v2+json`, with `value_schema_id` or `value_schema`, the
same for keys) every record is written with the schema in Confluent's wire format (`rest_schemas`,
`schema_registry.embedded`): 42201/42202 when a key/value comes without its schema, 42203 naming the record
and field whose JSON does not match it, the registry's own codes when the schema is not found or does not
register; the answer names `key_schema_id`/`value_schema_id`. Then the records are grouped into
one RecordBatch per partition (`kelp.records.build.build_batch`) and appended
through `broker.replicas.append` — the same door the Kafka handlers use.
Keyed records without a partition go where Kafka's default partitioner
(murmur2) puts them; keyless ones are spread round-robin.

Listing: `GET /topics` (no internal topics, as Confluent's Admin-client listing) and `GET /brokers`.

Read: `GET /topics/{t}/partitions/{p}/records?offset=&max_bytes=&timeout=`
long-polls through `broker.replicas.fetch` (which also counts bytes and
records out) and decodes the batches per record — acceptable here, this is
not the Kafka hot path.

This module must never write to a log except through the replica manager.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import defaultdict

from aiohttp import web

from kelp.errors import ErrorCode, OffsetOutOfRangeError, RestErrorCode
from kelp.json_types import JsonData, JsonValue
from kelp.partitioner import RoundRobin, partition_for_key
from kelp.records.build import build_batch
from kelp.records.record import Record, iter_records

from ...metadata.model import INTERNAL_TOPICS
from ...parts import BrokerParts
from ...replica.manager import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, FetchPartition
from ..access.route_access import TOPIC, describable
from ..json_body import json_value, off_loop, read_json, read_json_as
from ..keys import ROUND_ROBIN, int_setting
from ..problems import HttpProblem, json_response
from ..rest_schemas import NotEncodable, RegistryError, SchemaWriter, SchemaWriters
from ..serving import serving
from ..topic_views import partition_roles, record_bytes, topic_configs

__all__ = ["routes", "JSON_V2", "BINARY_V2"]

routes = web.RouteTableDef()

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
PLAIN_V2 = "application/vnd.kafka.v2+json"
AVRO_V2 = "application/vnd.kafka.avro.v2+json"
JSONSCHEMA_V2 = "application/vnd.kafka.jsonschema.v2+json"
PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"
PRODUCE_TYPES = {JSON_V2: "json", BINARY_V2: "binary", "application/json": "json", AVRO_V2: "AVRO",
                 JSONSCHEMA_V2: "JSONSCHEMA", PROTOBUF_V2: "PROTOBUF"}
SCHEMA_FORMATS = ("AVRO", "JSONSCHEMA", "PROTOBUF")

MAX_READ_TIMEOUT_MS = 60_000
# Above this many records, placing them and building the batches runs in a worker thread.
_INLINE_RECORDS = 2_000
_INLINE_SCHEMA_RECORDS = 200  # records encoded with a schema (Avro, JSON Schema, Protobuf) cost more each
DEFAULT_READ_MAX_BYTES = 1 << 20
MAX_READ_MAX_BYTES = 64 << 20


# -- produce ------------------------------------------------------------------
def _embedded_format(request: web.Request) -> str:
    ctype = request.content_type
    fmt = PRODUCE_TYPES.get(ctype)
    if fmt is None:
        raise HttpProblem(
            415,
            f"unsupported Content-Type {ctype!r}; use {JSON_V2}, {BINARY_V2}, application/json, {AVRO_V2}, "
            f"{JSONSCHEMA_V2} or {PROTOBUF_V2}",
        )
    return fmt


Writers = dict[str, SchemaWriter]  # "key"/"value": the schema a v2 request in a schema's format names


def _encode_field(value: JsonValue, fmt: str, *, index: int, field: str, writers: Writers) -> bytes | None:
    """JSON format: any JSON value, stored as its compact JSON text. Binary: base64 or null. A schema's format:
    written with the request's key or value schema (Confluent's wire format)."""
    if value is None:
        return None
    if fmt in SCHEMA_FORMATS:
        writer = writers.get(field)
        if writer is None:
            code = RestErrorCode.KEY_SCHEMA_MISSING if field == "key" else RestErrorCode.VALUE_SCHEMA_MISSING
            raise HttpProblem(422, f"records[{index}] has a {field} but the request names no {field} schema: give "
                                   f"'{field}_schema' or '{field}_schema_id'", error_code=code)
        try:
            return writer.write(value)
        except NotEncodable as exc:
            raise HttpProblem(422, f"records[{index}].{field}: {exc}".replace(f"{field}: data", field, 1),
                              error_code=RestErrorCode.JSON_CONVERSION) from None
    if fmt == "json":
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    if not isinstance(value, str):
        raise HttpProblem(
            422, f"records[{index}].{field}: binary format expects a base64 string or null, got {type(value).__name__}"
        )
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise HttpProblem(422, f"records[{index}].{field} is not valid base64: {exc}") from None


def _encode_headers(raw: JsonValue, fmt: str, *, index: int) -> tuple[tuple[str, bytes | None], ...]:
    """Optional extension: `headers` as `[{"name": .., "value": ..}]` or `{"name": value}`.

    Values are base64 in the binary format and plain strings in the json format.
    """
    if raw is None:
        return ()
    pairs: list[tuple[str, JsonValue]]
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list):
        pairs = []
        for j, item in enumerate(raw):
            name = item.get("name", item.get("key")) if isinstance(item, dict) else None
            if not isinstance(item, dict) or not isinstance(name, str):
                raise HttpProblem(422, f"records[{index}].headers[{j}] must be an object with a string 'name'")
            pairs.append((name, item.get("value")))
    else:
        raise HttpProblem(422, f"records[{index}].headers must be a list of {{name, value}} or an object")
    out: list[tuple[str, bytes | None]] = []
    for name, value in pairs:
        if value is None:
            out.append((name, None))
        elif not isinstance(value, str):
            raise HttpProblem(422, f"records[{index}].headers '{name}': the value must be a string or null")
        elif fmt == "binary":
            try:
                out.append((name, base64.b64decode(value, validate=True)))
            except (binascii.Error, ValueError) as exc:
                raise HttpProblem(422, f"records[{index}].headers '{name}' is not valid base64: {exc}") from None
        else:
            out.append((name, value.encode()))
    return tuple(out)


_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1


def _parse_records(body: JsonValue, fmt: str, writers: Writers | None = None) -> list[tuple[int | None, Record]]:
    """The records of a produce body, each field checked; a 422 names the first bad one."""
    if not isinstance(body, dict):
        raise HttpProblem(422, f"request body must be an object with a 'records' list, got {type(body).__name__}")
    records = body.get("records")
    if records is None:
        raise HttpProblem(422, "request body has no 'records' list")
    if not isinstance(records, list):
        raise HttpProblem(422, f"'records' must be a list, got {type(records).__name__}")
    if not records:
        raise HttpProblem(422, "'records' is empty; send at least one record")
    parsed: list[tuple[int | None, Record]] = []
    known = writers or {}
    header_fmt = "binary" if fmt == "binary" else "json"  # in a schema's format, header values are strings
    for i, item in enumerate(records):
        if not isinstance(item, dict):
            raise HttpProblem(422, f"records[{i}] must be an object with 'value' (and optional 'key', 'partition')")
        unknown = set(item) - {"key", "value", "partition", "headers", "timestamp"}
        if unknown:
            raise HttpProblem(422, f"records[{i}] has unknown field(s) {sorted(unknown)}")
        partition = item.get("partition")
        if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)
                                      or not 0 <= partition <= _INT32_MAX):
            raise HttpProblem(422, f"records[{i}].partition must be an integer 0..{_INT32_MAX}, got {partition!r}")
        ts = item.get("timestamp")
        if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts <= _INT64_MAX):
            raise HttpProblem(422, f"records[{i}].timestamp must be milliseconds since the epoch "
                                   f"(an integer 0..{_INT64_MAX}), got {ts!r}")
        rec = Record(
            key=_encode_field(item.get("key"), fmt, index=i, field="key", writers=known),
            value=_encode_field(item.get("value"), fmt, index=i, field="value", writers=known),
            headers=_encode_headers(item.get("headers"), header_fmt, index=i),
            timestamp=ts,
        )
        parsed.append((partition, rec))
    return parsed


def _place(parsed: list[tuple[int | None, Record]], *, topic: str, n: int, fixed_partition: int | None,
           rr: RoundRobin) -> dict[int, list[int]]:
    """Record indexes per partition (explicit, murmur2 of the key, or round-robin); 422/404 on a bad one."""
    by_partition: dict[int, list[int]] = defaultdict(list)
    for i, (explicit, rec) in enumerate(parsed):
        if fixed_partition is not None:
            if explicit is not None and explicit != fixed_partition:
                raise HttpProblem(
                    422, f"records[{i}].partition is {explicit} but the URL names partition {fixed_partition}"
                )
            p = fixed_partition
        elif explicit is not None:
            p = explicit
        elif rec.key is not None:
            p = partition_for_key(rec.key, n)
        else:
            p = rr.next(n)
        if not 0 <= p < n:
            where = "the URL" if fixed_partition is not None else f"records[{i}].partition"
            raise HttpProblem(
                404, f"{where}: partition {p} of topic '{topic}' does not exist (it has {n})",
                error_code=RestErrorCode.PARTITION_NOT_FOUND,
            )
        by_partition[p].append(i)
    return by_partition


def _build_batches(parsed: list[tuple[int | None, Record]],
                   by_partition: dict[int, list[int]]) -> dict[int, bytes | Exception]:
    out: dict[int, bytes | Exception] = {}
    for p, indexes in by_partition.items():
        try:
            out[p] = build_batch([parsed[i][1] for i in indexes])
        except Exception as exc:  # reported per record below, like an append failure
            out[p] = exc
    return out


async def _schema_writers(request: web.Request, topic: str, fmt: str, body: JsonValue) -> Writers:
    """The key and value schemas a v2 request in a schema's format names (`key_schema_id` / `key_schema`, the
    same for the value; a schema given is registered under `<topic>-key` / `<topic>-value` first, as
    Confluent's proxy does); Confluent's error body when one is not found or does not register."""
    if not isinstance(body, dict):
        raise HttpProblem(422, f"request body must be an object with a 'records' list, got {type(body).__name__}")
    found = SchemaWriters(request, topic)
    out: Writers = {}
    for field in ("key", "value"):
        schema_id, schema = body.get(f"{field}_schema_id"), body.get(f"{field}_schema")
        if schema_id is None and schema is None:
            continue
        if schema_id is not None and (isinstance(schema_id, bool) or not isinstance(schema_id, int)):
            raise HttpProblem(422, f"'{field}_schema_id' must be a schema id (an integer), got {schema_id!r}")
        if schema is not None and not isinstance(schema, str):
            schema = json.dumps(schema)  # Confluent's proxy takes the schema as a string; a JSON one is as good
        try:
            out[field] = await found.get(is_key=field == "key", rest_type=fmt, schema_id=schema_id, schema=schema)
        except RegistryError as exc:
            raise HttpProblem(exc.status, f"{field} schema: {exc.message}", error_code=exc.error_code) from None
    return out


async def _produce(request: web.Request, *, fixed_partition: int | None) -> web.Response:
    broker = serving(request)
    topic = request.match_info["topic"]
    fmt = _embedded_format(request)
    # Parsed and validated off the event loop when the body is large (json_body.INLINE_MAX_BYTES).
    max_records = int_setting(broker.config, "http.request.max.records")
    writers: Writers = {}
    if fmt in SCHEMA_FORMATS:  # the schemas first (found or registered), then every record written with them
        given = await read_json(request, shape_status=422, max_items=max_records,
                                limit_name="http.request.max.records")
        writers = await _schema_writers(request, topic, fmt, given)
        records = given.get("records") if isinstance(given, dict) else None
        if isinstance(records, list) and len(records) > _INLINE_SCHEMA_RECORDS:  # encoding each: off the loop
            parsed = await off_loop(request, lambda: _parse_records(given, fmt, writers))
        else:
            parsed = _parse_records(given, fmt, writers)
    else:
        parsed = await read_json_as(request, lambda body: _parse_records(body, fmt), expect=dict, shape_status=422,
                                    max_items=max_records, limit_name="http.request.max.records")
    info = await broker.topics.ensure_topic(topic)
    n = info.partitions
    rr = request.app[ROUND_ROBIN]

    def place_and_build() -> tuple[dict[int, list[int]], dict[int, bytes | Exception]]:
        by_partition = _place(parsed, topic=topic, n=n, fixed_partition=fixed_partition, rr=rr)
        return by_partition, _build_batches(parsed, by_partition)

    if len(parsed) > _INLINE_RECORDS:
        by_partition, batches = await off_loop(request, place_and_build)
    else:
        by_partition, batches = place_and_build()

    outcome: dict[int, int | dict[str, JsonData]] = {}  # partition: its first offset, or the error to answer
    for p in sorted(by_partition):
        try:
            batch = batches[p]
            if isinstance(batch, Exception):
                raise batch
            result = await broker.cluster.routing.append(topic, p, batch, acks=1)
        except Exception as exc:  # per-partition failure, reported per record like Confluent
            code = getattr(exc, "code", ErrorCode.UNKNOWN_SERVER_ERROR)
            outcome[p] = {"partition": p, "offset": None, "error_code": code,
                          "error": f"topic '{topic}' partition {p}: {exc}"}
            continue
        outcome[p] = result.base_offset

    def reply_body() -> bytes:
        offsets: list[dict[str, JsonData]] = [{} for _ in parsed]
        for p, indexes in by_partition.items():
            base = outcome[p]
            for j, i in enumerate(indexes):
                offsets[i] = base if isinstance(base, dict) else {
                    "partition": p, "offset": base + j, "error_code": None, "error": None}
        # In slices: one json.dumps of 400,000 offsets would hold the GIL (and the loop) for ~0.7 s.
        parts = [json.dumps(offsets[k:k + 1000], separators=(",", ":"))[1:-1] for k in range(0, len(offsets), 1000)]
        ids = ",".join(f'"{f}_schema_id":{writers[f].schema_id if f in writers else "null"}' for f in ("key", "value"))
        return ('{"offsets":[' + ",".join(parts) + "]," + ids + "}").encode()

    if len(parsed) > _INLINE_RECORDS:
        body = await off_loop(request, reply_body)
    else:
        body = reply_body()
    return web.Response(body=body, content_type=PLAIN_V2)


@routes.post("/topics/{topic}")
async def produce_to_topic(request: web.Request) -> web.Response:
    return await _produce(request, fixed_partition=None)


@routes.post("/topics/{topic}/partitions/{partition}")
async def produce_to_partition(request: web.Request) -> web.Response:
    return await _produce(request, fixed_partition=_partition_arg(request))


# -- metadata -------------------------------------------------------------------
def _partition_arg(request: web.Request) -> int:
    raw = request.match_info["partition"]
    try:
        p = int(raw)
    except ValueError:
        raise HttpProblem(400, f"partition must be an integer, got {raw!r}") from None
    if p < 0:
        raise HttpProblem(400, f"partition must be >= 0, got {p}")
    return p


def _confluent_partition(broker: BrokerParts, topic: str, p: int) -> dict[str, JsonData]:
    leader, replicas, isr = partition_roles(broker, topic, p)
    return {
        "partition": p,
        "leader": leader,
        "replicas": [{"broker": b, "leader": b == leader, "in_sync": b in isr} for b in replicas],
    }


@routes.get("/brokers")
async def list_brokers(request: web.Request) -> web.Response:
    """Confluent's `BrokerList`: the registered brokers' ids (Kafka's Metadata brokers; no ACL needed)."""
    return json_response({"brokers": sorted(serving(request).cluster.state.brokers)}, content_type=PLAIN_V2)


@routes.get("/topics")
async def list_topics(request: web.Request) -> web.Response:
    # Confluent lists with the Admin client's defaults (listInternal=false): no __consumer_offsets.
    names = [t.name for t in serving(request).topics.list_topics() if t.name not in INTERNAL_TOPICS]
    shown = describable(request, TOPIC, names)  # only the topics the principal may DESCRIBE, as Metadata answers
    return json_response([n for n in names if n in shown], content_type=PLAIN_V2)


@routes.get("/topics/{topic}")
async def get_topic(request: web.Request) -> web.Response:
    broker = serving(request)
    name = request.match_info["topic"]
    info = broker.topics.describe(name)
    configs = {k: v["value"] for k, v in topic_configs(broker, name).items()}
    body: dict[str, JsonData] = {
        "name": name,
        "configs": configs,
        "partitions": [_confluent_partition(broker, name, p) for p in range(info.partitions)],
    }
    return json_response(body, content_type=PLAIN_V2)


@routes.get("/topics/{topic}/partitions")
async def list_partitions(request: web.Request) -> web.Response:
    broker = serving(request)
    name = request.match_info["topic"]
    info = broker.topics.describe(name)
    return json_response([_confluent_partition(broker, name, p) for p in range(info.partitions)], content_type=PLAIN_V2)


@routes.get("/topics/{topic}/partitions/{partition}")
async def get_partition(request: web.Request) -> web.Response:
    broker = serving(request)
    name = request.match_info["topic"]
    p = _partition_arg(request)
    broker.topics.check_partition(name, p)
    return json_response(_confluent_partition(broker, name, p), content_type=PLAIN_V2)


# -- stateless read -------------------------------------------------------------
def _int_query(request: web.Request, key: str, default: int, *, low: int, high: int) -> int:
    raw = request.query.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpProblem(400, f"query parameter '{key}' must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise HttpProblem(400, f"query parameter '{key}' must be between {low} and {high}, got {value}")
    return value


def _read_format(request: web.Request) -> str:
    explicit = request.query.get("format")
    if explicit is not None:
        if explicit not in ("json", "binary"):
            raise HttpProblem(400, f"query parameter 'format' must be 'json' or 'binary', got {explicit!r}")
        return explicit
    accept = request.headers.get("Accept", "")
    return "json" if JSON_V2 in accept else "binary"


def _decode_field(data: bytes | None, fmt: str, *, topic: str, partition: int, offset: int, field: str
                  ) -> JsonValue:
    if data is None:
        return None
    if fmt == "binary":
        return base64.b64encode(data).decode()
    try:
        return json_value(data)
    except ValueError as exc:
        raise HttpProblem(
            406, f"the {field} of the record at topic '{topic}' partition {partition} offset {offset} is not JSON "
                 f"({exc}); read it with format=binary, or from offset {offset + 1} to skip it",
            error_code=RestErrorCode.CONSUMER_FORMAT_MISMATCH,
            details={"topic": topic, "partition": partition, "offset": offset},
        ) from None


@routes.get("/topics/{topic}/partitions/{partition}/records")
async def read_records(request: web.Request) -> web.Response:
    """Records from `offset` (number, `earliest` or `latest`); long-polls up to `timeout` ms."""
    broker = serving(request)
    topic = request.match_info["topic"]
    p = _partition_arg(request)
    fmt = _read_format(request)
    max_bytes = _int_query(request, "max_bytes", DEFAULT_READ_MAX_BYTES, low=1, high=MAX_READ_MAX_BYTES)
    timeout_ms = _int_query(request, "timeout", 0, low=0, high=MAX_READ_TIMEOUT_MS)
    count = _int_query(request, "count", 0, low=0, high=1 << 31)
    broker.topics.check_partition(topic, p)
    raw_offset = request.query.get("offset", "earliest")
    if raw_offset in ("earliest", "latest"):
        offset, _ = broker.replicas.list_offset(
            topic, p, EARLIEST_TIMESTAMP if raw_offset == "earliest" else LATEST_TIMESTAMP
        )
    else:
        try:
            offset = int(raw_offset)
        except ValueError:
            raise HttpProblem(
                400, f"query parameter 'offset' must be an integer, 'earliest' or 'latest', got {raw_offset!r}"
            ) from None
    info = broker.replicas.partition_info(topic, p)
    if offset < info.log_start_offset or offset > info.high_watermark:
        raise OffsetOutOfRangeError(
            f"offset {offset} is out of range for topic '{topic}' partition {p}: "
            f"valid offsets are {info.log_start_offset}..{info.high_watermark} "
            f"(log start offset .. high watermark; the high watermark waits for new records)"
        )
    (result,) = await broker.replicas.fetch(
        [FetchPartition(topic, p, offset, max_bytes)], max_wait_ms=timeout_ms, min_bytes=1, max_bytes=max_bytes
    )
    if result.error is not None:
        raise result.error
    out: list[JsonData] = []
    if result.records:
        for rec in iter_records(record_bytes(result.records)):
            if rec.offset < offset:
                continue  # the batch holding `offset` starts earlier
            out.append(
                {
                    "topic": topic,
                    "key": _decode_field(rec.key, fmt, topic=topic, partition=p, offset=rec.offset, field="key"),
                    "value": _decode_field(rec.value, fmt, topic=topic, partition=p, offset=rec.offset, field="value"),
                    "partition": p,
                    "offset": rec.offset,
                    "timestamp": rec.timestamp,
                    "headers": [
                        {
                            "key": k,
                            "value": None if v is None else (
                                base64.b64encode(v).decode() if fmt == "binary" else v.decode("utf-8", "replace")
                            ),
                        }
                        for k, v in rec.headers
                    ],
                }
            )
            if count and len(out) >= count:
                break
    return json_response(out, content_type=JSON_V2 if fmt == "json" else BINARY_V2)
