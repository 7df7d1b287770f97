"""Share-partition state in `__share_group_state`, Kafka's compacted topic for it, on the broker's own logs.

Why: what a share group has acknowledged must survive a broker restart, or records already accepted would be
delivered again. Kafka's share coordinator keeps each share-partition's state as ShareSnapshot records (key:
group, topic id, partition; value: the start offset and the state batches of the in-flight window) in the
compacted `__share_group_state`; compaction keeps the newest snapshot per share-partition. Kelp writes a whole
snapshot on every change it must keep (the window is bounded by `group.share.partition.max.record.locks`, so a
snapshot is small) with acks=all through the replica manager, like a coordinator's commit, and reads a
partition's newest snapshots back by replaying its log in a worker thread, once per state partition, then
keeps them current as it writes. The record formats are Kafka 4.4.0's ShareSnapshotKey/Value (`schemas/`,
Apache License 2.0, from kafka-share-coordinator), through kafka-python's schema codec: key = record type
(int16, 0) then the key's fields; value = version (int16, 0) then its fields, flexible.

The state partition of a share-partition is often led by another broker than the share-partition itself:
then the read and the write go to that broker over the control plane (`POST /cluster/v1/share-state/{read,
write}`, the inter-broker TLS and credentials), which does them on its own log — Kafka's ReadShareGroupState and
WriteShareGroupState between a share-partition's leader and the share coordinator. Where no broker leads it
yet, `StateUnavailable` is raised (NOT_LEADER_OR_FOLLOWER to the client, which retries) rather than serving
from a state that might not be durable.

This module must never decide delivery rules (that is `partition`).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from typing import Any, Iterable

from kelp.clock import wall_clock_ms
from kelp.errors import NotLeaderOrFollowerError
from kelp.records.build import build_batch

from ...cluster.member import ClusterMember
from ...replica.manager import ReplicaManager
from ...storage import LogManager
from ...topic_manager import TopicManager
from ..coordinator_records import schema_class
from ..offsets_store import replay_log
from ..placement import java_string_hashcode
from .partition import StateBatch

__all__ = ["STATE_TOPIC", "SNAPSHOT", "StateKey", "Snapshot", "ShareStateLog", "StateUnavailable",
           "snapshot_record", "decode_snapshot", "state_partition_for", "key_json", "key_of", "batches_of"]

log = logging.getLogger("kelp.broker.groups.share")

STATE_TOPIC = "__share_group_state"
SNAPSHOT = 0  # ShareSnapshotKey's record type ("apiKey")
_SCHEMAS = __name__.rsplit(".", 1)[0] + ".schemas"
StateKey = tuple[str, str, int]  # (group id, topic id as 32 hex digits, partition)
Snapshot = tuple[int, list[StateBatch]]  # (start offset, state batches)


def _schema(name: str) -> Any:
    """The kafka-python data class of Kafka's schema `schemas/<name>.json` (its codec is kafka-python's)."""
    return schema_class(name, package=_SCHEMAS, module=__name__)


ShareSnapshotKey = _schema("ShareSnapshotKey")
ShareSnapshotValue = _schema("ShareSnapshotValue")


class StateUnavailable(NotLeaderOrFollowerError):
    """The share-partition's state partition is not led here (or not ready): the client retries."""


def state_partition_for(key: StateKey, partitions: int) -> int:
    """Kafka's SharePartitionKey placement: "group:topicId:partition" hashed over the state partitions."""
    group, topic_id, partition = key
    h = java_string_hashcode(f"{group}:{uuid.UUID(hex=topic_id)}:{partition}")
    return (h & 0x7FFFFFFF) % partitions


