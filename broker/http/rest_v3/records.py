"""Confluent REST v3 produce: `POST /v3/clusters/{cluster_id}/topics/{topic}/records`.

Why: v3 clients produce one record per JSON object — `{"partition_id"?, "headers"?: [{"name", "value"
(base64)}], "key"?: {"type", "data"}, "value"?: {"type", "data"}, "timestamp"?: date-time}` — and may send
many objects one after another in one body (Confluent's streaming mode: concatenated JSON). Each gets its
own delivery report, in order: `{"error_code": 200, "cluster_id", "topic_name", "partition_id", "offset",
"timestamp", "key": {"type", "size"}, "value": {...}}`, or `{"error_code": 4xx/5xx, "message"}` for a record
that could not be produced; the HTTP status is 200 once a first report is sent, as Confluent's is. Reports
are JSON objects, one per line (one object in, one report out).

Data types: BINARY (`data` base64), JSON (any JSON value, stored as compact JSON text), STRING (a string,
stored as UTF-8), and in a registered schema's format — AVRO, JSONSCHEMA, PROTOBUF, with `schema_id`, or
`subject` and `schema_version`, or `schema` (registered first), else the latest schema of `<topic>-value` /
`<topic>-key` — written as Confluent's serializers write them (`schema_registry.embedded`, through
`rest_schemas`); a schema not found or data that does not match it is that record's error (404/422/400 with
the message naming the field). Records are placed as Kafka's producer places them (explicit partition,
murmur2 of the key, else round-robin), batched per partition, and appended at each partition's leader
(`LeaderRouting.append`), so any broker takes the request. The body is read as it arrives: the records
of each chunk are produced and answered before the next is read (a long-lived streaming request gets its
reports as it goes), holding at most `http.request.max.bytes` of a record still arriving (413 beyond).

`POST .../records:batch` (Confluent's batch form): `{"entries": [{"id", ...a record's fields}]}`, each `id`
a string of 1..80 characters, unique in the batch, at most `http.request.max.records` entries (413 beyond);
answered 207 with `{"successes": [{"id", "partition_id", "offset", ...}], "failures": [{"id", "error_code",
"message"}]}`, the same records produced the same way as the streaming route's.

This module must never append without the route's WRITE check (`route_access`), nor create a topic.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import json
import time
from collections import defaultdict
from datetime import datetime, timezone

from aiohttp import web

from kelp.errors import ErrorCode, KelpError
from kelp.json_types import JsonData, JsonValue
from kelp.partitioner import partition_for_key
from kelp.records.build import build_batch
from kelp.records.record import Record

from ..json_body import read_json
from ..keys import MAX_BODY, ROUND_ROBIN, int_setting
from ..problems import HttpProblem, json_response
from ..rest_schemas import REST_TYPES, NotEncodable, RegistryError, SchemaWriters
from ..serving import serving
from .views import CLUSTER, body_object, cluster_id, is_int

__all__ = ["routes", "take_complete"]

routes = web.RouteTableDef()
_DECODER = json.JSONDecoder(parse_constant=lambda name: (_ for _ in ()).throw(ValueError(f"{name} is not JSON")))
_SCHEMA_FIELDS = ("schema_id", "schema_version", "subject", "subject_name_strategy", "schema")
# Confluent's ProduceRequest and ProduceRequestData: any other field is refused (Jackson's FAIL_ON_UNKNOWN_PROPERTIES),
# so a misspelled or misplaced field ("records" around the record, "val") is never produced as a null.
_RECORD_FIELDS = frozenset({"partition_id", "headers", "key", "value", "timestamp"})
_DATA_FIELDS = frozenset({"type", "data", *_SCHEMA_FIELDS})


class _Bad(Exception):
    """One record that cannot be produced: its report is `{"error_code": status (400), "message": ...}`."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


Encoded = dict[str, tuple[bytes | None, JsonData]]  # "key"/"value" already written in a schema's format


def _in_schema(given: JsonValue) -> bool:
    return isinstance(given, dict) and (str(given.get("type", "")).upper() in REST_TYPES
                                        or any(given.get(f) is not None for f in _SCHEMA_FIELDS))


def _optional_int(given: dict[str, JsonValue], key: str, field: str) -> int | None:
    value = given.get(key)
    if value is not None and (not is_int(value) or value < 0):
        raise _Bad(f"'{field}.{key}' must be a non-negative integer, got {value!r}")
    return value if is_int(value) else None


