"""The Schema Registry's HTTP routes (Confluent's API) on every broker's HTTP listener, and the brokers'
internal routes behind them.

Why: clients built for Confluent's registry — confluent-kafka's `SchemaRegistryClient`, the Java
serializers, curl scripts — reach it at `/subjects`, `/schemas`, `/config`, `/mode` and `/compatibility`
of any broker and get Confluent's shapes, `application/vnd.schemaregistry.v1+json` and its error bodies
(`{"error_code": 40401, "message": ...}`). Reads are answered by the broker that receives them (after it
read `_schemas` to its end); writes are forwarded to the registry's leader, the leader of `_schemas`
partition 0, over the brokers' control plane (`POST /cluster/v1/schema-registry/write/{op}`, for brokers
only), retried while a new leader is elected (bounded). Non-leaders read `_schemas` through
`GET /cluster/v1/schema-registry/records` on the leader.

`install(app)` mounts it (`app.py`). Who may call what: `access.route_access.RULES`. It lives with the other
routes, not in `kelp.broker.schema_registry`: that package is the registry as the broker's client, with no HTTP.

This module must never decide an operation: `registry` does.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Awaitable, Callable

from aiohttp import ClientError, web

from kelp.errors import KelpError
from kelp.json_types import JsonData, JsonObject, JsonValue

from ..cpu_work import run_cpu
from ..loop_budget import LoopBudget
from ..parts import BrokerParts
from ..schema_registry.errors import Code, RegistryError, schema_not_found, subject_not_found
from ..schema_registry.model import SCHEMA_TYPES, Reference, add_contract
from ..schema_registry.registry import WRITE_OPS, SchemaRegistry
from ..schema_registry.requests import check_subject, level_of, mode_of, parse_version, schema_request
from ..schema_registry.state import RegistryState
from ..schema_registry.store import SchemaLog, b64, read_records, registry_error
from .json_body import INLINE_MAX_BYTES, BodyError, loads_bounded, off_loop, read_body
from .serving import serving

__all__ = ["install", "routes", "CONTENT_TYPE", "registry_of", "register_schema"]

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
FORWARD_TIMEOUT_S = 20.0

routes = web.RouteTableDef()


class _Holder:
    """The broker's registry, made on first use (the broker's parts exist only once it started)."""

    def __init__(self) -> None:
        self.registry: SchemaRegistry | None = None

    def get(self, parts: BrokerParts) -> SchemaRegistry:
        if self.registry is None or self.registry.log.parts is not parts:
            self.registry = SchemaRegistry(SchemaLog(parts))
        return self.registry


REGISTRY = web.AppKey("kelp_schema_registry", _Holder)


def install(app: web.Application) -> None:
    """Mount the registry's routes on a broker's HTTP app."""
    app[REGISTRY] = _Holder()
    app.add_routes(routes)


def _registry(request: web.Request) -> SchemaRegistry:
    return request.app[REGISTRY].get(serving(request))


def registry_of(request: web.Request) -> SchemaRegistry | None:
    """The broker's registry, for REST produce in a schema's format; None when it is switched off here."""
    holder = request.app.get(REGISTRY)
    return holder.get(serving(request)) if holder is not None else None


async def register_schema(request: web.Request, subject: str, body: JsonObject) -> JsonObject:
    """Register `body` under `subject` as `POST /subjects/{subject}/versions` does (forwarded to the leader)."""
    check_subject(subject)
    schema_request(body)
    answer = await _write(request, "register", {"subject": subject, "body": body})
    if not isinstance(answer, dict):
        raise RegistryError(500, Code.STORE_ERROR, f"registering under subject '{subject}' answered {answer!r}"[:300])
    return answer


# An answer listing more than this many subjects, versions or schemas is encoded on the CPU pool: `GET /schemas`
# of a large registry is megabytes of schema text, tens of milliseconds of json.dumps.
LARGE_ANSWER_ITEMS = 1000


def _answer(data: JsonData, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(data, separators=(",", ":")).encode(), status=status,
                        content_type=CONTENT_TYPE)


def _problem(exc: RegistryError) -> web.Response:
    return _answer({"error_code": exc.error_code, "message": exc.message}, exc.status)


Handler = Callable[[web.Request], Awaitable[JsonData]]


def _route(method: str, path: str) -> Callable[[Handler], Handler]:
    """A route answering its handler's JSON, and a RegistryError as Confluent's error body."""
    def wrap(handler: Handler) -> Handler:
        async def run(request: web.Request) -> web.Response:
            try:
                data = await handler(request)
                if isinstance(data, list) and len(data) > LARGE_ANSWER_ITEMS:  # every subject or schema: off the loop
                    body = await run_cpu(functools.partial(json.dumps, data, separators=(",", ":")))
                    return web.Response(body=body.encode(), content_type=CONTENT_TYPE)
                return _answer(data)
            except KelpError as exc:  # a Kafka error met on the way (the leadership of _schemas moving): Confluent's
                return _problem(registry_error(serving(request), exc))
            except RegistryError as exc:
                return _problem(exc)
        routes.route(method, path)(run)
        return handler
    return wrap


# What Confluent's registry consumes (its resources' @Consumes): anything else is 415, as Jersey answers it.
_CONSUMED = frozenset({"application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json",
                       "application/json", "application/octet-stream"})


async def _body(request: web.Request) -> JsonValue:
    """The body as JSON; a large one parsed in a worker thread (`json_body.off_loop`), as the other routes' are:
    a client's megabytes of JSON must not hold the event loop (issue 33's loop-lag guard). A body of a media type
    Confluent's registry does not consume (text/plain, a form) is 415."""
    if request.can_read_body and request.content_type not in _CONSUMED:
        raise RegistryError(415, 415, f"HTTP 415 Unsupported Media Type: {request.content_type!r}; send "
                                      "application/vnd.schemaregistry.v1+json or application/json")
    raw = await read_body(request)

    def parse() -> JsonValue:
        try:
            body: JsonValue = loads_bounded(raw.decode("utf-8")) if raw.strip() else None
        except (BodyError, UnicodeDecodeError) as exc:  # nested too deep included: 400, never a 500
            raise RegistryError(400, 400, f"the request body is not JSON, or not JSON Kelp accepts: {exc}") from None
        return body

    return parse() if len(raw) <= INLINE_MAX_BYTES else await off_loop(request, parse)


