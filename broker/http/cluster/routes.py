"""Cluster HTTP: controller RPCs between brokers, metadata pushes, and the admin API for replication.

Why: brokers talk to the controller over HTTP (design §4): the controller
pushes metadata to `/cluster/v1/metadata`, brokers send it topic changes,
dynamic broker config changes, ISR changes (AlterPartition), producer-id block requests and controlled
shutdowns at `/cluster/v1/controller/{op}`. Users and the operator see and
steer replication under `/admin/v1`: the cluster (brokers, controller),
partition reassignment with its progress, preferred-leader election,
decommissioned brokers (what a scale-down removes: marked first, then drained,
shrunk once the controller says they hold nothing), and this broker's
controlled shutdown (the pod's preStop hook).

This module only translates JSON to calls on `broker.cluster` (the
ClusterMember) and its errors to JSON; it decides nothing. The metadata
deliveries arrive while the broker starts (a starting broker is registered
through them), so the member is read off the broker itself; every other
route runs behind the starting gate and reads the broker's parts.
"""

from __future__ import annotations

from typing import TypeGuard, cast

from aiohttp import web

from kelp.config.entries import broker_entries, hide_secrets
from kelp.errors import NotControllerError
from kelp.json_types import JsonData, JsonValue

from ...cluster.member import ClusterMember
from ...metadata.records import MetadataPush
from ..json_body import read_body, read_json
from ..keys import BROKER
from ..problems import HttpProblem, json_response
from ..serving import serving

__all__ = ["routes"]

routes = web.RouteTableDef()

# Controller operations a broker may ask for, with the argument names each takes.
CONTROLLER_OPS = {
    "create_topic": {"name", "partitions", "replication_factor", "configs", "validate_only", "assignments"},
    "ensure_internal_topic": {"name", "partitions", "configs", "replication_factor"},
    "delete_topic": {"name", "topic_id"},
    "create_partitions": {"name", "total", "validate_only", "assignments"},
    "alter_configs": {"name", "configs", "replace_all", "delete", "validate_only"},
    "alter_partition": {"topic", "partition", "leader", "leader_epoch", "partition_epoch", "isr"},
    "alter_partitions": {"leader", "partitions"},
    "controlled_shutdown": {"broker_id"},
    "allocate_producer_ids": {"broker_id"},
    "reassign": {"topic", "partition", "replicas"},
    "elect_preferred_leaders": {"topic", "partitions"},
    "alter_broker_configs": {"broker", "configs", "replace_all", "validate_only"},
    "alter_scram_credentials": {"upsertions", "deletions"},
    "create_acls": {"acls"},
    "delete_acls": {"filters"},
    "alter_client_quotas": {"entries", "validate_only"},
    "alter_group_configs": {"group", "configs", "replace_all", "validate_only"},
    "decommission_broker": {"broker_id", "decommissioned"},
    "broker_holdings": {"broker_id"},
}


def _member(request: web.Request) -> ClusterMember:
    member = request.app[BROKER].cluster
    if member is None or not member.state.started:
        raise HttpProblem(503, "this broker has not joined its cluster yet")
    return member


@routes.post("/cluster/v1/metadata")
async def metadata_push(request: web.Request) -> web.Response:
    body = await read_json(request)
    if not isinstance(body, dict) or "controller_epoch" not in body:
        raise HttpProblem(400, "metadata push: a JSON object with controller_epoch is required")
    # The delivery only claims MetadataPush's shape: `apply` converts every field as it reads it.
    applied = await _member(request).metadata.receive(cast(MetadataPush, body))
    return json_response({"applied_offset": applied})


@routes.post("/cluster/v1/controller/{op}")
async def controller_op(request: web.Request) -> web.Response:
    op = request.match_info["op"]
    allowed = CONTROLLER_OPS.get(op)
    if allowed is None:
        raise HttpProblem(404, f"unknown controller operation '{op}'; known: {', '.join(sorted(CONTROLLER_OPS))}")
    body = await read_json(request)
    if not isinstance(body, dict):
        raise HttpProblem(400, f"controller operation '{op}': the body must be a JSON object")
    unknown = set(body) - allowed
    if unknown:
        raise HttpProblem(400, f"controller operation '{op}': unknown argument(s) {sorted(unknown)}")
    if op == "alter_partitions":
        _check_alter_partitions(body)
    member = _member(request)
    controller = member.state.controller
    if controller is None or not controller.state.active:
        raise NotControllerError(
            f"broker {member.state.broker_id} is not the controller (the controller is broker "
            f"{member.state.controller_id})"
        )
    return json_response(cast(JsonData, await controller.operation(op)(**body)))  # a TypedDict of JSON values


_ALTER_PARTITION_ITEM = {"topic", "partition", "leader_epoch", "partition_epoch", "isr"}


