"""Every version of every served API answers a refused principal and an allowed one with a response its
clients decode: the refusals are built by hand per API, and older versions lack fields newer ones have."""

from __future__ import annotations

from pathlib import Path

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterUserScramCredentialsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeClientQuotasRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeLogDirsRequest,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    ListGroupsRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest

from kelp.broker.kafka.handlers import get_handler
from tests.authorization.harness import ADMIN, InProcessBroker
from tests.authorization.matrix import ALICE, commit, fetch, join, produce

LO = ListOffsetsRequest.ListOffsetsTopic
EP = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
DR = DeleteRecordsRequest.DeleteRecordsTopic
OD = OffsetDeleteRequest.OffsetDeleteRequestTopic
REQUESTS = [
    join(),
    SyncGroupRequest(group_id="g1", generation_id=1, member_id="m", protocol_type="consumer", protocol_name="range",
                     assignments=[]),
    HeartbeatRequest(group_id="g1", generation_id=1, member_id="m"),
    LeaveGroupRequest(group_id="g1", member_id="m", members=[LeaveGroupRequest.MemberIdentity(member_id="m")]),
    commit("secret"),
    OffsetFetchRequest(group_id="g1", topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="secret",
                                                                                         partition_indexes=[0])],
                       groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g1", topics=None)]),
    OffsetDeleteRequest(group_id="g1", topics=[OD(name="secret", partitions=[OD.OffsetDeleteRequestPartition(
        partition_index=0)])]),
    FindCoordinatorRequest(key="g1", key_type=0, coordinator_keys=["g1"]),
    DescribeGroupsRequest(groups=["g1"], include_authorized_operations=True),
    ListGroupsRequest(),
    DeleteGroupsRequest(groups_names=["g1"]),
    DescribeLogDirsRequest(topics=None),
    ElectLeadersRequest(election_type=0, timeout_ms=5000, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic="secret", partitions=[0])]),
    ListPartitionReassignmentsRequest(timeout_ms=5000, topics=None),
    InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=6000, producer_id=-1, producer_epoch=-1),
    MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="secret")], allow_auto_topic_creation=False,
                    include_cluster_authorized_operations=True, include_topic_authorized_operations=True),
    ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[LO(name="secret", partitions=[
        LO.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1, max_num_offsets=1)])]),
    OffsetForLeaderEpochRequest(replica_id=-1, topics=[EP(topic="secret", partitions=[
        EP.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])]),
    DeleteRecordsRequest(timeout_ms=5000, topics=[DR(name="secret", partitions=[
        DR.DeleteRecordsPartition(partition_index=0, offset=0)])]),
    CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[CreateTopicsRequest.CreatableTopic(
        name="made", num_partitions=1, replication_factor=1, assignments=[], configs=[])]),
    DeleteTopicsRequest(topic_names=["secret"], topics=[DeleteTopicsRequest.DeleteTopicState(name="secret")],
                        timeout_ms=5000),
    CreatePartitionsRequest(timeout_ms=5000, validate_only=False, topics=[
        CreatePartitionsRequest.CreatePartitionsTopic(name="secret", count=2, assignments=None)]),
    DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name="secret", configuration_keys=None)]),
    fetch("secret"),
    produce("secret"),
    AlterUserScramCredentialsRequest(deletions=[AlterUserScramCredentialsRequest.ScramCredentialDeletion(
        name="carol", mechanism=2)], upsertions=[]),
    DescribeUserScramCredentialsRequest(users=[DescribeUserScramCredentialsRequest.UserName(name="carol")]),
    DescribeClientQuotasRequest(components=[], strict=False),
    AlterClientQuotasRequest(validate_only=True, entries=[AlterClientQuotasRequest.EntryData(
        entity=[AlterClientQuotasRequest.EntryData.EntityData(entity_type="user", entity_name="carol")],
        ops=[AlterClientQuotasRequest.EntryData.OpData(key="producer_byte_rate", value=1024.0, remove=False)])]),
]


async def test_every_version_answers_refused_and_allowed_principals(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path) as b:
        await b.parts.topics.create_topic("secret", 1, 1)
        for request in REQUESTS:
            spec = get_handler(request.API_KEY)
            assert spec is not None
            for version in range(spec.min_version, spec.max_version + 1):
                for principal in (ALICE, ADMIN):  # the harness decodes each answer as a client would
                    await b.call(request, version, principal=principal)
