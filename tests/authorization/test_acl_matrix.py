"""The ACL matrix: for every Kafka API the broker serves, a principal without the ACL Kafka requires gets
Kafka's error and learns nothing it may not describe (an existing topic it may not describe answers exactly
as a missing one); a principal holding exactly that ACL succeeds.

`test_every_served_api_is_in_the_matrix` keeps it complete: an API added to the registry without a row here
fails it. Principals: `alice` holds no ACL; `bob` is granted, per test, the one Kafka names; `broker` is the
inter-broker principal with CLUSTER_ACTION; `admin` is a super user.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
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
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest, WriteTxnMarkersRequest

from kelp.broker.kafka.handlers import all_handlers
from kelp.broker.kafka.messages import (
    AlterShareGroupOffsetsRequest,
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)
from kelp.errors import ErrorCode
from kelp.records.build import build_batch
from kelp.security.principal import KafkaPrincipal
from tests.authorization.harness import InProcessBroker

ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")
BROKER = KafkaPrincipal.user("broker")
SECRET, GHOST, GROUP = "secret", "ghost", "g1"
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
UNKNOWN_TOPIC_ID = ErrorCode.UNKNOWN_TOPIC_ID
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED

# API key -> the tests below that cover it
COVERED = {
    0: "produce", 1: "fetch", 2: "list_offsets", 3: "metadata", 8: "offset_commit", 9: "offset_fetch",
    10: "find_coordinator", 11: "membership", 12: "membership", 13: "membership", 14: "membership",
    15: "describe_groups", 16: "list_groups", 18: "api_versions", 19: "create_topics", 20: "delete_topics",
    21: "delete_records", 22: "init_producer_id", 23: "offset_for_leader_epoch", 29: "test_acl_apis.py",
    30: "test_acl_apis.py", 31: "test_acl_apis.py", 32: "describe_configs", 33: "alter_configs",
    35: "describe_log_dirs", 37: "create_partitions", 42: "delete_groups", 43: "cluster_admin",
    44: "alter_configs", 45: "cluster_admin", 46: "cluster_admin", 47: "offset_delete",
    48: "scram_users", 50: "scram_users", 51: "scram_users", 27: "write_txn_markers",
    24: "test_acl_transactions.py", 25: "test_acl_transactions.py", 26: "test_acl_transactions.py",
    28: "test_acl_transactions.py", 65: "test_acl_transactions.py", 66: "test_acl_transactions.py",
    61: "test_acl_txn_tools.py", 49: "test_client_quotas.py", 68: "consumer_group", 69: "consumer_group",
    76: "share_group", 77: "share_group", 78: "share_group", 79: "share_group", 90: "share_group", 91: "share_group",
    92: "share_group",
    60: "tests/broker/test_describe_apis.py", 75: "tests/broker/test_describe_apis.py",
    # SaslHandshake, SaslAuthenticate: how a connection authenticates, before any principal exists; no ACL
    17: "-", 36: "-",
}


def test_every_served_api_is_in_the_matrix() -> None:
    assert {s.api_key for s in all_handlers()} == set(COVERED)


def acl(rtype: str, name: str, op: str, principal: KafkaPrincipal = BOB, pattern: str = "LITERAL") -> dict:
    return {"resourceType": rtype, "resourceName": name, "patternType": pattern, "principal": str(principal),
            "host": "*", "operation": op, "permission": "ALLOW"}


@pytest.fixture
async def b(tmp_path: Path):
    async with InProcessBroker(tmp_path) as broker:
        await broker.parts.topics.create_topic(SECRET, 1, 1)
        await broker.parts.acls.create([acl("CLUSTER", "kafka-cluster", "CLUSTER_ACTION", BROKER)])
        await coordinating(broker)
        yield broker


async def coordinating(b: InProcessBroker) -> None:
    """Until this broker coordinates GROUP: its offsets topic is created on first FindCoordinator, then loaded."""
    for _ in range(200):
        found = await b.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP]), 4)
        if found.coordinators[0].error_code == 0 and b.parts.groups.check_group(GROUP) == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"broker never became the coordinator of {GROUP}")


async def grant(b: InProcessBroker, *acls: dict) -> None:
    answer = await b.parts.acls.create(list(acls))
    assert answer["results"] == [None] * len(acls)


def without_name(obj: object) -> str:
    """A response part as text, its topic name blanked: what a principal learns besides the name it asked."""
    return repr(obj).replace(f"'{SECRET}'", "'?'").replace(f"'{GHOST}'", "'?'")


# -- metadata -----------------------------------------------------------------------------------------------
async def test_metadata(b: InProcessBroker) -> None:
    asked = await b.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in (SECRET, GHOST)],
                                         allow_auto_topic_creation=False), 12, principal=ALICE)
    secret, ghost = sorted(asked.topics, key=lambda t: t.name != SECRET)
    assert secret.error_code == ghost.error_code == TOPIC_DENIED
    assert without_name(secret) == without_name(ghost) and secret.partitions == []
    every = await b.call(MetadataRequest(topics=None), 12, principal=ALICE)
    assert SECRET not in [t.name for t in every.topics]
    await grant(b, acl("TOPIC", SECRET, "DESCRIBE"))
    every = await b.call(MetadataRequest(topics=None, include_topic_authorized_operations=True), 12, principal=BOB)
    (seen,) = [t for t in every.topics if t.name == SECRET]
    assert seen.error_code == 0 and len(seen.partitions) == 1 and seen.authorized_operations == {8}  # DESCRIBE


async def test_metadata_by_topic_id(b: InProcessBroker) -> None:
    """v12 by id (how librdkafka resolves a KIP-848 assignment): an id it may not describe is refused without its
    name, an unknown id is UNKNOWN_TOPIC_ID, a describable one answers with its name."""
    import uuid

    secret_id = uuid.UUID(hex=b.parts.topics.get(SECRET).topic_id)  # type: ignore[union-attr]
    unknown = uuid.UUID(int=7)
    ask = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=i)
                                  for i in (secret_id, unknown)], allow_auto_topic_creation=False)
    refused = {t.topic_id: t for t in (await b.call(ask, 12, principal=ALICE)).topics}
    assert (refused[secret_id].error_code, refused[secret_id].name) == (TOPIC_DENIED, None)
    assert (refused[unknown].error_code, refused[unknown].name) == (ErrorCode.UNKNOWN_TOPIC_ID, None)
    await grant(b, acl("TOPIC", SECRET, "DESCRIBE"))
    seen = {t.topic_id: t for t in (await b.call(ask, 12, principal=BOB)).topics}
    assert (seen[secret_id].error_code, seen[secret_id].name, len(seen[secret_id].partitions)) == (0, SECRET, 1)
    assert seen[unknown].error_code == ErrorCode.UNKNOWN_TOPIC_ID


async def test_metadata_auto_creation_needs_create(b: InProcessBroker) -> None:
    await grant(b, acl("TOPIC", "auto-", "DESCRIBE", pattern="PREFIXED"))
    ask = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="auto-1")], allow_auto_topic_creation=True)
    refused = await b.call(ask, 12, principal=BOB)
    assert refused.topics[0].error_code == TOPIC_DENIED and not b.parts.topics.exists("auto-1")
    await grant(b, acl("TOPIC", "auto-", "CREATE", pattern="PREFIXED"))
    created = await b.call(ask, 12, principal=BOB)
    assert created.topics[0].error_code in (0, ErrorCode.LEADER_NOT_AVAILABLE) and b.parts.topics.exists("auto-1")


# -- produce, fetch, offsets --------------------------------------------------------------------------------
def produce(*topics: str, transactional: bool = False) -> ProduceRequest:
    T = ProduceRequest.TopicProduceData
    batch = build_batch([(b"k", b"v")], is_transactional=transactional, producer_id=1 if transactional else -1,
                        producer_epoch=0 if transactional else -1, base_sequence=0 if transactional else -1)
    return ProduceRequest(transactional_id="tx" if transactional else None, acks=1, timeout_ms=5000, topic_data=[
        T(name=t, partition_data=[T.PartitionProduceData(index=0, records=batch)]) for t in topics])


async def test_produce(b: InProcessBroker) -> None:
    refused = await b.call(produce(SECRET, GHOST), 9, principal=ALICE)
    answers = {t.name: t.partition_responses[0] for t in refused.responses}
    assert answers[SECRET].error_code == answers[GHOST].error_code == TOPIC_DENIED
    assert without_name(answers[SECRET]) == without_name(answers[GHOST])
    assert not b.parts.topics.exists(GHOST)
    await grant(b, acl("TOPIC", SECRET, "WRITE"))
    done = await b.call(produce(SECRET), 9, principal=BOB)
    assert done.responses[0].partition_responses[0].error_code == 0
    # writing a topic that does not exist creates it only with CREATE, else it does not exist
    await grant(b, acl("TOPIC", GHOST, "WRITE"))
    missing = await b.call(produce(GHOST), 9, principal=BOB)
    assert missing.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    txn = await b.call(produce(SECRET, transactional=True), 9, principal=BOB)
    assert txn.responses[0].partition_responses[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def fetch(*topics: str, replica_id: int = -1) -> FetchRequest:
    T = FetchRequest.FetchTopic
    return FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[
                            T(topic=t, partitions=[T.FetchPartition(partition=0, current_leader_epoch=-1,
                                                                    fetch_offset=0, last_fetched_epoch=-1,
                                                                    log_start_offset=-1, partition_max_bytes=1 << 20)])
                            for t in topics])


async def test_fetch(b: InProcessBroker) -> None:
    await b.call(produce(SECRET), 9)
    refused = await b.call(fetch(SECRET, GHOST), 12, principal=ALICE)
    parts = {t.topic: t.partitions[0] for t in refused.responses}
    assert parts[SECRET].error_code == parts[GHOST].error_code == TOPIC_DENIED
    assert without_name(parts[SECRET]) == without_name(parts[GHOST]) and not parts[SECRET].records
    await grant(b, acl("TOPIC", SECRET, "READ"))
    read = await b.call(fetch(SECRET), 12, principal=BOB)
    assert read.responses[0].partitions[0].error_code == 0 and read.responses[0].partitions[0].records
    # a follower's fetch (replica id set) needs CLUSTER_ACTION, READ on the topic is not enough
    follower = await b.call(fetch(SECRET, replica_id=1), 12, principal=BOB)
    assert follower.responses[0].partitions[0].error_code == TOPIC_DENIED
    replica = await b.call(fetch(SECRET, replica_id=1), 12, principal=BROKER)
    assert replica.responses[0].partitions[0].error_code != TOPIC_DENIED


async def test_list_offsets(b: InProcessBroker) -> None:
    T = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        T(name=t, partitions=[T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])
        for t in (SECRET, GHOST)])
    refused = await b.call(req, 9, principal=ALICE)
    secret, ghost = (t.partitions[0] for t in refused.topics)
    assert secret.error_code == ghost.error_code == TOPIC_DENIED and without_name(secret) == without_name(ghost)
    await grant(b, acl("TOPIC", SECRET, "DESCRIBE"))
    allowed = await b.call(req, 9, principal=BOB)
    assert allowed.topics[0].partitions[0].error_code == 0


async def test_offset_for_leader_epoch(b: InProcessBroker) -> None:
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[T(topic=t, partitions=[
        T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)]) for t in (SECRET, GHOST)])
    refused = await b.call(req, 4, principal=ALICE)
    secret, ghost = (t.partitions[0] for t in refused.topics)
    assert secret.error_code == ghost.error_code == TOPIC_DENIED and without_name(secret) == without_name(ghost)
    assert (await b.call(req, 4, principal=BROKER)).topics[0].partitions[0].error_code == 0  # a follower
    await grant(b, acl("TOPIC", SECRET, "DESCRIBE"))
    assert (await b.call(req, 4, principal=BOB)).topics[0].partitions[0].error_code == 0  # a consumer (KIP-320)


async def test_delete_records(b: InProcessBroker) -> None:
    T = DeleteRecordsRequest.DeleteRecordsTopic
    req = DeleteRecordsRequest(timeout_ms=5000, topics=[
        T(name=t, partitions=[T.DeleteRecordsPartition(partition_index=0, offset=0)]) for t in (SECRET, GHOST)])
    refused = await b.call(req, 2, principal=ALICE)
    secret, ghost = (t.partitions[0] for t in refused.topics)
    assert secret.error_code == ghost.error_code == TOPIC_DENIED and without_name(secret) == without_name(ghost)
    await grant(b, acl("TOPIC", SECRET, "DELETE"))
    assert (await b.call(req, 2, principal=BOB)).topics[0].partitions[0].error_code == 0


async def test_init_producer_id(b: InProcessBroker) -> None:
    idempotent = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                       producer_epoch=-1)
    assert (await b.call(idempotent, 4, principal=ALICE)).error_code == CLUSTER_DENIED
    transactional = InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000, producer_id=-1,
                                          producer_epoch=-1)
    refused = await b.call(transactional, 4, principal=ALICE)
    assert refused.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    await grant(b, acl("TOPIC", "any-topic-at-all", "WRITE"))  # WRITE on some topic is enough (Kafka 3.0+)
    answer = await b.call(idempotent, 4, principal=BOB)
    assert answer.error_code == 0 and answer.producer_id >= 0
    await grant(b, acl("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE", ALICE))
    assert (await b.call(idempotent, 4, principal=ALICE)).error_code == 0


# -- groups -------------------------------------------------------------------------------------------------
async def test_find_coordinator(b: InProcessBroker) -> None:
    req = FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP])
    refused = await b.call(req, 4, principal=ALICE)
    assert refused.coordinators[0].error_code == GROUP_DENIED and refused.coordinators[0].node_id == -1
    old = await b.call(FindCoordinatorRequest(key=GROUP, key_type=0), 3, principal=ALICE)
    assert old.error_code == GROUP_DENIED
    txn = await b.call(FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]), 4, principal=ALICE)
    assert txn.coordinators[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    await grant(b, acl("GROUP", GROUP, "DESCRIBE"))
    assert (await b.call(req, 4, principal=BOB)).coordinators[0].error_code == 0


def join(member_id: str = "") -> JoinGroupRequest:
    P = JoinGroupRequest.JoinGroupRequestProtocol
    return JoinGroupRequest(group_id=GROUP, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=member_id,
                            group_instance_id=None, protocol_type="consumer", protocols=[P(name="range", metadata=b"")])


async def test_membership(b: InProcessBroker) -> None:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group."""
    assert (await b.call(join(), 9, principal=ALICE)).error_code == GROUP_DENIED
    sync = SyncGroupRequest(group_id=GROUP, generation_id=1, member_id="m", protocol_type="consumer",
                            protocol_name="range", assignments=[])
    assert (await b.call(sync, 5, principal=ALICE)).error_code == GROUP_DENIED
    beat = HeartbeatRequest(group_id=GROUP, generation_id=1, member_id="m")
    assert (await b.call(beat, 4, principal=ALICE)).error_code == GROUP_DENIED
    leave = LeaveGroupRequest(group_id=GROUP, members=[LeaveGroupRequest.MemberIdentity(member_id="m")])
    assert (await b.call(leave, 5, principal=ALICE)).error_code == GROUP_DENIED
    await grant(b, acl("GROUP", GROUP, "READ"))
    first = await b.call(join(), 9, principal=BOB)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = await b.call(join(first.member_id), 9, principal=BOB)
    assert joined.error_code == 0
    member, generation = joined.member_id, joined.generation_id
    synced = await b.call(SyncGroupRequest(group_id=GROUP, generation_id=generation, member_id=member,
                                           protocol_type="consumer", protocol_name="range", assignments=[]),
                          5, principal=BOB)
    assert synced.error_code == 0
    beat = HeartbeatRequest(group_id=GROUP, generation_id=generation, member_id=member)
    assert (await b.call(beat, 4, principal=BOB)).error_code == 0
    left = await b.call(LeaveGroupRequest(group_id=GROUP, members=[LeaveGroupRequest.MemberIdentity(member_id=member)]),
                        5, principal=BOB)
    assert left.error_code == 0


