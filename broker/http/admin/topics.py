"""Admin API `/admin/v1/...`: topics, partitions, configs, brokers, as JSON.

Why: the CLI and the operator manage topics over HTTP without speaking the
Kafka admin protocol. Every change goes through the `TopicManager`, which
validates and persists before returning; this module only translates JSON
to calls and `KelpError`s to JSON errors (via `problems.error_middleware`).

Dynamic broker configs (`kafka-configs --entity-type brokers`'s twin):
`GET/PATCH /admin/v1/brokers/configs` (the cluster-wide defaults) and
`/admin/v1/brokers/{id}/configs` (one broker), `{"broker": null | id,
"configs": {key: value}}`; a PATCH's `{"configs": {key: value | null}}` sets
or deletes keys and answers once the change is applied on this broker. An
unknown, read-only or invalid key is a 422 with the Kafka door's message.

This module must never touch logs or partitions directly.
"""

from __future__ import annotations

import json

from aiohttp import web

from kelp.config.keys import DEFAULT_ENTITY
from kelp.errors import ConfigError, KelpError, TopicAuthorizationFailedError
from kelp.json_types import JsonData, JsonObject, JsonValue

from ...loop_budget import LoopBudget
from ...parts import BrokerParts
from ..access.route_access import TOPIC, access_of, describable, may_create_topic
from ..json_body import off_loop, read_json
from ..problems import HttpProblem, json_response
from ..serving import serving
from ..topic_views import brokers_view, describe_topic, topic_configs

__all__ = ["routes"]

routes = web.RouteTableDef()
PREFIX = "/admin/v1"
INLINE_TOPICS = 200  # topics listed beyond this are encoded in a worker thread (`json_body.off_loop`)


def _object(body: JsonValue, *, what: str) -> JsonObject:
    if not isinstance(body, dict):
        raise HttpProblem(400, f"{what} must be a JSON object, got {type(body).__name__}")
    return body


def _int_field(body: JsonObject, key: str, *, what: str, default: int | None = None) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise HttpProblem(400, f"{what}: '{key}' must be an integer, got {value!r}")
    return value


def _configs_field(body: JsonObject, *, what: str, allow_null: bool = False) -> dict[str, str | int | float | None]:
    """`body["configs"]`: config names to strings, numbers (booleans as "true"/"false"), or null with
    `allow_null` (delete the key)."""
    configs = body.get("configs", {})
    if configs is None:
        return {}
    if not isinstance(configs, dict):
        raise HttpProblem(400, f"{what}: 'configs' must be an object of Kafka property names to values")
    out: dict[str, str | int | float | None] = {}
    for key, value in configs.items():
        if isinstance(value, (dict, list)) or (value is None and not allow_null):
            raise HttpProblem(400, f"{what}: config '{key}' must be a string, number or boolean, got {value!r}")
        out[key] = str(value).lower() if isinstance(value, bool) else value
    return out


@routes.get(f"{PREFIX}/topics")
async def list_topics(request: web.Request) -> web.Response:
    broker = serving(request)
    shown = describable(request, TOPIC, (t.name for t in broker.topics.list_topics()))
    topics: list[JsonData] = []
    budget = LoopBudget()  # every topic of the cluster: 10,000 were 113 ms of one loop step, built and encoded
    for t in broker.topics.list_topics():
        if t.name in shown:
            await budget.tick()
            topics.append({"name": t.name, "topic_id": t.topic_id, "partitions": t.partitions,
                           "replication_factor": t.replication_factor, "internal": t.internal,
                           "configs": dict(t.configs)})
    if len(topics) <= INLINE_TOPICS:
        return json_response({"topics": topics})
    body = await off_loop(request, lambda: json.dumps({"topics": topics}, separators=(",", ":")).encode())
    return web.Response(body=body, content_type="application/json")


