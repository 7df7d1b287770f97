"""The ACL matrix for the administration APIs: topics, partitions, configs, log directories, reassignments and
leader elections, ApiVersions, SCRAM users and client quotas. A principal without the ACL Kafka requires gets
Kafka's error and learns nothing it may not describe; a principal holding exactly that ACL succeeds. Principals and
requests: `matrix.py`.
"""

from __future__ import annotations

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
    AlterUserScramCredentialsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClientQuotasRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest

from kelp.errors import ErrorCode
from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import (
    ALICE,
    BOB,
    CLUSTER_DENIED,
    GHOST,
    GROUP,
    GROUP_DENIED,
    SECRET,
    TOPIC_DENIED,
    acl,
    grant,
    without_name,
)

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


async def test_create_topics(b: InProcessBroker) -> None:
    T = CreateTopicsRequest.CreatableTopic
    req = CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
        T(name="made", num_partitions=1, replication_factor=1, assignments=[], configs=[])])
    refused = await b.call(req, 7, principal=ALICE)
    assert (refused.topics[0].error_code, refused.topics[0].error_message) == (TOPIC_DENIED, "Authorization failed.")
    await grant(b, acl("TOPIC", "made", "CREATE"))
    created = await b.call(req, 7, principal=BOB)
    made = created.topics[0]
    assert made.error_code == 0 and made.configs == [] and made.topic_config_error_code == TOPIC_DENIED
    await grant(b, acl("TOPIC", "seen", "CREATE"), acl("TOPIC", "seen", "DESCRIBE_CONFIGS"))
    seen = await b.call(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
        T(name="seen", num_partitions=1, replication_factor=1, assignments=[], configs=[])]), 7, principal=BOB)
    assert seen.topics[0].error_code == 0 and seen.topics[0].configs and seen.topics[0].topic_config_error_code == 0