def _check_alter_partitions(body: dict[str, JsonValue]) -> None:
    """alter_partitions' items are judged one by one by the controller: each must have the shape it reads."""
    items = body.get("partitions")
    if not _int32(body.get("leader")) or not isinstance(items, list):
        raise HttpProblem(400, "controller operation 'alter_partitions': needs 'leader' (integer) and 'partitions' "
                               "(a list)")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or set(item) != _ALTER_PARTITION_ITEM or not isinstance(item["topic"], str) \
                or not all(_int32(item[k]) for k in ("partition", "leader_epoch", "partition_epoch")) \
                or not isinstance(item["isr"], list) or not all(_int32(r) for r in item["isr"]):
            raise HttpProblem(400, f"controller operation 'alter_partitions': partitions[{i}] must be an object of "
                                   f"{sorted(_ALTER_PARTITION_ITEM)}: 'topic' a string, 'isr' a list of broker ids, "
                                   "the rest integers")


# -- admin: cluster, reassignment, leaders, shutdown ------------------------------------
@routes.get("/admin/v1/cluster")
async def cluster_view(request: web.Request) -> web.Response:
    return json_response(cast(JsonData, _member(request).describe()))  # a TypedDict of JSON values (mypy#4976)


def _int32(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def _partition_target(body: JsonValue, *, what: str) -> list[tuple[str, int, list[int] | None]]:
    items = body.get("partitions") if isinstance(body, dict) else None
    if not isinstance(items, list) or not items:
        raise HttpProblem(400, f"{what}: body must be {{\"partitions\": [{{\"topic\", \"partition\", \"replicas\"}}]}}")
    out: list[tuple[str, int, list[int] | None]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise HttpProblem(400, f"{what}: partitions[{i}] must be an object")
        topic, partition, replicas = item.get("topic"), item.get("partition"), item.get("replicas")
        if not isinstance(topic, str) or not _int32(partition):
            raise HttpProblem(400,
                              f"{what}: partitions[{i}] needs 'topic' (string) and 'partition' (integer 0..2^31-1)")
        if replicas is None:
            out.append((topic, partition, None))
            continue
        if not isinstance(replicas, list) or not replicas or not all(_int32(r) for r in replicas):
            raise HttpProblem(400, f"{what}: partitions[{i}].replicas must be a non-empty list of broker ids, "
                                   "or null to cancel")
        out.append((topic, partition, [r for r in replicas if _int32(r)]))
    return out


@routes.post("/admin/v1/partitions/reassign")
async def reassign(request: web.Request) -> web.Response:
    """Start (or with `"replicas": null` cancel) moving partitions; progress at GET
    /admin/v1/partitions/reassignments."""
    member = _member(request)
    results: list[JsonData] = []
    for topic, partition, replicas in _partition_target(await read_json(request), what="reassign"):
        state = await member.routing.call("reassign", topic=topic, partition=partition, replicas=replicas)
        results.append({"topic": topic, "partition": partition, **state})
    return json_response({"partitions": results})


@routes.get("/admin/v1/partitions/reassignments")
async def reassignments(request: web.Request) -> web.Response:
    """Partitions being moved, with each replica's log end offset against the leader's."""
    broker = serving(request)
    member = _member(request)
    out: list[JsonData] = []
    for t in broker.topics.list_topics():
        for p, s in enumerate(t.partition_states):
            if not s.reassigning:
                continue
            entry: dict[str, JsonData] = {
                "topic": t.name, "partition": p, "replicas": list(s.replicas), "adding": list(s.adding),
                "removing": list(s.removing), "isr": list(s.isr), "leader": s.leader}
            progress = await member.routing.replica_progress(t.name, p)
            if progress is not None:
                entry["log_end_offsets"] = {str(k): v for k, v in progress.items()}
            out.append(entry)
    return json_response({"reassignments": out})


@routes.post("/admin/v1/partitions/elect-leaders")
async def elect_leaders(request: web.Request) -> web.Response:
    """Preferred-leader election: `{"topic"?: str, "partitions"?: [int]}` (empty body = every partition)."""
    body = await read_json(request) if request.can_read_body else {}
    if not isinstance(body, dict):
        raise HttpProblem(400, "elect-leaders: body must be a JSON object")
    topic, partitions = body.get("topic"), body.get("partitions")
    if topic is not None and not isinstance(topic, str):
        raise HttpProblem(400, f"elect-leaders: 'topic' must be a topic name, got {topic!r}")
    if partitions is not None and (not isinstance(partitions, list) or not all(_int32(p) for p in partitions)):
        raise HttpProblem(400, f"elect-leaders: 'partitions' must be a list of partition numbers, got {partitions!r}")
    if partitions is not None and topic is None:
        raise HttpProblem(400, "elect-leaders: 'partitions' needs 'topic'")
    result = await _member(request).routing.call("elect_preferred_leaders", topic=topic, partitions=partitions)
    return json_response(result)


def _decommission_target(request: web.Request) -> int:
    raw = request.match_info["broker_id"]
    if not raw.isdigit() or not _int32(int(raw)):
        raise HttpProblem(400, f"broker id must be an integer 0..2^31-1, got {raw!r}")
    return int(raw)


@routes.get("/admin/v1/brokers/{broker_id}/decommission")
async def broker_holdings(request: web.Request) -> web.Response:
    """Whether the broker is decommissioned, and what it holds, as the controller has it (not this broker's
    view, which may lag): `replicas`, `leaders`, the first `partitions`."""
    broker_id = _decommission_target(request)
    return json_response(await _member(request).routing.call("broker_holdings", broker_id=broker_id))


@routes.post("/admin/v1/brokers/{broker_id}/decommission")
async def decommission(request: web.Request) -> web.Response:
    """Decommission a broker: no new replicas or leaders go to it from now on (then move its replicas away)."""
    broker_id = _decommission_target(request)
    return json_response(await _member(request).routing.call("decommission_broker", broker_id=broker_id,
                                                     decommissioned=True))


@routes.delete("/admin/v1/brokers/{broker_id}/decommission")
async def recommission(request: web.Request) -> web.Response:
    """Recommission a broker: it takes new replicas and leaderships again."""
    broker_id = _decommission_target(request)
    return json_response(await _member(request).routing.call("decommission_broker", broker_id=broker_id,
                                                     decommissioned=False))


@routes.post("/admin/v1/controlled-shutdown")
async def controlled_shutdown(request: web.Request) -> web.Response:
    """Move leadership off this broker now (the pod's preStop hook calls this before SIGTERM)."""
    member = _member(request)
    result = await member.routing.call("controlled_shutdown", broker_id=member.state.broker_id)
    return json_response(result)


@routes.get("/cluster/v1/partitions/{topic}/{partition}/replicas")
async def replica_progress(request: web.Request) -> web.Response:
    """The leader's view of each replica's log end offset (for reassignment progress)."""
    broker = serving(request)
    try:
        partition = int(request.match_info["partition"])
    except ValueError:
        raise HttpProblem(400, "partition must be an integer") from None
    part = broker.replicas.get_partition(request.match_info["topic"], partition)
    if part is None or not part.is_leader:
        raise HttpProblem(421, f"broker {broker.config.broker_id} does not lead "
                               f"{request.match_info['topic']}-{partition}")
    return json_response({str(k): v for k, v in part.describe_replicas().items()})


@routes.get("/cluster/v1/configs")
async def own_configs(request: web.Request) -> web.Response:
    """This broker's configs described (`kelp.config.entries`, secrets without a value): a broker's static configs are
    only known to itself, and REST v3 on another broker shows them (`rest_v3.configs`)."""
    entries = hide_secrets(broker_entries(serving(request).config))
    return json_response({"configs": [[n, v, ro, src, [[sn, sv, ss] for sn, sv, ss in syn]]
                                      for n, v, ro, src, syn in entries]})


@routes.post("/cluster/v1/partitions/info")
async def partitions_info(request: web.Request) -> web.Response:
    """Leader-side offsets of the given partitions (entries this broker does not lead carry nulls)."""
    broker = serving(request)
    body = await read_json(request)
    items = body.get("partitions") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise HttpProblem(400, 'partitions info: body must be {"partitions": [[topic, partition], ...]}')
    out: list[JsonData] = []
    for item in items:
        topic, p = item if isinstance(item, list) and len(item) == 2 else (None, None)
        if not isinstance(topic, str) or not isinstance(p, int):
            raise HttpProblem(400, f"partitions info: each entry must be [topic, partition], got {item!r}")
        part = broker.replicas.get_partition(topic, p)
        entry: dict[str, JsonData] = {"topic": topic, "partition": p, "log_start_offset": None, "log_end_offset": None,
                                 "high_watermark": None, "size_bytes": None}
        if part is not None and part.is_leader:
            pi = broker.replicas.partition_info(topic, p)
            entry.update(log_start_offset=pi.log_start_offset, log_end_offset=pi.log_end_offset,
                         high_watermark=pi.high_watermark, size_bytes=pi.size_bytes)
        out.append(entry)
    return json_response({"partitions": out})


@routes.post("/cluster/v1/partitions/{topic}/{partition}/append")
async def append_here(request: web.Request) -> web.Response:
    """A batch another broker's REST proxy built for a partition this broker leads."""
    broker = serving(request)
    try:
        partition = int(request.match_info["partition"])
        acks = int(request.query.get("acks", "1"))
        timeout_ms = int(request.query.get("timeout_ms", "30000"))
    except ValueError:
        raise HttpProblem(400, "partition, acks and timeout_ms must be integers") from None
    data = bytearray(await read_body(request, what="records"))
    result = await broker.replicas.append(request.match_info["topic"], partition, data, acks=acks,
                                          timeout_ms=timeout_ms)
    return json_response({"base_offset": result.base_offset, "last_offset": result.last_offset,
                          "log_append_time_ms": result.log_append_time_ms, "log_start_offset": result.log_start_offset,
                          "record_count": result.record_count})


@routes.post("/cluster/v1/partitions/{topic}/{partition}/delete-records")
async def delete_records_here(request: web.Request) -> web.Response:
    """DeleteRecords another broker's admin API forwarded to this partition's leader."""
    broker = serving(request)
    try:
        partition = int(request.match_info["partition"])
        offset = int(request.query["offset"])
    except (KeyError, ValueError):
        raise HttpProblem(400, "partition and the offset query parameter must be integers") from None
    low = await broker.replicas.delete_records(request.match_info["topic"], partition, offset)
    return json_response({"low_watermark": low})
