"""Confluent REST Proxy v2 consumers: `/consumers/{group}/instances/{name}/...`.

Why: HTTP-only applications consume as members of a consumer group, sharing
partitions with Kafka-protocol consumers of the same group. Each instance is
a real group member: it joins through the coordinator with the `consumer`
protocol (a `ConsumerProtocolSubscription`), computes the range assignment
for everyone when it is the leader, syncs, heartbeats in the background,
rejoins on a rebalance, and reads through the replica manager.

Endpoints (Confluent v2): create/delete an instance; subscription
(POST/GET/DELETE); records (GET, long-poll `timeout`, `max_bytes`); offsets
(POST commit, GET committed); assignments (POST manual, GET); positions
(POST seek, /beginning, /end). An instance idle for
`consumer.instance.timeout.ms` (default 300000; settable per instance in the
create body) is closed and leaves its group.

An instance lives on the broker that coordinates its group (the leader of
the group's `__consumer_offsets` partition): creating one elsewhere, or using
one after its group's coordinator moved to another broker, is answered with
421, `error_code` 16 and a message naming the coordinating broker; the client
creates the instance again there. While the coordinator is not available yet
(first use creates `__consumer_offsets`) the answer is 503 with 14 or 15.

This module must never change group state except through the coordinator.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from typing import Any

from aiohttp import web
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from kelp.errors import KelpError, OffsetOutOfRangeError
from kelp.records import iter_records

from ..groups.group import CommittedOffset
from ..groups.group_coordinator import Errors
from ..replica_manager import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, FetchPartition
from .admin_groups import error_for, require_local_group
from .keys import BROKER
from .problems import HttpProblem, json_response, read_json

__all__ = ["routes", "HttpConsumer", "ConsumerRegistry", "range_assign"]

log = logging.getLogger("kelp.broker.http.consumers")

routes = web.RouteTableDef()

PLAIN_V2 = "application/vnd.kafka.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
DEFAULT_INSTANCE_TIMEOUT_MS = 300_000
SESSION_TIMEOUT_MS = 10_000
MAX_RECORDS_TIMEOUT_MS = 60_000
DEFAULT_MAX_BYTES = 1 << 20
# Coordinator errors after which the member waits for the coordinator to change, then joins again.
_COORDINATOR_MOVING = (Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_NOT_AVAILABLE)


def range_assign(members: list[tuple[str, list[str]]], partitions_of: Any) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: per topic, sorted subscribers get contiguous ranges, the first ones one extra."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m, _ in members}
    topics = sorted({t for _, ts in members for t in ts})
    for topic in topics:
        n = partitions_of(topic) or 0
        subs = sorted(m for m, ts in members if topic in ts)
        if not subs or n <= 0:
            continue
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = per + (1 if i < extra else 0)
            if count:
                out[m][topic] = list(range(start, start + count))
            start += count
    return out


class HttpConsumer:
    def __init__(self, registry: "ConsumerRegistry", group: str, name: str, *, fmt: str, reset: str,
                 auto_commit: bool, instance_timeout_ms: int, base_uri: str) -> None:
        self.registry = registry
        self.broker = registry.broker
        self.group = group
        self.name = name
        self.format = fmt
        self.reset = reset
        self.auto_commit = auto_commit
        self.instance_timeout_ms = instance_timeout_ms
        self.base_uri = base_uri
        self.topics: list[str] = []
        self.manual = False
        self.member_id = ""
        self.generation = -1
        self.assignment: list[tuple[str, int]] = []
        self.positions: dict[tuple[str, int], int] = {}
        self.delivered: dict[tuple[str, int], int] = {}  # next offset after what GET records returned
        self.last_used = time.monotonic()
        self.closed = False
        self._task: asyncio.Task | None = None
        self._joined = asyncio.Event()
        self._lock = asyncio.Lock()
        coord = self.broker.groups
        self.session_timeout_ms = min(max(SESSION_TIMEOUT_MS, coord.config.min_session_timeout_ms),
                                      coord.config.max_session_timeout_ms)

    def touch(self) -> None:
        self.last_used = time.monotonic()

    # -- membership -----------------------------------------------------
    def subscribe(self, topics: list[str]) -> None:
        self.topics = sorted(set(topics))
        self.manual = False
        self.assignment = []
        self._joined.clear()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._member_loop(), name=f"rest-consumer-{self.group}-{self.name}")
        else:
            self._rejoin_now = True

    async def unsubscribe(self) -> None:
        await self._stop_membership()
        self.topics = []
        self.assignment = []
        self.positions.clear()

    async def _stop_membership(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        if self.member_id:
            await self._commit_auto()
            self.broker.groups.leave_group(self.group, [(self.member_id, None)])
            self.member_id = ""
            self.generation = -1

    async def _member_loop(self) -> None:
        self._rejoin_now = True
        interval = self.session_timeout_ms / 3000.0
        while not self.closed:
            try:
                if self._rejoin_now:
                    self._rejoin_now = False
                    await self._commit_auto()
                    await self._join_and_sync()
                await asyncio.sleep(interval)
                code = self.broker.groups.heartbeat(self.group, self.generation, self.member_id)
                if code == Errors.NONE:
                    continue
                if code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                    self.member_id = ""
                self._joined.clear()
                self._rejoin_now = True
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("REST consumer %s/%s: group membership failed; retrying", self.group, self.name)
                self._rejoin_now = True
                await asyncio.sleep(0.5)

    async def _join_and_sync(self) -> None:
        coord = self.broker.groups
        meta = ConsumerProtocolSubscription(version=0, topics=self.topics, user_data=b"").encode()
        for _ in range(10):
            r = await coord.join_group(
                self.group, self.member_id, client_id=f"rest-proxy-{self.name}", client_host="/rest-proxy",
                session_timeout_ms=self.session_timeout_ms, rebalance_timeout_ms=self.session_timeout_ms,
                protocol_type="consumer", protocols=[("range", bytes(meta))], require_known_member_id=True,
            )
            if r.error == Errors.MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error == Errors.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if r.error in _COORDINATOR_MOVING:
                # Leadership of the group's partition is changing: wait (bounded) for it, then try again.
                await coord.wait_ownership_change(1.0)
                continue
            if r.error:
                raise KelpError(f"JoinGroup of REST consumer {self.group}/{self.name} failed with Kafka error {r.error}")
            self.member_id, self.generation = r.member_id, r.generation
            assignments = None
            if r.members:
                assignments = self._leader_assignments(r.members)
            s = await coord.sync_group(self.group, r.generation, r.member_id, assignments=assignments)
            if s.error == Errors.REBALANCE_IN_PROGRESS:
                continue
            if s.error:
                if s.error == Errors.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                continue
            self._set_assignment(s.assignment)
            self._joined.set()
            return
        raise KelpError(f"REST consumer {self.group}/{self.name} could not complete a rebalance after 10 attempts")

    def _leader_assignments(self, members: list[tuple[str, str | None, bytes]]) -> dict[str, bytes]:
        subs = []
        for member_id, _, meta in members:
            try:
                topics = list(ConsumerProtocolSubscription.decode(meta).topics or [])
            except Exception:
                topics = []
            subs.append((member_id, topics))
        topics_info = self.broker.topics

        def partitions_of(topic: str) -> int:
            info = topics_info.get(topic)
            return info.partitions if info is not None else 0

        plan = range_assign(subs, partitions_of)
        A = ConsumerProtocolAssignment
        return {
            m: bytes(A(version=0, assigned_partitions=[A.TopicPartition(topic=t, partitions=ps) for t, ps in sorted(tp.items())],
                       user_data=b"").encode())
            for m, tp in plan.items()
        }

    def _set_assignment(self, data: bytes) -> None:
        parts: list[tuple[str, int]] = []
        if data:
            for t, ps in ConsumerProtocolAssignment.decode(data).assigned_partitions:
                parts.extend((t, p) for p in ps)
        self.assignment = sorted(parts)
        self.positions = {tp: off for tp, off in self.positions.items() if tp in parts}
        self.delivered = {tp: off for tp, off in self.delivered.items() if tp in parts}
        log.info("REST consumer %s/%s (member %s) assigned %s", self.group, self.name, self.member_id, self.assignment)

    # -- positions ------------------------------------------------------
    async def ensure_coordinated_here(self) -> None:
        """Raise 421 (naming the coordinator) / 503 when this broker does not coordinate the group now."""
        if self.broker.groups.check_group(self.group) != Errors.NONE:
            await require_local_group(self.broker, self.group, timeout_s=0)

    def _initial_position(self, tp: tuple[str, int]) -> int:
        err, committed = self.broker.groups.fetch_offsets(self.group, [tp])
        if err:
            # Never fall back to auto.offset.reset because the committed offset could not be read.
            raise error_for(err, f"cannot read the committed offset of {tp[0]}-{tp[1]} for group '{self.group}': "
                                 f"coordinator error {err}; retry")
        co = committed.get(tp)
        if co is not None and co.offset >= 0:
            return co.offset
        if self.reset == "none":
            raise HttpProblem(409, f"no committed offset for {tp[0]}-{tp[1]} in group '{self.group}' and "
                                   "auto.offset.reset is none", error_code=40403)
        ts = EARLIEST_TIMESTAMP if self.reset == "earliest" else LATEST_TIMESTAMP
        return self.broker.replicas.list_offset(tp[0], tp[1], ts)[0]

    async def wait_assigned(self, timeout_s: float) -> None:
        if self.manual or not self.topics:
            return
        try:
            await asyncio.wait_for(self._joined.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    async def read(self, *, timeout_ms: int, max_bytes: int) -> list[dict[str, Any]]:
        await self.ensure_coordinated_here()
        await self._commit_auto()
        await self.wait_assigned(timeout_ms / 1000.0)
        parts = list(self.assignment)
        if not parts:
            return []
        for tp in parts:
            if tp not in self.positions:
                self.positions[tp] = self._initial_position(tp)
        reqs = [FetchPartition(t, p, self.positions[(t, p)], max_bytes) for t, p in parts]
        results = await self.broker.replicas.fetch(reqs, max_wait_ms=timeout_ms, min_bytes=1, max_bytes=max_bytes)
        out: list[dict[str, Any]] = []
        for res in results:
            tp = (res.topic, res.partition)
            if res.error is not None:
                if isinstance(res.error, OffsetOutOfRangeError) and self.reset != "none":
                    ts = EARLIEST_TIMESTAMP if self.reset == "earliest" else LATEST_TIMESTAMP
                    self.positions[tp] = self.broker.replicas.list_offset(res.topic, res.partition, ts)[0]
                continue
            if not res.records:
                continue
            start = self.positions.get(tp, 0)
            nxt = start
            for rec in iter_records(bytes(res.records)):
                if rec.offset < start:
                    continue
                out.append({"topic": res.topic, "partition": res.partition, "offset": rec.offset,
                            "key": self._field(rec.key), "value": self._field(rec.value), "timestamp": rec.timestamp})
                nxt = rec.offset + 1
            if nxt != start and tp in self.positions:
                self.positions[tp] = nxt
                self.delivered[tp] = nxt
        return out

    def _field(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if self.format == "binary":
            return base64.b64encode(data).decode()
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise HttpProblem(406, "a record is not JSON; create the consumer with format=binary") from None

    # -- commits --------------------------------------------------------
    async def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        if not offsets:
            return
        coord = self.broker.groups
        codes = await coord.commit_offsets(
            self.group, member_id=self.member_id if not self.manual else "",
            generation=self.generation if (self.member_id and not self.manual) else -1,
            offsets={tp: CommittedOffset(o) for tp, o in offsets.items()},
        )
        bad = {tp: c for tp, c in codes.items() if c}
        if bad:
            (t, p), c = next(iter(bad.items()))
            if c == Errors.NOT_COORDINATOR:
                await self.ensure_coordinated_here()
            raise error_for(c, f"commit of {t}-{p} for group '{self.group}' failed with Kafka error {c}"
                               + (" (a rebalance is in progress; read again and retry)" if c in (22, 25, 27) else ""))

    async def _commit_auto(self) -> None:
        if self.auto_commit and self.delivered:
            pending, self.delivered = dict(self.delivered), {}
            try:
                await self.commit(pending)
            except KelpError as exc:
                log.info("auto-commit of REST consumer %s/%s skipped: %s", self.group, self.name, exc)

    async def close(self) -> None:
        if self.closed:
            return
        await self._stop_membership()
        self.closed = True


class ConsumerRegistry:
    """Every REST consumer instance of one broker, plus the idle-instance reaper."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.instances: dict[tuple[str, str], HttpConsumer] = {}
        self._reaper: asyncio.Task | None = None
        self._counter = 0

    @classmethod
    def of(cls, broker: Any) -> "ConsumerRegistry":
        coord = getattr(broker, "groups", None)
        if coord is None:
            raise HttpProblem(503, "the group coordinator is not running on this broker")
        reg = coord.extensions.get("rest_consumers")
        if reg is None:
            reg = coord.extensions["rest_consumers"] = cls(broker)
            coord.stop_hooks.append(reg.close_all)
        return reg

    def start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap())

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for key, inst in list(self.instances.items()):
                if now - inst.last_used > inst.instance_timeout_ms / 1000.0:
                    log.info("REST consumer %s/%s idle for over %d ms; closing it", key[0], key[1], inst.instance_timeout_ms)
                    self.instances.pop(key, None)
                    await inst.close()

    def get(self, group: str, name: str) -> HttpConsumer:
        inst = self.instances.get((group, name))
        if inst is None:
            raise HttpProblem(404, f"consumer instance '{name}' of group '{group}' does not exist (or expired)",
                              error_code=40403)
        inst.touch()
        return inst

    async def close_all(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for inst in list(self.instances.values()):
            try:
                await inst.close()
            except Exception:
                log.exception("closing REST consumer %s/%s failed", inst.group, inst.name)
        self.instances.clear()


# -- request helpers ------------------------------------------------------------------

def _registry(request: web.Request) -> ConsumerRegistry:
    reg = ConsumerRegistry.of(request.app[BROKER])
    reg.start_reaper()
    return reg


def _instance(request: web.Request) -> HttpConsumer:
    return _registry(request).get(request.match_info["group"], request.match_info["instance"])


def _no_content() -> web.Response:
    return web.Response(status=204)


def _partitions(body: Any, key: str = "partitions") -> list[tuple[str, int]]:
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise HttpProblem(422, f"body needs '{key}': a list of {{\"topic\", \"partition\"}} objects", error_code=42201)
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str) or not isinstance(item.get("partition"), int):
            raise HttpProblem(422, f"{key}[{i}] must be {{\"topic\": string, \"partition\": integer}}", error_code=42201)
        out.append((item["topic"], item["partition"]))
    return out