async def test_delete_topics(b: InProcessBroker) -> None:
    req = DeleteTopicsRequest(topic_names=[SECRET, GHOST], timeout_ms=5000)
    refused = await b.call(req, 5, principal=ALICE)
    secret, ghost = refused.responses
    assert secret.error_code == ghost.error_code == TOPIC_DENIED and without_name(secret) == without_name(ghost)
    await grant(b, acl("TOPIC", SECRET, "DESCRIBE"), acl("TOPIC", GHOST, "DESCRIBE"))
    described = {r.name: r.error_code for r in (await b.call(req, 5, principal=BOB)).responses}
    assert described == {SECRET: TOPIC_DENIED, GHOST: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    await grant(b, acl("TOPIC", SECRET, "DELETE"))
    deleted = await b.call(DeleteTopicsRequest(topic_names=[SECRET], timeout_ms=5000), 5, principal=BOB)
    assert deleted.responses[0].error_code == 0 and not b.parts.topics.exists(SECRET)


async def test_create_partitions(b: InProcessBroker) -> None:
    T = CreatePartitionsRequest.CreatePartitionsTopic
    req = CreatePartitionsRequest(timeout_ms=5000, validate_only=False, topics=[
        T(name=SECRET, count=2, assignments=None), T(name=GHOST, count=2, assignments=None)])
    refused = await b.call(req, 3, principal=ALICE)
    secret, ghost = refused.results
    assert secret.error_code == ghost.error_code == TOPIC_DENIED and without_name(secret) == without_name(ghost)
    await grant(b, acl("TOPIC", SECRET, "ALTER"))
    grown = await b.call(CreatePartitionsRequest(timeout_ms=5000, validate_only=False,
                                                 topics=[T(name=SECRET, count=2, assignments=None)]), 3, principal=BOB)
    assert grown.results[0].error_code == 0


async def test_describe_configs(b: InProcessBroker) -> None:
    R = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest(resources=[R(resource_type=TOPIC_RESOURCE, resource_name=n, configuration_keys=None)
                                            for n in (SECRET, GHOST)]
                                 + [R(resource_type=BROKER_RESOURCE, resource_name="0", configuration_keys=None)])
    refused = await b.call(req, 4, principal=ALICE)
    secret, ghost, broker = refused.results
    assert secret.error_code == ghost.error_code == TOPIC_DENIED and broker.error_code == CLUSTER_DENIED
    assert without_name(secret) == without_name(ghost) and secret.configs == []
    await grant(b, acl("TOPIC", SECRET, "ALTER_CONFIGS"), acl("CLUSTER", "kafka-cluster", "DESCRIBE_CONFIGS"))
    allowed = await b.call(req, 4, principal=BOB)
    secret, _, broker = allowed.results
    assert secret.error_code == 0 and secret.configs and broker.error_code == 0  # ALTER_CONFIGS implies DESCRIBE_


async def test_alter_configs(b: InProcessBroker) -> None:
    IR = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = IR.AlterableConfig
    incremental = IncrementalAlterConfigsRequest(validate_only=False, resources=[
        IR(resource_type=TOPIC_RESOURCE, resource_name=SECRET, configs=[C(name="retention.ms", config_operation=0,
                                                                          value="1000")]),
        IR(resource_type=BROKER_RESOURCE, resource_name="", configs=[C(name="log.retention.ms", config_operation=0,
                                                                       value="1000")])])
    refused = await b.call(incremental, 1, principal=ALICE)
    assert [r.error_code for r in refused.responses] == [TOPIC_DENIED, CLUSTER_DENIED]
    LR = AlterConfigsRequest.AlterConfigsResource
    legacy = AlterConfigsRequest(validate_only=False, resources=[
        LR(resource_type=TOPIC_RESOURCE, resource_name=SECRET,
           configs=[LR.AlterableConfig(name="retention.ms", value="2000")])])
    assert (await b.call(legacy, 2, principal=ALICE)).responses[0].error_code == TOPIC_DENIED
    await grant(b, acl("TOPIC", SECRET, "ALTER_CONFIGS"), acl("CLUSTER", "kafka-cluster", "ALTER_CONFIGS"))
    assert [r.error_code for r in (await b.call(incremental, 1, principal=BOB)).responses] == [0, 0]
    assert (await b.call(legacy, 2, principal=BOB)).responses[0].error_code == 0


async def test_group_configs(b: InProcessBroker) -> None:
    """A GROUP config resource (type 32): DESCRIBE_CONFIGS / ALTER_CONFIGS on the group, as Kafka's ConfigHelper
    and authorizeAlterResource; refused GROUP_AUTHORIZATION_FAILED with no configs and nothing changed."""
    R = DescribeConfigsRequest.DescribeConfigsResource
    describe = DescribeConfigsRequest(resources=[R(resource_type=32, resource_name=GROUP, configuration_keys=None)])
    IR = IncrementalAlterConfigsRequest.AlterConfigsResource
    alter = IncrementalAlterConfigsRequest(validate_only=False, resources=[IR(
        resource_type=32, resource_name=GROUP, configs=[IR.AlterableConfig(
            name="share.auto.offset.reset", config_operation=0, value="earliest")])])
    refused = (await b.call(describe, 4, principal=ALICE)).results[0]
    assert (refused.error_code, refused.configs) == (GROUP_DENIED, [])
    assert (await b.call(alter, 1, principal=ALICE)).responses[0].error_code == GROUP_DENIED
    assert b.parts.topics.group_configs(GROUP) == {}
    await grant(b, acl("GROUP", GROUP, "DESCRIBE_CONFIGS"))
    assert (await b.call(describe, 4, principal=BOB)).results[0].error_code == 0
    assert (await b.call(alter, 1, principal=BOB)).responses[0].error_code == GROUP_DENIED  # describe is not alter
    await grant(b, acl("GROUP", GROUP, "ALTER_CONFIGS"))
    assert (await b.call(alter, 1, principal=BOB)).responses[0].error_code == 0
    assert b.parts.topics.group_configs(GROUP) == {"share.auto.offset.reset": "earliest"}


async def test_describe_log_dirs(b: InProcessBroker) -> None:
    req = DescribeLogDirsRequest(topics=None)
    refused = await b.call(req, 4, principal=ALICE)
    assert refused.error_code == CLUSTER_DENIED and refused.results == []
    await grant(b, acl("CLUSTER", "kafka-cluster", "DESCRIBE"))
    allowed = await b.call(req, 4, principal=BOB)
    assert allowed.error_code == 0 and any(t.name == SECRET for r in allowed.results for t in r.topics)


async def test_cluster_admin(b: InProcessBroker) -> None:
    """AlterPartitionReassignments and ElectLeaders: ALTER on the cluster; ListPartitionReassignments DESCRIBE."""
    AT = AlterPartitionReassignmentsRequest.ReassignableTopic
    alter = AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[
        AT(name=SECRET, partitions=[AT.ReassignablePartition(partition_index=0, replicas=None)])])
    refused = await b.call(alter, 0, principal=ALICE)
    assert refused.error_code == CLUSTER_DENIED and refused.responses[0].partitions[0].error_code == CLUSTER_DENIED
    listing = ListPartitionReassignmentsRequest(timeout_ms=5000, topics=None)
    assert (await b.call(listing, 0, principal=ALICE)).error_code == CLUSTER_DENIED
    TP = ElectLeadersRequest.TopicPartitions
    elect = ElectLeadersRequest(election_type=0, timeout_ms=5000, topic_partitions=[TP(topic=SECRET, partitions=[0])])
    refused_election = await b.call(elect, 2, principal=ALICE)
    assert refused_election.error_code == CLUSTER_DENIED
    assert refused_election.replica_election_results[0].partition_result[0].error_code == CLUSTER_DENIED
    await grant(b, acl("CLUSTER", "kafka-cluster", "ALTER"))
    assert (await b.call(listing, 0, principal=BOB)).error_code == 0  # ALTER implies DESCRIBE
    assert (await b.call(alter, 0, principal=BOB)).error_code == 0
    assert (await b.call(elect, 2, principal=BOB)).error_code == 0


