"""Confluent REST Proxy v2 consumers: `/consumers/{group}/instances/{name}/...`.

Why: HTTP-only applications consume as members of a consumer group, sharing
partitions with Kafka-protocol consumers of the same group. Each instance is
a real group member: it joins through the coordinator with the `consumer`
protocol (a `ConsumerProtocolSubscription`), computes the range assignment
for everyone when it is the leader, syncs, heartbeats in the background,
rejoins on a rebalance, and reads through the replica manager.

Endpoints (Confluent v2): create/delete an instance (`format`: binary, json, or avro, jsonschema,
protobuf — values in Confluent's wire format answered as JSON with the schema they name,
`consumer_formats`; a read asking another embedded format is 406, 40601); subscription
(POST `topics` or `topic_pattern` — RE2, matched again each heartbeat —, GET, DELETE); records (GET,
long-poll `timeout`, `max_bytes`); offsets (POST commit, GET committed); assignments (POST manual, GET);
positions (POST seek to `offsets` and/or `timestamps`, /beginning, /end). An instance idle for
`consumer.instance.timeout.ms` (the broker key, default 300000; a shorter
one may be set per instance in the create body) is closed and leaves its
group; a broker serves at most `http.consumer.max.instances` instances (429
beyond, naming the key).

An instance is created on any broker and lives there: it is an ordinary
member of its group wherever the group's coordinator is, reads from its
partitions' leaders wherever they are, and follows both when they move
(`consumer_instance`, over the Kafka protocol). Its `base_uri` is that
broker's advertised HTTP address; a request for it reaching another broker
(a load balancer) is forwarded to the holder (`forwarding`), whether
Kelp generated its name or the client chose it (a chosen name is unique in
its group across the cluster: 409 when another broker holds it; names shaped
like the generated ones are refused, 422).

An instance is its creator's, as a Kafka consumer is its application's: it is bound to the principal that
created it (`http.authentication.methods`), and any other principal — a super user too — using or deleting
it is answered 403 with Confluent's KAFKA_AUTHORIZATION (40301), after the route's ACL checks (READ on the group).
Without HTTP authentication every request is User:ANONYMOUS, so every instance is everyone's, as before.

This module must never change group state except through the coordinator.
"""


from __future__ import annotations

from datetime import datetime
from typing import Awaitable, Callable, TypeGuard

from aiohttp import web

from kelp.errors import RestErrorCode
from kelp.json_types import JsonData, JsonValue

from ...client_patterns import InvalidPattern
from ...replica.manager import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from ...schema_registry.embedded import find_reader
from ..access.route_access import DESCRIBE, READ, TOPIC, access_of, principal_of, require
from ..json_body import read_json
from ..keys import int_setting
from ..problems import HttpProblem, json_response
from ..schema_registry_routes import registry_of
from ..serving import serving
from .consumer_formats import CONTENT_TYPES, FORMATS, SCHEMA_FORMATS
from .consumer_instance import ConsumerRegistry, HttpConsumer
from .forwarding import forward_if_held_elsewhere, held_elsewhere
from .subscriptions import topics_matching

__all__ = ["routes", "HttpConsumer", "ConsumerRegistry"]

routes = web.RouteTableDef()

PLAIN_V2 = "application/vnd.kafka.v2+json"
MAX_RECORDS_TIMEOUT_MS = 60_000
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
DEFAULT_MAX_BYTES = 1 << 20
MAX_RECORDS_MAX_BYTES = 64 << 20


# -- request helpers ------------------------------------------------------------------

def _registry(request: web.Request) -> ConsumerRegistry:
    reg = ConsumerRegistry.of(serving(request))
    reg.start_reaper()
    return reg