def _offsets(body: Any) -> dict[tuple[str, int], int]:
    items = body.get("offsets") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise HttpProblem(422, "body needs 'offsets': a list of {\"topic\", \"partition\", \"offset\"} objects",
                          error_code=42201)
    out = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str) \
                or not isinstance(item.get("partition"), int) or not isinstance(item.get("offset"), int):
            raise HttpProblem(422, f"offsets[{i}] must be {{\"topic\", \"partition\", \"offset\"}} with integers",
                              error_code=42201)
        out[(item["topic"], item["partition"])] = item["offset"]
    return out


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise HttpProblem(422, f"'{name}' must be true or false, got {value!r}", error_code=42204)


# -- routes ---------------------------------------------------------------------------

@routes.post("/consumers/{group}")
async def create_instance(request: web.Request) -> web.Response:
    reg = _registry(request)
    group = request.match_info["group"]
    if not group:
        raise HttpProblem(422, "group name must not be empty", error_code=42204)
    raw = await request.read()
    body = json.loads(raw) if raw.strip() else {}
    if not isinstance(body, dict):
        raise HttpProblem(422, "consumer config must be a JSON object", error_code=42204)
    name = body.get("name")
    if name is None:
        reg._counter += 1
        name = f"rest-consumer-{reg._counter}-{int(time.time() * 1000)}"
    if not isinstance(name, str) or not name:
        raise HttpProblem(422, f"'name' must be a non-empty string, got {name!r}", error_code=42204)
    if (group, name) in reg.instances:
        raise HttpProblem(409, f"consumer instance '{name}' already exists in group '{group}'", error_code=40902)
    await require_local_group(request.app[BROKER], group)
    fmt = body.get("format", "binary")
    if fmt not in ("binary", "json"):
        raise HttpProblem(422, f"'format' must be 'binary' or 'json' (Kelp has no schema registry), got {fmt!r}",
                          error_code=42204)
    reset = body.get("auto.offset.reset", "latest")
    if reset not in ("earliest", "latest", "none"):
        raise HttpProblem(422, f"'auto.offset.reset' must be earliest, latest or none, got {reset!r}", error_code=42204)
    auto = body.get("auto.commit.enable", body.get("enable.auto.commit", True))
    auto_commit = _bool(auto, "auto.commit.enable")
    timeout_ms = body.get("consumer.instance.timeout.ms", DEFAULT_INSTANCE_TIMEOUT_MS)
    if not isinstance(timeout_ms, int) or timeout_ms <= 0:
        raise HttpProblem(422, f"'consumer.instance.timeout.ms' must be a positive integer, got {timeout_ms!r}",
                          error_code=42204)
    base_uri = f"{request.url.scheme}://{request.host}/consumers/{group}/instances/{name}"
    reg.instances[(group, name)] = HttpConsumer(reg, group, name, fmt=fmt, reset=reset, auto_commit=auto_commit,
                                                instance_timeout_ms=timeout_ms, base_uri=base_uri)
    return json_response({"instance_id": name, "base_uri": base_uri}, content_type=PLAIN_V2)


