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

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import cast

from aiohttp import web
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from kelp.errors import (
    ErrorCode,
    GroupIdNotFoundError,
    KelpError,
    NonEmptyGroupError,
    UnknownTopicOrPartitionError,
)
from kelp.json_types import JsonData, JsonObject

from ...groups.consumer.model import ConsumerGroup
from ...groups.coordinator_lookup import CoordinatorLocation, locator_of
from ...groups.group import CommittedOffset
from ...groups.group_coordinator import GroupCoordinator
from ...parts import BrokerParts
from ...replica.manager import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from ..access.route_access import DESCRIBE, GROUP, READ, TOPIC, access_of, describable, require
from ..json_body import read_json
from ..problems import HttpProblem, json_response
from ..serving import serving

__all__ = ["routes", "describe_group", "plan_reset", "ResetStep", "require_local_group", "coordinator_problem",
           "error_for"]

routes = web.RouteTableDef()
PREFIX = "/admin/v1/groups"
# How long an HTTP request waits for this broker to become able to coordinate a group (the first use
# creates __consumer_offsets; a fresh leader loads its partition) before answering 503.
LOCAL_WAIT_S = 5.0


def _coordinator(request: web.Request) -> GroupCoordinator:
    return serving(request).groups


def coordinator_problem(located: CoordinatorLocation) -> HttpProblem:
    """The HTTP answer for a group this broker cannot act on now."""
    message = located.message or f"coordinator error {located.error}"
    if located.error == ErrorCode.NOT_COORDINATOR:
        return HttpProblem(421, message, error_code=ErrorCode.NOT_COORDINATOR)
    if located.error == ErrorCode.INVALID_GROUP_ID:
        return HttpProblem(400, message, error_code=ErrorCode.INVALID_GROUP_ID)
    return HttpProblem(503, message, error_code=located.error)


async def require_local_group(broker: BrokerParts, group_id: str, *, timeout_s: float = LOCAL_WAIT_S) -> None:
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


def _decode_assignment(protocol_type: str, data: bytes) -> list[tuple[str, list[int]]]:
    """(topic, partitions) of a `consumer` protocol assignment; nothing for other protocols or bad bytes."""
    if protocol_type != "consumer" or not data:
        return []
    try:
        a = ConsumerProtocolAssignment.decode(data)
        return [(str(t), sorted(int(p) for p in ps)) for t, ps in a.assigned_partitions]
    except Exception:
        return []


def _consumer_protocol_group(coord: GroupCoordinator, cg: ConsumerGroup) -> dict[str, JsonData]:
    """A KIP-848 group's members as `describe_group` shows them: their assignments (topic names), epochs and
    the partitions the broker's target gives them (what they reconcile to)."""
    def parts(a: dict[str, frozenset[int]]) -> list[JsonData]:
        name = coord.consumer.topics.name_of
        return [{"topic": name(t) or t, "partitions": sorted(ps)} for t, ps in sorted(a.items())]

    return {
        "group_type": "consumer", "state": cg.state.value, "protocol_type": "consumer", "protocol": cg.assignor,
        "generation": cg.group_epoch, "leader": None, "assignment_epoch": cg.assignment_epoch,
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "member_epoch": m.member_epoch,
            "subscribed_topics": list(m.subscribed_topic_names), "subscribed_topic_regex": m.subscribed_topic_regex,
            "assignment": parts(m.assigned), "target_assignment": parts(cg.target.get(m.member_id, {})),
        } for m in sorted(cg.members.values(), key=lambda m: m.member_id)],
    }


