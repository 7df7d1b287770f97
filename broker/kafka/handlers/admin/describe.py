"""DescribeCluster and DescribeTopicPartitions: what Kafka 4's admin clients ask instead of Metadata.

Why: a Java AdminClient of Kafka 4 asks DescribeCluster (KIP-700) for `describeCluster` and DescribeTopicPartitions
(KIP-966) for `describeTopics` whenever the broker advertises them; a broker serving only Metadata makes it fall
back, and answers what Metadata cannot say (fenced brokers, paging through a topic of thousands of partitions).

- DescribeCluster v0-v2: the live brokers on the request's listener, the cluster id and the controller id, as
  Metadata gives them (`metadata.visible_brokers`), the cluster's authorized operations when asked (DESCRIBE on the
  cluster, else none). Kelp's controller is one of its brokers: asked for the controllers' endpoints (v1+
  `endpoint_type` 2) a broker answers MISMATCHED_ENDPOINT_TYPE, as a Kafka broker does; an unknown type is
  UNSUPPORTED_ENDPOINT_TYPE. `include_fenced_brokers` (v2) adds nothing: a broker whose lease ran out leaves the
  list until it is back (Kelp keeps no fenced registrations).
- DescribeTopicPartitions v0: the topics named (all, when none is), sorted by name, from the request's cursor on,
  at most `response_partition_limit` partitions (capped by `max.request.partition.size.limit`, 2,000) in one answer,
  the next cursor where it stopped. A topic the principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED
  when named and left out when all are asked; an unknown one UNKNOWN_TOPIC_OR_PARTITION; nothing is auto-created.
  A cursor naming a topic the request does not name is INVALID_REQUEST (Kafka's rule). Eligible leader replicas
  (KIP-966's ELR) are not kept by Kelp: the lists are empty, as Kafka answers with ELR off.

This module must never create a topic or change state.
"""

from __future__ import annotations

import uuid

from kafka.protocol.admin import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)

from kelp.errors import ErrorCode

from ....loop_budget import LoopBudget
from ...access import AclOperation, ResourceType, access
from ..metadata import visible_brokers
from ..registry import RequestContext, handles

BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2
_NO_OPERATIONS = -(1 << 31)  # Kafka's "none given" for a topic's authorized operations
_B = DescribeClusterResponse.DescribeClusterBroker
_T = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
_P = _T.DescribeTopicPartitionsResponsePartition
_Cursor = DescribeTopicPartitionsResponse.Cursor
_NO_ID = uuid.UUID(int=0)


def _bits(operations: set[int]) -> int:
    return sum(1 << op for op in operations)


@handles(DescribeClusterRequest, min_version=0, max_version=2)
async def handle_describe_cluster(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    endpoint = request.endpoint_type if ctx.api_version >= 1 else BROKERS_ENDPOINT
    cluster_id = str(ctx.broker.config["cluster.id"])
    if endpoint != BROKERS_ENDPOINT:
        code, message = (ErrorCode.MISMATCHED_ENDPOINT_TYPE, "The request was sent to an endpoint of type BROKER, "
                         "but we wanted an endpoint of type CONTROLLER: Kelp's controller is one of its brokers")
        if endpoint != CONTROLLERS_ENDPOINT:
            code, message = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, f"Unsupported endpoint type {endpoint}"
        return DescribeClusterResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                       endpoint_type=endpoint, cluster_id=cluster_id, controller_id=-1, brokers=[])
    listed, controller_id = visible_brokers(ctx)
    operations: set[int] | None = None  # not asked: Kafka's Integer.MIN_VALUE
    if request.include_cluster_authorized_operations:
        acc = access(ctx)
        operations = acc.operations(ResourceType.CLUSTER, "kafka-cluster") \
            if acc.allows_cluster(AclOperation.DESCRIBE) else set()
    response = DescribeClusterResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, endpoint_type=endpoint,
        cluster_id=cluster_id, controller_id=controller_id,
        brokers=[_B(broker_id=i, host=host, port=port, rack=rack, is_fenced=False) for i, host, port, rack in listed])
    if operations is not None:
        response.authorized_operations = operations
    return response


@handles(DescribeTopicPartitionsRequest, min_version=0, max_version=0)
async def handle_describe_topic_partitions(ctx: RequestContext, request: DescribeTopicPartitionsRequest
                                           ) -> DescribeTopicPartitionsResponse:
    broker = ctx.broker
    acc = access(ctx)
    named = [t.name for t in request.topics or [] if t.name is not None]
    cursor = request.cursor
    start_topic = cursor.topic_name if cursor is not None else None
    start_partition = max(0, cursor.partition_index) if cursor is not None else 0
    if named and start_topic is not None and start_topic not in named:
        return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=[_T(
            error_code=ErrorCode.INVALID_REQUEST, name=start_topic, topic_id=_NO_ID, is_internal=False,
            partitions=[], topic_authorized_operations=_NO_OPERATIONS)], next_cursor=None)
    names = sorted(set(named)) if named else sorted(t.name for t in broker.topics.list_topics())
    if start_topic is not None:
        names = [n for n in names if n >= start_topic]
    describable = await acc.allowed_in_slices(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    limit = min(max(1, request.response_partition_limit or 1), int(broker.config["max.request.partition.size.limit"]))
    alive = broker.cluster.state.brokers
    topics = []
    next_cursor = None
    budget = LoopBudget()
    for i, name in enumerate(names):
        await budget.tick()
        if name not in describable:
            if named:  # asked for by name: refused, never told whether it exists
                topics.append(_T(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=_NO_ID,
                                 is_internal=False, partitions=[], topic_authorized_operations=_NO_OPERATIONS))
            continue
        info = broker.topics.get(name)
        if info is None:
            topics.append(_T(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=_NO_ID,
                             is_internal=False, partitions=[], topic_authorized_operations=_NO_OPERATIONS))
            continue
        if limit == 0:  # the answer is full: the next one starts with this topic
            next_cursor = _Cursor(topic_name=name, partition_index=0)
            break
        first = start_partition if name == start_topic else 0
        states = info.partition_states
        end = min(len(states), first + limit)
        partitions = []
        for p in range(first, end):
            state = states[p]
            partitions.append(_P(
                error_code=ErrorCode.LEADER_NOT_AVAILABLE if state.leader < 0 or state.leader not in alive
                else ErrorCode.NONE,
                partition_index=p, leader_id=state.leader, leader_epoch=state.leader_epoch,
                replica_nodes=list(state.replicas), isr_nodes=list(state.isr), eligible_leader_replicas=[],
                last_known_elr=[], offline_replicas=[r for r in state.replicas if r not in alive]))
        limit -= end - first
        topics.append(_T(error_code=ErrorCode.NONE, name=name, topic_id=uuid.UUID(hex=info.topic_id),
                         is_internal=bool(info.internal), partitions=partitions,
                         topic_authorized_operations=_bits(acc.operations(ResourceType.TOPIC, name))))
        if end < len(states):  # stopped inside this topic
            next_cursor = _Cursor(topic_name=name, partition_index=end)
            break
        if limit == 0 and i + 1 < len(names):
            next_cursor = _Cursor(topic_name=names[i + 1], partition_index=0)
            break
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)
