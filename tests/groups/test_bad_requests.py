"""Malformed or stale group requests on the wire get Kafka's error codes, and
the coordinator keeps serving other groups."""

from __future__ import annotations

import time

import pytest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.support.kafka_wire import WireClient

from .test_clients_share_partitions import create_topic

SUB = ConsumerProtocolSubscription(version=0, topics=["bad"], user_data=b"").encode()


def join(w: WireClient, group: str, member: str = "", session: int = 5000) -> object:
    P = JoinGroupRequest.JoinGroupRequestProtocol
    return w.request(JoinGroupRequest(group_id=group, session_timeout_ms=session, rebalance_timeout_ms=5000,
                                      member_id=member, group_instance_id=None, protocol_type="consumer",
                                      protocols=[P(name="range", metadata=SUB)]), 5)


def commit(w: WireClient, group: str, member: str, gen: int, topic: str, partition: int = 0) -> int:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    r = w.request(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=gen, member_id=member,
                                      group_instance_id=None, topics=[T(name=topic, partitions=[
                                          P(partition_index=partition, committed_offset=1, committed_leader_epoch=-1,
                                            committed_metadata="")])]), 7)
    return r.topics[0].partitions[0].error_code


@pytest.mark.timeout(60)
def test_bad_group_requests_get_kafka_error_codes(group_broker) -> None:
    create_topic(group_broker.bootstrap, "bad", 2)
    with WireClient(group_broker.bootstrap) as w:
        fc = w.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["g1", "g2"]), 4)
        assert [c.error_code for c in fc.coordinators] == [0, 0]
        assert fc.coordinators[0].port == int(group_broker.bootstrap.rsplit(":", 1)[1])

        assert join(w, "").error_code == 24  # INVALID_GROUP_ID
        assert join(w, "g1", session=10).error_code == 26  # INVALID_SESSION_TIMEOUT
        assert join(w, "g1", member="made-up").error_code == 25  # UNKNOWN_MEMBER_ID
        first = join(w, "g1")
        assert first.error_code == 79 and first.member_id  # MEMBER_ID_REQUIRED (v4+)
        joined = join(w, "g1", member=first.member_id)
        assert joined.error_code == 0 and joined.generation_id == 1 and joined.leader == first.member_id
        member, gen = joined.member_id, joined.generation_id

        A = SyncGroupRequest.SyncGroupRequestAssignment
        bad_gen = w.request(SyncGroupRequest(group_id="g1", generation_id=gen + 1, member_id=member,
                                             group_instance_id=None, assignments=[]), 3)
        assert bad_gen.error_code == 22  # ILLEGAL_GENERATION
        ok = w.request(SyncGroupRequest(group_id="g1", generation_id=gen, member_id=member, group_instance_id=None,
                                        assignments=[A(member_id=member, assignment=b"x")]), 3)
        assert ok.error_code == 0 and ok.assignment == b"x"

        hb = lambda g, m, gen_: w.request(HeartbeatRequest(group_id=g, generation_id=gen_, member_id=m,  # noqa: E731
                                                           group_instance_id=None), 3).error_code
        assert hb("g1", member, gen + 7) == 22
        assert hb("g1", "stranger", gen) == 25
        assert hb("g1", member, gen) == 0

        assert commit(w, "", "", -1, "bad") == 24
        assert commit(w, "g1", member, gen + 1, "bad") == 22
        assert commit(w, "g1", "stranger", gen, "bad") == 25
        assert commit(w, "g1", member, gen, "no-such-topic") == 3
        assert commit(w, "g1", member, gen, "bad", partition=9) == 3
        assert commit(w, "g1", member, gen, "bad") == 0

        # A second group, and a member that joins but never syncs: removed after its session timeout.
        lazy1 = join(w, "lazy", session=1000)
        lazy = join(w, "lazy", member=lazy1.member_id, session=1000)
        assert lazy.error_code == 0
        group_broker.wait_for_log(f"member {lazy.member_id} session expired", timeout=10)
        assert hb("lazy", lazy.member_id, lazy.generation_id) == 25
        assert hb("g1", member, gen) == 0, "the other group is unaffected"

        T = OffsetFetchRequest.OffsetFetchRequestTopic
        fetched = w.request(OffsetFetchRequest(group_id="g1", topics=[T(name="bad", partition_indexes=[0, 1])]), 5)
        assert [(p.partition_index, p.committed_offset) for p in fetched.topics[0].partitions] == [(0, 1), (1, -1)]


def _commit_topics(w: WireClient, group: str, member: str, gen: int,
                   topics: list[tuple[str, list[int]]]) -> dict[tuple[str, int], int]:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    r = w.request(OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=gen, member_id=member, group_instance_id=None,
        topics=[T(name=name, partitions=[P(partition_index=i, committed_offset=1, committed_leader_epoch=-1,
                                           committed_metadata="") for i in parts]) for name, parts in topics]), 7)
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def _listed(w: WireClient) -> set[str]:
    from kafka.protocol.admin import ListGroupsRequest
    return {g.group_id for g in w.request(ListGroupsRequest(), 3).groups}


@pytest.mark.timeout(60)
def test_offset_commit_judges_topics_before_the_group_and_an_empty_one_creates_nothing(group_broker) -> None:
    """Kafka's handleOffsetCommitRequest: a topic or partition the metadata lacks is UNKNOWN_TOPIC_OR_PARTITION
    whatever the group would answer, and a commit left with no partition (or sent with none) never reaches the
    coordinator, so it cannot create a group. Before: the coordinator's UNKNOWN_MEMBER_ID came back for a missing
    topic, and an empty or all-unknown commit made an empty group that ListGroups showed."""
    create_topic(group_broker.bootstrap, "judged", 2)
    with WireClient(group_broker.bootstrap) as w:
        deadline = time.monotonic() + 30
        w.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["judging"]), 4)  # makes the offsets topic
        while (first := join(w, "judging")).error_code in (15, 16):  # and it is loaded before the group is served
            assert time.monotonic() < deadline, "the group coordinator never became available"
            time.sleep(0.2)
        joined = join(w, "judging", member=first.member_id)
        assert joined.error_code == 0
        # A stranger: the existing partition gets the group's answer, the others UNKNOWN_TOPIC_OR_PARTITION.
        codes = _commit_topics(w, "judging", "stranger", joined.generation_id,
                               [("judged", [0, 5]), ("no-such-topic", [0])])
        assert codes == {("judged", 0): 25, ("judged", 5): 3, ("no-such-topic", 0): 3}

        # Nothing that passes: no group is made, by a simple commit (generation -1) or an empty one.
        assert _commit_topics(w, "ghost-a", "", -1, [("no-such-topic", [0, 1])]) == {
            ("no-such-topic", 0): 3, ("no-such-topic", 1): 3}
        assert _commit_topics(w, "ghost-b", "", -1, []) == {}
        assert _commit_topics(w, "ghost-c", "", -1, [("judged", [7])]) == {("judged", 7): 3}
        listed = _listed(w)
        assert "judging" in listed
        assert not listed & {"ghost-a", "ghost-b", "ghost-c"}, listed
        # A simple commit that names one real partition still makes its group, as Kafka's does.
        assert _commit_topics(w, "real-simple", "", -1, [("judged", [1]), ("no-such-topic", [0])]) == {
            ("judged", 1): 0, ("no-such-topic", 0): 3}
        assert "real-simple" in _listed(w)
