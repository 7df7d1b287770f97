"""KIP-932 share-group APIs: ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78) and
ShareAcknowledge (79), each at v1, the stable version (v0 was Kafka 4.0's early access; v2 of fetch and
acknowledge adds KIP-1206's acquire modes and KIP-1222's renew acknowledgements, not served here).

Why: Kafka's `KafkaShareConsumer` joins a share group with ShareGroupHeartbeat, reads with ShareFetch (which
also carries acknowledgements of what it read before) and acknowledges alone with ShareAcknowledge (commitSync,
close). This module turns those messages into `kelp.broker.groups.share` calls and back, reads the records a
share fetch acquires through the replica manager (bounded long-poll: MaxWaitMs), and answers with Kafka's
errors: INVALID_RECORD_STATE for an acknowledgement of a record the member does not hold (per partition,
nothing of it applied), SHARE_SESSION_NOT_FOUND / INVALID_SHARE_SESSION_EPOCH for a session out of step,
UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH for a heartbeat out of step.

Authorization (Kafka's KafkaApis): heartbeat needs READ on the group and DESCRIBE on its topics; fetch and
acknowledge READ on the group and READ on each topic; describe DESCRIBE on each group.

This module must never hold share-group state or decide delivery rules.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from typing import Any, cast

from kelp.broker.groups.share import ShareGroups, initial_start, share_groups_of
from kelp.broker.groups.share.manager import SessionError
from kelp.broker.groups.share.membership import ShareHeartbeat
from kelp.broker.groups.share.partition import AckBatch
from kelp.broker.replica.manager import FetchPartition
from kelp.errors import ErrorCode, KelpError
from kelp.records.header import iter_headers

from ..access import AclOperation, ResourceType, access
from ..messages import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from .consumer_groups import describe_groups, described_group_error
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

HB: Any = ShareGroupHeartbeatResponse
DG: Any = cast(Any, ShareGroupDescribeResponse).DescribedGroup
FR: Any = cast(Any, ShareFetchResponse).ShareFetchableTopicResponse
AR: Any = cast(Any, ShareAcknowledgeResponse).ShareAcknowledgeTopicResponse
TP = tuple[str, int]  # (topic id hex, partition)


def _other_protocol(ctx: RequestContext, group_id: str) -> bool:
    """A classic or consumer group of that id exists: it is not a share group (Kafka: GROUP_ID_NOT_FOUND)."""
    classic = ctx.broker.groups.groups.get(group_id)
    return (classic is not None and bool(classic.members)) or group_id in ctx.broker.groups.consumer.groups


# -- ShareGroupHeartbeat ------------------------------------------------------------------------------------
@handles(ShareGroupHeartbeatRequest, min_version=1, max_version=1)
async def handle_share_group_heartbeat(ctx: RequestContext, request: Any) -> ShareGroupHeartbeatResponse:
    def refuse(code: int, message: str) -> ShareGroupHeartbeatResponse:
        return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=code, error_message=message, member_id=None,
                                           member_epoch=-1, heartbeat_interval_ms=0, assignment=None)

    acc = access(ctx)
    if not acc.allows(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return refuse(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    names = request.subscribed_topic_names
    if names and acc.enabled:
        refused = set(names) - acc.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, set(names))
        if refused:
            return refuse(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Topic authorization failed for {sorted(refused)}.")
    code = ctx.broker.groups.check_group(request.group_id)
    if code != ErrorCode.NONE:
        return refuse(code, f"group {request.group_id} is not coordinated here now")
    if _other_protocol(ctx, request.group_id):
        return refuse(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a share group.")
    host = ctx.peer.rsplit(":", 1)[0] if ":" in ctx.peer else ctx.peer
    ans = await share_groups_of(ctx.broker).membership.heartbeat(ShareHeartbeat(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        rack_id=request.rack_id, subscribed_topic_names=tuple(names) if names is not None else None,
        client_id=ctx.client_id or "", client_host="/" + host))
    if ans.error:
        log.info("ShareGroupHeartbeat of group '%s' member '%s' epoch %d from %s: error %d (%s)",
                 request.group_id, request.member_id, request.member_epoch, ctx.client, ans.error, ans.message)
        return refuse(ans.error, ans.message or "")
    assignment = None
    if ans.assignment is not None:
        A = HB.Assignment
        assignment = A(topic_partitions=[A.TopicPartitions(topic_id=uuid.UUID(hex=t), partitions=sorted(ps))
                                         for t, ps in sorted(ans.assignment.items())])
    return ShareGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, member_id=ans.member_id,
        member_epoch=ans.member_epoch, heartbeat_interval_ms=ans.heartbeat_interval_ms, assignment=assignment)


# -- ShareGroupDescribe -------------------------------------------------------------------------------------
@handles(ShareGroupDescribeRequest, min_version=1, max_version=1)
async def handle_share_group_describe(ctx: RequestContext, request: Any) -> ShareGroupDescribeResponse:
    def one(gid: str) -> Any:
        code = ctx.broker.groups.check_group(gid)
        if code != ErrorCode.NONE:
            return described_group_error(DG, gid, code, None)
        group = share_groups_of(ctx.broker).membership.describe(gid)
        if group is None:
            return described_group_error(DG, gid, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
        A = DG.Member.Assignment
        members = [DG.Member(
            member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
            assignment=A(topic_partitions=[
                A.TopicPartitions(topic_id=uuid.UUID(hex=t), topic_name=ctx.broker.topics.name_of(t) or "",
                                  partitions=sorted(ps)) for t, ps in sorted(m.assigned.items())]))
            for m in sorted(group.members.values(), key=lambda m: m.member_id)]
        return DG(error_code=ErrorCode.NONE, error_message=None, group_id=gid, group_state=group.state,
                  group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                  assignor_name="simple", members=members, authorized_operations=-(2**31))

    return ShareGroupDescribeResponse(throttle_time_ms=0, groups=describe_groups(ctx, request.group_ids, DG, one))


# -- acknowledgements (both APIs) ---------------------------------------------------------------------------
def _ack_batches(p: Any) -> list[AckBatch]:
    return [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in p.acknowledgement_batches]


def _topic_refusal(ctx: RequestContext, topic_id: str) -> tuple[str | None, int]:
    """(topic name, error) of a topic id a share request names: UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED."""
    name = ctx.broker.topics.name_of(topic_id)
    if name is None:
        return None, ErrorCode.UNKNOWN_TOPIC_ID
    if not access(ctx).allows(AclOperation.READ, ResourceType.TOPIC, name):
        return name, ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return name, ErrorCode.NONE


async def _acknowledge(ctx: RequestContext, sg: ShareGroups, group: str, member: str,
                       topics: Any) -> dict[TP, tuple[int, str | None]]:
    out: dict[TP, tuple[int, str | None]] = {}
    for t in topics or []:
        tid = t.topic_id.hex if t.topic_id is not None else ""
        name, refusal = _topic_refusal(ctx, tid)
        for p in t.partitions:
            batches = _ack_batches(p)
            if not batches:
                continue
            part = ctx.broker.replicas.get_partition(name, p.partition_index) if name is not None else None
            code = refusal
            if code == ErrorCode.NONE and (part is None or not part.is_leader):
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER  # the records were acquired from another leader
            if code != ErrorCode.NONE:
                out[(tid, p.partition_index)] = (code, None)
                continue
            out[(tid, p.partition_index)] = await sg.partitions.acknowledge((group, tid, p.partition_index), member,
                                                                            batches)
    return out


def _uuid(topic_id: str) -> uuid.UUID:
    """The wire form of a topic id; the zero id for one the request left null (answered UNKNOWN_TOPIC_ID)."""
    return uuid.UUID(hex=topic_id) if topic_id else uuid.UUID(int=0)


def _leader(ctx: RequestContext, name: str | None, partition: int) -> Any:
    part = ctx.broker.replicas.get_partition(name, partition) if name is not None else None
    L = FR.PartitionData.LeaderIdAndEpoch
    return L(leader_id=part.leader, leader_epoch=part.leader_epoch) if part is not None else L(leader_id=-1,
                                                                                                 leader_epoch=-1)


async def _fetchable(ctx: RequestContext, sg: ShareGroups, group: str, wanted: list[TP], max_bytes: int,
                     ) -> tuple[dict[TP, int], dict[TP, str], list[tuple[TP, FetchPartition]]]:
    """For each partition of the share session: its error, or its name and where a fetch would read (the
    share-partition's next acquirable offset; none while its window of in-flight records is full)."""
    errors: dict[TP, int] = {}
    names: dict[TP, str] = {}
    asked: list[tuple[TP, FetchPartition]] = []
    for tid, pi in wanted:
        name, refusal = _topic_refusal(ctx, tid)
        if refusal != ErrorCode.NONE or name is None:
            errors[(tid, pi)] = refusal
            continue
        names[(tid, pi)] = name
        part = ctx.broker.replicas.get_partition(name, pi)
        if part is None or not part.is_leader:
            errors[(tid, pi)] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            continue
        try:
            sp = await sg.partitions.get((group, tid, pi), log_start=part.log.log_start_offset,
                                         log_end=part.high_watermark,
                                         initial=functools.partial(initial_start, ctx.broker, group, part))
        except KelpError as exc:
            errors[(tid, pi)] = exc.code
            continue
        offset = sp.fetch_offset()
        if offset is not None:
            asked.append(((tid, pi), FetchPartition(name, pi, offset, max_bytes)))
    return errors, names, asked


# -- ShareFetch ---------------------------------------------------------------------------------------------
@handles(ShareFetchRequest, min_version=1, max_version=1)
async def handle_share_fetch(ctx: RequestContext, request: Any) -> ShareFetchResponse:
    sg = share_groups_of(ctx.broker)
    lock_ms = sg.partitions.config_of(request.group_id or "").lock_duration_ms  # the group's own, else the broker's

    def top(code: int, message: str) -> ShareFetchResponse:
        return ShareFetchResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                  acquisition_lock_timeout_ms=lock_ms, responses=[], node_endpoints=[])

    group, member, epoch = request.group_id, request.member_id, request.share_session_epoch
    if not group or not member:
        return top(ErrorCode.INVALID_REQUEST, "GroupId and MemberId are required.")
    if not access(ctx).allows(AclOperation.READ, ResourceType.GROUP, group):
        return top(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    try:
        session = sg.partitions.open_or_continue(group, member, epoch)
    except SessionError as exc:
        return top(exc.code, str(exc))
    acks = await _acknowledge(ctx, sg, group, member, request.topics)
    if epoch == -1:
        sg.partitions.close(group, member)
        wanted: list[TP] = []
    else:
        for t in request.topics or []:
            for p in t.partitions:
                session.partitions.add((t.topic_id.hex if t.topic_id is not None else "", p.partition_index))
        for f in request.forgotten_topics_data or []:
            for pi in f.partitions:
                session.partitions.discard((f.topic_id.hex if f.topic_id is not None else "", pi))
        wanted = sorted(session.partitions)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000.0
    while True:
        errors, names, asked = await _fetchable(ctx, sg, group, wanted, request.max_bytes)
        remaining_ms = int((deadline - loop.time()) * 1000)
        if asked or not wanted or errors or remaining_ms <= 0:
            break
        # Every partition's window is full of in-flight records: wait (bounded by MaxWaitMs) for a change — a
        # lock expiring, a release, an acknowledgement — and try to acquire again; an empty answer at the first
        # wake would send the client straight back (and the records freed to another member's next fetch).
        await sg.partitions.wait_for_change(remaining_ms)
    records: dict[TP, tuple[bytes, list[Any]]] = {}
    if asked:
        results = await ctx.broker.replicas.fetch([fp for _k, fp in asked],
                                                  max_wait_ms=max(0, int((deadline - loop.time()) * 1000)),
                                                  min_bytes=request.min_bytes, max_bytes=request.max_bytes)
        budget = request.max_records if request.max_records > 0 else 500
        for (key, _fp), r in zip(asked, results, strict=True):
            if r.error is not None:
                errors[key] = r.error.code
                continue
            data = bytes(cast(bytes, r.records))
            heads = list(iter_headers(data))
            got = sg.partitions.acquire((group, key[0], key[1]), member,
                                        [(h.base_offset, h.last_offset, h.is_control) for h in heads],
                                        high_watermark=r.high_watermark, max_records=max(budget, 1))
            if not got:
                continue
            budget -= sum(a.last - a.first + 1 for a in got)
            last = got[-1].last
            end = next((h.position + h.size for h in heads if h.last_offset >= last), len(data))
            records[key] = (data[:end], got)
    P = FR.PartitionData
    by_topic: dict[str, list[Any]] = {}
    for key in sorted(set(acks) | set(errors) | set(records)):
        tid, pi = key
        ack_code, ack_message = acks.get(key, (ErrorCode.NONE, None))
        data, got = records.get(key, (b"", []))
        by_topic.setdefault(tid, []).append(P(
            partition_index=pi, error_code=errors.get(key, ErrorCode.NONE), error_message=None,
            acknowledge_error_code=ack_code, acknowledge_error_message=ack_message,
            current_leader=_leader(ctx, names.get(key) or ctx.broker.topics.name_of(tid), pi), records=data,
            acquired_records=[P.AcquiredRecords(first_offset=a.first, last_offset=a.last,
                                                delivery_count=a.delivery_count) for a in got]))
    return ShareFetchResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                              acquisition_lock_timeout_ms=lock_ms, node_endpoints=[],
                              responses=[FR(topic_id=_uuid(t), partitions=ps) for t, ps in by_topic.items()])