def commit(*topics: str) -> OffsetCommitRequest:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", topics=[
        T(name=t, partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                              committed_leader_epoch=-1, committed_metadata="")])
        for t in topics])


async def test_offset_commit(b: InProcessBroker) -> None:
    refused = await b.call(commit(SECRET), 9, principal=ALICE)
    assert refused.topics[0].partitions[0].error_code == GROUP_DENIED
    await grant(b, acl("GROUP", GROUP, "READ"))
    topic_refused = await b.call(commit(SECRET, GHOST), 9, principal=BOB)
    secret, ghost = (t.partitions[0] for t in topic_refused.topics)
    assert secret.error_code == ghost.error_code == TOPIC_DENIED
    await grant(b, acl("TOPIC", SECRET, "READ"))
    assert (await b.call(commit(SECRET), 9, principal=BOB)).topics[0].partitions[0].error_code == 0


async def test_offset_fetch(b: InProcessBroker) -> None:
    await b.call(commit(SECRET), 9)  # admin commits an offset for the group
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    named = OffsetFetchRequest(groups=[G(group_id=GROUP, topics=[
        G.OffsetFetchRequestTopics(name=t, partition_indexes=[0]) for t in (SECRET, GHOST)])])
    every = OffsetFetchRequest(groups=[G(group_id=GROUP, topics=None)])
    assert (await b.call(named, 8, principal=ALICE)).groups[0].error_code == GROUP_DENIED
    await grant(b, acl("GROUP", GROUP, "DESCRIBE"))
    topic_refused = await b.call(named, 8, principal=BOB)
    secret, ghost = (t.partitions[0] for t in topic_refused.groups[0].topics)
    assert secret.error_code == ghost.error_code == TOPIC_DENIED and secret.committed_offset == -1
    assert without_name(secret) == without_name(ghost)
    assert (await b.call(every, 8, principal=BOB)).groups[0].topics == []  # undescribable topics left out
    await grant(b, acl("TOPIC", SECRET, "DESCRIBE"))
    seen = await b.call(every, 8, principal=BOB)
    assert [(t.name, t.partitions[0].committed_offset) for t in seen.groups[0].topics] == [(SECRET, 1)]
    old = await b.call(OffsetFetchRequest(group_id=GROUP, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=SECRET, partition_indexes=[0])]), 5, principal=ALICE)
    assert old.error_code == GROUP_DENIED