def describe_group(broker: BrokerParts, group_id: str, *, topics_shown: Callable[[set[str]], set[str]] | None = None
                   ) -> dict[str, JsonData]:
    """The group, its members and its committed offsets with their lag; `topics_shown` narrows the offsets to the
    topics it returns (those the caller may DESCRIBE, as Kafka's OffsetFetch answers). A consumer-protocol
    (KIP-848) group shows its members' assignments, epochs and targets; its offsets are kept as a classic
    group's."""
    coord = broker.groups
    d = coord.describe_group(group_id)
    group = coord.groups.get(group_id)
    if d.error:
        raise error_for(d.error, f"cannot describe group '{group_id}': coordinator error {d.error}")
    cg = coord.consumer.groups.get(group_id)
    if group is None and cg is None:
        raise GroupIdNotFoundError(f"group '{group_id}' does not exist (no members and no committed offsets)")
    owner: dict[tuple[str, int], str] = {}
    members: list[JsonData] = []
    view: dict[str, JsonData] = {"group_type": "classic", "state": d.state, "protocol_type": d.protocol_type,
                                  "protocol": d.protocol, "generation": d.generation, "leader": d.leader}
    if cg is not None:
        view = _consumer_protocol_group(coord, cg)
        for cm in cg.members.values():
            owner.update({(coord.consumer.topics.name_of(t) or t, p): cm.member_id for t, ps in cm.assigned.items()
                          for p in ps})
        members = cast(list[JsonData], view.pop("members"))
    for m in d.members if cg is None else []:
        assignment = _decode_assignment(d.protocol_type, m.assignment)
        for topic, partitions in assignment:
            for p in partitions:
                owner[(topic, p)] = m.member_id
        members.append({
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": m.client_host,
            "assignment": [{"topic": topic, "partitions": partitions} for topic, partitions in assignment],
        })
    committed = group.offsets if group is not None else {}
    keys = set(committed) | set(owner)
    if topics_shown is not None:
        shown = topics_shown({t for t, _ in keys})
        keys = {(t, p) for t, p in keys if t in shown}
    offsets: list[JsonData] = []
    total = 0
    for topic, p in sorted(keys):
        co = committed.get((topic, p))
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
        "group_id": group_id, **view, "coordinator_partition": coord.partition_for(group_id),
        "members": members, "offsets": offsets, "total_lag": total,
    }


@dataclass(frozen=True)
class ResetStep:
    """Where a reset moves one partition's committed offset, and the log bounds it was clamped to."""

    topic: str
    partition: int
    current_offset: int | None  # None: nothing committed
    new_offset: int
    log_start_offset: int
    log_end_offset: int

    def to_json(self) -> dict[str, JsonData]:
        return {"topic": self.topic, "partition": self.partition, "current_offset": self.current_offset,
                "new_offset": self.new_offset, "log_start_offset": self.log_start_offset,
                "log_end_offset": self.log_end_offset}


def plan_reset(broker: BrokerParts, group_id: str, body: JsonObject) -> list[ResetStep]:
    """Target offsets for `body` = {topic, partitions?, to, value?}; clamped to the log like Kafka."""
    topic = body.get("topic")
    if not isinstance(topic, str) or not topic:
        raise HttpProblem(400, "reset-offsets needs 'topic' (a topic name)")
    info = broker.topics.get(topic)
    if info is None:
        raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
    given = body.get("partitions")
    if given is None:
        given = list(range(info.partitions))
    if not isinstance(given, list) or not all(isinstance(p, int) for p in given):
        raise HttpProblem(400, "'partitions' must be a list of partition numbers")
    partitions = [p for p in given if isinstance(p, int)]
    for p in partitions:
        broker.topics.check_partition(topic, p)
    to = body.get("to")
    value = body.get("value")
    if to not in ("earliest", "latest", "datetime", "offset", "shift-by"):
        raise HttpProblem(400, f"'to' must be earliest, latest, datetime, offset or shift-by, got {to!r}")
    if to in ("offset", "shift-by") and not isinstance(value, int):
        raise HttpProblem(400, f"reset to {to} needs an integer 'value', got {value!r}")
    shift = value if isinstance(value, int) else 0
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
    plan: list[ResetStep] = []
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
            target = shift
        elif to == "shift-by":
            target = (cur if cur is not None else end) + shift
        else:
            assert ts_ms is not None  # to == "datetime" set it
            found, _ = broker.replicas.list_offset(topic, p, ts_ms)
            target = end if found < 0 else found
        target = min(max(target, start), end)
        plan.append(ResetStep(topic, p, cur, target, start, end))
    return plan