async def test_api_versions(b: InProcessBroker) -> None:
    answer = await b.call(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 3,
                          principal=ALICE)
    assert answer.error_code == 0 and {k.api_key for k in answer.api_keys} >= {29, 30, 31}


async def test_scram_users(b: InProcessBroker) -> None:
    """DescribeUserScramCredentials DESCRIBE, AlterUserScramCredentials ALTER, DescribeClientQuotas DESCRIBE_CONFIGS,
    all on the cluster."""
    A = AlterUserScramCredentialsRequest
    alter = A(deletions=[], upsertions=[A.ScramCredentialUpsertion(name="carol", mechanism=2, iterations=8192,
                                                                   salt=b"s" * 16, salted_password=b"p" * 64)])
    describe = DescribeUserScramCredentialsRequest(users=None)
    quotas = DescribeClientQuotasRequest(components=[], strict=False)
    refused = await b.call(alter, 0, principal=ALICE)
    assert [(r.user, r.error_code) for r in refused.results] == [("carol", CLUSTER_DENIED)]
    assert (await b.call(describe, 0, principal=ALICE)).error_code == CLUSTER_DENIED
    assert (await b.call(quotas, 1, principal=ALICE)).error_code == CLUSTER_DENIED
    await grant(b, acl("CLUSTER", "kafka-cluster", "ALTER"), acl("CLUSTER", "kafka-cluster", "DESCRIBE_CONFIGS"))
    assert [r.error_code for r in (await b.call(alter, 0, principal=BOB)).results] == [0]
    described = await b.call(describe, 0, principal=BOB)  # ALTER implies DESCRIBE
    assert described.error_code == 0 and [r.user for r in described.results] == ["carol"]
    assert (await b.call(quotas, 1, principal=BOB)).error_code == 0