async def test_offset_commit_and_fetch_v10_authorize_the_name_an_id_resolves_to(b: InProcessBroker) -> None:
    """v10 names topics by id: READ (commit) or DESCRIBE (fetch) on the topic the id names now; an id no topic has
    is UNKNOWN_TOPIC_ID whoever asks (Kafka resolves before it authorizes)."""
    info = b.parts.topics.get(SECRET)
    assert info is not None
    secret, stranger = uuid.UUID(hex=info.topic_id), uuid.uuid4()
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    by_id = OffsetCommitRequest(group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", topics=[
        T(topic_id=t, partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=3,
                                                                  committed_leader_epoch=-1, committed_metadata="")])
        for t in (secret, stranger)])
    codes = lambda r: [(t.topic_id, t.partitions[0].error_code) for t in r.topics]  # noqa: E731
    assert codes(await b.call(by_id, 10, principal=ALICE)) == [(secret, GROUP_DENIED), (stranger, GROUP_DENIED)]
    await grant(b, acl("GROUP", GROUP, "READ"), acl("GROUP", GROUP, "DESCRIBE"))
    assert codes(await b.call(by_id, 10, principal=BOB)) == [(secret, TOPIC_DENIED), (stranger, UNKNOWN_TOPIC_ID)]
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    fetch = OffsetFetchRequest(groups=[G(group_id=GROUP, topics=[
        G.OffsetFetchRequestTopics(topic_id=t, partition_indexes=[0]) for t in (secret, stranger)])])
    fetched = lambda r: [(t.topic_id, t.partitions[0].committed_offset, t.partitions[0].error_code)  # noqa: E731
                         for t in r.groups[0].topics]
    assert fetched(await b.call(fetch, 10, principal=BOB)) == [(secret, -1, TOPIC_DENIED),
                                                               (stranger, -1, UNKNOWN_TOPIC_ID)]
    await grant(b, acl("TOPIC", SECRET, "READ"))  # READ implies DESCRIBE
    assert codes(await b.call(by_id, 10, principal=BOB)) == [(secret, 0), (stranger, UNKNOWN_TOPIC_ID)]
    assert fetched(await b.call(fetch, 10, principal=BOB)) == [(secret, 3, 0), (stranger, -1, UNKNOWN_TOPIC_ID)]