@routes.post(f"{PREFIX}/topics")
async def create_topic(request: web.Request) -> web.Response:
    broker = serving(request)
    body = _object(await read_json(request), what="create-topic body")
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise HttpProblem(400, "create-topic body: 'name' (the topic name, a string) is required")
    acc = access_of(request)
    if not may_create_topic(acc, name):  # Kafka's CreateTopics: CREATE on the cluster or on the topic
        raise TopicAuthorizationFailedError(f"{acc.principal} is not authorized to CREATE topic '{name}'")
    what = f"create topic '{name}'"
    partitions = _int_field(body, "partitions", what=what)
    rf = _int_field(body, "replication_factor", what=what)
    configs = _configs_field(body, what=what)
    validate_only = bool(body.get("validate_only", False))
    given = body.get("assignments")
    assignments: dict[int, list[int]] | None = None
    if given is not None:
        if not isinstance(given, dict) or not given:
            raise _bad_assignments(what)
        lists: dict[str, list[int]] = {}
        for k, v in given.items():
            if not isinstance(v, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in v):
                raise _bad_assignments(what)
            lists[k] = [b for b in v if isinstance(b, int)]
        try:
            assignments = {int(k): v for k, v in lists.items()}
        except ValueError:
            raise HttpProblem(400, f"{what}: 'assignments' keys must be partition numbers") from None
        if partitions is not None or rf is not None:
            raise HttpProblem(400, f"{what}: give 'assignments' or 'partitions'/'replication_factor', not both")
    created = await broker.topics.create_topic(name, partitions, rf, configs, validate_only=validate_only,
                                               assignments=assignments)
    if validate_only:
        return json_response({"name": name, "validated": True})
    return json_response(await describe_topic(broker, name, created=created), status=201)


def _bad_assignments(what: str) -> HttpProblem:
    return HttpProblem(400, f"{what}: 'assignments' must map partition numbers to broker id lists, "
                            'e.g. {"0": [0, 1], "1": [1, 2]}')


@routes.get(PREFIX + "/topics/{topic}")
async def get_topic(request: web.Request) -> web.Response:
    return json_response(await describe_topic(serving(request), request.match_info["topic"]))