def _instance(request: web.Request) -> HttpConsumer:
    """The instance the path names, if the request's principal created it (else 403)."""
    inst = _registry(request).get(request.match_info["group"], request.match_info["instance"])
    principal = principal_of(request)
    if inst.owner != principal:
        raise HttpProblem(403, f"consumer instance '{inst.name}' of group '{inst.group}' was created by another "
                               f"principal; {principal} may not use it (REST consumer instances belong to the "
                               "principal that created them)", error_code=RestErrorCode.KAFKA_AUTHORIZATION)
    return inst


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _instance_route(method: str, path: str) -> Callable[[Handler], Handler]:
    """A route of one instance: forwarded to the broker holding the instance when that is another one."""
    def register(handler: Handler) -> Handler:
        async def served_or_forwarded(request: web.Request) -> web.StreamResponse:
            forwarded = await forward_if_held_elsewhere(request, serving(request), _registry(request))
            return forwarded if forwarded is not None else await handler(request)

        served_or_forwarded.__name__ = handler.__name__
        routes.route(method, "/consumers/{group}/instances/{instance}" + path)(served_or_forwarded)
        return handler
    return register


def _no_content() -> web.Response:
    return web.Response(status=204)


def _partitions(body: JsonValue, key: str = "partitions") -> list[tuple[str, int]]:
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise HttpProblem(422, f"body needs '{key}': a list of {{\"topic\", \"partition\"}} objects",
                          error_code=RestErrorCode.KEY_SCHEMA_MISSING)
    out = []
    for i, item in enumerate(items):
        topic, partition = (item.get("topic"), item.get("partition")) if isinstance(item, dict) else (None, None)
        if not isinstance(topic, str) or not _int_in(partition, 0, _INT32_MAX):
            raise HttpProblem(422, f"{key}[{i}] must be {{\"topic\": string, \"partition\": integer 0..{_INT32_MAX}}}",
                              error_code=RestErrorCode.KEY_SCHEMA_MISSING)
        out.append((topic, partition))
    return out


def _int_in(value: JsonValue, low: int, high: int) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _offsets(body: JsonValue) -> dict[tuple[str, int], int]:
    items = body.get("offsets") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise HttpProblem(422, "body needs 'offsets': a list of {\"topic\", \"partition\", \"offset\"} objects",
                          error_code=RestErrorCode.KEY_SCHEMA_MISSING)
    out = {}
    for i, item in enumerate(items):
        topic, partition, offset = ((item.get("topic"), item.get("partition"), item.get("offset"))
                                    if isinstance(item, dict) else (None, None, None))
        if not isinstance(topic, str) or not _int_in(partition, 0, _INT32_MAX) or not _int_in(offset, 0, _INT64_MAX):
            raise HttpProblem(422, f"offsets[{i}] must be {{\"topic\": string, \"partition\": integer 0..{_INT32_MAX}, "
                                   f"\"offset\": integer 0..{_INT64_MAX}}}",
                              error_code=RestErrorCode.KEY_SCHEMA_MISSING)
        out[(topic, partition)] = offset
    return out