async def test_offset_delete(b: InProcessBroker) -> None:
    await b.call(commit(SECRET), 9)
    T = OffsetDeleteRequest.OffsetDeleteRequestTopic
    req = OffsetDeleteRequest(group_id=GROUP, topics=[
        T(name=t, partitions=[T.OffsetDeleteRequestPartition(partition_index=0)]) for t in (SECRET, GHOST)])
    assert (await b.call(req, 0, principal=ALICE)).error_code == GROUP_DENIED
    await grant(b, acl("GROUP", GROUP, "DELETE"), acl("TOPIC", SECRET, "READ"))
    answer = await b.call(req, 0, principal=BOB)
    codes = {t.name: t.partitions[0].error_code for t in answer.topics}
    assert answer.error_code == 0 and codes == {SECRET: 0, GHOST: TOPIC_DENIED}


async def test_describe_groups(b: InProcessBroker) -> None:
    req = DescribeGroupsRequest(groups=[GROUP], include_authorized_operations=True)
    refused = await b.call(req, 5, principal=ALICE)
    assert refused.groups[0].error_code == GROUP_DENIED and refused.groups[0].members == []
    await grant(b, acl("GROUP", GROUP, "READ"))
    seen = await b.call(req, 5, principal=BOB)
    assert seen.groups[0].error_code == 0 and seen.groups[0].authorized_operations == {3, 8}  # READ, DESCRIBE