async def _encode_in_schema(writers: SchemaWriters, doc: JsonValue) -> Encoded:
    """The key and value a record gives in a schema's format (AVRO, JSONSCHEMA, PROTOBUF, or naming a schema),
    written with it; a schema not found, or data that does not match it, is the record's error."""
    out: Encoded = {}
    if not isinstance(doc, dict):
        return out
    for field in ("key", "value"):
        given = doc.get(field)
        if not isinstance(given, dict) or not _in_schema(given):
            continue
        rest_type = str(given["type"]).upper() if given.get("type") is not None else None
        strategy = given.get("subject_name_strategy")
        if strategy not in (None, "TOPIC_NAME") and given.get("subject") is None:
            raise _Bad(f"'{field}.subject_name_strategy' {strategy!r} is not supported: name the 'subject', or use "
                       "TOPIC_NAME (<topic>-key / <topic>-value)")
        subject, schema = given.get("subject"), given.get("schema")
        if not (subject is None or isinstance(subject, str)) or not (schema is None or isinstance(schema, str)):
            raise _Bad(f"'{field}.subject' and '{field}.schema' must be strings")
        refs = given.get("references")
        try:
            writer = await writers.get(is_key=field == "key", rest_type=rest_type,
                                       schema_id=_optional_int(given, "schema_id", field),
                                       version=_optional_int(given, "schema_version", field), subject=subject,
                                       schema=schema, references=refs if isinstance(refs, list) else None)
            raw = writer.write(given.get("data"))
        except RegistryError as exc:
            raise _Bad(f"'{field}': {exc.message} (error code {exc.error_code})", exc.status) from None
        except NotEncodable as exc:
            raise _Bad(f"'{field}': {exc}") from None
        except KelpError as exc:  # not authorized to register the schema given inline
            raise _Bad(f"'{field}': {exc}", exc.http_status) from None
        named = writers.subject_of(field == "key", subject)
        out[field] = raw, {"type": rest_type or {v: k for k, v in REST_TYPES.items()}[writer.schema_type],
                           "size": len(raw), "subject": named, "schema_id": writer.schema_id,
                           "schema_version": await writers.version_of(named, writer.schema_id)}
    return out


def _data(doc: dict[str, JsonValue], field: str, encoded: Encoded) -> tuple[bytes | None, JsonData]:
    """(stored bytes, the report's {"type", "size"}) of `key` or `value`."""
    if field in encoded:
        return encoded[field]
    given = doc.get(field)
    if given is None:
        return None, None
    if not isinstance(given, dict):
        raise _Bad(f"'{field}' must be an object {{\"type\": \"BINARY\"|\"JSON\"|\"STRING\"|\"AVRO\"|...,"
                   " \"data\": ...}")
    _unrecognized(given, _DATA_FIELDS, f"'{field}'")
    kind = str(given.get("type", "JSON" if "data" in given else "")).upper()
    data = given.get("data")
    if data is None:
        return None, {"type": kind or "JSON", "size": 0}
    if kind == "BINARY":
        if not isinstance(data, str):
            raise _Bad(f"'{field}.data' of type BINARY must be a base64 string")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise _Bad(f"'{field}.data' is not valid base64") from None
    elif kind == "STRING":
        if not isinstance(data, str):
            raise _Bad(f"'{field}.data' of type STRING must be a string")
        raw = data.encode()
    elif kind == "JSON":
        raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    else:
        raise _Bad(f"'{field}.type' must be BINARY, JSON or STRING, got {given.get('type')!r}")
    return raw, {"type": kind, "size": len(raw)}


