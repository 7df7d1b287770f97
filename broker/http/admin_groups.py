"""`/admin/v1/groups`: list, describe (members, assignment, committed offsets, lag), reset offsets, delete.

Why: operators (the CLI's `kelp groups`, the Kubernetes operator) need
kafka-consumer-groups' answers over plain HTTP: who owns which partition, how
far behind each partition is, and a safe way to move a group's offsets — a
plan first, applied only with `execute`, and refused while the group has
live members (as kafka-consumer-groups refuses).

Each broker answers for the groups it coordinates (the leader of the group's
`__consumer_offsets` partition). A request about a group coordinated by
another broker is refused with 421 Misdirected Request, `error_code` 16
(NOT_COORDINATOR) and a message naming that broker; while this broker is
still loading the group, or no broker leads its partition, 503 with 14 / 15
(retry). `GET /admin/v1/groups` lists this broker's groups only, as Kafka's
ListGroups does: a cluster-wide list asks every broker and merges.

This module must never change group state except through the coordinator
(`broker.groups`), which writes `__consumer_offsets`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from aiohttp import web

from kelp.errors import (
    ErrorCode,
    GroupIdNotFoundError,
    KelpError,
    NonEmptyGroupError,
    UnknownTopicOrPartitionError,
)

from ..groups.coordinator_lookup import CoordinatorLocation, locator_of
from ..groups.group import CommittedOffset
from ..replica_manager import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from .json_body import read_json
from .keys import BROKER
from .problems import HttpProblem, json_response

__all__ = ["routes", "describe_group", "plan_reset", "require_local_group", "coordinator_problem"]

routes = web.RouteTableDef()
PREFIX = "/admin/v1/groups"
# How long an HTTP request waits for this broker to become able to coordinate a group (the first use
# creates __consumer_offsets; a fresh leader loads its partition) before answering 503.
LOCAL_WAIT_S = 5.0


def _coordinator(request: web.Request) -> Any:
    coord = getattr(request.app[BROKER], "groups", None)
    if coord is None:
        raise HttpProblem(503, "the group coordinator is not running on this broker")
    return coord


def coordinator_problem(located: CoordinatorLocation) -> HttpProblem:
    """The HTTP answer for a group this broker cannot act on now."""
    message = located.message or f"coordinator error {located.error}"
    if located.error == ErrorCode.NOT_COORDINATOR:
        return HttpProblem(421, message, error_code=ErrorCode.NOT_COORDINATOR)
    if located.error == ErrorCode.INVALID_GROUP_ID:
        return HttpProblem(400, message, error_code=ErrorCode.INVALID_GROUP_ID)
    return HttpProblem(503, message, error_code=located.error)


async def require_local_group(broker: Any, group_id: str, *, timeout_s: float = LOCAL_WAIT_S) -> None:
    """Return once this broker coordinates `group_id`; else raise 421 naming the coordinator, or 503."""
    located = await locator_of(broker).require_local(group_id, timeout_s=timeout_s)
    if located.error:
        raise coordinator_problem(located)


def error_for(code: int, message: str) -> KelpError:
    """The `kelp.errors` class carrying a Kafka error code, for a coordinator result."""
    stack = list(KelpError.__subclasses__())
    while stack:
        cls = stack.pop()
        if getattr(cls, "code", None) == code:
            return cls(message)
        stack.extend(cls.__subclasses__())
    err = KelpError(message)
    err.code = code
    return err


def _decode_assignment(protocol_type: str, data: bytes) -> list[dict[str, Any]]:
    if protocol_type != "consumer" or not data:
        return []
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    try:
        a = ConsumerProtocolAssignment.decode(data)
    except Exception:
        return []
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in a.assigned_partitions]


def describe_group(broker: Any, group_id: str) -> dict[str, Any]:
    coord = broker.groups
    d = coord.describe_group(group_id)
    group = coord.groups.get(group_id)
    if d.error:
        raise error_for(d.error, f"cannot describe group '{group_id}': coordinator error {d.error}")
    if group is None:
        raise GroupIdNotFoundError(f"group '{group_id}' does not exist (no members and no committed offsets)")
    owner: dict[tuple[str, int], str] = {}
    members = []
    for m in d.members:
        assignment = _decode_assignment(d.protocol_type, m.assignment)
        for a in assignment:
            for p in a["partitions"]:
                owner[(a["topic"], p)] = m.member_id
        members.append({
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "assignment": assignment,
        })
    keys = set(group.offsets) | set(owner)
    offsets = []
    total = 0
    for topic, p in sorted(keys):
        co = group.offsets.get((topic, p))
        try:
            end = broker.replicas.partition_info(topic, p).high_watermark
        except KelpError:
            end = None
        lag = None
        if co is not None and end is not None:
            lag = max(end - co.offset, 0)
            total += lag
        offsets.append({
            "topic": topic, "partition": p, "committed_offset": co.offset if co else None,
            "metadata": co.metadata if co else None, "log_end_offset": end, "lag": lag,
            "member_id": owner.get((topic, p)),
        })
    return {
        "group_id": group_id, "state": d.state, "protocol_type": d.protocol_type, "protocol": d.protocol,
        "generation": d.generation, "leader": d.leader, "coordinator_partition": coord.partition_for(group_id),
        "members": members, "offsets": offsets, "total_lag": total,
    }


def plan_reset(broker: Any, group_id: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Target offsets for `body` = {topic, partitions?, to, value?}; clamped to the log like Kafka."""
    topic = body.get("topic")
    if not isinstance(topic, str) or not topic:
        raise HttpProblem(400, "reset-offsets needs 'topic' (a topic name)")
    info = broker.topics.get(topic)
    if info is None:
        raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
    partitions = body.get("partitions")
    if partitions is None:
        partitions = list(range(info.partitions))
    if not isinstance(partitions, list) or not all(isinstance(p, int) for p in partitions):
        raise HttpProblem(400, "'partitions' must be a list of partition numbers")
    for p in partitions:
        broker.topics.check_partition(topic, p)
    to = body.get("to")
    value = body.get("value")
    if to not in ("earliest", "latest", "datetime", "offset", "shift-by"):
        raise HttpProblem(400, f"'to' must be earliest, latest, datetime, offset or shift-by, got {to!r}")
    if to in ("offset", "shift-by") and not isinstance(value, int):
        raise HttpProblem(400, f"reset to {to} needs an integer 'value', got {value!r}")
    ts_ms = None
    if to == "datetime":
        if not isinstance(value, str):
            raise HttpProblem(400, "reset to datetime needs 'value' as ISO-8601, e.g. 2024-01-31T12:00:00Z")
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise HttpProblem(400, f"'value' {value!r} is not an ISO-8601 date-time") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        ts_ms = int(dt.timestamp() * 1000)
    group = broker.groups.groups.get(group_id)
    plan = []
    for p in sorted(set(partitions)):
        start, _ = broker.replicas.list_offset(topic, p, EARLIEST_TIMESTAMP)
        end, _ = broker.replicas.list_offset(topic, p, LATEST_TIMESTAMP)
        current = group.offsets.get((topic, p)) if group is not None else None
        cur = current.offset if current is not None else None
        if to == "earliest":
            target = start
        elif to == "latest":
            target = end
        elif to == "offset":
            target = value
        elif to == "shift-by":
            target = (cur if cur is not None else end) + value
        else:
            found, _ = broker.replicas.list_offset(topic, p, ts_ms)
            target = end if found < 0 else found
        target = min(max(target, start), end)
        plan.append({"topic": topic, "partition": p, "current_offset": cur, "new_offset": target,
                     "log_start_offset": start, "log_end_offset": end})
    return plan


