"""One REST Proxy v2 consumer instance (`HttpConsumer`) and a broker's registry of them.

Why: `consumers` translates HTTP to calls; the state of an instance —
its group membership (join, sync, heartbeat, rejoin in a background task),
its assignment and positions, auto-commit, and what it may deliver — lives
here, so the route module stays a thin translation. An instance is an
ordinary group member on whichever broker it was created: everything it
says to its group's coordinator and its partitions' leaders goes over the
Kafka protocol (`consumer_client.MemberClient`), which follows both when
they move; the HTTP client notices nothing but a read that returns fewer
records while they move. Reads decode every
record of a fetch before any position moves: a position advances only past
records the response delivers, and a record its format cannot read
(`consumer_formats`: not JSON for `json`, not in its schema for `avro`...)
is reported (406, 40601, naming topic, partition and offset) until the
position is moved past it, as a Kafka consumer does with a record its
deserializer refuses. The registry caps the instances of a broker
(`http.consumer.max.instances`) and closes idle ones
(`consumer.instance.timeout.ms`, on its injectable monotonic clock).

This module must never change group state except through the coordinator (over the Kafka protocol).
"""

from __future__ import annotations

import asyncio
import logging
import re

import aiohttp
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from kelp.clock import Monotonic, monotonic, wall_clock_ms
from kelp.errors import ErrorCode, KelpError, RestErrorCode
from kelp.json_types import JsonData
from kelp.kafka_client import KafkaClientError
from kelp.kafka_client.errors import error_name
from kelp.kafka_client.security import PLAINTEXT
from kelp.records.header import iter_headers
from kelp.records.record import iter_records
from kelp.security.principal import ANONYMOUS, KafkaPrincipal

from ...acl_manager import Access
from ...parts import BrokerParts
from ...replica.manager import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from ..admin.groups import error_for
from ..problems import HttpProblem
from .consumer_client import FetchedPartition, MemberClient
from .consumer_formats import ReaderLookup, RecordDecoder, Undeliverable
from .subscriptions import leader_assignments, topics_matching

__all__ = ["HttpConsumer", "ConsumerRegistry", "unavailable"]

log = logging.getLogger("kelp.broker.http.consumers")

SESSION_TIMEOUT_MS = 10_000
LONG_POLL_ROUND_MS = 200
CLOSE_TIMEOUT_S = 3.0
FORWARD_CONNECTIONS = 64  # requests forwarded to other brokers at once (forwarding.py); more wait
# Commit errors that mean a rebalance moved the group on: the client reads again and retries.
_REBALANCED = (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS)