def _bool(value: JsonValue, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise HttpProblem(422, f"'{name}' must be true or false, got {value!r}",
                      error_code=RestErrorCode.INVALID_CONSUMER_CONFIG)


# -- routes ---------------------------------------------------------------------------

@routes.post("/consumers/{group}")
async def create_instance(request: web.Request) -> web.Response:
    reg = _registry(request)
    group = request.match_info["group"]
    if not group:
        raise HttpProblem(422, "group name must not be empty", error_code=RestErrorCode.INVALID_CONSUMER_CONFIG)
    given = await read_json(request, what="consumer config", shape_status=422, allow_empty=True)
    body = given if isinstance(given, dict) else {}  # an object, or nothing (an empty body)
    name = body.get("name")
    chosen = name is not None
    if name is None:
        name = reg.new_name()
    if not isinstance(name, str) or not name:
        raise HttpProblem(422, f"'name' must be a non-empty string, got {name!r}",
                          error_code=RestErrorCode.INVALID_CONSUMER_CONFIG)
    if chosen and reg.holder_of(name) is not None:
        raise HttpProblem(422, f"'name' {name!r} starts like the names Kelp generates (rest-consumer-b<broker>-), "
                               "which name the broker holding an instance; choose another name, or leave 'name' "
                               "out to have one generated", error_code=RestErrorCode.INVALID_CONSUMER_CONFIG)
    if (group, name) in reg.instances:
        raise HttpProblem(409, f"consumer instance '{name}' already exists in group '{group}'",
                          error_code=RestErrorCode.CONSUMER_ALREADY_EXISTS)
    elsewhere = await held_elsewhere(serving(request), group, name) if chosen else None
    if elsewhere is not None:  # a name is the cluster's: requests for it are forwarded to its one holder
        raise HttpProblem(409, f"consumer instance '{name}' already exists in group '{group}' on broker "
                               f"{elsewhere}; choose another name or delete that instance first",
                          error_code=RestErrorCode.CONSUMER_ALREADY_EXISTS)
    fmt = body.get("format", "binary")
    if fmt not in FORMATS:
        raise HttpProblem(422, f"'format' must be one of {', '.join(FORMATS)}, got {fmt!r}",
                          error_code=RestErrorCode.INVALID_CONSUMER_CONFIG)
    if fmt in SCHEMA_FORMATS and registry_of(request) is None:
        raise HttpProblem(422, f"'format' {fmt!r} reads values with the Schema Registry, which is disabled on this "
                               "broker (http.schema.registry.enable=false)",
                          error_code=RestErrorCode.INVALID_CONSUMER_CONFIG)
    reset = body.get("auto.offset.reset", "latest")
    if reset not in ("earliest", "latest", "none"):
        raise HttpProblem(422, f"'auto.offset.reset' must be earliest, latest or none, got {reset!r}",
                          error_code=RestErrorCode.INVALID_CONSUMER_CONFIG)
    auto = body.get("auto.commit.enable", body.get("enable.auto.commit", True))
    auto_commit = _bool(auto, "auto.commit.enable")
    max_timeout_ms = int_setting(serving(request).config, "consumer.instance.timeout.ms")
    timeout_ms = body.get("consumer.instance.timeout.ms", max_timeout_ms)
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 0 < timeout_ms <= max_timeout_ms:
        raise HttpProblem(422, f"'consumer.instance.timeout.ms' must be an integer 1..{max_timeout_ms} "
                               f"(the broker's consumer.instance.timeout.ms), got {timeout_ms!r}",
                          error_code=RestErrorCode.INVALID_CONSUMER_CONFIG)
    max_instances = int_setting(serving(request).config, "http.consumer.max.instances")
    if len(reg.instances) >= max_instances:
        raise HttpProblem(
            429, f"this broker already serves {len(reg.instances)} REST consumer instances, the most it allows "
                 f"(http.consumer.max.instances={max_instances}); delete instances you no longer use "
                 f"(DELETE /consumers/{{group}}/instances/{{name}}) or wait for idle ones to expire "
                 f"(after consumer.instance.timeout.ms={max_timeout_ms} ms)",
            error_code=RestErrorCode.TOO_MANY_CONSUMER_INSTANCES)
    # The broker's own advertised HTTP address: the instance lives here.
    endpoint = serving(request).cluster.state.endpoint
    here = endpoint.http_url if endpoint is not None else f"{request.url.scheme}://{request.host}"
    base_uri = f"{here}/consumers/{group}/instances/{name}"
    reg.instances[(group, name)] = HttpConsumer(reg, group, name, fmt=fmt, reset=reset, auto_commit=auto_commit,
                                                instance_timeout_ms=timeout_ms, base_uri=base_uri,
                                                owner=principal_of(request))
    return json_response({"instance_id": name, "base_uri": base_uri}, content_type=PLAIN_V2)


@_instance_route("DELETE", "")
async def delete_instance(request: web.Request) -> web.Response:
    reg = _registry(request)
    inst = _instance(request)
    reg.instances.pop((inst.group, inst.name), None)
    await inst.close()
    return _no_content()


@_instance_route("POST", "/subscription")
async def subscribe(request: web.Request) -> web.Response:
    inst = _instance(request)
    body = await read_json(request, what="subscription body", shape_status=422)
    topics = body.get("topics") if isinstance(body, dict) else None
    pattern = body.get("topic_pattern") if isinstance(body, dict) else None
    if topics is None and pattern is not None:  # Confluent: `topics` when given, else `topic_pattern`
        return await _subscribe_pattern(request, inst, pattern)
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) for t in topics):
        raise HttpProblem(422, "body needs 'topics': a non-empty list of topic names, or 'topic_pattern': a "
                               "regular expression of topic names", error_code=RestErrorCode.INVALID_CONSUMER_CONFIG)
    names = [t for t in topics if isinstance(t, str)]
    for t in names:
        require(request, READ, TOPIC, t)  # a consumer reads what it subscribes to: READ, before it learns more
        inst.broker.topics.describe(t)
    _refuse_if_assigned(inst)
    inst.subscribe(names)
    return _no_content()