@routes.get(PREFIX)
async def list_groups(request: web.Request) -> web.Response:
    """This broker's groups (those of the `__consumer_offsets` partitions it coordinates)."""
    coord = _coordinator(request)
    broker = serving(request)
    out: list[JsonData] = []
    acc = access_of(request)  # Kafka's ListGroups: every group to DESCRIBE on the cluster, else the describable
    listed = coord.list_groups()
    if not acc.allows_cluster(DESCRIBE):
        allowed = acc.allowed(DESCRIBE, GROUP, (gid for gid, _, _ in listed))
        listed = [g for g in listed if g[0] in allowed]
    for gid, ptype, state in listed:
        g, cg = coord.groups.get(gid), coord.consumer.groups.get(gid)
        if cg is not None:  # a consumer-protocol (KIP-848) group: its members, its group epoch
            out.append({"group_id": gid, "protocol_type": ptype, "state": state, "group_type": "consumer",
                        "members": len(cg.members), "generation": cg.group_epoch})
            continue
        out.append({"group_id": gid, "protocol_type": ptype, "state": state, "group_type": "classic",
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
    broker = serving(request)
    gid = request.match_info["group"]
    await require_local_group(broker, gid)
    return json_response(describe_group(broker, gid, topics_shown=lambda names: describable(request, TOPIC, names)))


@routes.post(PREFIX + "/{group}/reset-offsets")
async def reset_offsets(request: web.Request) -> web.Response:
    coord = _coordinator(request)
    broker = serving(request)
    gid = request.match_info["group"]
    body = await read_json(request)
    if not isinstance(body, dict):
        raise HttpProblem(400, "reset-offsets body must be a JSON object")
    if isinstance(body.get("topic"), str):  # a reset commits offsets: READ on the topic, as OffsetCommit needs
        require(request, READ, TOPIC, str(body["topic"]))
    await require_local_group(broker, gid)
    live = _live_members(coord, gid)
    if live:
        raise NonEmptyGroupError(f"group '{gid}' has {live[0]} active member(s) (state {live[1]}); "
                                 "stop its consumers before resetting offsets")
    plan = plan_reset(broker, gid, body)
    execute = bool(body.get("execute", False))
    if execute:
        codes = await coord.commit_offsets(
            gid, offsets={(step.topic, step.partition): CommittedOffset(step.new_offset) for step in plan}
        )
        bad = {tp: c for tp, c in codes.items() if c}
        if bad:
            (t, p), code = next(iter(bad.items()))
            if code == ErrorCode.NOT_COORDINATOR:
                await require_local_group(broker, gid, timeout_s=0)
            raise error_for(code, f"resetting group '{gid}' failed on {t}-{p} with Kafka error {code}")
    return json_response({"group_id": gid, "executed": execute, "plan": [step.to_json() for step in plan]})


def _live_members(coord: GroupCoordinator, gid: str) -> tuple[int, str] | None:
    """(member count, state) of a group with members, classic or consumer-protocol; None when it has none."""
    cg = coord.consumer.groups.get(gid)
    if cg is not None and cg.members:
        return len(cg.members), cg.state.value
    group = coord.groups.get(gid)
    return (len(group.members), group.state.value) if group is not None and group.members else None


@routes.delete(PREFIX + "/{group}")
async def delete_group(request: web.Request) -> web.Response:
    coord = _coordinator(request)
    gid = request.match_info["group"]
    await require_local_group(serving(request), gid)
    code = (await coord.delete_groups([gid]))[gid]
    if code:
        live = _live_members(coord, gid)
        if code == NonEmptyGroupError.code and live:
            raise NonEmptyGroupError(f"group '{gid}' has {live[0]} active member(s) (state {live[1]}); "
                                     "it can be deleted once it is Empty")
        if code == GroupIdNotFoundError.code:
            raise GroupIdNotFoundError(f"group '{gid}' does not exist")
        raise error_for(code, f"deleting group '{gid}' failed with Kafka error {code}")
    return json_response({"group_id": gid, "deleted": True})
