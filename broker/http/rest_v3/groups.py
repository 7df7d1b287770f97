"""Confluent REST v3 consumer groups: groups, their consumers, lags and lag summary, from any broker.

Why: a group lives on its coordinator (the leader of its `__consumer_offsets` partition), but a v3 client
asks whichever broker it reaches. So: the list merges every live broker's own groups (as Kafka's
AdminClient.listConsumerGroups asks every broker), and a group is described by its coordinator — this
broker's coordinator in-process (`admin.groups.describe_group`), another's through its admin API
(`LeaderRouting.broker_json`, the control plane's TLS and credentials); its lags are computed here
against each partition's log end offset as the partition's leader knows it (`partition_infos`).
Routes (under `/v3/clusters/{cluster_id}`): `GET /consumer-groups`, `/consumer-groups/{group}`,
`/consumer-groups/{group}/consumers`, `.../consumers/{consumer}`, `.../consumers/{consumer}/assignments`,
`.../assignments/{topic}/partitions/{partition}`, `/consumer-groups/{group}/lags`,
`.../lags/{topic}/partitions/{partition}`, `/consumer-groups/{group}/lag-summary`.

Authorization is the admin group routes' (`route_access`): DESCRIBE on the group; the list shows every
group to DESCRIBE on the cluster, else those the principal may DESCRIBE; lags only of topics it may
DESCRIBE (as Kafka's OffsetFetch answers).

This module must never change a group: it only reads.
"""

from __future__ import annotations

from typing import cast
from urllib.parse import quote

from aiohttp import web

from kelp.errors import ErrorCode, KelpError
from kelp.json_types import JsonData, JsonObject

from ...groups.placement import OFFSETS_TOPIC
from ...parts import BrokerParts
from ..access.route_access import DESCRIBE, GROUP, TOPIC, access_of, describable
from ..admin.groups import describe_group, require_local_group
from ..problems import HttpProblem
from ..serving import serving
from .views import CLUSTER, Links, collection, int_path, links_of, resource, v3_response

__all__ = ["routes", "remote_json"]

routes = web.RouteTableDef()
GROUPS = CLUSTER + "/consumer-groups"
GROUP_PATH = GROUPS + "/{group}"
_STATES = {"Stable": "STABLE", "PreparingRebalance": "PREPARING_REBALANCE",
           "CompletingRebalance": "COMPLETING_REBALANCE", "Empty": "EMPTY", "Dead": "DEAD",
           "Assigning": "ASSIGNING", "Reconciling": "RECONCILING"}  # the last two: consumer-protocol groups


def _coordinator_of(broker: BrokerParts, group: str) -> int:
    if not broker.topics.exists(OFFSETS_TOPIC):
        raise HttpProblem(404, f"consumer group '{group}' not found (no group has committed or joined yet)",
                          error_code=ErrorCode.GROUP_ID_NOT_FOUND)
    info = broker.topics.describe(OFFSETS_TOPIC)
    return info.partition_states[broker.groups.partition_for(group)].leader


async def remote_json(broker: BrokerParts, broker_id: int, path: str) -> JsonObject:
    """GET `path` of another broker as this one (`LeaderRouting.broker_json`); its errors as v3 errors."""
    try:
        status, body = await broker.cluster.routing.broker_json(broker_id, path)
    except (OSError, KelpError) as exc:
        raise HttpProblem(503, f"broker {broker_id} did not answer {path} ({exc}); retry",
                          error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE) from None
    if not isinstance(body, dict):
        raise HttpProblem(502, f"broker {broker_id} answered {path} with {str(body)[:200]}")
    if status >= 300:
        raise HttpProblem(status, str(body.get("message", f"broker {broker_id} answered {status}")),
                          error_code=_int(body.get("error_code"), status))
    return cast(JsonObject, body)


async def _describe(broker: BrokerParts, group: str) -> tuple[int, JsonObject]:
    """(coordinator id, the group as `admin.groups.describe_group` shows it, every topic's offsets)."""
    coordinator = _coordinator_of(broker, group)
    if coordinator == broker.config.broker_id:
        await require_local_group(broker, group)
        return coordinator, cast(JsonObject, describe_group(broker, group))
    return coordinator, await remote_json(broker, coordinator, f"/admin/v1/groups/{quote(group, safe='')}")