def snapshot_record(key: StateKey, start: int, batches: Iterable[StateBatch], *, epoch: int,
                    now_ms: int) -> tuple[bytes, bytes]:
    group, topic_id, partition = key
    k = ShareSnapshotKey(version=0, group_id=group, topic_id=uuid.UUID(hex=topic_id), partition=partition)
    SB = ShareSnapshotValue.StateBatch
    v = ShareSnapshotValue(
        version=0, snapshot_epoch=epoch, state_epoch=0, leader_epoch=-1, start_offset=start,
        delivery_complete_count=-1, create_timestamp=now_ms, write_timestamp=now_ms,
        state_batches=[SB(first_offset=b.first, last_offset=b.last, delivery_state=b.state,
                          delivery_count=b.delivery_count) for b in batches])
    return struct.pack(">h", SNAPSHOT) + k.encode(version=0, header=False), bytes(v.encode(version=0))


def decode_snapshot(key: bytes | None, value: bytes | None) -> tuple[StateKey, Snapshot | None] | None:
    """(key, snapshot or None for a tombstone) of a ShareSnapshot record; None for any other record."""
    if key is None or len(key) < 2 or struct.unpack_from(">h", key)[0] != SNAPSHOT:
        return None
    k = ShareSnapshotKey.decode(key[2:], version=0, header=False)
    skey = (k.group_id, k.topic_id.hex, k.partition)
    if value is None:
        return skey, None
    v = ShareSnapshotValue.decode(value)
    return skey, (v.start_offset, [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                   for b in v.state_batches])


def key_json(key: StateKey) -> dict[str, Any]:
    return {"group": key[0], "topic_id": key[1], "partition": key[2]}


