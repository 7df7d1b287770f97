"""The ACL matrix for the group APIs: FindCoordinator, the classic membership, offsets, describing, listing and
deleting groups, KIP-848 consumer groups and share groups. A principal without the ACL Kafka requires gets Kafka's
error and learns nothing it may not describe; a principal holding exactly that ACL succeeds. Principals and
requests: `matrix.py`.
"""

from __future__ import annotations

import uuid

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

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
from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import (
    ALICE,
    BOB,
    GHOST,
    GROUP,
    GROUP_DENIED,
    SECRET,
    TOPIC_DENIED,
    UNKNOWN_TOPIC_ID,
    acl,
    commit,
    grant,
    join,
    without_name,
)


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