def _flag(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "false").lower()
    if raw not in ("true", "false", ""):
        raise RegistryError(400, 400, f"query parameter '{name}' must be true or false, got {raw!r}")
    return raw == "true"


def _subject(request: web.Request) -> str:
    return check_subject(request.match_info["subject"])


def _schema_id(request: web.Request) -> int:
    raw = request.match_info["id"]
    try:
        return int(raw)
    except ValueError:
        raise schema_not_found(detail=f": '{raw}' is not a schema id (an integer)") from None


# -- writes: here on the leader, else forwarded to it ---------------------------------------------------------
async def _write(request: web.Request, op: str, args: JsonObject) -> JsonData:
    registry = _registry(request)
    log = registry.log
    await log.create()
    deadline = time.monotonic() + FORWARD_TIMEOUT_S
    last = "no leader of '_schemas' is known yet"
    while True:
        leader = log.leader()
        endpoint = log.parts.cluster.state.brokers.get(leader)
        if log.is_leader():
            return await registry.write(op, args)
        if endpoint is not None and leader != log.parts.config.broker_id:
            url = f"{endpoint.http_url}/cluster/v1/schema-registry/write/{op}"
            try:
                async with log.parts.cluster.session.session().post(url, json=args) as resp:
                    body = await resp.json(content_type=None)
                if resp.status == 200 and isinstance(body, dict) and "result" in body:
                    result: JsonData = body["result"]
                    return result
                code = body.get("error_code") if isinstance(body, dict) else None
                message = body.get("message") if isinstance(body, dict) else None
                # not the leader any more, or a broker still starting (503 before any handler ran): retry
                if code != Code.UNKNOWN_LEADER and resp.status != 503:
                    raise RegistryError(resp.status, int(code) if isinstance(code, int) else resp.status,
                                        str(message or body))
                last = str(message)
            except (ClientError, OSError, asyncio.TimeoutError, ValueError) as exc:
                last = f"broker {leader} did not answer: {exc!r}"
        if time.monotonic() > deadline:
            raise RegistryError(500, Code.REQUEST_FORWARDING_FAILED if endpoint is not None else Code.UNKNOWN_LEADER,
                                f"Error while forwarding the request to the leader of '_schemas' within "
                                f"{FORWARD_TIMEOUT_S:.0f}s: {last}")
        await asyncio.sleep(0.2)


