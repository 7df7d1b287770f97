"""KIP-848 consumer-group APIs: ConsumerGroupHeartbeat (API key 68) and ConsumerGroupDescribe (69), v0-1.

Why: a Kafka 4 client with `group.protocol=consumer` (the Java consumer, librdkafka) joins, heartbeats,
reconciles and leaves through ConsumerGroupHeartbeat alone, and admin tools describe such groups with
ConsumerGroupDescribe. This module turns the wire messages (`kelp.broker.kafka.messages`, Kafka's schemas)
into `kelp.broker.groups.consumer` calls and back: topic ids are 32 hex digits inside the coordinator and
UUIDs on the wire. v1 of the heartbeat adds SubscribedTopicRegex (resolved by the coordinator,
`groups.consumer.regex`) and has the client make its member id; v1 of describe adds MemberType (0: a classic
member of a mixed group, `groups.consumer.migration`; 1: a consumer-protocol member).

Authorization (Kafka's KafkaApis): the heartbeat needs READ on the group and DESCRIBE on every subscribed
topic (GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED), and a regex's matches are only the topics
the member may DESCRIBE; describe needs DESCRIBE on each group.

This module must never hold group state or decide group rules.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Callable, cast

from kelp.broker.groups.consumer.heartbeat import HeartbeatRequest
from kelp.broker.groups.consumer.model import ConsumerGroup
from kelp.errors import ErrorCode

from ..access import AclOperation, ResourceType, access
from ..messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

HB = ConsumerGroupHeartbeatResponse
# The nested structs kafka-python builds from the schema at import (no stubs name them: typed as Any here).
_HBAssignment: Any = cast(Any, HB).Assignment
DG: Any = cast(Any, ConsumerGroupDescribeResponse).DescribedGroup
CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = 0, 1  # MemberType (v1)


def _client_host(ctx: RequestContext) -> str:
    host = ctx.peer.rsplit(":", 1)[0] if ":" in ctx.peer else ctx.peer
    return "/" + host


def _assignment(a: dict[str, frozenset[int]]) -> Any:
    return _HBAssignment(topic_partitions=[
        _HBAssignment.TopicPartitions(topic_id=uuid.UUID(hex=t), partitions=sorted(ps)) for t, ps in sorted(a.items())])


@handles(ConsumerGroupHeartbeatRequest, min_version=0, max_version=1)
async def handle_consumer_group_heartbeat(ctx: RequestContext,
                                          request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    def refuse(code: int, message: str) -> ConsumerGroupHeartbeatResponse:
        return HB(throttle_time_ms=0, error_code=code, error_message=message, member_id=None, member_epoch=-1,
                  heartbeat_interval_ms=0, assignment=None)

    acc = access(ctx)
    if not acc.allows(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return refuse(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    names = request.subscribed_topic_names
    if names and acc.enabled:
        refused = set(names) - acc.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, set(names))
        if refused:
            return refuse(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                          f"Topic authorization failed for topics {sorted(refused)}.")
    owned: dict[str, frozenset[int]] | None = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            if tp.partitions:
                owned[tp.topic_id.hex] = frozenset(owned.get(tp.topic_id.hex, frozenset()) | set(tp.partitions))
    result = await ctx.broker.groups.consumer.heartbeat(HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=tuple(names) if names is not None else None,
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None) if ctx.api_version >= 1 else None,
        server_assignor=request.server_assignor, owned=owned, client_id=ctx.client_id or "",
        client_host=_client_host(ctx), version=ctx.api_version,
        topic_filter=(lambda ts: acc.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, ts)) if acc.enabled else None,
    ))
    if result.error:
        log.info("ConsumerGroupHeartbeat of group '%s' member '%s' epoch %d from %s: error %d (%s)",
                 request.group_id, request.member_id, request.member_epoch, ctx.client, result.error, result.message)
        return refuse(result.error, result.message or "")
    return HB(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, member_id=result.member_id,
              member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
              assignment=_assignment(result.assignment) if result.assignment is not None else None)


def _described(ctx: RequestContext, group: ConsumerGroup) -> Any:
    consumer = ctx.broker.groups.consumer
    A = DG.Member.Assignment
    TP = A.TopicPartitions

    def assignment(a: dict[str, frozenset[int]]) -> Any:
        return A(topic_partitions=[TP(topic_id=uuid.UUID(hex=t), topic_name=consumer.topics.name_of(t) or "",
                                      partitions=sorted(ps)) for t, ps in sorted(a.items())])

    members = [DG.Member(
        member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
        client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex, assignment=assignment(m.assigned),
        target_assignment=assignment(group.target.get(m.member_id, {})),
        member_type=CONSUMER_MEMBER_TYPE if m.classic is None else CLASSIC_MEMBER_TYPE,
    ) for m in sorted(group.members.values(), key=lambda m: m.member_id)]
    return DG(error_code=ErrorCode.NONE, error_message=None, group_id=group.group_id, group_state=group.state.value,
              group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch, assignor_name=group.assignor,
              members=members, authorized_operations=-(2**31))


def described_group_error(dg: Any, group_id: str, code: int, message: str | None) -> Any:
    """A DescribedGroup that carries only an error: ConsumerGroupDescribe's and ShareGroupDescribe's (`dg`, the
    response's class) have the same fields."""
    return dg(error_code=code, error_message=message, group_id=group_id, group_state="", group_epoch=-1,
              assignment_epoch=-1, assignor_name="", members=[], authorized_operations=-(2**31))


def describe_groups(ctx: RequestContext, group_ids: list[str] | None, dg: Any,
                    describe: Callable[[str], Any]) -> list[Any]:
    """The DescribedGroups of a ConsumerGroupDescribe or ShareGroupDescribe (`dg`, the response's class): each
    group refused without DESCRIBE on it, else what `describe` (one group id) answers."""
    acc = access(ctx)
    out = []
    for gid in group_ids or []:
        if not acc.allows(AclOperation.DESCRIBE, ResourceType.GROUP, gid):
            out.append(described_group_error(dg, gid, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                             "Group authorization failed."))
        else:
            out.append(describe(gid))
    return out


@handles(ConsumerGroupDescribeRequest, min_version=0, max_version=1)
async def handle_consumer_group_describe(ctx: RequestContext,
                                         request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    def one(gid: str) -> Any:
        found = ctx.broker.groups.consumer.describe(gid)
        if found.group is None:
            return described_group_error(DG, gid, found.error, found.message)
        return _described(ctx, found.group)

    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=describe_groups(ctx, request.group_ids, DG, one))