def _record(doc: JsonValue, n: int, now_ms: int, encoded: Encoded) -> tuple[int | None, Record, JsonData, JsonData]:
    if not isinstance(doc, dict):
        raise _Bad("a record must be a JSON object")
    _unrecognized(doc, _RECORD_FIELDS, "a record")
    partition = doc.get("partition_id")
    if partition is not None and (not is_int(partition) or not 0 <= partition < n):
        raise _Bad(f"'partition_id' must be a partition of the topic (0..{n - 1}), got {partition!r}")
    key, key_report = _data(doc, "key", encoded)
    value, value_report = _data(doc, "value", encoded)
    headers: list[tuple[str, bytes | None]] = []
    raw_headers = doc.get("headers", [])
    if not isinstance(raw_headers, list):
        raise _Bad("'headers' must be a list of {\"name\", \"value\" (base64)}")
    for i, h in enumerate(raw_headers):
        name = h.get("name") if isinstance(h, dict) else None
        hv = h.get("value") if isinstance(h, dict) else None
        if not isinstance(name, str) or not (hv is None or isinstance(hv, str)):
            raise _Bad(f"headers[{i}] must be {{\"name\": string, \"value\": base64 string or null}}")
        try:
            headers.append((name, None if hv is None else base64.b64decode(hv, validate=True)))
        except (binascii.Error, ValueError):
            raise _Bad(f"headers[{i}].value is not valid base64") from None
    ts = doc.get("timestamp")
    ts_ms = now_ms
    if ts is not None:
        try:
            parsed = datetime.fromisoformat(str(ts))
            ts_ms = int((parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp() * 1000)
        except ValueError:
            raise _Bad(f"'timestamp' must be an ISO 8601 date-time, got {ts!r}") from None
        if ts_ms < 0:
            raise _Bad(f"'timestamp' {ts!r} is before 1970")
    rec = Record(key=key, value=value, headers=tuple(headers), timestamp=ts_ms)
    return (partition if is_int(partition) else None), rec, key_report, value_report


def _unrecognized(doc: dict[str, JsonValue], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(doc) - known)
    if unknown:
        raise _Bad(f"Unrecognized field {unknown[0]!r} in {what}: its fields are {', '.join(sorted(known))}")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def take_complete(text: str) -> tuple[list[JsonValue], str]:
    """The complete JSON documents at the start of `text`, and what follows them (the start of one still
    arriving, or text that is not JSON: the caller tells them apart when no more comes)."""
    out: list[JsonValue] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos >= end:
            return out, ""
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return out, text[pos:]
        out.append(value)


async def _produce_docs(request: web.Request, cid: str, topic: str, partitions: int, docs: list[JsonValue],
                        first: int, writers: SchemaWriters) -> list[dict[str, JsonData]]:
    """Produce `docs` (records `first`... of the stream): their reports, in order."""
    broker = serving(request)
    now_ms = int(time.time() * 1000)
    reports: list[dict[str, JsonData]] = [{} for _ in docs]
    placed: dict[int, list[tuple[int, Record, JsonData, JsonData]]] = defaultdict(list)
    rr = request.app[ROUND_ROBIN]
    for i, doc in enumerate(docs):
        try:
            encoded = await _encode_in_schema(writers, doc)
            explicit, rec, key_report, value_report = _record(doc, partitions, now_ms, encoded)
        except _Bad as exc:
            reports[i] = {"error_code": exc.status, "message": f"record {first + i}: {exc}"}
            continue
        p = explicit if explicit is not None else (
            partition_for_key(rec.key, partitions) if rec.key is not None else rr.next(partitions))
        placed[p].append((i, rec, key_report, value_report))
    for p, entries in sorted(placed.items()):
        try:
            batch = build_batch([rec for _, rec, _, _ in entries])
            result = await broker.cluster.routing.append(topic, p, batch, acks=-1)
        except Exception as exc:  # reported per record, as Confluent does
            code = getattr(exc, "code", ErrorCode.UNKNOWN_SERVER_ERROR)
            status = getattr(exc, "http_status", 500)
            for i, _, _, _ in entries:
                reports[i] = {"error_code": status, "message": f"topic '{topic}' partition {p}: {exc} "
                                                               f"(Kafka error {code})"}
            continue
        for j, (i, rec, key_report, value_report) in enumerate(entries):
            reports[i] = {"error_code": 200, "cluster_id": cid, "topic_name": topic, "partition_id": p,
                          "offset": result.base_offset + j, "timestamp": _iso(rec.timestamp or now_ms),
                          "key": key_report, "value": value_report}
    return reports


@routes.post(CLUSTER + "/topics/{topic}/records")
async def produce(request: web.Request) -> web.StreamResponse:
    """Records as they arrive: the complete JSON objects of each chunk are produced and answered before the
    next chunk is read, so a client streaming over one long-lived request gets its reports as it goes. At
    most `http.request.max.bytes` of one record is held while it arrives (413 beyond); a failure after the
    first report is answered as a last report (the status is already sent)."""
    cid = cluster_id(request)
    broker = serving(request)
    topic = request.match_info["topic"]
    partitions = broker.topics.describe(topic).partitions
    if request.content_type not in ("application/json", "application/octet-stream", ""):
        raise HttpProblem(415, f"unsupported Content-Type {request.content_type!r}; send application/json",
                          error_code=415)
    max_bytes = request.app[MAX_BODY]
    writers = SchemaWriters(request, topic)
    decoder = codecs.getincrementaldecoder("utf-8")()
    response: web.StreamResponse | None = None
    pending, produced = "", 0

    async def answer(reports: list[dict[str, JsonData]]) -> None:
        nonlocal response
        if response is None:
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            await response.prepare(request)
        await response.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in reports).encode())

    async def fail(status: int, message: str) -> web.StreamResponse:
        if response is None:
            raise HttpProblem(status, message, error_code=status)
        await answer([{"error_code": status, "message": message}])
        await response.write_eof()
        return response

    finished = False
    while not finished:
        chunk = await request.content.readany()
        finished = not chunk
        try:
            pending += decoder.decode(chunk, final=finished)
        except UnicodeDecodeError as exc:
            return await fail(400, f"record {produced} is not UTF-8 (byte {exc.start} of its chunk)")
        docs, pending = take_complete(pending)
        if docs:
            await answer(await _produce_docs(request, cid, topic, partitions, docs, produced, writers))
            produced += len(docs)
        if len(pending) > max_bytes:
            return await fail(413, f"record {produced} is over {max_bytes} bytes (http.request.max.bytes) "
                                   "or is not valid JSON")
    if pending.strip():
        try:
            _DECODER.raw_decode(pending.strip())
        except (ValueError, RecursionError) as exc:
            return await fail(400, f"record {produced} is not valid JSON: {exc}")
    if response is None:
        # Confluent's answer for an empty produce body (its OpenAPI's produce_record_empty_request_body)
        raise HttpProblem(422, "Payload error. Request body is empty. Data is required (send a JSON object per "
                               "record).", error_code=422)
    await response.write_eof()
    return response


