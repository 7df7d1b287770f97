"""KIP-932 share-group administration: DescribeShareGroupOffsets (90, v0-1), AlterShareGroupOffsets (91, v0)
and DeleteShareGroupOffsets (92, v0).

Why: Kafka's `kafka-share-groups --describe` shows each share-partition's start offset and lag, and
`--reset-offsets` (on an empty group) moves the start offsets, the way `kafka-consumer-groups` does for
committed offsets; both reach the group's coordinator. Describing reads each share-partition's state (in memory
where this broker leads the partition, else its snapshot in `__share_group_state`); altering goes to each
partition's leader (here, or over the control plane: `POST /cluster/v1/share-state/reset`), which writes the
new start and forgets what was in flight. `--delete-offsets` deletes the state of the group's share-partitions of
some topics (`groups.share.deletion`). Kafka's rules: DESCRIBE on the group (and on each topic) to describe, READ
on the group and on each topic to alter, DELETE on the group and READ on each topic to delete offsets;
NON_EMPTY_GROUP while the group has members.

This module must never hold share-group state or decide delivery rules.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

from kelp.broker.groups.share import reset_here, share_groups_of
from kelp.broker.groups.share.deletion import NO_OFFSETS, delete_share_partitions, is_share_group
from kelp.broker.groups.share.state_log import key_json
from kelp.errors import ErrorCode, KelpError

from ...loop_budget import LoopBudget
from ..access import AclOperation, ResourceType, access
from ..messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)
from .registry import RequestContext, handles


# -- DescribeShareGroupOffsets ------------------------------------------------------------------------------
@handles(DescribeShareGroupOffsetsRequest, min_version=0, max_version=1)
async def handle_describe_share_group_offsets(ctx: RequestContext, request: Any) -> DescribeShareGroupOffsetsResponse:
    """Each share-partition's start offset (and from v1 its lag), as `kafka-share-groups --describe` shows; the
    group's partitions when no topics are named: those of its members' topics and those with state here."""
    R: Any = DescribeShareGroupOffsetsResponse
    G = R.DescribeShareGroupOffsetsResponseGroup
    T = G.DescribeShareGroupOffsetsResponseTopic
    P = T.DescribeShareGroupOffsetsResponsePartition
    acc = access(ctx)
    out = []
    budget = LoopBudget()  # a request may name thousands of topics and partitions (the loop-lag guard's width)
    for g in request.groups or []:
        gid = g.group_id
        code: int = ErrorCode.NONE if acc.allows(AclOperation.DESCRIBE, ResourceType.GROUP, gid) \
            else ErrorCode.GROUP_AUTHORIZATION_FAILED
        code = code or ctx.broker.groups.check_group(gid)
        if code != ErrorCode.NONE:
            out.append(G(group_id=gid, topics=[], error_code=code, error_message=None))
            continue
        sg = share_groups_of(ctx.broker)
        wanted: dict[str, set[int]] = {}
        if g.topics is None:
            group = sg.membership.describe(gid)
            for m in group.members.values() if group is not None else ():
                for tid, ps in m.assigned.items():
                    wanted.setdefault(ctx.broker.topics.name_of(tid) or "", set()).update(ps)
            for tid, p in sg.partitions.groups_partitions(gid):
                wanted.setdefault(ctx.broker.topics.name_of(tid) or "", set()).add(p)
            wanted.pop("", None)
        else:
            for t in g.topics:
                wanted.setdefault(t.topic_name, set()).update(t.partitions)
        topics = []
        for name in sorted(wanted):
            await budget.tick()
            info = ctx.broker.topics.get(name)
            if info is None or not acc.allows(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if info is None else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                topics.append(T(topic_name=name, topic_id=uuid.UUID(int=0), partitions=[P(
                    partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1, error_code=error,
                    error_message=None) for p in sorted(wanted[name])]))
                continue
            parts = []
            for p in sorted(wanted[name]):
                await budget.tick()
                part = ctx.broker.replicas.get_partition(name, p)
                try:
                    found = await sg.partitions.start_and_lag((gid, info.topic_id, p),
                                                              high_watermark=part.high_watermark if part else 0)
                except KelpError as exc:
                    parts.append(P(partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1, error_code=exc.code,
                                   error_message=str(exc)))
                    continue
                start, lag = found if found is not None else (-1, -1)
                parts.append(P(partition_index=p, start_offset=start, leader_epoch=part.leader_epoch if part else -1,
                               lag=lag, error_code=ErrorCode.NONE, error_message=None))
            topics.append(T(topic_name=name, topic_id=uuid.UUID(hex=info.topic_id), partitions=parts))
        out.append(G(group_id=gid, topics=topics, error_code=ErrorCode.NONE, error_message=None))
    return DescribeShareGroupOffsetsResponse(throttle_time_ms=0, groups=out)


# -- AlterShareGroupOffsets ---------------------------------------------------------------------------------
@handles(AlterShareGroupOffsetsRequest, min_version=0, max_version=0)
async def handle_alter_share_group_offsets(ctx: RequestContext, request: Any) -> AlterShareGroupOffsetsResponse:
    R: Any = AlterShareGroupOffsetsResponse
    T = R.AlterShareGroupOffsetsResponseTopic
    P = T.AlterShareGroupOffsetsResponsePartition
    gid = request.group_id
    acc = access(ctx)

    def refuse(code: int, message: str | None) -> AlterShareGroupOffsetsResponse:
        return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                              responses=[])

    if not acc.allows(AclOperation.READ, ResourceType.GROUP, gid):
        return refuse(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    code = ctx.broker.groups.check_group(gid)
    if code != ErrorCode.NONE:
        return refuse(code, None)
    sg = share_groups_of(ctx.broker)
    group = sg.membership.describe(gid)
    if group is not None and group.members:
        return refuse(ErrorCode.NON_EMPTY_GROUP, f"Share group {gid} is not empty: its offsets cannot be altered.")
    out = []
    budget = LoopBudget()
    for t in request.topics or []:
        info = ctx.broker.topics.get(t.topic_name)
        refusal: int = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if info is None else ErrorCode.NONE
        if info is not None and not acc.allows(AclOperation.READ, ResourceType.TOPIC, t.topic_name):
            refusal = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        parts = []
        for p in t.partitions:
            await budget.tick()
            error: int = refusal
            message: str | None = None
            if error == ErrorCode.NONE and info is not None and not 0 <= p.partition_index < info.partitions:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if error == ErrorCode.NONE and info is not None:
                key = (gid, info.topic_id, p.partition_index)
                try:
                    url = sg.partitions.state.broker_url(t.topic_name, p.partition_index)
                    if url is None:
                        await reset_here(ctx.broker, key, p.start_offset)
                    else:
                        await sg.partitions.state.remote(url, "reset", {**key_json(key), "start": p.start_offset})
                except KelpError as exc:
                    error, message = exc.code, str(exc)
            parts.append(P(partition_index=p.partition_index, error_code=error, error_message=message))
        out.append(T(topic_name=t.topic_name, topic_id=uuid.UUID(hex=info.topic_id) if info else uuid.UUID(int=0),
                     partitions=parts))
    return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                                          responses=out)


# -- DeleteShareGroupOffsets --------------------------------------------------------------------------------
@handles(DeleteShareGroupOffsetsRequest, min_version=0, max_version=0)
async def handle_delete_share_group_offsets(ctx: RequestContext, request: Any) -> DeleteShareGroupOffsetsResponse:
    """Kafka's GroupCoordinatorService.deleteShareGroupOffsets: the state of the (empty) share group's
    share-partitions of each named topic deleted; a topic refused, unknown or without state answered alone."""
    T: Any = cast(Any, DeleteShareGroupOffsetsResponse).DeleteShareGroupOffsetsResponseTopic
    gid = request.group_id
    acc = access(ctx)

    def answer(code: int, message: str | None, topics: list[Any]) -> DeleteShareGroupOffsetsResponse:
        return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                               responses=topics)

    if not acc.allows(AclOperation.DELETE, ResourceType.GROUP, gid):
        return answer(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", [])
    code = ctx.broker.groups.check_group(gid)
    if code != ErrorCode.NONE:
        return answer(code, None, [])
    names = list(dict.fromkeys(t.topic_name for t in request.topics or []))
    if not names:
        return answer(ErrorCode.NONE, None, [])
    code, keys = await is_share_group(ctx.broker, gid)
    if code != ErrorCode.NONE:
        message = f"Share group {gid} is not empty." if code == ErrorCode.NON_EMPTY_GROUP else None
        return answer(code, message, [])
    out = []
    for name in names:
        info = ctx.broker.topics.get(name)
        tid = uuid.UUID(hex=info.topic_id) if info is not None else uuid.UUID(int=0)
        if not acc.allows(AclOperation.READ, ResourceType.TOPIC, name):
            out.append(T(topic_name=name, topic_id=uuid.UUID(int=0), error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                         error_message="Topic authorization failed."))
            continue
        mine = {k for k in keys if info is not None and k[1] == info.topic_id}
        if not mine:
            out.append(T(topic_name=name, topic_id=tid, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         error_message=NO_OFFSETS if info is not None else
                         "This server does not host this topic-partition."))
            continue
        failed = [c for c in (await delete_share_partitions(ctx.broker, mine)).values() if c != ErrorCode.NONE]
        out.append(T(topic_name=name, topic_id=tid, error_code=failed[0] if failed else ErrorCode.NONE,
                     error_message=None))
    return answer(ErrorCode.NONE, None, out)