def _refuse_if_assigned(inst: HttpConsumer) -> None:
    if inst.manual:
        raise HttpProblem(409, "this instance has a manual assignment; subscription and assignment are exclusive",
                          error_code=RestErrorCode.ILLEGAL_STATE)


async def _subscribe_pattern(request: web.Request, inst: HttpConsumer, pattern: JsonValue) -> web.Response:
    """A `topic_pattern` subscription: every topic whose whole name the pattern matches (RE2: linear time, no
    backreferences or lookaround), internal topics left out, those the principal may DESCRIBE — as a Java
    consumer's `subscribe(Pattern)` sees them in Metadata; a topic created later that matches joins it."""
    if not isinstance(pattern, str) or not pattern:
        raise HttpProblem(422, f"'topic_pattern' must be a non-empty regular expression, got {pattern!r}",
                          error_code=RestErrorCode.INVALID_CONSUMER_CONFIG)
    _refuse_if_assigned(inst)
    access = access_of(request)
    try:
        matched = await topics_matching(inst.broker, pattern, access)
    except InvalidPattern as exc:
        raise HttpProblem(422, f"'topic_pattern' {pattern[:200]!r} is not a valid pattern: {exc}",
                          error_code=RestErrorCode.INVALID_CONSUMER_CONFIG) from None
    inst.subscribe(matched, pattern=pattern, access=access)
    return _no_content()


@_instance_route("GET", "/subscription")
async def get_subscription(request: web.Request) -> web.Response:
    return json_response({"topics": _instance(request).topics}, content_type=PLAIN_V2)


@_instance_route("DELETE", "/subscription")
async def unsubscribe(request: web.Request) -> web.Response:
    await _instance(request).unsubscribe()
    return _no_content()


_FORMAT_OF_TYPE = {content_type: fmt for fmt, content_type in CONTENT_TYPES.items()}


def _embedded_format_asked(accept: str) -> str | None:
    """The embedded format an Accept header prefers (`application/vnd.kafka.<format>.v2+json` with the highest
    q), or None when it names none (`*/*`, `application/json`, no header: any format is taken)."""
    best: tuple[float, str] | None = None
    for item in accept.split(","):
        media_type, *params = (part.strip() for part in item.split(";"))
        fmt = _FORMAT_OF_TYPE.get(media_type.lower())
        if fmt is None:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if best is None or q > best[0]:
            best = (q, fmt)
    return best[1] if best is not None and best[0] > 0 else None