@routes.get(PREFIX)
async def list_groups(request: web.Request) -> web.Response:
    """This broker's groups (those of the `__consumer_offsets` partitions it coordinates)."""
    coord = _coordinator(request)
    broker = request.app[BROKER]
    out = []
    for gid, ptype, state in coord.list_groups():
        g = coord.groups.get(gid)
        out.append({"group_id": gid, "protocol_type": ptype, "state": state,
                    "members": len(g.members) if g else 0, "generation": g.generation if g else -1})
    return json_response({
        "groups": out,
        "scope": "local",
        "broker_id": broker.config.broker_id,
        "offsets_topic_partitions": coord.config.num_partitions,
        "coordinated_partitions": sorted(coord.ownership.owned()),
        "loading_partitions": sorted(coord.ownership.loading()),
    })


@routes.get(PREFIX + "/{group}")
async def get_group(request: web.Request) -> web.Response:
    _coordinator(request)
    broker = request.app[BROKER]
    gid = request.match_info["group"]
    await require_local_group(broker, gid)
    return json_response(describe_group(broker, gid))


@routes.post(PREFIX + "/{group}/reset-offsets")
async def reset_offsets(request: web.Request) -> web.Response:
    coord = _coordinator(request)
    broker = request.app[BROKER]
    gid = request.match_info["group"]
    body = await read_json(request)
    if not isinstance(body, dict):
        raise HttpProblem(400, "reset-offsets body must be a JSON object")
    await require_local_group(broker, gid)
    group = coord.groups.get(gid)
    if group is not None and group.members:
        raise NonEmptyGroupError(
            f"group '{gid}' has {len(group.members)} active member(s) (state {group.state.value}); "
            "stop its consumers before resetting offsets"
        )
    plan = plan_reset(broker, gid, body)
    execute = bool(body.get("execute", False))
    if execute:
        codes = await coord.commit_offsets(
            gid, offsets={(e["topic"], e["partition"]): CommittedOffset(e["new_offset"]) for e in plan}
        )
        bad = {tp: c for tp, c in codes.items() if c}
        if bad:
            (t, p), code = next(iter(bad.items()))
            if code == ErrorCode.NOT_COORDINATOR:
                await require_local_group(broker, gid, timeout_s=0)
            raise error_for(code, f"resetting group '{gid}' failed on {t}-{p} with Kafka error {code}")
    return json_response({"group_id": gid, "executed": execute, "plan": plan})


@routes.delete(PREFIX + "/{group}")
async def delete_group(request: web.Request) -> web.Response:
    coord = _coordinator(request)
    gid = request.match_info["group"]
    await require_local_group(request.app[BROKER], gid)
    code = (await coord.delete_groups([gid]))[gid]
    if code:
        group = coord.groups.get(gid)
        if code == NonEmptyGroupError.code and group is not None:
            raise NonEmptyGroupError(
                f"group '{gid}' has {len(group.members)} active member(s) (state {group.state.value}); "
                "it can be deleted once it is Empty"
            )
        if code == GroupIdNotFoundError.code:
            raise GroupIdNotFoundError(f"group '{gid}' does not exist")
        raise error_for(code, f"deleting group '{gid}' failed with Kafka error {code}")
    return json_response({"group_id": gid, "deleted": True})
