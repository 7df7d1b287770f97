"""`SchemaLog`: the registry's state read from `_schemas` to its end, and its writes appended with acks=all.

Why: `_schemas` (one partition, compacted, replicated like `__consumer_offsets`: offsets.topic.replication
.factor) is the registry's only storage, so that any broker can serve it and it survives failover. A broker
answers a read only after it has applied the partition up to its high watermark as the partition's leader
knows it at that moment, so a client that registered a schema through one broker finds it through any
other at once (read-after-write across brokers). The leader reads its own log; the other brokers ask it for
the records past the offset they have applied (`GET /cluster/v1/schema-registry/records`, the brokers'
control plane), so a broker needs no replica of `_schemas` to serve the registry.

Writes are appended here by the leader only (`registry`), with acks=all: a registration is answered once
every in-sync replica has it, so the broker that becomes leader after a failure has every schema answered
before. Before deciding a write, the leader waits (bounded) until its high watermark reaches its log end —
a new leader's records above the high watermark are committed only once its followers catch up — and
reads to there, so ids are never handed out twice.

Every wait is bounded; a registry that cannot read or write its topic answers 50001/50002, and one whose
leadership of `_schemas` moves under a read or a write (Kafka's NOT_LEADER_OR_FOLLOWER, a replica going) 500
with 50004, Confluent's UNKNOWN_LEADER — never Kafka's 503: Confluent's clients retry it as a failover.

This module must never decide what to write: the registry does.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Sequence

from kelp.errors import ErrorCode, KelpError, OffsetOutOfRangeError
from kelp.records.build import build_batch
from kelp.records.record import Record, iter_records

from ..cpu_work import run_cpu
from ..parts import BrokerParts
from ..replica.results import FetchPartition, SegmentSlice
from .errors import Code, RegistryError, store_error
from .model import SchemaVersion, decode_version
from .state import RegistryState

__all__ = ["SchemaLog", "TOPIC", "read_records", "b64", "registry_error"]

TOPIC = "_schemas"
READ_BYTES = 1 << 20
# `_schemas`' max.message.bytes: a record holds a schema of up to `requests.MAX_SCHEMA_BYTES` (1 MiB) written as a
# JSON string, which escaping makes longer (a quote becomes two bytes, a control character six); the broker's
# default (1 MiB) refused the record of a schema of 1 MB. Set when Kelp creates the topic.
MESSAGE_MAX_BYTES = 8 << 20
# A record larger than this is encoded into its batch, and decoded from `_schemas`, on the CPU pool: a 1 MB schema's
# record took 150 ms to build and 75 ms to decode, which the event loop must not spend (issue 33's bound).
OFF_LOOP_RECORD_BYTES = 64 << 10
SYNC_TIMEOUT_S = 10.0
COMMIT_WAIT_S = 5.0
APPEND_TIMEOUT_MS = 10_000

RecordTriple = tuple[int, bytes | None, bytes | None]


async def read_records(parts: BrokerParts, offset: int) -> tuple[list[RecordTriple], int, int]:
    """Records of `_schemas` from `offset` on this broker, its leader: (records, high watermark, log start)."""
    (result,) = await parts.replicas.fetch([FetchPartition(TOPIC, 0, offset, READ_BYTES)], max_wait_ms=0,
                                           min_bytes=1, max_bytes=READ_BYTES)
    if isinstance(result.error, OffsetOutOfRangeError):  # below the log start: the reader starts over there
        info = parts.replicas.partition_info(TOPIC, 0)
        return [], info.high_watermark, info.log_start_offset
    if result.error is not None:
        raise result.error
    data = result.records
    if isinstance(data, SegmentSlice):  # a file range (only with zero_copy, which this read does not ask)
        chunk = data
        try:
            data = chunk.read()
        finally:
            chunk.close()
    out = [(r.offset, r.key, r.value) for r in iter_records(data) if r.offset >= offset] if data else []
    return out, result.high_watermark, result.log_start_offset


class SchemaLog:
    """This broker's view of `_schemas` (see the module docstring)."""

    def __init__(self, parts: BrokerParts) -> None:
        self.parts = parts
        self.state = RegistryState()
        self._lock = asyncio.Lock()

    def exists(self) -> bool:
        return self.parts.topics.get(TOPIC) is not None

    def leader(self) -> int:
        """The broker leading `_schemas` partition 0 (the registry's writer), -1 when none is known."""
        info = self.parts.topics.get(TOPIC)
        return info.partition_states[0].leader if info is not None and info.partitions > 0 else -1

    def is_leader(self) -> bool:
        part = self.parts.replicas.get_partition(TOPIC, 0)
        return part is not None and part.is_leader

    async def create(self) -> None:
        """Create `_schemas` (compacted, one partition, records up to `MESSAGE_MAX_BYTES`) unless it exists; 50001
        while it cannot be created."""
        if self.exists():
            return
        cluster = self.parts.cluster
        try:
            configs = {"cleanup.policy": "compact", "max.message.bytes": str(MESSAGE_MAX_BYTES)}
            await cluster.routing.ensure_internal_topic(TOPIC, partitions=1, configs=configs)
        except KelpError as exc:
            raise store_error(f"the registry's topic '{TOPIC}' could not be created: {exc}") from None

    async def sync(self) -> RegistryState:
        """Apply `_schemas` up to its leader's high watermark (as of now); the state. Bounded."""
        if not self.exists():
            return self.state
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        async with self._lock:
            end: int | None = None
            while True:
                records, hw, log_start = await self._read(self.state.next_offset)
                if self.state.next_offset < log_start:  # records deleted below what was applied: read again
                    self.state = RegistryState()
                    self.state.next_offset = log_start
                    continue
                end = hw if end is None else end
                for offset, key, value in records:
                    if offset >= end:
                        break
                    decoded = None
                    if value is not None and len(value) > OFF_LOOP_RECORD_BYTES:
                        decoded = await run_cpu(_decoded, value)
                    self.state.apply(offset, key, value, decoded)
                if records and records[0][0] >= end:  # the offsets below `end` were compacted away
                    self.state.next_offset = max(self.state.next_offset, end)
                if self.state.next_offset >= end:
                    return self.state
                if time.monotonic() > deadline:
                    raise RegistryError(500, Code.OPERATION_TIMEOUT, f"reading '{TOPIC}' to its end (offset {end}) "
                                        f"did not finish within {SYNC_TIMEOUT_S:.0f}s (at {self.state.next_offset})")
                if not records:
                    await asyncio.sleep(0.05)

    async def _read(self, offset: int) -> tuple[list[RecordTriple], int, int]:
        if self.is_leader():
            try:
                return await read_records(self.parts, offset)
            except KelpError as exc:  # the leadership moved between the check and the read
                raise _leadership_moved(self.parts.config.broker_id, exc) from None
        leader = self.leader()
        endpoint = self.parts.cluster.state.brokers.get(leader)
        if endpoint is None:
            raise RegistryError(500, Code.UNKNOWN_LEADER,
                                f"no leader of '{TOPIC}' is known (the registry's storage); retry")
        url = f"{endpoint.http_url}/cluster/v1/schema-registry/records"
        try:
            async with self.parts.cluster.session.session().get(url, params={"offset": str(offset)}) as resp:
                body = await resp.json(content_type=None)
        except Exception as exc:
            raise store_error(f"reading '{TOPIC}' from its leader, broker {leader}, failed: {exc!r}") from None
        if isinstance(body, dict) and body.get("error_code") == Code.UNKNOWN_LEADER:  # it stopped leading
            raise RegistryError(500, Code.UNKNOWN_LEADER, f"broker {leader} no longer leads '{TOPIC}': "
                                                          f"{body.get('message')}")
        if resp.status != 200 or not isinstance(body, dict):
            raise store_error(f"reading '{TOPIC}' from its leader, broker {leader}, failed: {resp.status} {body}")
        records = [(int(r["offset"]), _unb64(r.get("key")), _unb64(r.get("value"))) for r in body["records"]]
        return records, int(body["high_watermark"]), int(body["log_start_offset"])

    async def wait_committed(self) -> None:
        """On the leader: until everything in its log is committed (high watermark == log end), bounded."""
        deadline = time.monotonic() + COMMIT_WAIT_S
        while True:
            try:
                info = self.parts.replicas.partition_info(TOPIC, 0)
            except KelpError as exc:  # the replica went (a reassignment moved it away)
                raise _leadership_moved(self.parts.config.broker_id, exc) from None
            if info.high_watermark >= info.log_end_offset:
                return
            if time.monotonic() > deadline:
                raise RegistryError(500, Code.OPERATION_TIMEOUT, f"'{TOPIC}' has records its followers have not "
                                    f"caught up with (high watermark {info.high_watermark} < log end "
                                    f"{info.log_end_offset}) after {COMMIT_WAIT_S:.0f}s; retry")
            await asyncio.sleep(0.02)

    async def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Append `records` in one batch with acks=all, then apply them (and anything before)."""
        batch_records = [Record(key=k, value=v) for k, v in records]
        large = sum(len(k) + len(v or b"") for k, v in records) > OFF_LOOP_RECORD_BYTES
        batch = await run_cpu(build_batch, batch_records) if large else build_batch(batch_records)
        try:
            await self.parts.cluster.routing.append(TOPIC, 0, batch, acks=-1, timeout_ms=APPEND_TIMEOUT_MS)
        except KelpError as exc:
            raise store_error(f"writing to '{TOPIC}' failed: {exc}") from None
        await self.sync()


def _leadership_moved(broker_id: int, exc: KelpError) -> RegistryError:
    return RegistryError(500, Code.UNKNOWN_LEADER, f"broker {broker_id} stopped leading '{TOPIC}' (the registry's "
                                                   f"storage) during the request: {exc}; retry")


# Kafka's answers of a replica that is not, or no longer, the partition's leader
_NOT_LEADER = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                         ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


def registry_error(parts: BrokerParts, exc: KelpError) -> RegistryError:
    """The registry's answer to a Kafka error met serving it: 500 with 50004 (UNKNOWN_LEADER) when the
    leadership of `_schemas` moved, else 500 with 50001 (STORE_ERROR) — Confluent's codes, not Kafka's."""
    if exc.code in _NOT_LEADER:
        return _leadership_moved(parts.config.broker_id, exc)
    return store_error(f"reading or writing '{TOPIC}' failed: {exc}")


def _decoded(value: bytes) -> SchemaVersion | None:
    """A SCHEMA record's value decoded (on the CPU pool), or None for one that is not (a CONFIG or MODE value,
    or an unreadable one: `RegistryState.apply` decodes it again and says why it skips it)."""
    try:
        return decode_version(value)
    except ValueError:
        return None


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(data: object) -> bytes | None:
    return None if data is None else base64.b64decode(str(data))
