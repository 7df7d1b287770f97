"""Confluent REST v3 configs: topic configs, broker configs and the cluster-wide dynamic broker defaults.

Why: Confluent's UI, Terraform's provider and scripts read and change configs with these routes; Kelp
answers them in Confluent's shapes from the same doors as `kafka-configs` and the admin API — described
by `kelp.config.entries` (value, source, synonyms, read-only, secrets without a value: DescribeConfigs' answer),
changed through the topic manager (`alter_config`, `alter_broker_configs`: the one validator, then the
controller and the metadata log, so any broker takes a change and every broker applies it). A broker's
static configs are only known to itself: another broker's are read from it (`/cluster/v1/configs`,
`LeaderRouting.broker_json`). Routes, under `/v3/clusters/{cluster_id}`:

- `GET /topics/-/configs` (every topic's), `GET .../topics/{topic}/configs`, `GET|PUT|DELETE
  .../topics/{topic}/configs/{name}`, `POST .../topics/{topic}/configs:alter`;
- `GET /broker-configs` (the cluster-wide dynamic defaults, `--entity-default`), `GET|PUT|DELETE
  /broker-configs/{name}`, `POST /broker-configs:alter`;
- `GET /brokers/-/configs` (every live broker's), `GET /brokers/{broker_id}/configs`, `GET|PUT|DELETE
  /brokers/{broker_id}/configs/{name}`, `POST /brokers/{broker_id}/configs:alter`.

A `:alter` body is `{"data": [{"name", "value"?, "operation"?: "SET"|"DELETE"}], "validate_only"?}`: one
change, all or nothing. PUT takes `{"value": string}`; DELETE returns the key to its default. An unknown,
read-only or invalid key is answered 400 with Kafka's INVALID_CONFIG (40) and the validator's message.
Authorization is `route_access`'s: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic or on the cluster.

This module must never change a config but through the topic manager.
"""

from __future__ import annotations

import json

from aiohttp import web

from kelp.config.entries import (
    SOURCE_DEFAULT,
    SOURCE_NAMES,
    Entry,
    broker_entries,
    default_entity_entries,
    hide_secrets,
    topic_entries,
)
from kelp.config.keys import DEFAULT_ENTITY
from kelp.config.listener_keys import is_sensitive
from kelp.json_types import JsonData, JsonObject

from ...loop_budget import LoopBudget
from ...parts import BrokerParts
from ..access.route_access import DC, TOPIC, access_of
from ..json_body import off_loop, read_json
from ..problems import HttpProblem
from ..serving import serving
from .groups import remote_json
from .views import CLUSTER, Links, body_object, collection, links_of, live_broker, resource, v3_response

__all__ = ["routes"]

routes = web.RouteTableDef()
# Config entries above this are encoded in a worker thread (`json_body.off_loop`), not on the event loop.
INLINE_ENTRIES = 2000
TOPIC_PATH = CLUSTER + "/topics/{topic}"
BROKER_CONFIGS = CLUSTER + "/brokers/{broker_id}/configs"
CLUSTER_CONFIGS = CLUSTER + "/broker-configs"



def _fields(entry: Entry) -> dict[str, JsonData]:
    name, value, read_only, source, synonyms = entry
    return {"name": name, "value": value, "is_default": source == SOURCE_DEFAULT, "is_read_only": read_only,
            "is_sensitive": is_sensitive(name), "source": SOURCE_NAMES.get(source, "UNKNOWN"),
            "synonyms": [{"name": sn, "value": sv, "source": SOURCE_NAMES.get(ss, "UNKNOWN")}
                         for sn, sv, ss in synonyms]}


def _named(entries: list[Entry], name: str, where: str, listing: str) -> Entry:
    for entry in entries:
        if entry[0] == name:
            return entry
    raise HttpProblem(404, f"{where} has no config '{name}' (GET {listing} lists them)", error_code=404)


