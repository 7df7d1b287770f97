"""`MemberClient`: what a REST Proxy v2 consumer instance says to the cluster, over the Kafka protocol.

Why: an instance is an ordinary group member, created on any broker. Its
group may be coordinated by another broker, the coordinator may move (a
SIGKILL, a leadership change of the group's `__consumer_offsets`
partition), and its partitions' leaders may be anywhere. A Kafka consumer
copes with all of that by finding the coordinator and the leaders and
following them; so does this, with Kelp's own client (`kelp.kafka_client`):
`AsyncClient.with_coordinator` for JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit and OffsetFetch, and requests to each partition's
leader (from metadata, refreshed when a leader moved) for ListOffsets and
Fetch. There is one code path: a group this broker coordinates is reached
the same way, through this broker's own inter-broker listener, with the
inter-broker listener's TLS and SASL (`broker/cluster/inter_broker.py`).
Authorization of the HTTP caller is the routes' (`route_access`), before
anything is asked here.

Each instance has two clients, so a long-polling Fetch never holds up a
Heartbeat on the same connection (one request in flight per connection):
`group` for the coordinator, `data` for leaders. Both hold at most one
connection per broker, closed with the instance.

What it must never do: hold group state (member id, generation, assignment
belong to `HttpConsumer`), wait without a bound, or retry without a bound;
it turns the client's failures into `KafkaClientError`s for the caller.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

from kelp.kafka_client import (
    COORDINATOR_MOVED,
    LEADER_MOVED,
    AsyncClient,
    AsyncConnection,
    ConnectionSecurity,
    ErrorResponse,
    KafkaClientError,
)
from kelp.kafka_client.errors import error_name

__all__ = ["MemberClient", "JoinAnswer", "FetchedPartition"]

JOIN_V, SYNC_V, HEARTBEAT_V, LEAVE_V, COMMIT_V, OFFSET_FETCH_V, LIST_OFFSETS_V, FETCH_V = 5, 3, 3, 3, 7, 7, 5, 11

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    error: int
    generation: int
    member_id: str
    leader: str
    members: list[tuple[str, bytes]]  # (member id, subscription metadata): filled for the leader only


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    topic: str
    partition: int
    error: int
    records: bytes


def _moved(code: int, what: str, address: str) -> None:
    """Raise for a code after which the coordinator must be found again (the client retries, bounded)."""
    if code in COORDINATOR_MOVED:
        raise ErrorResponse(f"{what}: {error_name(code)} from {address}", code, address=address)


class MemberClient:
    """The Kafka-protocol side of one REST consumer instance (see the module docstring)."""

    def __init__(self, bootstrap: str, *, client_id: str, security: ConnectionSecurity,
                 timeout_s: float = 30.0) -> None:
        self.group = AsyncClient(bootstrap, client_id=client_id, timeout_s=timeout_s, security=security)
        self.data = AsyncClient(bootstrap, client_id=client_id, timeout_s=timeout_s, security=security)
        self._stale_metadata = True

    async def close(self) -> None:
        await asyncio.gather(self.group.close(), self.data.close())

    # -- the group, through its coordinator ---------------------------------------------
    async def join(self, group: str, member_id: str, *, session_timeout_ms: int, rebalance_timeout_ms: int,
                   protocols: list[tuple[str, bytes]]) -> JoinAnswer:
        P = JoinGroupRequest.JoinGroupRequestProtocol
        request = JoinGroupRequest(group_id=group, session_timeout_ms=session_timeout_ms,
                                   rebalance_timeout_ms=rebalance_timeout_ms, member_id=member_id,
                                   group_instance_id=None, protocol_type="consumer",
                                   protocols=[P(name=n, metadata=m) for n, m in protocols])

        async def attempt(conn: AsyncConnection) -> JoinAnswer:
            # A JoinGroup may wait for the whole rebalance on the coordinator's side.
            r = await conn.request(request, JOIN_V, timeout_s=rebalance_timeout_ms / 1000.0 + self.group.timeout_s)
            _moved(r.error_code, f"JoinGroup of {group!r}", conn.address)
            return JoinAnswer(r.error_code, r.generation_id, r.member_id or "", r.leader or "",
                              [(m.member_id, bytes(m.metadata or b"")) for m in (r.members or [])])

        return await self.group.with_coordinator(group, f"JoinGroup of group {group!r}", attempt)

    async def sync(self, group: str, generation: int, member_id: str,
                   assignments: dict[str, bytes] | None) -> tuple[int, bytes]:
        A = SyncGroupRequest.SyncGroupRequestAssignment
        request = SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                                   group_instance_id=None,
                                   assignments=[A(member_id=m, assignment=a) for m, a in (assignments or {}).items()])

        async def attempt(conn: AsyncConnection) -> tuple[int, bytes]:
            r = await conn.request(request, SYNC_V)
            _moved(r.error_code, f"SyncGroup of {group!r}", conn.address)
            return r.error_code, bytes(r.assignment or b"")

        return await self.group.with_coordinator(group, f"SyncGroup of group {group!r}", attempt)

    async def heartbeat(self, group: str, generation: int, member_id: str) -> int:
        request = HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                   group_instance_id=None)

        async def attempt(conn: AsyncConnection) -> int:
            r = await conn.request(request, HEARTBEAT_V)
            _moved(r.error_code, f"Heartbeat of {group!r}", conn.address)
            return int(r.error_code)

        return await self.group.with_coordinator(group, f"Heartbeat of group {group!r}", attempt)

    async def leave(self, group: str, member_id: str) -> int:
        M = LeaveGroupRequest.MemberIdentity
        request = LeaveGroupRequest(group_id=group, members=[M(member_id=member_id, group_instance_id=None)])

        async def attempt(conn: AsyncConnection) -> int:
            r = await conn.request(request, LEAVE_V)
            _moved(r.error_code, f"LeaveGroup of {group!r}", conn.address)
            return int(r.error_code)

        return await self.group.with_coordinator(group, f"LeaveGroup of group {group!r}", attempt)

    async def commit(self, group: str, generation: int, member_id: str,
                     offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """OffsetCommit; the error code per partition (0: committed)."""
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (t, p), o in sorted(offsets.items()):
            by_topic.setdefault(t, []).append((p, o))
        request = OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
            topics=[T(name=t, partitions=[T.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
                for p, o in ps]) for t, ps in by_topic.items()])

        async def attempt(conn: AsyncConnection) -> dict[TopicPartition, int]:
            r = await conn.request(request, COMMIT_V)
            out = {(t.name, p.partition_index): int(p.error_code) for t in r.topics for p in t.partitions}
            for code in out.values():
                _moved(code, f"OffsetCommit of {group!r}", conn.address)
            return out

        return await self.group.with_coordinator(group, f"OffsetCommit of group {group!r}", attempt)

    async def committed(self, group: str, parts: list[TopicPartition]) -> dict[TopicPartition, tuple[int, str]]:
        """OffsetFetch: (offset, metadata) per partition, offset -1 where nothing is committed."""
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        by_topic: dict[str, list[int]] = {}
        for t, p in parts:
            by_topic.setdefault(t, []).append(p)
        request = OffsetFetchRequest(group_id=group, require_stable=False,
                                     topics=[T(name=t, partition_indexes=ps) for t, ps in by_topic.items()])

        async def attempt(conn: AsyncConnection) -> dict[TopicPartition, tuple[int, str]]:
            r = await conn.request(request, OFFSET_FETCH_V)
            _moved(r.error_code, f"OffsetFetch of {group!r}", conn.address)
            if r.error_code:
                raise ErrorResponse(f"OffsetFetch of {group!r}: {error_name(r.error_code)}", r.error_code,
                                    address=conn.address)
            out: dict[TopicPartition, tuple[int, str]] = {}
            for t in r.topics:
                for p in t.partitions:
                    _moved(p.error_code, f"OffsetFetch of {group!r}", conn.address)
                    if p.error_code:
                        raise ErrorResponse(f"OffsetFetch of {group!r} {t.name}-{p.partition_index}: "
                                            f"{error_name(p.error_code)}", p.error_code, address=conn.address)
                    out[(t.name, p.partition_index)] = (int(p.committed_offset), p.metadata or "")
            return out

        if not parts:
            return {}
        return await self.group.with_coordinator(group, f"OffsetFetch of group {group!r}", attempt)

    # -- partitions, through their leaders ----------------------------------------------
    async def _by_leader(self, parts: list[TopicPartition]) -> dict[int, list[TopicPartition]]:
        if self._stale_metadata:
            await self.data.refresh(sorted({t for t, _ in parts}))
            self._stale_metadata = False
        out: dict[int, list[TopicPartition]] = {}
        for t, p in parts:
            info = await self.data.leader(t, p)
            out.setdefault(info.leader, []).append((t, p))
        return out

    async def list_offsets(self, parts: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """ListOffsets (-2 earliest, -1 latest) from each partition's leader, retried (bounded) when one moved."""
        return await self.offsets_for_times({tp: timestamp for tp in parts})

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets of each partition at its own timestamp (ms, or -2 earliest / -1 latest): the first offset
        whose record's timestamp is at or after it, -1 when no record is (Kafka's `offsetsForTimes`)."""
        pending = list(timestamps)
        out: dict[TopicPartition, int] = {}

        async def attempt() -> dict[TopicPartition, int]:
            T = ListOffsetsRequest.ListOffsetsTopic
            for leader, wanted in (await self._by_leader(pending)).items():
                by_topic: dict[str, list[int]] = {}
                for t, p in wanted:
                    by_topic.setdefault(t, []).append(p)
                request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                    T(name=t, partitions=[T.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1,
                                                                 timestamp=timestamps[(t, p)]) for p in ps])
                    for t, ps in by_topic.items()])
                r = await self.data.send(leader, request, LIST_OFFSETS_V)
                for t in r.topics:
                    for p in t.partitions:
                        if p.error_code:
                            self._stale_metadata = True
                            raise ErrorResponse(f"ListOffsets {t.name}-{p.partition_index}: "
                                                f"{error_name(p.error_code)}", p.error_code)
                        out[(t.name, p.partition_index)] = int(p.offset)
                        pending.remove((t.name, p.partition_index))
            return out

        async def recover(_error: KafkaClientError) -> None:
            self._stale_metadata = True

        return await self.data.retrying("listing offsets", attempt, recover=recover)

    async def fetch(self, positions: dict[TopicPartition, int], *, max_wait_ms: int,
                    max_bytes: int) -> list[FetchedPartition]:
        """One Fetch per leader, concurrently; a leader that moved or cannot be reached gives nothing this time
        (the metadata is refreshed before the next fetch), as a consumer's poll does."""
        try:
            leaders = await self._by_leader(list(positions))
        except KafkaClientError:
            self._stale_metadata = True
            return []
        P = FetchRequest.FetchTopic.FetchPartition

        async def one(leader: int, wanted: list[TopicPartition]) -> list[FetchedPartition]:
            by_topic: dict[str, list[int]] = {}
            for t, p in wanted:
                by_topic.setdefault(t, []).append(p)
            request = FetchRequest(
                replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                topics=[FetchRequest.FetchTopic(topic=t, partitions=[P(
                    partition=p, current_leader_epoch=-1, fetch_offset=positions[(t, p)], last_fetched_epoch=-1,
                    log_start_offset=-1, partition_max_bytes=max_bytes) for p in ps]) for t, ps in by_topic.items()])
            try:
                r = await self.data.send(leader, request, FETCH_V,
                                         timeout_s=self.data.timeout_s + max_wait_ms / 1000.0)
            except KafkaClientError:
                self._stale_metadata = True
                return []
            if r.error_code:
                self._stale_metadata = True
                return []
            out = []
            for t in r.responses:
                for p in t.partitions:
                    if p.error_code in LEADER_MOVED:
                        self._stale_metadata = True
                    out.append(FetchedPartition(t.topic, p.partition_index, int(p.error_code), bytes(p.records or b"")))
            return out

        answers = await asyncio.gather(*(one(leader, wanted) for leader, wanted in leaders.items()))
        return [fp for answer in answers for fp in answer]