async def test_list_groups(b: InProcessBroker) -> None:
    await b.call(commit(SECRET), 9)  # the group exists now
    assert (await b.call(ListGroupsRequest(), 5, principal=ALICE)).groups == []
    await grant(b, acl("GROUP", GROUP, "DESCRIBE"))
    assert [g.group_id for g in (await b.call(ListGroupsRequest(), 5, principal=BOB)).groups] == [GROUP]
    await grant(b, acl("CLUSTER", "kafka-cluster", "DESCRIBE", ALICE))  # DESCRIBE on the cluster: every group
    assert [g.group_id for g in (await b.call(ListGroupsRequest(), 5, principal=ALICE)).groups] == [GROUP]


async def test_delete_groups(b: InProcessBroker) -> None:
    await b.call(commit(SECRET), 9)
    req = DeleteGroupsRequest(groups_names=[GROUP])
    assert (await b.call(req, 2, principal=ALICE)).results[0].error_code == GROUP_DENIED
    await grant(b, acl("GROUP", GROUP, "DELETE"))
    assert (await b.call(req, 2, principal=BOB)).results[0].error_code == 0


async def test_consumer_group(b: InProcessBroker) -> None:
    """KIP-848: the heartbeat needs READ on the group and DESCRIBE on each subscribed topic; describe, DESCRIBE
    on the group (READ implies it)."""
    hb = ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id="m1", member_epoch=0, rebalance_timeout_ms=30000,
                                       subscribed_topic_names=[SECRET], topic_partitions=[])
    refused = await b.call(hb, 1, principal=ALICE)
    assert refused.error_code == GROUP_DENIED and refused.assignment is None
    await grant(b, acl("GROUP", GROUP, "READ"))
    assert (await b.call(hb, 1, principal=BOB)).error_code == TOPIC_DENIED
    await grant(b, acl("TOPIC", SECRET, "DESCRIBE"))
    joined = await b.call(hb, 1, principal=BOB)
    assert joined.error_code == 0 and joined.member_epoch == 1
    describe = ConsumerGroupDescribeRequest(group_ids=[GROUP], include_authorized_operations=False)
    hidden = (await b.call(describe, 1, principal=ALICE)).groups[0]
    assert hidden.error_code == GROUP_DENIED and hidden.members == []
    seen = (await b.call(describe, 1, principal=BOB)).groups[0]
    assert seen.error_code == 0 and [m.member_id for m in seen.members] == ["m1"]