@routes.delete(PREFIX + "/topics/{topic}")
async def delete_topic(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    await serving(request).topics.delete_topic(name)
    return json_response({"name": name, "deleted": True})


@routes.post(PREFIX + "/topics/{topic}/partitions")
async def create_partitions(request: web.Request) -> web.Response:
    broker = serving(request)
    name = request.match_info["topic"]
    body = _object(await read_json(request), what="create-partitions body")
    total = _int_field(body, "partitions", what=f"grow topic '{name}'")
    if total is None:
        raise HttpProblem(400, f"grow topic '{name}': 'partitions' (the new total count) is required")
    await broker.topics.create_partitions(name, total, validate_only=bool(body.get("validate_only", False)))
    return json_response(await describe_topic(broker, name))


@routes.get(PREFIX + "/topics/{topic}/configs")
async def get_configs(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    return json_response({"name": name, "configs": topic_configs(serving(request), name)})


@routes.put(PREFIX + "/topics/{topic}/configs")
async def replace_configs(request: web.Request) -> web.Response:
    """Replace every override: keys not given return to their defaults."""
    broker = serving(request)
    name = request.match_info["topic"]
    body = _object(await read_json(request), what="configs body")
    configs = _configs_field(body, what=f"alter configs of topic '{name}'")
    await broker.topics.alter_config(name, configs, replace=True)
    return json_response({"name": name, "configs": topic_configs(broker, name)})


@routes.patch(PREFIX + "/topics/{topic}/configs")
async def patch_configs(request: web.Request) -> web.Response:
    """Set the given keys; a null value or a name in `delete` returns a key to its default."""
    broker = serving(request)
    name = request.match_info["topic"]
    what = f"alter configs of topic '{name}'"
    body = _object(await read_json(request), what="configs body")
    configs = _configs_field(body, what=what, allow_null=True)
    listed = body.get("delete", [])
    if not isinstance(listed, list) or not all(isinstance(k, str) for k in listed):
        raise HttpProblem(400, f"{what}: 'delete' must be a list of config names")
    delete = [k for k in listed if isinstance(k, str)] + [k for k, v in configs.items() if v is None]
    sets = {k: v for k, v in configs.items() if v is not None}
    await broker.topics.alter_config(name, sets, delete=tuple(delete))
    return json_response({"name": name, "configs": topic_configs(broker, name)})


@routes.post(PREFIX + "/topics/{topic}/delete-records")
async def delete_records(request: web.Request) -> web.Response:
    """Move partitions' log start up: `{"partitions": [{"partition": 0, "offset": 42}, ...]}` (-1: high watermark).

    Each partition is done by its leader (as Kafka's DeleteRecords); the answer lists each one's new
    `low_watermark`, or its `error_code`/`message`; any failure makes the status that of the first.
    """
    broker = serving(request)
    name = request.match_info["topic"]
    what = f"delete records of topic '{name}'"
    body = _object(await read_json(request), what="delete-records body")
    items = body.get("partitions")
    if not isinstance(items, list) or not items:
        raise HttpProblem(400, f'{what}: body must be {{"partitions": [{{"partition": 0, "offset": 42}}, ...]}}')
    wanted: dict[int, int] = {}
    for item in items:
        item = _object(item, what=f"{what}: each entry of 'partitions'")
        partition = _int_field(item, "partition", what=what)
        offset = _int_field(item, "offset", what=what)
        if partition is None or offset is None:
            raise HttpProblem(400, f"{what}: each entry needs 'partition' and 'offset' (integers), got {item!r}")
        if partition in wanted:
            raise HttpProblem(400, f"{what}: partition {partition} is given more than once")
        wanted[partition] = offset
    for partition in wanted:
        broker.topics.check_partition(name, partition)  # unknown topic or partition: 404, nothing done
    results: list[JsonData] = []
    first_error: KelpError | None = None
    for partition, offset in sorted(wanted.items()):
        try:
            low = await broker.cluster.routing.delete_records(name, partition, offset)
            results.append({"partition": partition, "low_watermark": low})
        except KelpError as exc:
            first_error = first_error or exc
            results.append({"partition": partition, "error_code": exc.code, "message": str(exc)})
    if first_error is not None:
        return json_response({"error_code": first_error.code, "message": str(first_error), "name": name,
                              "partitions": results}, status=first_error.http_status)
    return json_response({"name": name, "partitions": results})


@routes.get(f"{PREFIX}/brokers")
async def list_brokers(request: web.Request) -> web.Response:
    return json_response({"brokers": brokers_view(serving(request))})


# -- dynamic broker configs ----------------------------------------------------------
def _broker_entity(request: web.Request) -> int:
    raw = request.match_info.get("broker_id")
    if raw is None:
        return DEFAULT_ENTITY
    try:
        broker_id = int(raw)
    except ValueError:
        raise HttpProblem(400, f"broker id must be an integer, got {raw!r}") from None
    if broker_id < 0:
        raise HttpProblem(400, f"broker id must be >= 0, got {broker_id} (the cluster-wide defaults are "
                               f"{PREFIX}/brokers/configs)")
    return broker_id


def _broker_configs_view(broker: BrokerParts, entity: int) -> JsonData:
    return {"broker": None if entity == DEFAULT_ENTITY else entity,
            "configs": broker.topics.dynamic_broker_configs(entity)}


@routes.get(f"{PREFIX}/brokers/configs")
@routes.get(PREFIX + "/brokers/{broker_id}/configs")
async def get_broker_configs(request: web.Request) -> web.Response:
    """The dynamic configs of the cluster-wide default entity, or of one broker (not the static ones)."""
    broker = serving(request)
    entity = _broker_entity(request)
    return json_response(_broker_configs_view(broker, entity))


@routes.patch(f"{PREFIX}/brokers/configs")
@routes.patch(PREFIX + "/brokers/{broker_id}/configs")
async def patch_broker_configs(request: web.Request) -> web.Response:
    """`{"configs": {key: value | null}}`: set or delete dynamic broker configs; answers once applied here."""
    broker = serving(request)
    entity = _broker_entity(request)
    what = "alter the cluster-wide broker configs" if entity == DEFAULT_ENTITY else f"alter configs of broker {entity}"
    body = _object(await read_json(request), what="broker configs body")
    unknown = sorted(set(body) - {"configs"})
    if unknown or not isinstance(body.get("configs"), dict):
        raise HttpProblem(400, f"{what}: the body must be {{\"configs\": {{name: value, or null to delete}}}}"
                               + (f"; unknown field(s) {unknown}" if unknown else ""))
    configs = _configs_field(body, what=what, allow_null=True)
    try:
        await broker.topics.alter_broker_configs(entity, configs)
    except ConfigError as exc:  # unknown, read-only or invalid: the request is well formed, its content is not
        raise HttpProblem(422, str(exc), error_code=exc.code) from None
    return json_response(_broker_configs_view(broker, entity))