def key_of(body: Any) -> StateKey:
    """The key of a control-plane request's JSON body; ValueError if it is not one."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    group, tid, partition = body.get("group"), body.get("topic_id"), body.get("partition")
    if not isinstance(group, str) or not isinstance(tid, str) or not isinstance(partition, int):
        raise ValueError("group (string), topic_id (string) and partition (integer) are required")
    return group, uuid.UUID(hex=tid).hex, partition


def batches_of(items: Any) -> list[StateBatch]:
    """State batches from their JSON form [[first, last, state, count], ...]; ValueError if malformed."""
    if not isinstance(items, list):
        raise ValueError("batches must be a list")
    out = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 4 and all(isinstance(x, int) for x in item)):
            raise ValueError(f"a state batch is [first, last, state, count] integers, not {item!r}"[:200])
        out.append(StateBatch(item[0], item[1], item[2], item[3]))
    return out


class ShareStateLog:
    """Reads and writes share-partition snapshots in `__share_group_state` (see the module docstring)."""

    def __init__(self, cluster: ClusterMember, topics: TopicManager, replicas: ReplicaManager, logs: LogManager, *,
                 partitions: int,
                 topic_configs: dict[str, str], replication_factor: int, write_timeout_ms: int) -> None:
        self.cluster = cluster
        self.topics = topics
        self.replicas = replicas
        self.logs = logs
        self.partitions = partitions
        self.topic_configs = topic_configs
        self.replication_factor = replication_factor
        self.write_timeout_ms = write_timeout_ms
        self._cache: dict[int, dict[StateKey, Snapshot]] = {}
        self._loading: dict[int, asyncio.Task[dict[StateKey, Snapshot]]] = {}
        self._epochs: dict[StateKey, int] = {}

    def partition_of(self, key: StateKey) -> int:
        return state_partition_for(key, self.partitions)

    async def _leader(self, p: int) -> str | None:
        """None when this broker leads state partition `p` (ready to write); else the leader's HTTP URL."""
        if not self.topics.exists(STATE_TOPIC):
            await self.cluster.routing.ensure_internal_topic(STATE_TOPIC, partitions=self.partitions,
                                                     configs=dict(self.topic_configs),
                                                     replication_factor=self.replication_factor)
        part = self.replicas.get_partition(STATE_TOPIC, p)
        if part is not None and part.is_leader and part.leader_ready:
            return None
        found = self.cluster.routing.partition_leader(STATE_TOPIC, p)
        endpoint = self.cluster.state.brokers.get(found[0]) if found is not None else None
        if endpoint is None or found is None or found[0] == self.cluster.state.broker_id:
            raise StateUnavailable(f"{STATE_TOPIC} partition {p} has no ready leader yet")
        return str(endpoint.http_url)

    async def remote(self, url: str, op: str, args: dict[str, Any]) -> Any:
        """POST `/cluster/v1/share-state/{op}` on the broker at `url`; its JSON answer, or StateUnavailable."""
        import aiohttp  # by the first call to another broker: a broker alone never loads it (issue 38)

        try:
            async with self.cluster.session.session().post(
                    f"{url}/cluster/v1/share-state/{op}", json=args,
                    timeout=aiohttp.ClientTimeout(total=self.write_timeout_ms / 1000 + 5)) as resp:
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as exc:
            raise StateUnavailable(f"the leader of the share-partition's state ({url}) did not answer: {exc!r}") \
                from None
        if resp.status != 200 or not isinstance(body, dict):
            message = body.get("message") if isinstance(body, dict) else body
            raise StateUnavailable(f"the leader of the share-partition's state ({url}) answered {resp.status}: "
                                   f"{message}")
        return body

    async def read(self, key: StateKey) -> Snapshot | None:
        """The newest snapshot of `key`, or None if it has none (read where its state partition is led)."""
        url = await self._leader(self.partition_of(key))
        if url is None:
            return await self.read_local(key)
        body = await self.remote(url, "read", key_json(key))
        snap = body.get("snapshot")
        return None if snap is None else (int(snap["start"]), batches_of(snap["batches"]))

    async def write(self, key: StateKey, start: int, batches: list[StateBatch]) -> None:
        """Append a snapshot where its state partition is led and wait for the in-sync replicas; raises a
        KelpError on failure."""
        url = await self._leader(self.partition_of(key))
        if url is None:
            return await self.write_local(key, start, batches)
        await self.remote(url, "write", {**key_json(key), "start": start,
                                          "batches": [[b.first, b.last, b.state, b.delivery_count] for b in batches]})
        return None

    async def read_local(self, key: StateKey) -> Snapshot | None:
        """`read` on this broker, the state partition's leader (a remote read lands here)."""
        return (await self._loaded(self.partition_of(key))).get(key)

    async def _loaded(self, p: int) -> dict[StateKey, Snapshot]:
        """The newest snapshots of state partition `p`, which this broker leads (replayed once, then kept)."""
        if await self._leader(p) is not None:
            raise StateUnavailable(f"{STATE_TOPIC} partition {p} is not led by this broker")
        cached = self._cache.get(p)
        if cached is None:
            task = self._loading.get(p)
            if task is None:
                task = self._loading[p] = asyncio.get_running_loop().create_task(
                    asyncio.to_thread(self._replay, p), name=f"load-{STATE_TOPIC}-{p}")
            try:
                cached = await asyncio.shield(task)
            finally:
                if task.done():
                    self._loading.pop(p, None)
            cached = self._cache.setdefault(p, cached)
        return cached

    async def group_keys_local(self, group: str, partitions: Iterable[int]) -> list[StateKey]:
        """The share-partitions of `group` with state in those state partitions (each led here)."""
        return [k for p in partitions for k in await self._loaded(p) if k[0] == group]

    async def group_keys(self, group: str) -> set[StateKey]:
        """Every share-partition of `group` with state, over all state partitions: read where each is led (one
        request per other broker); StateUnavailable while one has no leader. None without the state topic."""
        if not self.topics.exists(STATE_TOPIC):
            return set()
        by_leader: dict[int, list[int]] = {}
        for p in range(self.partitions):
            found = self.cluster.routing.partition_leader(STATE_TOPIC, p)
            if found is None or found[0] < 0:
                raise StateUnavailable(f"{STATE_TOPIC} partition {p} has no leader now")
            by_leader.setdefault(found[0], []).append(p)
        keys: set[StateKey] = set()
        for broker, ps in sorted(by_leader.items()):
            endpoint = self.cluster.state.brokers.get(broker)
            if broker == self.cluster.state.broker_id or endpoint is None:
                keys.update(await self.group_keys_local(group, ps))
                continue
            body = await self.remote(str(endpoint.http_url), "keys", {"group": group, "partitions": ps})
            keys.update((group, uuid.UUID(hex=str(t)).hex, int(q)) for t, q in body.get("keys") or [])
        return keys

    async def delete(self, key: StateKey) -> None:
        """Kafka's DeleteShareGroupState of one share-partition: a tombstone where its state partition is led."""
        url = await self._leader(self.partition_of(key))
        if url is None:
            return await self.delete_local(key)
        await self.remote(url, "tombstone", key_json(key))
        return None

    async def delete_local(self, key: StateKey) -> None:
        """`delete` on this broker, the state partition's leader: the snapshot's key with no value, acks=all."""
        p = self.partition_of(key)
        await self._loaded(p)
        record = (snapshot_record(key, 0, [], epoch=0, now_ms=0)[0], None)
        await self.replicas.append(STATE_TOPIC, p, build_batch([record]), acks=-1,
                                   timeout_ms=self.write_timeout_ms, internal_allowed=True)
        self._epochs.pop(key, None)
        self._cache.setdefault(p, {}).pop(key, None)

    def _replay(self, p: int) -> dict[StateKey, Snapshot]:
        """Every share-partition's newest snapshot in state partition `p` (worker thread: reads segments)."""
        out: dict[StateKey, Snapshot] = {}
        lg = self.logs.get(STATE_TOPIC, p)
        if lg is None:
            return out
        for info, records in replay_log(lg):
            if info.is_control:
                continue
            for rec in records:
                try:
                    found = decode_snapshot(rec.key, rec.value)
                except Exception as exc:  # one bad record must not hide the partition's other states
                    log.warning("%s-%d offset %d: unreadable record skipped: %s", STATE_TOPIC, p, rec.offset, exc)
                    continue
                if found is None:
                    continue
                skey, snap = found
                if snap is None:
                    out.pop(skey, None)
                else:
                    out[skey] = snap
        return out

    async def write_local(self, key: StateKey, start: int, batches: list[StateBatch]) -> None:
        """`write` on this broker, the state partition's leader (a remote write lands here)."""
        p = self.partition_of(key)
        if await self._leader(p) is not None:
            raise StateUnavailable(f"{STATE_TOPIC} partition {p} is not led by this broker")
        if p not in self._cache:
            await self.read_local(key)  # a write must not be shadowed by an older snapshot loaded after it
        epoch = self._epochs.get(key, 0) + 1
        record = snapshot_record(key, start, batches, epoch=epoch, now_ms=wall_clock_ms())
        await self.replicas.append(STATE_TOPIC, p, build_batch([record]), acks=-1,
                                   timeout_ms=self.write_timeout_ms, internal_allowed=True)
        self._epochs[key] = epoch
        self._cache.setdefault(p, {})[key] = (start, list(batches))

    def broker_url(self, topic: str, partition: int) -> str | None:
        """None when this broker leads the partition; else its leader's HTTP URL (StateUnavailable: none)."""
        part = self.replicas.get_partition(topic, partition)
        if part is not None and part.is_leader:
            return None
        found = self.cluster.routing.partition_leader(topic, partition)
        endpoint = self.cluster.state.brokers.get(found[0]) if found is not None else None
        if endpoint is None or found is None or found[0] == self.cluster.state.broker_id:
            raise StateUnavailable(f"{topic}-{partition} has no leader now")
        return str(endpoint.http_url)

    def forget_partition(self, p: int) -> None:
        """This broker stopped leading state partition `p`: its cached snapshots may go stale."""
        self._cache.pop(p, None)