@routes.post("/cluster/v1/schema-registry/write/{op}")
async def leader_write(request: web.Request) -> web.Response:
    op = request.match_info["op"]
    try:
        args = await _body(request)
        if op not in WRITE_OPS or not isinstance(args, dict):
            raise RegistryError(404, 404, f"no registry write operation '{op}' taking {args!r}"[:300])
        return _answer({"result": await _registry(request).write(op, args)})
    except KelpError as exc:
        return _problem(registry_error(serving(request), exc))
    except RegistryError as exc:
        return _problem(exc)


@routes.get("/cluster/v1/schema-registry/records")
async def leader_records(request: web.Request) -> web.Response:
    registry = _registry(request)
    if not registry.log.is_leader():
        return _answer({"error_code": Code.UNKNOWN_LEADER, "message": "not the leader of '_schemas' partition 0"}, 500)
    try:
        offset = int(request.query.get("offset", "0"))
    except ValueError:
        return _answer({"error_code": 400, "message": "query parameter 'offset' must be an integer"}, 400)
    records, hw, log_start = await read_records(registry.log.parts, offset)
    return _answer({"records": [{"offset": o, "key": b64(k), "value": b64(v)} for o, k, v in records],
                    "high_watermark": hw, "log_start_offset": log_start})


# -- subjects and versions ------------------------------------------------------------------------------------
def _page(request: web.Request, items: list[JsonData]) -> list[JsonData]:
    """Confluent's `offset` (from 0) and `limit` (-1, the default: all) over an answer's list."""
    bounds = []
    for name, default, low in (("offset", 0, 0), ("limit", -1, -1)):
        raw = request.query.get(name, str(default))
        try:
            value = int(raw)
        except ValueError:
            raise RegistryError(400, 400, f"query parameter '{name}' must be an integer, got {raw!r}") from None
        if value < low:
            raise RegistryError(400, 400, f"query parameter '{name}' must be at least {low}, got {value}")
        bounds.append(value)
    offset, limit = bounds
    return items[offset:] if limit < 0 else items[offset:offset + limit]


@_route("GET", "/subjects")
async def list_subjects(request: web.Request) -> JsonData:
    """Confluent's `subjectPrefix`, `deleted` (soft-deleted too), `deletedOnly` (only those), `offset`, `limit`."""
    state = await _registry(request).state()
    prefix = request.query.get("subjectPrefix", "")
    if _flag(request, "deletedOnly"):
        names = sorted(set(state.subject_names(deleted=True)) - set(state.subject_names()))
    else:
        names = state.subject_names(deleted=_flag(request, "deleted"))
    return _page(request, [n for n in names if n.startswith(prefix)])


@_route("GET", "/schemas")
async def list_schemas(request: web.Request) -> JsonData:
    """Every subject version (Confluent's `GET /schemas`): `subjectPrefix`, `deleted`, `latestOnly`, `offset`,
    `limit`; each as `GET /subjects/{s}/versions/{v}` answers it."""
    state = await _registry(request).state()
    prefix = request.query.get("subjectPrefix", "")
    deleted, latest = _flag(request, "deleted"), _flag(request, "latestOnly")
    out: list[JsonData] = []
    budget = LoopBudget()  # every version of every subject: thousands in a large registry
    for subject in state.subject_names(deleted=deleted):
        await budget.tick()
        if not subject.startswith(prefix):
            continue
        versions = state.versions(subject, deleted=deleted)
        for sv in versions[-1:] if latest else versions:
            out.append({**sv.to_api(), "schema": sv.schema})
    return _page(request, out)


@_route("GET", "/")
async def root(request: web.Request) -> JsonData:
    """Confluent answers its root with an empty object (clients use it as a liveness check)."""
    return {}


@_route("GET", "/contexts")
async def list_contexts(request: web.Request) -> JsonData:
    """Schema contexts (Confluent's multi-tenancy prefix `:.ctx:`): Kelp has the default context only."""
    return ["."]


@_route("GET", "/v1/metadata/id")
async def metadata_id(request: web.Request) -> JsonData:
    """The registry's identity as Confluent answers it: the Kafka cluster it stores in, and its own cluster."""
    cluster_id = str(_registry(request).log.parts.config["cluster.id"])
    return {"scope": {"path": [], "clusters": {"kafka-cluster": cluster_id,
                                               "schema-registry-cluster": "schema-registry"}}}