def _alter_items(body: JsonObject, what: str) -> tuple[dict[str, str], list[str]]:
    """(keys to set, keys to delete) of a `:alter` body, each key at most once."""
    items = body.get("data")
    if not isinstance(items, list) or not items:
        raise HttpProblem(400, f"{what}: 'data' must be a non-empty list of {{\"name\", \"value\", \"operation\"}}",
                          error_code=400)
    sets: dict[str, str] = {}
    deletes: list[str] = []
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        op = (item.get("operation") or "SET") if isinstance(item, dict) else None
        value = item.get("value") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name or not isinstance(op, str) or op.upper() not in ("SET", "DELETE"):
            raise HttpProblem(400, f"{what}: data[{i}] must be {{\"name\": string, \"value\": string, "
                                   "\"operation\": \"SET\" | \"DELETE\"}", error_code=400)
        if name in sets or name in deletes:
            raise HttpProblem(400, f"{what}: config '{name}' is given more than once (data[{i}])", error_code=400)
        if op.upper() == "DELETE" or value is None:
            deletes.append(name)
        elif isinstance(value, str):
            sets[name] = value
        else:
            raise HttpProblem(400, f"{what}: data[{i}].value must be a string, got {value!r}", error_code=400)
    return sets, deletes


def _put_value(body: JsonObject, what: str) -> str:
    value = body.get("value")
    if not isinstance(value, str):
        raise HttpProblem(400, f"{what}: the body must be {{\"value\": string}}, got 'value': {value!r}",
                          error_code=400)
    return value


def _validate_only(body: JsonObject, what: str) -> bool:
    flag = body.get("validate_only", False)
    if not isinstance(flag, bool):
        raise HttpProblem(400, f"{what}: 'validate_only' must be true or false, got {flag!r}", error_code=400)
    return flag


# -- topic configs -------------------------------------------------------------------------------------
def _topic_entries(broker: BrokerParts, topic: str) -> list[Entry]:
    info = broker.topics.describe(topic)
    return hide_secrets(topic_entries(broker.config, broker.topics.effective_configs(topic), info.configs))


def _topic_config(links: Links, topic: str, entry: Entry) -> dict[str, JsonData]:
    return resource("KafkaTopicConfig", links.url("topics", topic, "configs", entry[0]),
                    links.crn(("topic", topic), ("config", entry[0])), cluster_id=links.cid, topic_name=topic,
                    **_fields(entry))


@routes.get(CLUSTER + "/topics/-/configs")  # before .../topics/{topic}/configs, which would take "-" as a name
async def list_all_topic_configs(request: web.Request) -> web.Response:
    """Every topic's configs: built a slice at a time and encoded in a worker thread when large, as thousands of
    topics take ~0.4 ms each (issue 33's loop-lag guard: no request holds the loop over 50 ms)."""
    links, broker = links_of(request), serving(request)
    names = sorted(t.name for t in broker.topics.list_topics())
    shown = access_of(request).allowed(DC, TOPIC, names)  # as DescribeConfigs: DESCRIBE_CONFIGS on each topic
    data: list[JsonData] = []
    budget = LoopBudget()
    for t in names:
        if t in shown:
            await budget.tick()
            data.extend(_topic_config(links, t, e) for e in _topic_entries(broker, t))
    doc = collection("KafkaTopicConfigList", links.url("topics", "-", "configs"), data)
    if len(data) <= INLINE_ENTRIES:
        return v3_response(doc)
    body = await off_loop(request, lambda: json.dumps(doc, separators=(",", ":")).encode())
    return web.Response(body=body, content_type="application/json")


@routes.get(TOPIC_PATH + "/configs")
async def list_topic_configs(request: web.Request) -> web.Response:
    links, broker, topic = links_of(request), serving(request), request.match_info["topic"]
    data: list[JsonData] = [_topic_config(links, topic, e) for e in _topic_entries(broker, topic)]
    return v3_response(collection("KafkaTopicConfigList", links.url("topics", topic, "configs"), data))


def _topic_entry(broker: BrokerParts, topic: str, name: str) -> Entry:
    return _named(_topic_entries(broker, topic), name, f"topic '{topic}'", f".../topics/{topic}/configs")


@routes.get(TOPIC_PATH + "/configs/{name}")
async def get_topic_config(request: web.Request) -> web.Response:
    links, broker, topic = links_of(request), serving(request), request.match_info["topic"]
    return v3_response(_topic_config(links, topic, _topic_entry(broker, topic, request.match_info["name"])))