@routes.post(CLUSTER + "/topics/{topic}/records:batch")
async def produce_batch(request: web.Request) -> web.Response:
    """Confluent's batch produce: every entry produced as the streaming route produces a record, one report per
    entry, successes and failures apart, answered 207 (Multi-Status) as Confluent's is."""
    cid = cluster_id(request)
    broker = serving(request)
    topic = request.match_info["topic"]
    partitions = broker.topics.describe(topic).partitions
    if request.content_type not in ("application/json", ""):
        raise HttpProblem(415, f"unsupported Content-Type {request.content_type!r}; send application/json",
                          error_code=415)
    what = f"produce a batch to topic '{topic}'"
    body = body_object(await read_json(request), what)
    entries = body.get("entries")
    if not isinstance(entries, list) or not entries:
        raise HttpProblem(400, f"{what}: 'entries' must be a non-empty list of records, each with an 'id'",
                          error_code=400)
    limit = int_setting(broker.config, "http.request.max.records")
    if len(entries) > limit:
        raise HttpProblem(413, f"{what}: {len(entries)} entries, over the {limit} one request may carry "
                               "(http.request.max.records); split the batch", error_code=413)
    ids: list[str] = []
    for i, entry in enumerate(entries):
        entry_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(entry_id, str) or not 1 <= len(entry_id) <= 80:
            raise HttpProblem(400, f"{what}: entries[{i}].id must be a string of 1 to 80 characters, got "
                                   f"{entry_id!r}", error_code=400)
        if entry_id in ids:
            raise HttpProblem(400, f"{what}: entries[{i}].id {entry_id!r} is given more than once; ids must be "
                                   "unique in a batch", error_code=400)
        ids.append(entry_id)
    docs: list[JsonValue] = [{k: v for k, v in e.items() if k != "id"} for e in entries if isinstance(e, dict)]
    reports = await _produce_docs(request, cid, topic, partitions, docs, 0, SchemaWriters(request, topic))
    successes: list[JsonData] = []
    failures: list[JsonData] = []
    for entry_id, report in zip(ids, reports, strict=True):
        if report.get("error_code") == 200:
            successes.append({"id": entry_id, **{k: v for k, v in report.items() if k != "error_code"}})
        else:
            failures.append({"id": entry_id, "error_code": report.get("error_code", 500),
                             "message": f"entry {entry_id!r}, {report.get('message', 'not produced')}"})
    return json_response({"successes": successes, "failures": failures}, status=207)