@_route("GET", "/subjects/{subject}/versions")
async def list_versions(request: web.Request) -> JsonData:
    """Confluent's `deleted` (soft-deleted too), `deletedOnly` (only those), `offset` and `limit`."""
    subject = request.match_info["subject"]
    state = await _registry(request).state()
    only_deleted = _flag(request, "deletedOnly")
    versions = state.versions(subject, deleted=only_deleted or _flag(request, "deleted"))
    if not versions:
        raise RegistryError(404, Code.SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
    return _page(request, [sv.version for sv in versions if sv.deleted or not only_deleted])


@_route("POST", "/subjects/{subject}/versions")
async def register(request: web.Request) -> JsonData:
    subject = _subject(request)
    body = await _body(request)
    schema_request(body)  # 42201 here, before forwarding, for a body that can never register
    assert isinstance(body, dict)
    return await _write(request, "register", {"subject": subject, "body": body})


def _in_format(request: web.Request, registry: SchemaRegistry, state: RegistryState, found: JsonObject,
               refs: tuple[Reference, ...]) -> JsonObject:
    """`?format=serialized`: a PROTOBUF schema as a base64 FileDescriptorProto (what confluent-kafka's Protobuf
    deserializer asks for); any other format or type is answered as stored, as Confluent's registry does."""
    if request.query.get("format") != "serialized" or found.get("schemaType") != "PROTOBUF":
        return found
    return {**found, "schema": registry.serialized(state, str(found["schema"]), refs)}


async def _version(request: web.Request) -> JsonObject:
    registry = _registry(request)
    state = await registry.state()
    version = parse_version(request.match_info["version"])
    found = registry.find(state, request.match_info["subject"], version, deleted=_flag(request, "deleted"))
    return _in_format(request, registry, state, found.to_api(), found.references)


@_route("GET", "/subjects/{subject}/metadata")
async def latest_with_metadata(request: web.Request) -> JsonData:
    """Confluent's `GET /subjects/{s}/metadata?key=k&value=v...`: the newest version whose data contract's
    metadata properties hold every pair given (`deleted` to look at soft-deleted versions too); 40403 when none."""
    keys, values = request.query.getall("key", []), request.query.getall("value", [])
    if len(keys) != len(values):
        raise RegistryError(400, 400, f"give as many 'value' as 'key' query parameters ({len(keys)} keys, "
                                      f"{len(values)} values)")
    wanted = dict(zip(keys, values, strict=True))
    registry = _registry(request)
    state = await registry.state()
    subject = request.match_info["subject"]
    versions = state.versions(subject, deleted=_flag(request, "deleted"))
    if not versions:
        raise subject_not_found(subject)
    for sv in reversed(versions):
        found = sv.to_api().get("metadata")
        held = found.get("properties") if isinstance(found, dict) else None
        if isinstance(held, dict) and all(held.get(k) == v for k, v in wanted.items()):
            return _in_format(request, registry, state, sv.to_api(), sv.references)
    raise schema_not_found(detail=f": no version of subject '{subject}' has metadata {wanted}")


@_route("GET", "/subjects/{subject}/versions/{version}")
async def get_version(request: web.Request) -> JsonData:
    return await _version(request)


@_route("GET", "/subjects/{subject}/versions/{version}/schema")
async def get_version_schema(request: web.Request) -> JsonData:
    found = await _version(request)
    schema = str(found["schema"])
    return schema if found.get("schemaType") == "PROTOBUF" else loads_bounded(schema)


@_route("GET", "/subjects/{subject}/versions/{version}/referencedby")
async def referenced_by(request: web.Request) -> JsonData:
    found = await _version(request)
    state = await _registry(request).state()
    return _page(request, [sv.schema_id for sv in state.referenced_by(str(found["subject"]),
                                                                      int(str(found["version"])))])


@_route("DELETE", "/subjects/{subject}/versions/{version}")
async def delete_version(request: web.Request) -> JsonData:
    version = parse_version(request.match_info["version"])
    return await _write(request, "delete_version", {"subject": request.match_info["subject"], "version": version,
                                                    "permanent": _flag(request, "permanent")})


@_route("POST", "/subjects/{subject}")
async def lookup(request: web.Request) -> JsonData:
    body = schema_request(await _body(request))
    return await _registry(request).lookup(request.match_info["subject"], body, deleted=_flag(request, "deleted"))


@_route("DELETE", "/subjects/{subject}")
async def delete_subject(request: web.Request) -> JsonData:
    return await _write(request, "delete_subject", {"subject": request.match_info["subject"],
                                                    "permanent": _flag(request, "permanent")})


# -- schemas by id --------------------------------------------------------------------------------------------
async def _by_id(request: web.Request) -> JsonObject:
    schema_id = _schema_id(request)
    registry = _registry(request)
    state = await registry.state()
    identity = state.ids.get(schema_id)
    if identity is None:
        raise schema_not_found(schema_id)
    schema_type, schema, refs, metadata, rule_set = identity
    out: JsonObject = {}
    if schema_type != "AVRO":
        out["schemaType"] = schema_type
    if refs:
        out["references"] = [r.to_json() for r in refs]
    add_contract(out, metadata, rule_set)
    out["schema"] = schema
    return _in_format(request, registry, state, out, refs)


@_route("GET", "/schemas/ids/{id}")
async def schema_by_id(request: web.Request) -> JsonData:
    return await _by_id(request)


@_route("GET", "/schemas/ids/{id}/schema")
async def raw_schema_by_id(request: web.Request) -> JsonData:
    found = await _by_id(request)
    return str(found["schema"]) if found.get("schemaType") == "PROTOBUF" else loads_bounded(str(found["schema"]))


@_route("GET", "/schemas/ids/{id}/versions")
async def id_versions(request: web.Request) -> JsonData:
    schema_id = _schema_id(request)
    state = await _registry(request).state()
    if schema_id not in state.ids:
        raise schema_not_found(schema_id)
    users = state.users_of(schema_id, deleted=_flag(request, "deleted"))
    return _page(request, [{"subject": sv.subject, "version": sv.version} for sv in users])


@_route("GET", "/schemas/ids/{id}/subjects")
async def id_subjects(request: web.Request) -> JsonData:
    schema_id = _schema_id(request)
    state = await _registry(request).state()
    if schema_id not in state.ids:
        raise schema_not_found(schema_id)
    subjects = sorted({sv.subject for sv in state.users_of(schema_id, deleted=_flag(request, "deleted"))})
    return _page(request, list[JsonData](subjects))


@_route("GET", "/schemas/types")
async def schema_types(request: web.Request) -> JsonData:
    return sorted(SCHEMA_TYPES)


# -- compatibility --------------------------------------------------------------------------------------------
@_route("POST", "/compatibility/subjects/{subject}/versions/{version}")
async def check_version(request: web.Request) -> JsonData:
    version = parse_version(request.match_info["version"])
    body = schema_request(await _body(request))
    return await _registry(request).check(request.match_info["subject"], version, body,
                                          verbose=_flag(request, "verbose"))


@_route("POST", "/compatibility/subjects/{subject}/versions")
async def check_all(request: web.Request) -> JsonData:
    body = schema_request(await _body(request))
    return await _registry(request).check(request.match_info["subject"], None, body,
                                          verbose=_flag(request, "verbose"))


# -- config and mode ------------------------------------------------------------------------------------------
def _scope(request: web.Request) -> str | None:
    return request.match_info.get("subject")


async def _get_config(request: web.Request) -> JsonData:
    subject = _scope(request)
    state = await _registry(request).state()
    if subject is not None and subject not in state.configs and not _flag(request, "defaultToGlobal"):
        raise RegistryError(404, Code.SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
                            f"Subject '{subject}' does not have subject-level compatibility configured")
    return {"compatibilityLevel": state.level(subject)}


async def _put_config(request: web.Request) -> JsonData:
    return await _write(request, "set_config", {"subject": _scope(request), "level": level_of(await _body(request))})


async def _delete_config(request: web.Request) -> JsonData:
    return await _write(request, "delete_config", {"subject": _scope(request)})


async def _get_mode(request: web.Request) -> JsonData:
    subject = _scope(request)
    state = await _registry(request).state()
    if subject is not None and subject not in state.modes and not _flag(request, "defaultToGlobal"):
        raise RegistryError(404, Code.SUBJECT_LEVEL_MODE_NOT_CONFIGURED,
                            f"Subject '{subject}' does not have subject-level mode configured")
    return {"mode": state.own_mode(subject)}


async def _put_mode(request: web.Request) -> JsonData:
    return await _write(request, "set_mode", {"subject": _scope(request), "mode": mode_of(await _body(request)),
                                              "force": _flag(request, "force")})


async def _delete_mode(request: web.Request) -> JsonData:
    return await _write(request, "delete_mode", {"subject": _scope(request)})


for _path in ("/config", "/config/{subject}"):
    _route("GET", _path)(_get_config)
    _route("PUT", _path)(_put_config)
    _route("DELETE", _path)(_delete_config)
for _path in ("/mode", "/mode/{subject}"):
    _route("GET", _path)(_get_mode)
    _route("PUT", _path)(_put_mode)
    _route("DELETE", _path)(_delete_mode)