# -- ShareAcknowledge ---------------------------------------------------------------------------------------
@handles(ShareAcknowledgeRequest, min_version=1, max_version=1)
async def handle_share_acknowledge(ctx: RequestContext, request: Any) -> ShareAcknowledgeResponse:
    def top(code: int, message: str) -> ShareAcknowledgeResponse:
        return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=code, error_message=message, responses=[],
                                        node_endpoints=[])

    group, member, epoch = request.group_id, request.member_id, request.share_session_epoch
    if not group or not member:
        return top(ErrorCode.INVALID_REQUEST, "GroupId and MemberId are required.")
    if not access(ctx).allows(AclOperation.READ, ResourceType.GROUP, group):
        return top(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    if epoch == 0:
        return top(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session.")
    sg = share_groups_of(ctx.broker)
    try:
        sg.partitions.open_or_continue(group, member, epoch)
    except SessionError as exc:
        return top(exc.code, str(exc))
    acks = await _acknowledge(ctx, sg, group, member, request.topics)
    if epoch == -1:
        sg.partitions.close(group, member)
    P = AR.PartitionData
    by_topic: dict[str, list[Any]] = {}
    for (tid, pi), (code, message) in sorted(acks.items()):
        by_topic.setdefault(tid, []).append(P(
            partition_index=pi, error_code=code, error_message=message,
            current_leader=P.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1) if (name := ctx.broker.topics.name_of(
                tid)) is None else _ack_leader(ctx, name, pi)))
    responses = [AR(topic_id=_uuid(t), partitions=ps) for t, ps in by_topic.items()]
    return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                                    node_endpoints=[], responses=responses)


def _ack_leader(ctx: RequestContext, name: str, partition: int) -> Any:
    part = ctx.broker.replicas.get_partition(name, partition)
    L = AR.PartitionData.LeaderIdAndEpoch
    return L(leader_id=part.leader if part else -1, leader_epoch=part.leader_epoch if part else -1)