@routes.delete("/consumers/{group}/instances/{instance}")
async def delete_instance(request: web.Request) -> web.Response:
    reg = _registry(request)
    inst = reg.get(request.match_info["group"], request.match_info["instance"])
    reg.instances.pop((inst.group, inst.name), None)
    await inst.close()
    return _no_content()


@routes.post("/consumers/{group}/instances/{instance}/subscription")
async def subscribe(request: web.Request) -> web.Response:
    inst = _instance(request)
    body = await read_json(request)
    topics = body.get("topics") if isinstance(body, dict) else None
    if isinstance(body, dict) and "topic_pattern" in body:
        raise HttpProblem(422, "topic_pattern subscriptions are not supported; list the topics", error_code=42204)
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) for t in topics):
        raise HttpProblem(422, "body needs 'topics': a non-empty list of topic names", error_code=42204)
    for t in topics:
        inst.broker.topics.describe(t)
    if inst.manual:
        raise HttpProblem(409, "this instance has a manual assignment; subscription and assignment are exclusive",
                          error_code=40903)
    inst.subscribe(topics)
    return _no_content()


@routes.get("/consumers/{group}/instances/{instance}/subscription")
async def get_subscription(request: web.Request) -> web.Response:
    return json_response({"topics": _instance(request).topics}, content_type=PLAIN_V2)


