"""Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete.

Why: these turn kafka-python request objects into calls on the broker's
`GroupCoordinator` (`broker.groups`) and its results back into responses, for
every version real clients (kafka-python 3, aiokafka 0.14, librdkafka 2.x)
negotiate. FindCoordinator answers the leader of the group's
`__consumer_offsets` partition (`kelp.broker.groups.coordinator_lookup`), or for key type 1 of the
transactional id's `__transaction_state` partition (`kelp.broker.transactions.locator`);
every other group request is answered by this broker's coordinator, which
says NOT_COORDINATOR for groups it does not coordinate. JoinGroup and SyncGroup park until the rebalance completes; the
server answers other requests on the connection meanwhile.

Authorization (Kafka's KafkaApis group handlers), all in the block below: FindCoordinator needs DESCRIBE on
the group (or transactional id); JoinGroup, SyncGroup, Heartbeat, LeaveGroup READ on the group; OffsetCommit
READ on the group and READ on each topic; OffsetFetch DESCRIBE on the group and DESCRIBE on each topic (topics
it may not describe are answered TOPIC_AUTHORIZATION_FAILED, or left out of an all-topics answer); OffsetDelete
DELETE on the group and READ on each topic; DescribeGroups DESCRIBE on each group; DeleteGroups DELETE on each
group; ListGroups answers every group to DESCRIBE on the cluster, else only the groups the principal may
DESCRIBE. A refused group gets GROUP_AUTHORIZATION_FAILED, a refused topic TOPIC_AUTHORIZATION_FAILED.
DeleteGroups of an id that is no classic or consumer group deletes a share group of that id (KIP-932: empty
only, its share-partitions' state tombstoned; `groups.share.deletion`).
OffsetCommit v10 and OffsetFetch v10 name topics by id (`offset_topic_ids`): a topic is authorized by the name
its id resolves to, and an id no topic has is answered UNKNOWN_TOPIC_ID before any check of the topic.

This module must never hold group state or decide group rules: that is
`kelp.broker.groups.group_coordinator`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import replace
from typing import Any, Protocol, Sequence, cast

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from kelp.broker.groups.coordinator_lookup import CoordinatorLocation, locator_of
from kelp.broker.groups.group import CommittedOffset
from kelp.broker.groups.group_coordinator import GroupCoordinator, GroupDescription
from kelp.broker.groups.share import SHARE_GROUP_TYPE, listed_share_groups
from kelp.broker.groups.share.deletion import delete_share_group
from kelp.broker.transactions.locator import txn_locator_of
from kelp.errors import ErrorCode

from ...loop_budget import LoopBudget
from ..access import AclOperation, ResourceType, access
from . import offset_topic_ids as ids
from .offset_topic_ids import TOPIC_IDS_VERSION
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class _FetchTopic(Protocol):
    """A topic of an OffsetFetch request (v1-v7 at the top level, v8+ per group)."""

    @property
    def name(self) -> str: ...

    @property
    def partition_indexes(self) -> list[int]: ...


# -- authorization: Kafka's group handlers -------------------------------------------------------------------
def _may(ctx: RequestContext, operation: AclOperation, group_id: str) -> bool:
    return access(ctx).allows(operation, ResourceType.GROUP, group_id)


def _coordinator_refused(ctx: RequestContext, key_type: int, key: str) -> CoordinatorLocation | None:
    """FindCoordinator (Kafka's getCoordinator): DESCRIBE on the group, or on the transactional id."""
    if key_type == 0 and not _may(ctx, AclOperation.DESCRIBE, key):
        return CoordinatorLocation(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    if key_type == 1 and not access(ctx).allows(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return CoordinatorLocation(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                   "Transactional Id authorization failed.")
    return None


def _topics_refused(ctx: RequestContext, operation: AclOperation, names: set[str]) -> set[str]:
    acc = access(ctx)
    return names - acc.allowed(operation, ResourceType.TOPIC, names) if acc.enabled else set()


def _listable(ctx: RequestContext, groups: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """ListGroups: every group to DESCRIBE on the cluster, else those the principal may DESCRIBE."""
    acc = access(ctx)
    if acc.allows_cluster(AclOperation.DESCRIBE):
        return groups
    return [g for g in groups if acc.allows(AclOperation.DESCRIBE, ResourceType.GROUP, g[0])]


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    return ctx.broker.groups


def _client_host(ctx: RequestContext) -> str:
    host = ctx.peer.rsplit(":", 1)[0] if ":" in ctx.peer else ctx.peer
    return "/" + host


# -- FindCoordinator -----------------------------------------------------------------

@handles(FindCoordinatorRequest, min_version=0, max_version=4)
async def handle_find_coordinator(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    """The leader of the group's `__consumer_offsets` partition (key type 0), or of the transactional id's
    `__transaction_state` partition (key type 1); each topic is created on first use."""
    key_type = getattr(request, "key_type", 0) if ctx.api_version >= 1 else 0

    async def answer(key: str) -> CoordinatorLocation:
        refused = _coordinator_refused(ctx, key_type, key)
        if refused is not None:
            return refused
        if key_type not in (0, 1):
            return CoordinatorLocation(ErrorCode.INVALID_REQUEST, f"key type {key_type} is not supported "
                                                                 "(groups, 0, and transactions, 1)")
        if key_type == 1:
            if not key:
                return CoordinatorLocation(ErrorCode.INVALID_REQUEST, "transactional id must not be empty")
            b = ctx.broker
            located = await txn_locator_of(config=b.config, topics=b.topics, cluster=b.cluster,
                                           coordinator=b.transactions).locate(key)
        elif not key and ctx.api_version < 4:
            return CoordinatorLocation(ErrorCode.INVALID_GROUP_ID, "group id must not be empty")
        else:
            located = await locator_of(ctx.broker).locate(key)
        if not located.error:
            located = _on_listener(ctx, located)
        if located.error:
            log.info("FindCoordinator for %s '%s' from %s: error %d: %s", "transactional id" if key_type else
                     "group", key, ctx.client, located.error, located.message)
        return located

    if ctx.api_version >= 4:
        C = FindCoordinatorResponse.Coordinator
        keys = list(request.coordinator_keys or [])
        found = await asyncio.gather(*(answer(k) for k in keys))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            C(key=k, node_id=loc.node_id, host=loc.host, port=loc.port, error_code=loc.error, error_message=loc.message)
            for k, loc in zip(keys, found, strict=True)
        ])
    loc = await answer(request.key)
    return FindCoordinatorResponse(
        throttle_time_ms=0, error_code=loc.error, error_message=loc.message,
        node_id=loc.node_id, host=loc.host, port=loc.port,
    )


def _on_listener(ctx: RequestContext, located: CoordinatorLocation) -> CoordinatorLocation:
    """The coordinator's address on the listener the request came in on (Kafka's rule), or
    COORDINATOR_NOT_AVAILABLE when that broker has no such listener."""
    cluster = ctx.broker.cluster
    endpoint = cluster.state.brokers.get(located.node_id)
    if endpoint is None and cluster.state.endpoint is not None and cluster.state.endpoint.id == located.node_id:
        endpoint = cluster.state.endpoint
    address = endpoint.address(ctx.listener) if endpoint is not None else (located.host, located.port)
    if address is None:
        return CoordinatorLocation(COORDINATOR_NOT_AVAILABLE, f"the coordinator, broker {located.node_id}, has no "
                                                              f"listener {ctx.listener}")
    return replace(located, host=address[0], port=address[1])


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ----------------------------------

@handles(JoinGroupRequest, min_version=0, max_version=9)
async def handle_join_group(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    coord = _coordinator(ctx)
    v = ctx.api_version
    M = JoinGroupResponse.JoinGroupResponseMember
    if not _may(ctx, AclOperation.READ, request.group_id):
        return JoinGroupResponse(throttle_time_ms=0, error_code=GROUP_DENIED, generation_id=-1, protocol_type=None,
                                 protocol_name=None if v >= 7 else "", leader="", skip_assignment=False, member_id="",
                                 members=[])
    result = await coord.join_group(
        request.group_id,
        request.member_id or "",
        group_instance_id=getattr(request, "group_instance_id", None) if v >= 5 else None,
        client_id=ctx.client_id or "",
        client_host=_client_host(ctx),
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if v >= 1 else -1,
        protocol_type=request.protocol_type,
        # Decoded from the wire, a bytes field is bytes (the stubs' ApiData form is for requests a client builds).
        protocols=[(p.name, cast(bytes, p.metadata)) for p in request.protocols or []],
        require_known_member_id=v >= 4,
    )
    if result.error and result.error != ErrorCode.MEMBER_ID_REQUIRED:
        log.info("JoinGroup of group '%s' member '%s' from %s: error %d",
                 request.group_id, request.member_id, ctx.client, result.error)
    protocol_name = result.protocol_name
    if protocol_name is None and v < 7:
        protocol_name = ""
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader or "",
        skip_assignment=result.skip_assignment,
        member_id=result.member_id or "",
        members=[M(member_id=m, group_instance_id=i, metadata=meta) for m, i, meta in result.members],
    )


@handles(SyncGroupRequest, min_version=0, max_version=5)
async def handle_sync_group(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    coord = _coordinator(ctx)
    v = ctx.api_version
    if not _may(ctx, AclOperation.READ, request.group_id):
        return SyncGroupResponse(throttle_time_ms=0, error_code=GROUP_DENIED, protocol_type=None, protocol_name=None,
                                 assignment=b"")
    result = await coord.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None) if v >= 3 else None,
        protocol_type=getattr(request, "protocol_type", None) if v >= 5 else None,
        protocol_name=getattr(request, "protocol_name", None) if v >= 5 else None,
        assignments={a.member_id: cast(bytes, a.assignment) for a in request.assignments or []},  # bytes: decoded
    )
    if result.error:
        log.info("SyncGroup of group '%s' member '%s' generation %d from %s: error %d",
                 request.group_id, request.member_id, request.generation_id, ctx.client, result.error)
    return SyncGroupResponse(
        throttle_time_ms=0, error_code=result.error, protocol_type=result.protocol_type,
        protocol_name=result.protocol_name, assignment=result.assignment or b"",
    )


@handles(HeartbeatRequest, min_version=0, max_version=4)
async def handle_heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    coord = _coordinator(ctx)
    if not _may(ctx, AclOperation.READ, request.group_id):
        return HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    code = coord.heartbeat(
        request.group_id, request.generation_id, request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None) if ctx.api_version >= 3 else None,
    )
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)