def _require_own_format(request: web.Request, inst: HttpConsumer) -> None:
    """Confluent's 406/40601: an instance reads only in the format it was created with (its deserializer); a read
    asking another embedded format is refused before anything is fetched, so no position moves."""
    asked = _embedded_format_asked(request.headers.get("Accept", ""))
    if asked is not None and asked != inst.format:
        raise HttpProblem(406, f"The requested embedded data format does not match the deserializer for this "
                               f"consumer instance: '{inst.name}' of group '{inst.group}' reads format "
                               f"{inst.format} (Accept: {CONTENT_TYPES[inst.format]}), the request asked for "
                               f"{asked} ({CONTENT_TYPES[asked]})",
                          error_code=RestErrorCode.CONSUMER_FORMAT_MISMATCH)


@_instance_route("GET", "/records")
async def records(request: web.Request) -> web.Response:
    inst = _instance(request)
    _require_own_format(request, inst)
    try:
        timeout_ms = int(request.query.get("timeout", "1000"))
        max_bytes = int(request.query.get("max_bytes", str(DEFAULT_MAX_BYTES)))
    except ValueError:
        raise HttpProblem(400, "query parameters 'timeout' and 'max_bytes' must be integers") from None
    if not 0 <= timeout_ms <= MAX_RECORDS_TIMEOUT_MS or not 0 < max_bytes <= MAX_RECORDS_MAX_BYTES:
        raise HttpProblem(400, f"'timeout' must be 0..{MAX_RECORDS_TIMEOUT_MS} ms and 'max_bytes' "
                               f"1..{MAX_RECORDS_MAX_BYTES}")
    for t in sorted(set(inst.topics) | {t for t, _ in inst.assignment}):
        require(request, READ, TOPIC, t)  # every read, as Kafka's Fetch checks: an ACL taken back stops it
    registry = registry_of(request)
    inst.schema_readers = (lambda schema_id: find_reader(registry, schema_id)) if registry is not None else None
    async with inst._lock:
        out = await inst.read(timeout_ms=timeout_ms, max_bytes=max_bytes)
    inst.touch()
    return json_response(out, content_type=CONTENT_TYPES[inst.format])


@_instance_route("POST", "/offsets")
async def commit_offsets(request: web.Request) -> web.Response:
    inst = _instance(request)
    body = await read_json(request, what="offsets body", shape_status=422, allow_empty=True)
    offsets = _offsets(body) if body else dict(inst.positions)
    for t in sorted({t for t, _ in offsets}):
        require(request, READ, TOPIC, t)  # OffsetCommit: READ on each topic
    await inst.commit(offsets)
    return web.Response(status=200)


@_instance_route("GET", "/offsets")
async def committed_offsets(request: web.Request) -> web.Response:
    inst = _instance(request)
    body = await read_json(request, what="partitions body", shape_status=422, allow_empty=True)
    parts = list(inst.assignment) if body is None else _partitions(body)
    for t in sorted({t for t, _ in parts}):
        require(request, DESCRIBE, TOPIC, t)  # OffsetFetch: TOPIC_AUTHORIZATION_FAILED without DESCRIBE on it
    found = await inst.committed(parts)
    offsets: list[JsonData] = []
    for t, p in parts:
        offset, metadata = found.get((t, p), (-1, ""))
        offsets.append({"topic": t, "partition": p, "offset": offset, "metadata": metadata})
    return json_response({"offsets": offsets}, content_type=PLAIN_V2)


@_instance_route("POST", "/assignments")
async def assign(request: web.Request) -> web.Response:
    inst = _instance(request)
    parts = _partitions(await read_json(request, what="partitions body", shape_status=422))
    for t in sorted({t for t, _ in parts}):
        require(request, READ, TOPIC, t)
    for t, p in parts:
        inst.broker.topics.check_partition(t, p)
    if inst.topics:
        raise HttpProblem(409, "this instance is subscribed; subscription and manual assignment are exclusive",
                          error_code=RestErrorCode.ILLEGAL_STATE)
    inst.manual = True
    inst.assignment = sorted(set(parts))
    inst.positions = {tp: o for tp, o in inst.positions.items() if tp in inst.assignment}
    return _no_content()


