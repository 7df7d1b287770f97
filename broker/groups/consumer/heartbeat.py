"""ConsumerGroupHeartbeat's request and answer as the coordinator sees them, and the request's validation.

Why: the handler (`kafka/handlers/consumer_groups.py`) turns the wire message into `HeartbeatRequest` (topic
ids as 32 hex digits) and back; the coordinator never sees a wire type. `invalid_request` is Kafka's
throwIfConsumerGroupHeartbeatRequestIsInvalid: a request it refuses is answered INVALID_REQUEST (or
UNSUPPORTED_ASSIGNOR) before anything is looked up or changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from kelp.errors import ErrorCode

from .assignors import Assignment
from .model import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, ClassicMetadata
from .regex import TopicFilter

__all__ = ["HeartbeatRequest", "HeartbeatResult", "invalid_request"]


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None  # TopicPartitions; None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""
    version: int = 1
    # The topic names of a regex's matches the member may describe (its ACLs); None: authorization is off.
    topic_filter: TopicFilter | None = None
    classic: ClassicMetadata | None = None  # a classic member's JoinGroup (`migration.join`), never the wire's


@dataclass(frozen=True)
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: the member's assignment did not change


def invalid_request(req: HeartbeatRequest, assignors: list[str]) -> tuple[int, str] | None:
    """(error, message) when Kafka refuses the request as malformed; None when it is well formed."""
    bad = ErrorCode.INVALID_REQUEST
    if not req.group_id:
        return bad, "GroupId can't be empty."
    if req.rack_id is not None and not req.rack_id:
        return bad, "RackId can't be empty."
    if req.instance_id is not None and not req.instance_id:
        return bad, "InstanceId can't be empty."
    if req.member_epoch == 0:
        if req.version >= 1 and not req.member_id:
            return bad, "MemberId can't be empty."
        if req.rebalance_timeout_ms == -1:
            return bad, "RebalanceTimeoutMs must be provided in first request."
        if req.owned is None or any(req.owned.values()):
            return bad, "TopicPartitions must be empty when (re-)joining."
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            return bad, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    elif req.member_epoch > 0 or req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
        if not req.member_id:
            return bad, "MemberId can't be empty."
        if req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
            return bad, "InstanceId can't be null."
    else:
        return bad, f"MemberEpoch {req.member_epoch} is invalid."
    if req.rebalance_timeout_ms != -1 and req.rebalance_timeout_ms <= 0:
        return bad, "RebalanceTimeoutMs must be positive."
    if req.subscribed_topic_names is not None and any(not t for t in req.subscribed_topic_names):
        return bad, "SubscribedTopicNames can't contain an empty topic name."
    if req.server_assignor is not None and req.server_assignor not in assignors:
        return (ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(assignors)}.")
    return None