async def _group_ids(request: web.Request) -> list[str]:
    broker = serving(request)
    ids: set[str] = set()
    for b in sorted(broker.cluster.state.brokers):
        if b == broker.config.broker_id:
            ids.update(gid for gid, _, _ in broker.groups.list_groups())
            continue
        body = await remote_json(broker, b, "/admin/v1/groups")
        groups = body.get("groups")
        if isinstance(groups, list):
            ids.update(str(g["group_id"]) for g in groups if isinstance(g, dict))
    acc = access_of(request)
    return sorted(ids if acc.allows_cluster(DESCRIBE) else acc.allowed(DESCRIBE, GROUP, ids))


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _committed(d: JsonObject) -> dict[tuple[str, int], tuple[int, str]]:
    """(topic, partition) -> (committed offset, owning member id or "") of a described group."""
    out: dict[tuple[str, int], tuple[int, str]] = {}
    offsets = d.get("offsets")
    for o in offsets if isinstance(offsets, list) else []:
        if not isinstance(o, dict):
            continue
        topic, p, committed = o.get("topic"), _int(o.get("partition"), -1), _int(o.get("committed_offset"), -1)
        if isinstance(topic, str) and p >= 0 and committed >= 0:
            out[(topic, p)] = (committed, str(o.get("member_id") or ""))
    return out


def _members(d: JsonObject) -> list[JsonObject]:
    members = d.get("members")
    return [m for m in members if isinstance(m, dict)] if isinstance(members, list) else []


def _group_data(links: Links, group: str, coordinator: int, d: JsonObject) -> dict[str, JsonData]:
    state = _STATES.get(str(d.get("state")), "UNKNOWN")
    base = ("consumer-groups", group)
    return resource("KafkaConsumerGroup", links.url(*base), links.crn(("consumer-group", group)),
                    cluster_id=links.cid, consumer_group_id=group, is_simple=d.get("protocol_type") in ("", None),
                    partition_assignor=str(d.get("protocol") or ""), state=state,
                    type="CONSUMER" if d.get("group_type") == "consumer" else "CLASSIC",
                    is_mixed_consumer_group=False, coordinator=links.related("brokers", coordinator),
                    consumers=links.related(*base, "consumers"), lag_summary=links.related(*base, "lag-summary"))


@routes.get(GROUPS)
async def list_groups(request: web.Request) -> web.Response:
    links, broker = links_of(request), serving(request)
    data: list[JsonData] = []
    for group in await _group_ids(request):
        try:
            coordinator, d = await _describe(broker, group)
        except (HttpProblem, KelpError):
            continue  # gone, or its coordinator is moving: it shows again on the next list
        data.append(_group_data(links, group, coordinator, d))
    return v3_response(collection("KafkaConsumerGroupList", links.url("consumer-groups"), data))


@routes.get(GROUP_PATH)
async def get_group(request: web.Request) -> web.Response:
    links, group = links_of(request), request.match_info["group"]
    coordinator, d = await _describe(serving(request), group)
    return v3_response(_group_data(links, group, coordinator, d))


def _consumer_data(links: Links, group: str, m: JsonObject) -> dict[str, JsonData]:
    mid = str(m.get("member_id"))
    base = ("consumer-groups", group, "consumers", mid)
    return resource("KafkaConsumer", links.url(*base), links.crn(("consumer-group", group), ("consumer", mid)),
                    cluster_id=links.cid, consumer_group_id=group, consumer_id=mid,
                    instance_id=m.get("group_instance_id"), client_id=str(m.get("client_id") or ""),
                    assignments=links.related(*base, "assignments"))


@routes.get(GROUP_PATH + "/consumers")
async def list_consumers(request: web.Request) -> web.Response:
    links, group = links_of(request), request.match_info["group"]
    _, d = await _describe(serving(request), group)
    data: list[JsonData] = [_consumer_data(links, group, m) for m in _members(d)]
    return v3_response(collection("KafkaConsumerList", links.url("consumer-groups", group, "consumers"), data))


async def _member(request: web.Request) -> tuple[Links, str, JsonObject]:
    links, group, consumer = links_of(request), request.match_info["group"], \
        request.match_info["consumer"]
    _, d = await _describe(serving(request), group)
    for m in _members(d):
        if str(m.get("member_id")) == consumer:
            return links, group, m
    raise HttpProblem(404, f"consumer '{consumer}' is not a member of consumer group '{group}' now (GET "
                           f".../consumer-groups/{group}/consumers lists them)", error_code=ErrorCode.UNKNOWN_MEMBER_ID)


def _assigned(m: JsonObject) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    assignment = m.get("assignment")
    for a in assignment if isinstance(assignment, list) else []:
        partitions = a.get("partitions") if isinstance(a, dict) else None
        if isinstance(a, dict) and isinstance(a.get("topic"), str) and isinstance(partitions, list):
            out += [(str(a["topic"]), p) for p in partitions if isinstance(p, int)]
    return sorted(out)


def _assignment_data(links: Links, group: str, m: JsonObject, topic: str, p: int) -> dict[str, JsonData]:
    mid = str(m.get("member_id"))
    return resource("KafkaConsumerAssignment",
                    links.url("consumer-groups", group, "consumers", mid, "assignments", topic, "partitions", p),
                    links.crn(("consumer-group", group), ("consumer", mid), ("assignment", f"{topic}-{p}")),
                    cluster_id=links.cid, consumer_group_id=group, consumer_id=mid, topic_name=topic, partition_id=p,
                    partition=links.related("topics", topic, "partitions", p),
                    lag=links.related("consumer-groups", group, "lags", topic, "partitions", p))


