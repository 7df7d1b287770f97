"""The control plane's share-group state routes: a share-partition's leader reads and writes its state where
its `__share_group_state` partition is led.

Why: a share-partition (KIP-932) is served by its topic-partition's leader, but its durable state lives in the
`__share_group_state` partition its key hashes to, usually led by another broker. That leader does the read
(the newest snapshot) and the write (append with acks=all) on its own log — Kafka's ReadShareGroupState and
WriteShareGroupState — and answers here: `POST /cluster/v1/share-state/read` and `/write` with the key
(`group`, `topic_id`, `partition`) and, to write, `start` and `batches` ([first, last, state, count]).
`/reset` (key and `start`) is AlterShareGroupOffsets forwarded by the group's coordinator to the partition's
leader, which starts the share-partition over there; `/delete` (the key) is DeleteGroups or
DeleteShareGroupOffsets forwarded the same way, and `/tombstone` (the key) its DeleteShareGroupState where the
state partition is led; `/keys` (`group`, `partitions`) lists the group's share-partitions with state in those
state partitions, led here (`[[topic_id, partition], ...]`). Only
brokers reach `/cluster/v1` (the control plane's trust). Errors are Kafka's (NOT_LEADER_OR_FOLLOWER when this
broker does not lead that state partition, the caller then answers its client NOT_LEADER_OR_FOLLOWER).

This module only translates JSON to `ShareStateLog` calls; it decides nothing.
"""

from __future__ import annotations

from aiohttp import web

from ...groups.share import reset_here, share_groups_of
from ...groups.share.deletion import delete_here
from ...groups.share.state_log import StateKey, batches_of, key_of
from ..json_body import read_json
from ..problems import HttpProblem, json_response
from ..serving import serving

__all__ = ["routes"]

routes = web.RouteTableDef()


def _key_and_start(body: object) -> tuple[StateKey, int]:
    """The share-partition's key and the `start` offset of a write or reset body; ValueError naming what is
    missing."""
    key = key_of(body)
    start = body.get("start") if isinstance(body, dict) else None
    if not isinstance(start, int) or isinstance(start, bool):
        raise ValueError("start (integer) is required")
    return key, start


async def _key(request: web.Request) -> StateKey:
    """The share-partition a body names (400 when it names none)."""
    try:
        return key_of(await read_json(request))
    except ValueError as exc:
        raise HttpProblem(400, str(exc)) from None


@routes.post("/cluster/v1/share-state/read")
async def read_state(request: web.Request) -> web.Response:
    parts = serving(request)
    key = await _key(request)
    snap = await share_groups_of(parts).partitions.state.read_local(key)
    return json_response({"snapshot": None if snap is None else {
        "start": snap[0], "batches": [[b.first, b.last, b.state, b.delivery_count] for b in snap[1]]}})


@routes.post("/cluster/v1/share-state/write")
async def write_state(request: web.Request) -> web.Response:
    parts = serving(request)
    body = await read_json(request)
    try:
        key, start = _key_and_start(body)
        batches = batches_of(body.get("batches") if isinstance(body, dict) else None)
    except ValueError as exc:
        raise HttpProblem(400, str(exc)) from None
    await share_groups_of(parts).partitions.state.write_local(key, start, batches)
    return json_response({"written": True})


@routes.post("/cluster/v1/share-state/reset")
async def reset_state(request: web.Request) -> web.Response:
    """AlterShareGroupOffsets of a share-partition this broker leads (the group's coordinator forwards it)."""
    parts = serving(request)
    body = await read_json(request)
    try:
        key, start = _key_and_start(body)
    except ValueError as exc:
        raise HttpProblem(400, str(exc)) from None
    await reset_here(parts, key, start)
    return json_response({"reset": True})


@routes.post("/cluster/v1/share-state/delete")
async def delete_partition_state(request: web.Request) -> web.Response:
    """DeleteGroups / DeleteShareGroupOffsets of a share-partition this broker leads (the coordinator forwards it)."""
    parts = serving(request)
    key = await _key(request)
    await delete_here(parts, key)
    return json_response({"deleted": True})


@routes.post("/cluster/v1/share-state/tombstone")
async def tombstone_state(request: web.Request) -> web.Response:
    """DeleteShareGroupState of a share-partition whose state partition this broker leads."""
    parts = serving(request)
    key = await _key(request)
    await share_groups_of(parts).partitions.state.delete_local(key)
    return json_response({"deleted": True})


@routes.post("/cluster/v1/share-state/keys")
async def group_keys(request: web.Request) -> web.Response:
    parts = serving(request)
    body = await read_json(request)
    group = body.get("group") if isinstance(body, dict) else None
    ps = body.get("partitions") if isinstance(body, dict) else None
    if not isinstance(group, str) or not isinstance(ps, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in ps):
        raise HttpProblem(400, "group (string) and partitions (integers) are required")
    keys = await share_groups_of(parts).partitions.state.group_keys_local(group, [int(str(p)) for p in ps])
    return json_response({"keys": [[tid, p] for _g, tid, p in sorted(keys)]})