@routes.delete("/consumers/{group}/instances/{instance}/subscription")
async def unsubscribe(request: web.Request) -> web.Response:
    await _instance(request).unsubscribe()
    return _no_content()


@routes.get("/consumers/{group}/instances/{instance}/records")
async def records(request: web.Request) -> web.Response:
    inst = _instance(request)
    try:
        timeout_ms = int(request.query.get("timeout", "1000"))
        max_bytes = int(request.query.get("max_bytes", str(DEFAULT_MAX_BYTES)))
    except ValueError:
        raise HttpProblem(400, "query parameters 'timeout' and 'max_bytes' must be integers") from None
    if not 0 <= timeout_ms <= MAX_RECORDS_TIMEOUT_MS or max_bytes <= 0:
        raise HttpProblem(400, f"'timeout' must be 0..{MAX_RECORDS_TIMEOUT_MS} ms and 'max_bytes' positive")
    async with inst._lock:
        out = await inst.read(timeout_ms=timeout_ms, max_bytes=max_bytes)
    inst.touch()
    return json_response(out, content_type=JSON_V2 if inst.format == "json" else BINARY_V2)


@routes.post("/consumers/{group}/instances/{instance}/offsets")
async def commit_offsets(request: web.Request) -> web.Response:
    inst = _instance(request)
    raw = await request.read()
    body = json.loads(raw) if raw.strip() else None
    offsets = _offsets(body) if body else dict(inst.positions)
    await inst.commit(offsets)
    return web.Response(status=200)


