"""The ACL matrix for the data APIs: Metadata, Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords,
InitProducerId and WriteTxnMarkers. A principal without the ACL Kafka requires gets Kafka's error and learns nothing
it may not describe (an existing topic it may not describe answers exactly as a missing one); a principal holding
exactly that ACL succeeds. Principals and requests: `matrix.py`.
"""

from __future__ import annotations

import uuid

from kafka.protocol.admin import (
    DeleteRecordsRequest,
)
from kafka.protocol.consumer import (
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
)
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, WriteTxnMarkersRequest

from kelp.errors import ErrorCode
from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import (
    ALICE,
    BOB,
    BROKER,
    CLUSTER_DENIED,
    GHOST,
    SECRET,
    TOPIC_DENIED,
    acl,
    fetch,
    grant,
    produce,
    without_name,
)


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
