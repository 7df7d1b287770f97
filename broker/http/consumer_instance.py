"""One REST Proxy v2 consumer instance (`HttpConsumer`) and a broker's registry of them.

Why: `rest_consumers` translates HTTP to calls; the state of an instance —
its group membership (join, sync, heartbeat, rejoin in a background task),
its assignment and positions, auto-commit, and what it may deliver — lives
here, so the route module stays a thin translation. Reads decode every
record of a fetch before any position moves: a position advances only past
records the response delivers, and a record a `format=json` instance cannot
deliver is reported (406, 40601, naming topic, partition and offset) until
the position is moved past it, as a Kafka consumer does with a record its
deserializer refuses. The registry caps the instances of a broker
(`http.consumer.max.instances`) and closes idle ones
(`consumer.instance.timeout.ms`, on its injectable monotonic clock).

This module must never change group state except through the coordinator.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Callable

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from kelp.clock import Monotonic, monotonic, wall_clock_ms
from kelp.errors import ErrorCode, KelpError, OffsetOutOfRangeError, RestErrorCode
from kelp.json_types import JsonData, JsonValue
from kelp.records import iter_records

from ..groups.group import CommittedOffset
from ..parts import BrokerParts
from ..replica_manager import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, FetchPartition
from ..security.principal import ANONYMOUS, KafkaPrincipal
from .admin_groups import error_for, require_local_group
from .json_body import json_value
from .problems import HttpProblem
from .topic_views import record_bytes

__all__ = ["HttpConsumer", "ConsumerRegistry", "range_assign"]

log = logging.getLogger("kelp.broker.http.consumers")

SESSION_TIMEOUT_MS = 10_000
# Coordinator errors after which the member waits for the coordinator to change, then joins again.
_COORDINATOR_MOVING = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE)
# Commit errors that mean a rebalance moved the group on: the client reads again and retries.
_REBALANCED = (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS)

class _Undeliverable(Exception):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


def range_assign(members: list[tuple[str, list[str]]],
                 partitions_of: Callable[[str], int | None]) -> dict[str, dict[str, list[int]]]:
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
                 auto_commit: bool, instance_timeout_ms: int, base_uri: str,
                 owner: KafkaPrincipal = ANONYMOUS) -> None:
        self.registry = registry
        self.owner = owner  # the principal that created it: the only one that may use it (rest_consumers.py)
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
        # (partition, offset, field, reason) of a record format=json cannot deliver; see _raise_if_undeliverable
        self.undeliverable: tuple[tuple[str, int], int, str, str] | None = None
        self.last_used = registry.monotonic()
        self.closed = False
        self._task: asyncio.Task[None] | None = None
        self._joined = asyncio.Event()
        self._lock = asyncio.Lock()
        coord = self.broker.groups
        self.session_timeout_ms = min(max(SESSION_TIMEOUT_MS, coord.config.min_session_timeout_ms),
                                      coord.config.max_session_timeout_ms)

    def touch(self) -> None:
        self.last_used = self.registry.monotonic()

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
                if code == ErrorCode.NONE:
                    continue
                if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
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
            if r.error == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if r.error in _COORDINATOR_MOVING:
                # Leadership of the group's partition is changing: wait (bounded) for it, then try again.
                await coord.wait_ownership_change(1.0)
                continue
            if r.error:
                raise KelpError(f"JoinGroup of REST consumer {self.group}/{self.name} failed with Kafka error "
                                f"{r.error}")
            self.member_id, self.generation = r.member_id, r.generation
            assignments = None
            if r.members:
                assignments = self._leader_assignments(r.members)
            s = await coord.sync_group(self.group, r.generation, r.member_id, assignments=assignments)
            if s.error == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            if s.error:
                if s.error == ErrorCode.UNKNOWN_MEMBER_ID:
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
            m: bytes(A(version=0, assigned_partitions=[A.TopicPartition(topic=t, partitions=ps)
                                                       for t, ps in sorted(tp.items())],
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
        if self.broker.groups.check_group(self.group) != ErrorCode.NONE:
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
                                   "auto.offset.reset is none", error_code=RestErrorCode.CONSUMER_INSTANCE_NOT_FOUND)
        ts = EARLIEST_TIMESTAMP if self.reset == "earliest" else LATEST_TIMESTAMP
        return self.broker.replicas.list_offset(tp[0], tp[1], ts)[0]

    async def wait_assigned(self, timeout_s: float) -> None:
        if self.manual or not self.topics:
            return
        try:
            await asyncio.wait_for(self._joined.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    async def read(self, *, timeout_ms: int, max_bytes: int) -> list[JsonData]:
        await self.ensure_coordinated_here()
        await self._commit_auto()
        await self.wait_assigned(timeout_ms / 1000.0)
        parts = list(self.assignment)
        if not parts:
            return []
        for tp in parts:
            if tp not in self.positions:
                self.positions[tp] = self._initial_position(tp)
        self._raise_if_undeliverable()
        reqs = [FetchPartition(t, p, self.positions[(t, p)], max_bytes) for t, p in parts]
        results = await self.broker.replicas.fetch(reqs, max_wait_ms=timeout_ms, min_bytes=1, max_bytes=max_bytes)
        # Decode every record of the response before any position moves: a position advances only
        # past records this response delivers, and stops at the first one that cannot be delivered.
        out: list[JsonData] = []
        advance: dict[tuple[str, int], int] = {}
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
            for rec in iter_records(bytes(record_bytes(res.records))):
                if rec.offset < start:
                    continue
                try:
                    key, value = self._field(rec.key, "key"), self._field(rec.value, "value")
                except _Undeliverable as exc:
                    if self.undeliverable is None:
                        self.undeliverable = (tp, rec.offset, exc.field, exc.reason)
                    break
                out.append({"topic": res.topic, "partition": res.partition, "offset": rec.offset,
                            "key": key, "value": value, "timestamp": rec.timestamp})
                nxt = rec.offset + 1
            if nxt != start:
                advance[tp] = nxt
        for tp, nxt in advance.items():
            if tp in self.positions:
                self.positions[tp] = nxt
                self.delivered[tp] = nxt
        if not out:
            self._raise_if_undeliverable()
        return out

    def _raise_if_undeliverable(self) -> None:
        """406 (40601) naming the record this consumer cannot deliver while its position is still there.

        Like a Kafka consumer meeting a record its deserializer refuses: the
        records before it were delivered; now every read answers this error
        until the position is moved past it (POST .../positions) — nothing is
        skipped silently and nothing after it is lost.
        """
        if self.undeliverable is None:
            return
        tp, offset, field, reason = self.undeliverable
        if tp not in self.assignment or self.positions.get(tp) != offset:
            self.undeliverable = None  # sought past it, or the partition moved to another member
            return
        topic, partition = tp
        raise HttpProblem(
            406,
            f"the {field} of the record at topic '{topic}' partition {partition} offset {offset} is not JSON "
            f"({reason}), and this consumer was created with format=json; it stays at that offset. Skip the "
            f"record with POST {self.base_uri}/positions "
            f'{{"offsets": [{{"topic": "{topic}", "partition": {partition}, "offset": {offset + 1}}}]}}, '
            "or read it with a consumer created with format=binary",
            error_code=RestErrorCode.CONSUMER_FORMAT_MISMATCH,
            details={"topic": topic, "partition": partition, "offset": offset},
        )

    def _field(self, data: bytes | None, field: str) -> JsonValue:
        if data is None:
            return None
        if self.format == "binary":
            return base64.b64encode(data).decode()
        try:
            return json_value(data)
        except ValueError as exc:
            raise _Undeliverable(field, str(exc)) from None

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
            if c == ErrorCode.NOT_COORDINATOR:
                await self.ensure_coordinated_here()
            raise error_for(c, f"commit of {t}-{p} for group '{self.group}' failed with Kafka error {c}"
                               + (" (a rebalance is in progress; read again and retry)" if c in _REBALANCED else ""))

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
    """Every REST consumer instance of one broker, plus the idle-instance reaper (`monotonic`: its clock)."""

    def __init__(self, broker: BrokerParts, *, monotonic: Monotonic = monotonic) -> None:
        self.broker = broker
        self.monotonic = monotonic
        self.instances: dict[tuple[str, str], HttpConsumer] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._counter = 0

    @classmethod
    def of(cls, broker: BrokerParts) -> "ConsumerRegistry":
        """The broker's registry, kept with its group coordinator (it stops with it)."""
        coord = broker.groups
        reg = coord.extensions.get("rest_consumers")
        if not isinstance(reg, ConsumerRegistry):
            reg = cls(broker)
            coord.extensions["rest_consumers"] = reg
            coord.stop_hooks.append(reg.close_all)
        return reg

    def new_name(self) -> str:
        """A name for an instance created without one: unique in this registry, and across restarts."""
        self._counter += 1
        return f"rest-consumer-{self._counter}-{wall_clock_ms()}"

    def start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap())

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = self.monotonic()
            for key, inst in list(self.instances.items()):
                if now - inst.last_used > inst.instance_timeout_ms / 1000.0:
                    log.info("REST consumer %s/%s idle for over %d ms; closing it", key[0], key[1],
                             inst.instance_timeout_ms)
                    self.instances.pop(key, None)
                    await inst.close()

    def get(self, group: str, name: str) -> HttpConsumer:
        inst = self.instances.get((group, name))
        if inst is None:
            raise HttpProblem(404, f"consumer instance '{name}' of group '{group}' does not exist (or expired)",
                              error_code=RestErrorCode.CONSUMER_INSTANCE_NOT_FOUND)
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