@routes.get("/consumers/{group}/instances/{instance}/offsets")
async def committed_offsets(request: web.Request) -> web.Response:
    inst = _instance(request)
    raw = await request.read()
    body = json.loads(raw) if raw.strip() else {"partitions": [{"topic": t, "partition": p} for t, p in inst.assignment]}
    parts = _partitions(body)
    err, found = inst.broker.groups.fetch_offsets(inst.group, parts)
    if err:
        await inst.ensure_coordinated_here()
        raise error_for(err, f"cannot read committed offsets of group '{inst.group}': coordinator error {err}; retry")
    return json_response({"offsets": [
        {"topic": t, "partition": p, "offset": found[(t, p)].offset if found.get((t, p)) else -1,
         "metadata": found[(t, p)].metadata if found.get((t, p)) else ""}
        for t, p in parts
    ]}, content_type=PLAIN_V2)


@routes.post("/consumers/{group}/instances/{instance}/assignments")
async def assign(request: web.Request) -> web.Response:
    inst = _instance(request)
    parts = _partitions(await read_json(request))
    for t, p in parts:
        inst.broker.topics.check_partition(t, p)
    if inst.topics:
        raise HttpProblem(409, "this instance is subscribed; subscription and manual assignment are exclusive",
                          error_code=40903)
    inst.manual = True
    inst.assignment = sorted(set(parts))
    inst.positions = {tp: o for tp, o in inst.positions.items() if tp in inst.assignment}
    return _no_content()