@routes.get(GROUP_PATH + "/consumers/{consumer}")
async def get_consumer(request: web.Request) -> web.Response:
    links, group, m = await _member(request)
    return v3_response(_consumer_data(links, group, m))


@routes.get(GROUP_PATH + "/consumers/{consumer}/assignments")
async def list_assignments(request: web.Request) -> web.Response:
    links, group, m = await _member(request)
    shown = describable(request, TOPIC, {t for t, _ in _assigned(m)})
    data: list[JsonData] = [_assignment_data(links, group, m, t, p) for t, p in _assigned(m) if t in shown]
    return v3_response(collection("KafkaConsumerAssignmentList", links.url(
        "consumer-groups", group, "consumers", str(m.get("member_id")), "assignments"), data))


@routes.get(GROUP_PATH + "/consumers/{consumer}/assignments/{topic}/partitions/{partition}")
async def get_assignment(request: web.Request) -> web.Response:
    links, group, m = await _member(request)
    topic, p = request.match_info["topic"], int_path(request, "partition", "partition")
    if (topic, p) not in _assigned(m) or not describable(request, TOPIC, {topic}):
        raise HttpProblem(404, f"partition {p} of topic '{topic}' is not assigned to consumer "
                               f"'{m.get('member_id')}' of group '{group}'", error_code=404)
    return v3_response(_assignment_data(links, group, m, topic, p))


async def _lags(request: web.Request, links: Links, group: str) -> list[dict[str, JsonData]]:
    broker = serving(request)
    _, d = await _describe(broker, group)
    clients = {str(m.get("member_id")): (m.get("group_instance_id"), str(m.get("client_id") or ""))
               for m in _members(d)}
    committed_offsets = _committed(d)
    shown = describable(request, TOPIC, {t for t, _ in committed_offsets})
    keys = [k for k in committed_offsets if k[0] in shown]
    infos = await broker.cluster.routing.partition_infos(keys)
    out: list[dict[str, JsonData]] = []
    for topic, p in sorted(keys):
        committed, member = committed_offsets[(topic, p)]
        info = infos.get((topic, p))
        end = info.high_watermark if info is not None else committed
        instance, client = clients.get(member, (None, ""))
        out.append(resource(
            "KafkaConsumerLag", links.url("consumer-groups", group, "lags", topic, "partitions", p),
            links.crn(("consumer-group", group), ("lag", f"{topic}-{p}")), cluster_id=links.cid,
            consumer_group_id=group, topic_name=topic, partition_id=p, current_offset=committed,
            log_end_offset=end, lag=max(end - committed, 0), consumer_id=member, instance_id=instance,
            client_id=client))
    return out


@routes.get(GROUP_PATH + "/lags")
async def list_lags(request: web.Request) -> web.Response:
    links, group = links_of(request), request.match_info["group"]
    data: list[JsonData] = list(await _lags(request, links, group))
    return v3_response(collection("KafkaConsumerLagList", links.url("consumer-groups", group, "lags"), data))


@routes.get(GROUP_PATH + "/lags/{topic}/partitions/{partition}")
async def get_lag(request: web.Request) -> web.Response:
    links, group = links_of(request), request.match_info["group"]
    topic, p = request.match_info["topic"], int_path(request, "partition", "partition")
    for lag in await _lags(request, links, group):
        if lag["topic_name"] == topic and lag["partition_id"] == p:
            return v3_response(lag)
    raise HttpProblem(404, f"consumer group '{group}' has no committed offset for partition {p} of topic '{topic}' "
                           "(of topics you may DESCRIBE)", error_code=404)


@routes.get(GROUP_PATH + "/lag-summary")
async def lag_summary(request: web.Request) -> web.Response:
    links, group = links_of(request), request.match_info["group"]
    lags = await _lags(request, links, group)
    if not lags:
        raise HttpProblem(404, f"consumer group '{group}' has no committed offsets (of topics you may DESCRIBE) "
                               "to summarize lag over", error_code=ErrorCode.GROUP_ID_NOT_FOUND)
    top = max(lags, key=lambda entry: cast(int, entry["lag"]))
    member, topic, p = str(top["consumer_id"]), str(top["topic_name"]), cast(int, top["partition_id"])
    return v3_response(resource(
        "KafkaConsumerGroupLagSummary", links.url("consumer-groups", group, "lag-summary"),
        links.crn(("consumer-group", group), ("lag-summary", "")), cluster_id=links.cid, consumer_group_id=group,
        max_lag_consumer_id=member, max_lag_instance_id=top["instance_id"], max_lag_client_id=top["client_id"],
        max_lag_topic_name=topic, max_lag_partition_id=p, max_lag=top["lag"],
        total_lag=sum(cast(int, entry["lag"]) for entry in lags),
        max_lag_consumer=links.related("consumer-groups", group, "consumers", member),
        max_lag_partition=links.related("topics", topic, "partitions", p)))