class HttpConsumer:
    def __init__(self, registry: "ConsumerRegistry", group: str, name: str, *, fmt: str, reset: str,
                 auto_commit: bool, instance_timeout_ms: int, base_uri: str,
                 owner: KafkaPrincipal = ANONYMOUS) -> None:
        self.registry = registry
        self.owner = owner  # the principal that created it: the only one that may use it (consumers.py)
        self.broker = registry.broker
        self.group = group
        self.name = name
        self.format = fmt
        self.decoder = RecordDecoder(fmt)
        self.reset = reset
        self.auto_commit = auto_commit
        self.instance_timeout_ms = instance_timeout_ms
        self.base_uri = base_uri
        self.topics: list[str] = []
        # A `topic_pattern` subscription: `topics` are the names it matched (RE2, whole name, no internal topic)
        # that `pattern_access` may DESCRIBE, as a Java consumer's Metadata shows them; matched again each
        # heartbeat interval, and a change rejoins the group (Kafka's consumer does it on a metadata refresh).
        self.pattern: str | None = None
        self.pattern_access: Access | None = None
        self.manual = False
        self.member_id = ""
        self.generation = -1
        self.assignment: list[tuple[str, int]] = []
        self.positions: dict[tuple[str, int], int] = {}
        self.delivered: dict[tuple[str, int], int] = {}  # next offset after what GET records returned
        # (partition, offset, field, reason) of a record its format cannot read; see _raise_if_undeliverable
        self.undeliverable: tuple[tuple[str, int], int, str, str] | None = None
        self.schema_readers: ReaderLookup | None = None  # set by each read request (the broker's registry)
        self.last_used = registry.monotonic()
        self.closed = False
        self.client = registry.member_client(f"rest-proxy-{name}")
        self._task: asyncio.Task[None] | None = None
        self._joined = asyncio.Event()
        self._wake = asyncio.Event()  # cuts the member loop's wait short: rejoin now
        self._lock = asyncio.Lock()
        self._rejoin_now = True
        coord = self.broker.groups
        self.session_timeout_ms = min(max(SESSION_TIMEOUT_MS, coord.config.min_session_timeout_ms),
                                      coord.config.max_session_timeout_ms)

    def touch(self) -> None:
        self.last_used = self.registry.monotonic()

    # -- membership -----------------------------------------------------
    def subscribe(self, topics: list[str], *, pattern: str | None = None, access: Access | None = None) -> None:
        self.topics = sorted(set(topics))
        self.pattern, self.pattern_access = pattern, access
        self.manual = False
        self.assignment = []
        self._joined.clear()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._member_loop(), name=f"rest-consumer-{self.group}-{self.name}")
        else:
            self.request_rejoin()

    def request_rejoin(self) -> None:
        """Join the group again now (not at the next heartbeat): the coordinator no longer knows this member."""
        self._joined.clear()
        self._rejoin_now = True
        self._wake.set()

    async def _pattern_moved(self) -> bool:
        """Whether the pattern's matches changed (a topic created, deleted, or its ACLs): then rejoin."""
        if self.pattern is None or self.pattern_access is None:
            return False
        topics = await topics_matching(self.broker, self.pattern, self.pattern_access)
        if topics == self.topics:
            return False
        log.info("REST consumer %s/%s: topic_pattern %r now matches %s (was %s); rejoining", self.group, self.name,
                 self.pattern, topics, self.topics)
        self.topics = topics
        return True

    async def unsubscribe(self) -> None:
        await self._stop_membership()
        self.pattern, self.pattern_access = None, None
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
            try:
                await self.client.leave(self.group, self.member_id)
            except KafkaClientError as exc:  # the coordinator expires the member after its session timeout
                log.info("REST consumer %s/%s could not leave its group: %s", self.group, self.name, exc)
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
                try:
                    await asyncio.wait_for(self._wake.wait(), interval)
                except asyncio.TimeoutError:
                    pass
                if self._wake.is_set():
                    self._wake.clear()
                    continue
                code = await self.client.heartbeat(self.group, self.generation, self.member_id)
                if code == ErrorCode.NONE and await self._pattern_moved():
                    self._joined.clear()
                    self._rejoin_now = True
                    continue
                if code == ErrorCode.NONE:
                    continue
                if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                    self.member_id = ""
                self._joined.clear()
                self._rejoin_now = True
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # The coordinator could not be found or reached within the client's retries (a failover
                # longer than them): keep the member and try again, as a consumer's poll loop does.
                log.info("REST consumer %s/%s: group membership failed (%s); retrying", self.group, self.name, exc)
                self._rejoin_now = True
                await asyncio.sleep(0.5)

    async def _join_and_sync(self) -> None:
        meta = bytes(ConsumerProtocolSubscription(version=0, topics=self.topics, user_data=b"").encode())
        for _ in range(10):
            r = await self.client.join(self.group, self.member_id, session_timeout_ms=self.session_timeout_ms,
                                       rebalance_timeout_ms=self.session_timeout_ms, protocols=[("range", meta)])
            if r.error == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                self.member_id = ""
                continue
            if r.error == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            if r.error:
                raise KelpError(f"JoinGroup of REST consumer {self.group}/{self.name} failed: {error_name(r.error)}")
            self.member_id, self.generation = r.member_id, r.generation
            assignments = self._leader_assignments(r.members) if r.leader == r.member_id else None
            code, data = await self.client.sync(self.group, r.generation, r.member_id, assignments)
            if code:
                if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                    self.member_id = ""
                continue
            self._set_assignment(data)
            self._joined.set()
            return
        raise KelpError(f"REST consumer {self.group}/{self.name} could not complete a rebalance after 10 attempts")

    def _leader_assignments(self, members: list[tuple[str, bytes]]) -> dict[str, bytes]:
        topics_info = self.broker.topics

        def partitions_of(topic: str) -> int:
            info = topics_info.get(topic)
            return info.partitions if info is not None else 0

        return leader_assignments(members, partitions_of)

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
    async def committed(self, parts: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, str]]:
        """The group's committed (offset, metadata) of `parts`, from its coordinator wherever it is."""
        try:
            return await self.client.committed(self.group, parts)
        except KafkaClientError as exc:
            raise unavailable(exc, f"cannot read the committed offsets of group '{self.group}'") from None

    async def edge_offsets(self, parts: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """The first (EARLIEST_TIMESTAMP) or next (LATEST_TIMESTAMP) offset of `parts`, from their leaders."""
        try:
            return await self.client.list_offsets(parts, timestamp)
        except KafkaClientError as exc:
            raise unavailable(exc, "cannot list the partitions' offsets") from None

    async def offsets_for_times(self, timestamps: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Each partition's first offset at or after its timestamp (ms); the end of the log where no record is that
        recent, as Kafka's tools reset `--to-datetime` past the last record."""
        try:
            found = await self.client.offsets_for_times(timestamps)
            past_end = [tp for tp, offset in found.items() if offset < 0]
            if past_end:
                found.update(await self.client.list_offsets(past_end, LATEST_TIMESTAMP))
        except KafkaClientError as exc:
            raise unavailable(exc, "cannot list the partitions' offsets for the timestamps") from None
        return found

    async def _initial_positions(self, parts: list[tuple[str, int]]) -> None:
        """Positions of partitions without one: committed, else auto.offset.reset. Never falls back to the reset
        because the committed offset could not be read (the partitions wait for the next read then)."""
        try:
            committed = await self.client.committed(self.group, parts)
        except KafkaClientError as exc:
            log.info("REST consumer %s/%s: committed offsets not readable yet (%s)", self.group, self.name, exc)
            return
        missing = []
        for tp in parts:
            offset = committed.get(tp, (-1, ""))[0]
            if offset >= 0:
                self.positions[tp] = offset
            else:
                missing.append(tp)
        if missing and self.reset == "none":
            t, p = missing[0]
            raise HttpProblem(409, f"no committed offset for {t}-{p} in group '{self.group}' and "
                                   "auto.offset.reset is none", error_code=RestErrorCode.ILLEGAL_STATE)
        if missing:
            await self._reset(missing)

    async def _reset(self, parts: list[tuple[str, int]]) -> None:
        ts = EARLIEST_TIMESTAMP if self.reset == "earliest" else LATEST_TIMESTAMP
        try:
            self.positions.update(await self.client.list_offsets(parts, ts))
        except KafkaClientError as exc:
            log.info("REST consumer %s/%s: offsets not listable yet (%s)", self.group, self.name, exc)

    async def wait_assigned(self, timeout_s: float) -> None:
        if self.manual or not self.topics:
            return
        try:
            await asyncio.wait_for(self._joined.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    async def read(self, *, timeout_ms: int, max_bytes: int) -> list[JsonData]:
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000.0
        await self._commit_auto()
        await self.wait_assigned(timeout_ms / 1000.0)
        parts = list(self.assignment)
        if not parts:
            return []
        unknown = [tp for tp in parts if tp not in self.positions]
        if unknown:
            await self._initial_positions(unknown)
        self._raise_if_undeliverable()
        # First whatever is there now, then long-poll in short rounds: a leader without records holds its
        # answer for the round's wait, so a short round bounds how late records on another leader arrive.
        wait_ms = 0
        while True:
            positions = {tp: self.positions[tp] for tp in parts if tp in self.positions}
            if not positions:
                return []
            results = await self.client.fetch(positions, max_wait_ms=wait_ms, max_bytes=max_bytes)
            out = await self._deliver(results, max_bytes)
            remaining_ms = int((deadline - asyncio.get_running_loop().time()) * 1000)
            if out or remaining_ms <= 0 or self.closed:
                if not out:
                    self._raise_if_undeliverable()
                return out
            wait_ms = min(remaining_ms, LONG_POLL_ROUND_MS)

    async def _deliver(self, results: list[FetchedPartition], max_bytes: int) -> list[JsonData]:
        """Decode every record of a fetch before any position moves: a position advances only past records
        this answer delivers (at most `max_bytes` of keys and values, at least one record), and stops at the
        first one that cannot be delivered."""
        out: list[JsonData] = []
        advance: dict[tuple[str, int], int] = {}
        budget = max_bytes
        if self.decoder.schema_type is not None:  # the schemas the records name, looked up before decoding
            await self.decoder.prepare((v for res in results if res.records for rec in iter_records(res.records)
                                        for v in (rec.key, rec.value)), self.schema_readers)
        reset: list[tuple[str, int]] = []
        for res in results:
            tp = (res.topic, res.partition)
            if res.error == ErrorCode.OFFSET_OUT_OF_RANGE and self.reset != "none":
                reset.append(tp)
                continue
            if res.error or not res.records or tp not in self.positions:
                continue
            start = self.positions[tp]
            nxt = start
            complete = True
            for rec in iter_records(res.records):
                if rec.offset < start:
                    continue
                size = len(rec.key or b"") + len(rec.value or b"")
                if out and size > budget:
                    complete = False
                    break
                try:
                    key, value = self.decoder.decode(rec.key, "key"), self.decoder.decode(rec.value, "value")
                except Undeliverable as exc:
                    if self.undeliverable is None:
                        self.undeliverable = (tp, rec.offset, exc.field, exc.reason)
                    complete = False
                    break
                budget -= size
                out.append({"topic": res.topic, "partition": res.partition, "offset": rec.offset,
                            "key": key, "value": value, "timestamp": rec.timestamp})
                nxt = rec.offset + 1
            if complete:
                # Past transaction markers and compacted gaps too: the end of the last complete batch.
                nxt = max([nxt, *(info.next_offset for info in iter_headers(res.records))])
            if nxt != start:
                advance[tp] = nxt
        for tp, nxt in advance.items():
            if tp in self.positions:
                self.positions[tp] = nxt
                self.delivered[tp] = nxt
        if reset:
            await self._reset(reset)
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
            f"the {field} of the record at topic '{topic}' partition {partition} offset {offset} cannot be read "
            f"as {self.format} ({reason}), and this consumer was created with format={self.format}; it stays at "
            "that offset. Skip the "
            f"record with POST {self.base_uri}/positions "
            f'{{"offsets": [{{"topic": "{topic}", "partition": {partition}, "offset": {offset + 1}}}]}}, '
            "or read it with a consumer created with format=binary",
            error_code=RestErrorCode.CONSUMER_FORMAT_MISMATCH,
            details={"topic": topic, "partition": partition, "offset": offset},
        )

    # -- commits --------------------------------------------------------
    async def commit(self, offsets: dict[tuple[str, int], int], *, rejoined: bool = False) -> None:
        """OffsetCommit as this member. When the coordinator no longer knows the member (it moved, or the
        session lapsed while it moved), rejoin at once and commit again the partitions still assigned,
        as a consumer whose partitions survived the rebalance would: the HTTP client does not notice."""
        if not offsets:
            return
        member = bool(self.member_id) and not self.manual
        try:
            codes = await self.client.commit(self.group, self.generation if member else -1,
                                             self.member_id if member else "", offsets)
        except KafkaClientError as exc:
            raise unavailable(exc, f"cannot commit offsets of group '{self.group}'") from None
        bad = {tp: c for tp, c in codes.items() if c}
        if bad and member and not rejoined and all(c in _REBALANCED for c in bad.values()):
            self.request_rejoin()
            await self.wait_assigned(self.session_timeout_ms / 1000.0)
            if self._joined.is_set():
                kept = {tp: o for tp, o in offsets.items() if tp in bad and tp in self.assignment}
                await self.commit(kept, rejoined=True)
                bad = {tp: c for tp, c in bad.items() if tp not in kept}
        if bad:
            (t, p), c = next(iter(bad.items()))
            raise error_for(c, f"commit of {t}-{p} for group '{self.group}' failed with Kafka error {c} "
                               f"({error_name(c)})"
                               + (" (a rebalance is in progress; read again and retry)" if c in _REBALANCED else ""))

    async def _commit_auto(self) -> None:
        if self.auto_commit and self.delivered:
            pending, self.delivered = dict(self.delivered), {}
            try:
                await self.commit(pending)
            except (KelpError, HttpProblem) as exc:
                log.info("auto-commit of REST consumer %s/%s skipped: %s", self.group, self.name, exc)

    async def close(self) -> None:
        """Commit (auto-commit), leave the group and drop the connections; bounded by CLOSE_TIMEOUT_S, since
        a coordinator that cannot be reached (a broker stopping) would otherwise hold the close for the
        client's whole retry budget: the group then expires the member after its session timeout."""
        if self.closed:
            return
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self._stop_membership()
        except TimeoutError:
            log.info("REST consumer %s/%s: leaving its group took over %.0f s; the coordinator expires it",
                     self.group, self.name, CLOSE_TIMEOUT_S)
        finally:
            self.closed = True
            await self.client.close()


def unavailable(exc: KafkaClientError, what: str) -> HttpProblem:
    """503 for what the cluster could not answer within the client's retries (Confluent's 50003: retriable)."""
    return HttpProblem(503, f"{what}: {exc}; retry", error_code=RestErrorCode.KAFKA_RETRIABLE)


_GENERATED = re.compile(r"^rest-consumer-b(\d+)-")
REMEMBERED_HOLDERS = 10_000


class ConsumerRegistry:
    """Every REST consumer instance of one broker, plus the idle-instance reaper (`monotonic`: its clock)."""

    def __init__(self, broker: BrokerParts, *, monotonic: Monotonic = monotonic) -> None:
        self.broker = broker
        self.monotonic = monotonic
        self.instances: dict[tuple[str, str], HttpConsumer] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._counter = 0
        self._forward_session: aiohttp.ClientSession | None = None
        # (group, name) -> the other broker holding an instance whose name the client chose (`forwarding`
        # learns it by asking the brokers); at most REMEMBERED_HOLDERS, the oldest forgotten first.
        self.remote_holders: dict[tuple[str, str], int] = {}

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
        """A name for an instance created without one: unique in this registry, and across restarts, and
        naming this broker (`holder_of`), so any broker can forward a request for it here."""
        self._counter += 1
        return f"rest-consumer-b{self.broker.config.broker_id}-{self._counter}-{wall_clock_ms()}"

    @staticmethod
    def holder_of(name: str) -> int | None:
        """The broker id a name from `new_name` carries; None for a name the client chose."""
        m = _GENERATED.match(name)
        return int(m.group(1)) if m else None

    def remember_holder(self, group: str, name: str, holder: int | None) -> None:
        """Where another broker's instance of a client-chosen name lives (None: forget it)."""
        self.remote_holders.pop((group, name), None)
        if holder is None:
            return
        if len(self.remote_holders) >= REMEMBERED_HOLDERS:
            self.remote_holders.pop(next(iter(self.remote_holders)))
        self.remote_holders[(group, name)] = holder

    def member_client(self, client_id: str) -> MemberClient:
        """A Kafka-protocol client for one instance: bootstrapped from this broker's own inter-broker
        listener, with that listener's TLS and SASL, so it reaches every broker as the brokers reach each other."""
        cluster = self.broker.cluster
        endpoint = cluster.state.endpoint
        if endpoint is None:
            raise HttpProblem(503, f"broker {self.broker.config.broker_id} has not joined its cluster yet; retry")
        security = cluster.state.inter_broker
        if security is not None:
            security.maybe_reload()
        return MemberClient(f"{endpoint.host}:{endpoint.port}", client_id=client_id,
                            security=security.kafka if security is not None else PLAINTEXT)

    def forward_session(self) -> aiohttp.ClientSession:
        """HTTP to the other brokers (their TLS as the control plane's), without credentials of its own:
        `forwarding` relays the client's. Closed by `close_all`."""
        if self._forward_session is None or self._forward_session.closed:
            security = self.broker.cluster.state.inter_broker
            tls = security.http_ssl if security is not None else None
            self._forward_session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=tls, limit=FORWARD_CONNECTIONS) if tls is not None
                else aiohttp.TCPConnector(limit=FORWARD_CONNECTIONS))
        return self._forward_session

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
        instances = list(self.instances.values())
        self.instances.clear()
        for inst, outcome in zip(instances, await asyncio.gather(*(i.close() for i in instances),
                                                                 return_exceptions=True), strict=True):
            if isinstance(outcome, Exception):
                log.error("closing REST consumer %s/%s failed: %r", inst.group, inst.name, outcome)
        if self._forward_session is not None:
            await self._forward_session.close()