@routes.get("/consumers/{group}/instances/{instance}/assignments")
async def get_assignments(request: web.Request) -> web.Response:
    inst = _instance(request)
    return json_response({"partitions": [{"topic": t, "partition": p} for t, p in inst.assignment]},
                         content_type=PLAIN_V2)


@routes.post("/consumers/{group}/instances/{instance}/positions")
async def seek(request: web.Request) -> web.Response:
    inst = _instance(request)
    for tp, off in _offsets(await read_json(request)).items():
        if tp not in inst.assignment:
            raise HttpProblem(409, f"{tp[0]}-{tp[1]} is not assigned to this consumer instance", error_code=40903)
        inst.positions[tp] = off
    return _no_content()


async def _seek_edge(request: web.Request, ts: int) -> web.Response:
    inst = _instance(request)
    for tp in _partitions(await read_json(request)):
        if tp not in inst.assignment:
            raise HttpProblem(409, f"{tp[0]}-{tp[1]} is not assigned to this consumer instance", error_code=40903)
        inst.positions[tp] = inst.broker.replicas.list_offset(tp[0], tp[1], ts)[0]
    return _no_content()


@routes.post("/consumers/{group}/instances/{instance}/positions/beginning")
async def seek_beginning(request: web.Request) -> web.Response:
    return await _seek_edge(request, EARLIEST_TIMESTAMP)


@routes.post("/consumers/{group}/instances/{instance}/positions/end")
async def seek_end(request: web.Request) -> web.Response:
    return await _seek_edge(request, LATEST_TIMESTAMP)