async def test_share_group(b: InProcessBroker) -> None:
    """KIP-932: the heartbeat needs READ on the group and DESCRIBE on each subscribed topic; ShareFetch and
    ShareAcknowledge READ on the group; describe DESCRIBE on the group; DeleteShareGroupOffsets DELETE on it."""
    hb = ShareGroupHeartbeatRequest(group_id=GROUP, member_id="m1", member_epoch=0, rack_id=None,
                                    subscribed_topic_names=[SECRET])
    refused = await b.call(hb, 1, principal=ALICE)
    assert refused.error_code == GROUP_DENIED and refused.assignment is None
    fetch = ShareFetchRequest(group_id=GROUP, member_id="m1", share_session_epoch=0, max_wait_ms=0, min_bytes=1,
                              max_bytes=1024, max_records=10, batch_size=10, topics=[], forgotten_topics_data=[])
    assert (await b.call(fetch, 1, principal=ALICE)).error_code == GROUP_DENIED
    ack = ShareAcknowledgeRequest(group_id=GROUP, member_id="m1", share_session_epoch=1, topics=[])
    assert (await b.call(ack, 1, principal=ALICE)).error_code == GROUP_DENIED
    await grant(b, acl("GROUP", GROUP, "READ"))
    assert (await b.call(hb, 1, principal=BOB)).error_code == TOPIC_DENIED
    await grant(b, acl("TOPIC", SECRET, "DESCRIBE"))
    joined = await b.call(hb, 1, principal=BOB)
    assert joined.error_code == 0 and joined.member_epoch == 1
    assert (await b.call(fetch, 1, principal=BOB)).error_code == 0
    describe = ShareGroupDescribeRequest(group_ids=[GROUP], include_authorized_operations=False)
    hidden = (await b.call(describe, 1, principal=ALICE)).groups[0]
    assert hidden.error_code == GROUP_DENIED and hidden.members == []
    seen = (await b.call(describe, 1, principal=BOB)).groups[0]
    assert seen.error_code == 0 and [m.member_id for m in seen.members] == ["m1"]
    offsets = DescribeShareGroupOffsetsRequest(groups=[
        DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=GROUP, topics=None)])
    assert (await b.call(offsets, 1, principal=ALICE)).groups[0].error_code == GROUP_DENIED
    assert (await b.call(offsets, 1, principal=BOB)).groups[0].error_code == 0
    alter = AlterShareGroupOffsetsRequest(group_id=GROUP, topics=[])
    assert (await b.call(alter, 0, principal=ALICE)).error_code == GROUP_DENIED
    assert (await b.call(alter, 0, principal=BOB)).error_code == ErrorCode.NON_EMPTY_GROUP  # m1 is a member
    # DeleteShareGroupOffsets: DELETE on the group (READ is not enough), then READ on each topic
    DT = DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic
    delete = DeleteShareGroupOffsetsRequest(group_id=GROUP, topics=[DT(topic_name=SECRET)])
    assert (await b.call(delete, 0, principal=BOB)).error_code == GROUP_DENIED
    await grant(b, acl("GROUP", GROUP, "DELETE"))
    assert (await b.call(delete, 0, principal=BOB)).error_code == ErrorCode.NON_EMPTY_GROUP