@handles(LeaveGroupRequest, min_version=0, max_version=5)
async def handle_leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    coord = _coordinator(ctx)
    v = ctx.api_version
    if not _may(ctx, AclOperation.READ, request.group_id):
        return LeaveGroupResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    if v >= 3:
        members = [(m.member_id or "", m.group_instance_id) for m in request.members or []]
    else:
        members = [(request.member_id, None)]
    top, results = await coord.leave_group(request.group_id, members)
    if v < 3:
        code = top or (results[0][2] if results else ErrorCode.NONE)
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code)
    R = LeaveGroupResponse.MemberResponse
    return LeaveGroupResponse(
        throttle_time_ms=0, error_code=top,
        members=[R(member_id=m, group_instance_id=i, error_code=c) for m, i, c in results],
    )


# -- offsets ---------------------------------------------------------------------------

@handles(OffsetCommitRequest, min_version=2, max_version=10)
async def handle_offset_commit(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    """v10 names topics by id: an id no topic has (or the zero UUID) is answered UNKNOWN_TOPIC_ID for each of its
    partitions, and the rest are committed as Kafka does; the others are authorized by the name the id resolves to."""
    coord = _coordinator(ctx)
    v = ctx.api_version
    T = OffsetCommitResponse.OffsetCommitResponseTopic
    P = T.OffsetCommitResponsePartition
    by_id = v >= TOPIC_IDS_VERSION
    log.debug("OffsetCommit v%d of group '%s' from %s: %d topics", v, request.group_id, ctx.client,
              len(request.topics or []))
    # (name, the request's topic): None for an id no topic has (v10); names by id are authorized like the others
    named = [(ids.name_of(ctx, t.topic_id) if by_id else t.name, t) for t in request.topics or []]

    def topic(name: str | None, t: Any, partitions: list[Any]) -> Any:
        return T(name=name if name is not None and not by_id else "", topic_id=t.topic_id if by_id else ids.NO_ID,
                 partitions=partitions)

    if not _may(ctx, AclOperation.READ, request.group_id):
        return OffsetCommitResponse(throttle_time_ms=0, topics=[
            topic(n, t, [P(partition_index=p.partition_index, error_code=GROUP_DENIED) for p in t.partitions or []])
            for n, t in named])
    refused = _topics_refused(ctx, AclOperation.READ, {n for n, _ in named if n is not None})
    unknown = any(n is None for n, _ in named)
    offsets: dict[tuple[str, int], CommittedOffset] = {}
    # Kafka's order per topic: an id no topic has, then TOPIC_AUTHORIZATION_FAILED, then UNKNOWN_TOPIC_OR_PARTITION
    # for a topic or partition the metadata does not hold; only what passes all three reaches the coordinator.
    turned_away: dict[tuple[str, int], int] = {}
    budget = LoopBudget()  # a commit may name thousands of partitions
    for name, t in named:
        if name is None:
            continue
        await budget.tick()
        for p in t.partitions or []:
            tp = (name, p.partition_index)
            if name in refused:
                turned_away[tp] = TOPIC_DENIED
            elif not ctx.broker.topics.has_partition(name, p.partition_index):
                turned_away[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets[tp] = CommittedOffset(
                    p.committed_offset,
                    p.committed_leader_epoch if v >= 6 else -1,
                    p.committed_metadata or "",
                    -1,
                )
    codes: dict[tuple[str, int], int] = {}
    # Kafka asks its coordinator nothing when no partition passed (an empty request included): such a commit
    # neither validates the member nor creates an empty group.
    if offsets:
        codes = await coord.commit_offsets(
            request.group_id,
            member_id=request.member_id or "",
            generation=request.generation_id_or_member_epoch,
            group_instance_id=getattr(request, "group_instance_id", None) if v >= 7 else None,
            offsets=offsets, api_version=v,
        )
    codes.update(turned_away)
    bad = {tp: c for tp, c in codes.items() if c}
    if bad or unknown:
        log.info("OffsetCommit v%d of group '%s' from %s: errors %s", v, request.group_id, ctx.client,
                 ", ".join([f"{t}-{p}:{c}" for (t, p), c in sorted(bad.items())[:10]]
                           + [f"{t.topic_id}:{ErrorCode.UNKNOWN_TOPIC_ID}" for n, t in named if n is None][:10]))
    topics = []
    for name, t in named:
        await budget.tick()
        topics.append(topic(name, t, [
            P(partition_index=p.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_ID if name is None
              else codes.get((name, p.partition_index), ErrorCode.NONE))
            for p in t.partitions or []
        ]))
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)


_FetchedPartition = tuple[int, CommittedOffset | None, int]  # partition, its committed offset, its error


def _fetch_group(ctx: RequestContext, group_id: str, topics: Sequence[_FetchTopic] | None,
                 require_stable: bool = False, member: tuple[str | None, int] = (None, -1),
                 ) -> tuple[int, list[tuple[str, list[_FetchedPartition]]]]:
    """(group error, [(topic, [(partition, CommittedOffset|None, error)])]). Kafka's checks: DESCRIBE on the group;
    topics asked for that the principal may not DESCRIBE are answered TOPIC_AUTHORIZATION_FAILED, and left out of
    an answer for every committed topic. With `require_stable` (v7+, KIP-447) a partition whose offset an open
    transaction holds is answered UNSTABLE_OFFSET_COMMIT (the consumer retries)."""
    if not _may(ctx, AclOperation.DESCRIBE, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    refused = _topics_refused(ctx, AclOperation.DESCRIBE, {t.name for t in topics}) if topics is not None else set()
    wanted = None if topics is None else [(t.name, p) for t in topics if t.name not in refused
                                          for p in t.partition_indexes or []]
    err, found = _coordinator(ctx).fetch_offsets(group_id, wanted, member_id=member[0], member_epoch=member[1])
    if err:
        return err, []
    by_topic: dict[str, list[_FetchedPartition]] = {}
    keys = wanted if wanted is not None else sorted(found)
    if wanted is None:
        describable = {t for t, _ in keys} - _topics_refused(ctx, AclOperation.DESCRIBE, {t for t, _ in keys})
        keys = [(t, p) for t, p in keys if t in describable]
    unstable = _coordinator(ctx).unstable_offsets(group_id, keys) if require_stable else set()
    for t, p in keys:
        if (t, p) in unstable:
            by_topic.setdefault(t, []).append((p, None, ErrorCode.UNSTABLE_OFFSET_COMMIT))
        else:
            by_topic.setdefault(t, []).append((p, found.get((t, p)), ErrorCode.NONE))
    for topic in topics or []:
        if topic.name in refused:
            by_topic.setdefault(topic.name, []).extend(
                (p, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in topic.partition_indexes or [])
    return 0, list(by_topic.items())


def _fetch_group_by_id(ctx: RequestContext, group_id: str, topics: Sequence[Any] | None, require_stable: bool,
                       member: tuple[str | None, int]) -> tuple[int, list[tuple[uuid.UUID, list[_FetchedPartition]]]]:
    """`_fetch_group` for OffsetFetch v10, whose topics are ids (Kafka's fetchPartitionOffsets/fetchAllOffsets):
    an id no topic has is answered UNKNOWN_TOPIC_ID after the others (not when the group itself fails); in an
    answer for every committed topic, a topic without an id now (deleted, its offsets not yet dropped) is left
    out, as Kafka cannot name it."""
    if topics is None:
        err, items = _fetch_group(ctx, group_id, None, require_stable, member)
        current = [(ids.id_of(ctx, name), parts) for name, parts in items]
        return err, [(tid, parts) for tid, parts in current if tid is not None]
    asked: dict[str, uuid.UUID] = {}
    known: list[_FetchTopic] = []
    unknown: list[tuple[uuid.UUID, list[_FetchedPartition]]] = []
    for t in topics:
        name = ids.name_of(ctx, t.topic_id)
        if name is None:
            unknown.append((t.topic_id or ids.NO_ID, [(p, None, ErrorCode.UNKNOWN_TOPIC_ID)
                                                      for p in t.partition_indexes or []]))
        else:
            asked[name] = t.topic_id
            known.append(ids.NamedTopic(name, list(t.partition_indexes or [])))
    err, items = _fetch_group(ctx, group_id, known, require_stable, member)
    if err:
        return err, []
    return err, [(asked[name], parts) for name, parts in items] + unknown


@handles(OffsetFetchRequest, min_version=1, max_version=10)
async def handle_offset_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    v = ctx.api_version
    if v >= 8:
        G = OffsetFetchResponse.OffsetFetchResponseGroup
        GT = G.OffsetFetchResponseTopics
        GP = GT.OffsetFetchResponsePartitions
        groups = []
        budget = LoopBudget()  # a request may name thousands of groups
        for g in request.groups or []:
            await budget.tick()
            member = (g.member_id, g.member_epoch) if v >= 9 else (None, -1)  # KIP-848: a member's fetch
            stable = bool(request.require_stable)
            log.debug("OffsetFetch v%d of group '%s' from %s: %s topics", v, g.group_id, ctx.client,
                      "all" if g.topics is None else len(g.topics))
            items: Sequence[tuple[str | uuid.UUID, list[_FetchedPartition]]]
            if v >= TOPIC_IDS_VERSION:
                err, items = _fetch_group_by_id(ctx, g.group_id, g.topics, stable, member)
            else:
                err, items = _fetch_group(ctx, g.group_id, g.topics, stable, member)
            groups.append(G(group_id=g.group_id, error_code=err, topics=[
                GT(name="" if isinstance(t, uuid.UUID) else t, topic_id=t if isinstance(t, uuid.UUID) else ids.NO_ID,
                   partitions=[
                    GP(partition_index=p, committed_offset=co.offset if co else -1,
                       committed_leader_epoch=co.leader_epoch if co else -1,
                       metadata=co.metadata if co else "", error_code=code)
                    for p, co, code in parts
                ]) for t, parts in items
            ]))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    T = OffsetFetchResponse.OffsetFetchResponseTopic
    P = T.OffsetFetchResponsePartition
    topics_req = request.topics
    if v < 2 and topics_req is None:
        topics_req = []
    err, items = _fetch_group(ctx, request.group_id, topics_req, v >= 7 and bool(request.require_stable))
    topics = [
        T(name=t, partitions=[
            P(partition_index=p, committed_offset=co.offset if co else -1,
              committed_leader_epoch=co.leader_epoch if co else -1,
              metadata=co.metadata if co else "",
              error_code=code or (err if v < 2 else ErrorCode.NONE))
            for p, co, code in parts
        ]) for t, parts in items
    ]
    if err and v < 2 and topics_req:
        topics = [T(name=t.name, partitions=[
            P(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=err)
            for p in t.partition_indexes or []]) for t in topics_req]
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=err)


@handles(OffsetDeleteRequest, min_version=0, max_version=0)
async def handle_offset_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    coord = _coordinator(ctx)
    T = OffsetDeleteResponse.OffsetDeleteResponseTopic
    P = T.OffsetDeleteResponsePartition
    if not _may(ctx, AclOperation.DELETE, request.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[])
    refused = _topics_refused(ctx, AclOperation.READ, {t.name for t in request.topics or []})
    wanted = [(t.name, p.partition_index) for t in request.topics or [] if t.name not in refused
              for p in t.partitions or []]
    err, codes = await coord.delete_offsets(request.group_id, wanted)
    for t in request.topics or []:
        if t.name in refused:
            codes.update({(t.name, p.partition_index): TOPIC_DENIED for p in t.partitions or []})
    return OffsetDeleteResponse(
        error_code=err, throttle_time_ms=0,
        topics=[] if err else [
            T(name=t.name, partitions=[
                P(partition_index=p.partition_index, error_code=codes.get((t.name, p.partition_index), ErrorCode.NONE))
                for p in t.partitions or []
            ]) for t in request.topics or []
        ],
    )


# -- admin ----------------------------------------------------------------------------

@handles(DescribeGroupsRequest, min_version=0, max_version=6)
async def handle_describe_groups(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    """Classic groups. As Kafka 4: a group that is not a classic one (a KIP-848 consumer group, described by
    ConsumerGroupDescribe) and a group that does not exist are `Dead` with no error below v6, and from v6
    (KIP-1043) GROUP_ID_NOT_FOUND with "Group G is not a classic group." / "Group G not found."."""
    coord = _coordinator(ctx)
    G = DescribeGroupsResponse.DescribedGroup
    acc = access(ctx)
    with_operations = ctx.api_version >= 3 and bool(getattr(request, "include_authorized_operations", False))
    groups = []
    for gid in request.groups or []:
        if not acc.allows(AclOperation.DESCRIBE, ResourceType.GROUP, gid):
            groups.append(G(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid, group_state="",
                            protocol_type="", protocol_data="", members=[]))
            continue
        d = coord.describe_group(gid)
        if d.error == ErrorCode.NONE and (gid in coord.consumer.groups or d.state == "Dead"):
            why = "is not a classic group" if gid in coord.consumer.groups else "not found"
            v6 = ctx.api_version >= 6
            group = G(error_code=ErrorCode.GROUP_ID_NOT_FOUND if v6 else ErrorCode.NONE,
                      error_message=f"Group {gid} {why}." if v6 else None, group_id=gid, group_state="Dead",
                      protocol_type="", protocol_data="", members=[])
        else:
            group = _described_classic(d)
        if with_operations and group.error_code == ErrorCode.NONE:
            group.authorized_operations = acc.operations(ResourceType.GROUP, gid)
        groups.append(group)
    return DescribeGroupsResponse(throttle_time_ms=0, groups=groups)


def _described_classic(d: GroupDescription) -> Any:
    G = DescribeGroupsResponse.DescribedGroup
    M = G.DescribedGroupMember
    stable = d.state in ("Stable", "CompletingRebalance")
    return G(
        error_code=d.error, group_id=d.group_id, group_state=d.state, protocol_type=d.protocol_type,
        protocol_data=d.protocol,
        members=[
            M(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
              client_host=m.client_host,
              member_metadata=m.metadata_for(d.protocol) if stable and d.protocol in m.protocol_names() else b"",
              member_assignment=m.assignment if d.state == "Stable" else b"")
            for m in d.members
        ],
    )


# A group is "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848, ConsumerGroupHeartbeat): ListGroups v5 types.
GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"


@handles(ListGroupsRequest, min_version=0, max_version=5)
async def handle_list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    coord = _coordinator(ctx)
    states = getattr(request, "states_filter", None) if ctx.api_version >= 4 else None
    types = getattr(request, "types_filter", None) if ctx.api_version >= 5 else None
    L = ListGroupsResponse.ListedGroup
    wanted = {t.lower() for t in types} if types else None
    listed = []
    shares = listed_share_groups(coord, states=states or None)
    for g, pt, st in _listable(ctx, sorted(coord.list_groups(states=states or None) + shares)):
        # KIP-848 groups: "consumer"; KIP-932 share groups: "share"
        kind = SHARE_GROUP_TYPE if pt == SHARE_GROUP_TYPE else CONSUMER_GROUP_TYPE if g in coord.consumer.groups \
            else GROUP_TYPE
        if wanted is None or kind in wanted:
            listed.append(L(group_id=g, protocol_type=pt, group_state=st, group_type=kind))
    return ListGroupsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, groups=listed)


@handles(DeleteGroupsRequest, min_version=0, max_version=2)
async def handle_delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    coord = _coordinator(ctx)
    names = list(dict.fromkeys(request.groups_names or []))  # Kafka answers each group once
    acc = access(ctx)
    allowed = acc.allowed(AclOperation.DELETE, ResourceType.GROUP, names)
    codes = await coord.delete_groups([g for g in names if g in allowed])
    for g, code in codes.items():  # not a classic or consumer group: a share group's state goes (KIP-932)
        if code == ErrorCode.GROUP_ID_NOT_FOUND:
            codes[g] = await delete_share_group(ctx.broker, g)
    codes.update({g: ErrorCode.GROUP_AUTHORIZATION_FAILED for g in names if g not in allowed})
    R = DeleteGroupsResponse.DeletableGroupResult
    return DeleteGroupsResponse(throttle_time_ms=0, results=[R(group_id=g, error_code=codes[g]) for g in names])