@routes.put(TOPIC_PATH + "/configs/{name}")
async def put_topic_config(request: web.Request) -> web.Response:
    links_of(request)
    broker, topic, name = serving(request), request.match_info["topic"], request.match_info["name"]
    what = f"update config '{name}' of topic '{topic}'"
    body = body_object(await read_json(request), what)
    if body.get("value") is None:  # Confluent's PUT with a null value returns the key to its default
        await broker.topics.alter_config(topic, {}, delete=(name,))
    else:
        await broker.topics.alter_config(topic, {name: _put_value(body, what)})
    return web.Response(status=204)


@routes.delete(TOPIC_PATH + "/configs/{name}")
async def reset_topic_config(request: web.Request) -> web.Response:
    links_of(request)
    broker, topic, name = serving(request), request.match_info["topic"], request.match_info["name"]
    _topic_entry(broker, topic, name)
    await broker.topics.alter_config(topic, {}, delete=(name,))
    return web.Response(status=204)


@routes.post(TOPIC_PATH + "/configs:alter")
async def alter_topic_configs(request: web.Request) -> web.Response:
    links_of(request)
    broker, topic = serving(request), request.match_info["topic"]
    what = f"alter configs of topic '{topic}'"
    body = body_object(await read_json(request), what)
    sets, deletes = _alter_items(body, what)
    await broker.topics.alter_config(topic, dict(sets), delete=tuple(deletes),
                                     validate_only=_validate_only(body, what))
    return web.Response(status=204)


# -- the cluster-wide dynamic broker defaults ----------------------------------------------------------
def _cluster_config(links: Links, entry: Entry) -> dict[str, JsonData]:
    return resource("KafkaClusterConfig", links.url("broker-configs", entry[0]), links.crn(("broker-config", entry[0])),
                    cluster_id=links.cid, config_type="BROKER", **_fields(entry))


def _default_entries(broker: BrokerParts) -> list[Entry]:
    return hide_secrets(default_entity_entries(broker.topics.dynamic_broker_configs(DEFAULT_ENTITY)))


async def _alter_broker(broker: BrokerParts, entity: int, sets: dict[str, str], deletes: list[str], *,
                        validate_only: bool = False) -> None:
    changes: dict[str, object] = {**sets, **{k: None for k in deletes}}
    await broker.topics.alter_broker_configs(entity, changes, validate_only=validate_only)  # ConfigError: 400 (40)


@routes.get(CLUSTER_CONFIGS)
async def list_cluster_configs(request: web.Request) -> web.Response:
    links = links_of(request)
    data: list[JsonData] = [_cluster_config(links, e) for e in _default_entries(serving(request))]
    return v3_response(collection("KafkaClusterConfigList", links.url("broker-configs"), data))


@routes.get(CLUSTER_CONFIGS + "/{name}")
async def get_cluster_config(request: web.Request) -> web.Response:
    links, name = links_of(request), request.match_info["name"]
    entry = _named(_default_entries(serving(request)), name, "the cluster-wide dynamic broker configs",
                   ".../broker-configs")
    return v3_response(_cluster_config(links, entry))


@routes.put(CLUSTER_CONFIGS + "/{name}")
async def put_cluster_config(request: web.Request) -> web.Response:
    links_of(request)
    name = request.match_info["name"]
    what = f"update the cluster-wide broker config '{name}'"
    value = _put_value(body_object(await read_json(request), what), what)
    await _alter_broker(serving(request), DEFAULT_ENTITY, {name: value}, [])
    return web.Response(status=204)


@routes.delete(CLUSTER_CONFIGS + "/{name}")
async def reset_cluster_config(request: web.Request) -> web.Response:
    links_of(request)
    await _alter_broker(serving(request), DEFAULT_ENTITY, {}, [request.match_info["name"]])
    return web.Response(status=204)


@routes.post(CLUSTER_CONFIGS + ":alter")
async def alter_cluster_configs(request: web.Request) -> web.Response:
    links_of(request)
    what = "alter the cluster-wide broker configs"
    body = body_object(await read_json(request), what)
    sets, deletes = _alter_items(body, what)
    await _alter_broker(serving(request), DEFAULT_ENTITY, sets, deletes, validate_only=_validate_only(body, what))
    return web.Response(status=204)