# -- topic administration --------------------------------------------------------------------------------------
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


# -- configs ----------------------------------------------------------------------------------------------------
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


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


# -- cluster administration -------------------------------------------------------------------------------------
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


async def test_a_super_user_needs_no_acl(b: InProcessBroker) -> None:
    admin = KafkaPrincipal.user("admin")
    assert (await b.call(produce(SECRET), 9, principal=admin)).responses[0].partition_responses[0].error_code == 0
    assert (await b.call(DescribeLogDirsRequest(topics=None), 4, principal=admin)).error_code == 0


async def test_a_deny_beats_an_allow_and_a_host_acl_applies_only_from_that_host(b: InProcessBroker) -> None:
    await grant(b, acl("TOPIC", SECRET, "WRITE"), acl("TOPIC", "sec", "WRITE", pattern="PREFIXED"))
    deny = {**acl("TOPIC", SECRET, "WRITE"), "permission": "DENY", "host": "10.9.9.9"}
    await grant(b, deny)
    ok = await b.call(produce(SECRET), 9, principal=BOB, peer="10.1.1.1:5000")
    assert ok.responses[0].partition_responses[0].error_code == 0
    denied = await b.call(produce(SECRET), 9, principal=BOB, peer="10.9.9.9:5000")
    assert denied.responses[0].partition_responses[0].error_code == TOPIC_DENIED


