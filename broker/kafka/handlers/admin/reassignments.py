"""AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders: Kafka's replication admin.

Why: `kafka-reassign-partitions`, `kafka-leader-election` and AdminClient
users steer replicas with these APIs; each goes to the controller through
the cluster member, and every refusal carries Kafka's code and a message
naming the partition.

Authorization (ControllerApis): AlterPartitionReassignments and ElectLeaders need ALTER on the cluster,
ListPartitionReassignments DESCRIBE; refused, the request is answered CLUSTER_AUTHORIZATION_FAILED at the top and
for every partition it names (Kafka's getErrorResponse).
"""

from __future__ import annotations

import logging

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

from kelp.errors import ErrorCode, KelpError

from ....loop_budget import LoopBudget
from ...access import AclOperation, access, denied_message
from ..error_log import PartitionErrors
from ..registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

PREFERRED, UNCLEAN = 0, 1
_Ongoing = ListPartitionReassignmentsResponse.OngoingTopicReassignment.OngoingPartitionReassignment
DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


# -- authorization: ControllerApis' authorizeClusterOperation for these APIs ----------------------------------
def _may(ctx: RequestContext, operation: AclOperation) -> bool:
    return access(ctx).allows_cluster(operation)


@handles(AlterPartitionReassignmentsRequest, min_version=0, max_version=0)
async def handle_alter_reassignments(ctx: RequestContext, request: AlterPartitionReassignmentsRequest
                                     ) -> AlterPartitionReassignmentsResponse:
    R = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
    P = R.ReassignablePartitionResponse
    if not _may(ctx, AclOperation.ALTER):
        why = denied_message(ctx, "AlterPartitionReassignments")
        return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=DENIED, error_message=why, responses=[
            R(name=t.name, partitions=[P(partition_index=p.partition_index, error_code=DENIED, error_message=why)
                                       for p in t.partitions]) for t in request.topics])
    responses = []
    budget = LoopBudget()  # each call may complete without suspending: thousands would be one step of the loop
    errors = PartitionErrors("AlterPartitionReassignments", ctx.client)
    for t in request.topics:
        parts = []
        for p in t.partitions:
            await budget.tick()
            try:
                await ctx.broker.cluster.routing.call("reassign", topic=t.name, partition=p.partition_index,
                                              replicas=list(p.replicas) if p.replicas is not None else None)
                parts.append(P(partition_index=p.partition_index, error_code=ErrorCode.NONE, error_message=None))
            except KelpError as exc:
                errors.add(t.name, p.partition_index, exc)
                parts.append(P(partition_index=p.partition_index, error_code=exc.code, error_message=str(exc)))
        responses.append(R(name=t.name, partitions=parts))
    errors.log(log)
    return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                                               responses=responses)


@handles(ListPartitionReassignmentsRequest, min_version=0, max_version=0)
async def handle_list_reassignments(ctx: RequestContext, request: ListPartitionReassignmentsRequest
                                    ) -> ListPartitionReassignmentsResponse:
    T = ListPartitionReassignmentsResponse.OngoingTopicReassignment
    P = T.OngoingPartitionReassignment
    if not _may(ctx, AclOperation.DESCRIBE):
        return ListPartitionReassignmentsResponse(
            throttle_time_ms=0, error_code=DENIED, error_message=denied_message(ctx, "ListPartitionReassignments"),
            topics=[T(name=t.name, partitions=[P(partition_index=p, replicas=[], adding_replicas=[],
                                                 removing_replicas=[]) for p in t.partition_indexes]
                      ) for t in request.topics or []])
    wanted = None if request.topics is None else {(t.name, p) for t in request.topics for p in t.partition_indexes}
    by_topic: dict[str, list[_Ongoing]] = {}
    for topic in ctx.broker.topics.list_topics():
        for p, s in enumerate(topic.partition_states):
            if s.reassigning and (wanted is None or (topic.name, p) in wanted):
                by_topic.setdefault(topic.name, []).append(P(
                    partition_index=p, replicas=list(s.replicas), adding_replicas=list(s.adding),
                    removing_replicas=list(s.removing)))
    return ListPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
        topics=[T(name=name, partitions=parts) for name, parts in sorted(by_topic.items())])


@handles(ElectLeadersRequest, min_version=0, max_version=2)
async def handle_elect_leaders(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    R = ElectLeadersResponse.ReplicaElectionResult
    P = R.PartitionResult
    election_type = getattr(request, "election_type", PREFERRED) if ctx.api_version >= 1 else PREFERRED
    topics = request.topic_partitions
    if not _may(ctx, AclOperation.ALTER):
        why = denied_message(ctx, "ElectLeaders")
        return ElectLeadersResponse(throttle_time_ms=0, error_code=DENIED, replica_election_results=[
            R(topic=t.topic, partition_result=[P(partition_id=p, error_code=DENIED, error_message=why)
                                               for p in t.partitions]) for t in topics or []])
    names: list[tuple[str, list[int] | None]]  # (topic, its partitions; None: every one)
    if topics is None:
        names = [(t.name, None) for t in ctx.broker.topics.list_topics()]
    else:
        names = [(t.topic, list(t.partitions)) for t in topics]
    results = []
    for name, partitions in names:
        if election_type != PREFERRED:
            msg = "unclean elections on request are not supported; set unclean.leader.election.enable on the topic"
            results.append(R(topic=name, partition_result=[P(partition_id=p, error_code=ErrorCode.INVALID_REQUEST,
                                                             error_message=msg)
                                                           for p in (partitions or [])]))
            continue
        try:
            out = (await ctx.broker.cluster.routing.call("elect_preferred_leaders",
                                                 topic=name, partitions=partitions)).get("results")
            if not isinstance(out, dict):
                raise KelpError(f"the controller's answer to elect_preferred_leaders for '{name}' has no results")
            res = []
            for key, code in sorted(out.items()):
                p = int(key.rsplit("-", 1)[1])
                error = code if isinstance(code, int) else ErrorCode.UNKNOWN_SERVER_ERROR
                res.append(P(partition_id=p, error_code=error, error_message=None))
            results.append(R(topic=name, partition_result=res))
        except KelpError as exc:
            results.append(R(topic=name,
                             partition_result=[P(partition_id=p, error_code=exc.code, error_message=str(exc))
                                                           for p in (partitions or [])]))
    return ElectLeadersResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, replica_election_results=results)