# -- one broker's configs ------------------------------------------------------------------------------
def _entries_from_json(body: object, broker_id: int) -> list[Entry]:
    rows = body.get("configs") if isinstance(body, dict) else None
    entries: list[Entry] = []
    try:
        for n, v, ro, src, syn in rows if isinstance(rows, list) else []:
            entries.append((str(n), None if v is None else str(v), bool(ro), int(src),
                            [(str(sn), None if sv is None else str(sv), int(ss)) for sn, sv, ss in syn]))
    except (TypeError, ValueError):
        raise HttpProblem(502, f"broker {broker_id} described its configs in a shape this broker does not read "
                               "(a broker of another version?)") from None
    return entries


async def _broker_entries(broker: BrokerParts, broker_id: int) -> list[Entry]:
    if broker_id == broker.config.broker_id:
        return hide_secrets(broker_entries(broker.config))
    return _entries_from_json(await remote_json(broker, broker_id, "/cluster/v1/configs"), broker_id)


def _broker_config(links: Links, broker_id: int, entry: Entry) -> dict[str, JsonData]:
    return resource("KafkaBrokerConfig", links.url("brokers", broker_id, "configs", entry[0]),
                    links.crn(("broker", broker_id), ("config", entry[0])), cluster_id=links.cid,
                    broker_id=broker_id, **_fields(entry))


@routes.get(CLUSTER + "/brokers/-/configs")  # before .../brokers/{broker_id}/configs, which would take "-"
async def list_all_broker_configs(request: web.Request) -> web.Response:
    links, broker = links_of(request), serving(request)
    data: list[JsonData] = []
    for broker_id in sorted(broker.cluster.state.brokers):
        data += [_broker_config(links, broker_id, e) for e in await _broker_entries(broker, broker_id)]
    return v3_response(collection("KafkaBrokerConfigList", links.url("brokers", "-", "configs"), data))


@routes.get(BROKER_CONFIGS)
async def list_broker_configs(request: web.Request) -> web.Response:
    links, broker = links_of(request), serving(request)
    broker_id = live_broker(request, links)
    data: list[JsonData] = [_broker_config(links, broker_id, e) for e in await _broker_entries(broker, broker_id)]
    return v3_response(collection("KafkaBrokerConfigList", links.url("brokers", broker_id, "configs"), data))


@routes.get(BROKER_CONFIGS + "/{name}")
async def get_broker_config(request: web.Request) -> web.Response:
    links, broker, name = links_of(request), serving(request), request.match_info["name"]
    broker_id = live_broker(request, links)
    entry = _named(await _broker_entries(broker, broker_id), name, f"broker {broker_id}",
                   f".../brokers/{broker_id}/configs")
    return v3_response(_broker_config(links, broker_id, entry))


@routes.put(BROKER_CONFIGS + "/{name}")
async def put_broker_config(request: web.Request) -> web.Response:
    links, broker, name = links_of(request), serving(request), request.match_info["name"]
    broker_id = live_broker(request, links)
    what = f"update config '{name}' of broker {broker_id}"
    value = _put_value(body_object(await read_json(request), what), what)
    await _alter_broker(broker, broker_id, {name: value}, [])
    return web.Response(status=204)


@routes.delete(BROKER_CONFIGS + "/{name}")
async def reset_broker_config(request: web.Request) -> web.Response:
    links, broker = links_of(request), serving(request)
    await _alter_broker(broker, live_broker(request, links), {}, [request.match_info["name"]])
    return web.Response(status=204)


@routes.post(BROKER_CONFIGS + ":alter")
async def alter_broker_configs(request: web.Request) -> web.Response:
    links, broker = links_of(request), serving(request)
    broker_id = live_broker(request, links)
    what = f"alter configs of broker {broker_id}"
    body = body_object(await read_json(request), what)
    sets, deletes = _alter_items(body, what)
    await _alter_broker(broker, broker_id, sets, deletes, validate_only=_validate_only(body, what))
    return web.Response(status=204)