async def test_produce_decisions_follow_acl_changes_at_once(b: InProcessBroker) -> None:
    """The produce path's decision cache never outlives the ACLs it read."""
    def code(answer: object) -> int:
        return answer.responses[0].partition_responses[0].error_code  # type: ignore[attr-defined]

    assert code(await b.call(produce(SECRET), 9, principal=BOB)) == TOPIC_DENIED
    await grant(b, acl("TOPIC", SECRET, "WRITE"))
    assert code(await b.call(produce(SECRET), 9, principal=BOB)) == 0
    await b.parts.acls.delete([{"principal": "User:bob"}])
    assert code(await b.call(produce(SECRET), 9, principal=BOB)) == TOPIC_DENIED


# -- SCRAM users and client quotas -----------------------------------------------------------------------------
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


# -- transactions -----------------------------------------------------------------------------------------
async def test_write_txn_markers(b: InProcessBroker) -> None:
    """Brokers only (a coordinator writing markers): CLUSTER_ACTION on the cluster, else every partition is
    CLUSTER_AUTHORIZATION_FAILED and nothing is written, whatever else the principal may do to the topic."""
    M = WriteTxnMarkersRequest.WritableTxnMarker
    req = WriteTxnMarkersRequest(markers=[M(producer_id=5, producer_epoch=0, transaction_result=False,
                                            coordinator_epoch=0, topics=[M.WritableTxnMarkerTopic(
                                                name=SECRET, partition_indexes=[0])])])
    end = b.parts.replicas.partition_info(SECRET, 0).log_end_offset
    await grant(b, acl("TOPIC", SECRET, "ALL"))
    for who in (ALICE, BOB):
        refused = await b.call(req, 1, principal=who)
        assert refused.markers[0].topics[0].partitions[0].error_code == CLUSTER_DENIED
    assert b.parts.replicas.partition_info(SECRET, 0).log_end_offset == end
    written = await b.call(req, 1, principal=BROKER)
    assert written.markers[0].producer_id == 5
    assert written.markers[0].topics[0].partitions[0].error_code == 0
    assert b.parts.replicas.partition_info(SECRET, 0).log_end_offset == end + 1