@_instance_route("GET", "/assignments")
async def get_assignments(request: web.Request) -> web.Response:
    inst = _instance(request)
    return json_response({"partitions": [{"topic": t, "partition": p} for t, p in inst.assignment]},
                         content_type=PLAIN_V2)


def _timestamps(body: JsonValue) -> dict[tuple[str, int], int]:
    """Confluent's `timestamps` of a seek: {"topic", "partition", "timestamp": ISO-8601 with a zone} -> ms."""
    items = body.get("timestamps") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise HttpProblem(422, "'timestamps' must be a list of {\"topic\", \"partition\", \"timestamp\"} objects",
                          error_code=RestErrorCode.KEY_SCHEMA_MISSING)
    out = {}
    for i, item in enumerate(items):
        topic, partition, stamp = ((item.get("topic"), item.get("partition"), item.get("timestamp"))
                                   if isinstance(item, dict) else (None, None, None))
        when = None
        if isinstance(stamp, str):
            try:
                when = datetime.fromisoformat(stamp)
            except ValueError:
                pass
        if not isinstance(topic, str) or not _int_in(partition, 0, _INT32_MAX) or when is None \
                or when.tzinfo is None:
            raise HttpProblem(422, f"timestamps[{i}] must be {{\"topic\": string, \"partition\": integer "
                                   f"0..{_INT32_MAX}, \"timestamp\": an ISO-8601 time with its zone, e.g. "
                                   f"\"2024-05-01T12:00:00Z\"}}, got timestamp {stamp!r}",
                              error_code=RestErrorCode.KEY_SCHEMA_MISSING)
        out[(topic, partition)] = max(0, int(when.timestamp() * 1000))
    return out


@_instance_route("POST", "/positions")
async def seek(request: web.Request) -> web.Response:
    """Seek to `offsets`, and to the first offset at or after each of `timestamps` (Confluent's
    `ConsumerSeekRequest`); every partition named must be assigned, and nothing moves unless all are."""
    inst = _instance(request)
    body = await read_json(request, what="positions body", shape_status=422)
    if not isinstance(body, dict) or body.get("offsets") is None and body.get("timestamps") is None:
        raise HttpProblem(422, "body needs 'offsets' (a list of {\"topic\", \"partition\", \"offset\"}) or "
                               "'timestamps' (a list of {\"topic\", \"partition\", \"timestamp\"})",
                          error_code=RestErrorCode.KEY_SCHEMA_MISSING)
    offsets = _offsets(body) if body.get("offsets") is not None else {}
    times = _timestamps(body) if body.get("timestamps") is not None else {}
    for tp in [*offsets, *times]:
        if tp not in inst.assignment:
            raise HttpProblem(409, f"{tp[0]}-{tp[1]} is not assigned to this consumer instance",
                              error_code=RestErrorCode.ILLEGAL_STATE)
    found = await inst.offsets_for_times(times) if times else {}
    inst.positions.update(offsets)
    inst.positions.update(found)
    return _no_content()


async def _seek_edge(request: web.Request, ts: int) -> web.Response:
    inst = _instance(request)
    parts = _partitions(await read_json(request, what="partitions body", shape_status=422))
    for tp in parts:
        if tp not in inst.assignment:
            raise HttpProblem(409, f"{tp[0]}-{tp[1]} is not assigned to this consumer instance",
                              error_code=RestErrorCode.ILLEGAL_STATE)
    inst.positions.update(await inst.edge_offsets(parts, ts))
    return _no_content()


@_instance_route("POST", "/positions/beginning")
async def seek_beginning(request: web.Request) -> web.Response:
    return await _seek_edge(request, EARLIEST_TIMESTAMP)


@_instance_route("POST", "/positions/end")
async def seek_end(request: web.Request) -> web.Response:
    return await _seek_edge(request, LATEST_TIMESTAMP)
