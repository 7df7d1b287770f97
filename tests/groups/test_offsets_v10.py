"""OffsetCommit v10 and OffsetFetch v10 (Kafka 4.1+) name topics by id (issue 36), on the wire.

A commit by id round-trips (the answer echoes each id, names empty), reads back by name at v9 and by id at v10;
an id no topic has, or the zero UUID, is answered UNKNOWN_TOPIC_ID for each of its partitions while the known
topics of the same request are committed (Kafka's testOffsetCommitWithUnknownTopicId), and a request naming only
unknown ids touches no group; the connection stays open throughout. A deleted and re-created topic gets a new id:
the old id never resolves to the new topic, neither to commit nor to fetch.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.protocol.admin import ListGroupsRequest
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest

from tests.support.kafka_wire import WireClient

from .test_clients_share_partitions import create_topic

UNKNOWN_TOPIC_ID = 100
ZERO = uuid.UUID(int=0)
CT = OffsetCommitRequest.OffsetCommitRequestTopic
CP = CT.OffsetCommitRequestPartition
FG = OffsetFetchRequest.OffsetFetchRequestGroup
FT = FG.OffsetFetchRequestTopics


def coordinators(w: WireClient, *groups: str) -> None:
    """FindCoordinator first, as clients do (it creates `__consumer_offsets`): this broker coordinates them all."""
    fc = w.request(FindCoordinatorRequest(key_type=0, coordinator_keys=list(groups)), 4)
    assert [c.error_code for c in fc.coordinators] == [0] * len(groups)


def topic_id(w: WireClient, name: str) -> uuid.UUID:
    md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name, topic_id=None)],
                                   allow_auto_topic_creation=False, include_topic_authorized_operations=False), 12)
    assert md.topics[0].error_code == 0, md.topics[0]
    return md.topics[0].topic_id


def commit_by_id(w: WireClient, group: str, offsets: list[tuple[uuid.UUID, list[tuple[int, int]]]]) -> list:
    """OffsetCommit v10 as a simple (memberless) committer: [(id, [(partition, error)])] of the answer."""
    r = w.request(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                      group_instance_id=None, topics=[CT(topic_id=tid, partitions=[
                                          CP(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                             committed_metadata=f"m{o}") for p, o in parts])
                                          for tid, parts in offsets]), 10)
    assert all(t.name in ("", None) for t in r.topics), "v10 answers carry ids, not names"
    # kafka-python decodes the zero UUID as None
    return [(t.topic_id or ZERO, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics]


def fetch_by_id(w: WireClient, group: str, topics: list[tuple[uuid.UUID, list[int]]] | None) -> tuple[int, list]:
    """OffsetFetch v10: (group error, [(id, [(partition, offset, metadata, error)])])."""
    r = w.request(OffsetFetchRequest(groups=[FG(group_id=group, member_id=None, member_epoch=-1, topics=None
                                                if topics is None else [FT(topic_id=tid, partition_indexes=ps)
                                                                        for tid, ps in topics])],
                                     require_stable=False), 10)
    g = r.groups[0]
    return g.error_code, [(t.topic_id or ZERO, [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
                                        for p in t.partitions]) for t in g.topics]


def fetch_by_name(w: WireClient, group: str, name: str, partitions: list[int]) -> list[tuple[int, int]]:
    r = w.request(OffsetFetchRequest(groups=[FG(group_id=group, member_id=None, member_epoch=-1, topics=[
        FG.OffsetFetchRequestTopics(name=name, partition_indexes=partitions)])], require_stable=False), 9)
    return [(p.partition_index, p.committed_offset) for t in r.groups[0].topics for p in t.partitions]


@pytest.mark.timeout(60)
def test_v10_commit_and_fetch_by_id_with_unknown_and_zero_ids(group_broker) -> None:
    bs = group_broker.bootstrap
    create_topic(bs, "v10a", 2)
    create_topic(bs, "v10b", 1)
    stranger = uuid.uuid4()
    with WireClient(bs) as w:
        versions = {k.api_key: k.max_version for k in w.request(ApiVersionsRequest(), 3).api_keys}
        assert versions[8] == 10 and versions[9] == 10, "OffsetCommit and OffsetFetch v10 advertised"
        coordinators(w, "g10", "ghost")
        a, b = topic_id(w, "v10a"), topic_id(w, "v10b")

        answer = commit_by_id(w, "g10", [(a, [(0, 5), (1, 7)]), (stranger, [(0, 9), (3, 9)]), (b, [(0, 3)]),
                                         (ZERO, [(0, 1)])])
        assert answer == [(a, [(0, 0), (1, 0)]), (stranger, [(0, UNKNOWN_TOPIC_ID), (3, UNKNOWN_TOPIC_ID)]),
                          (b, [(0, 0)]), (ZERO, [(0, UNKNOWN_TOPIC_ID)])]

        # the known topics were committed; read back by name (v9) and by id (v10)
        assert fetch_by_name(w, "g10", "v10a", [0, 1]) == [(0, 5), (1, 7)]
        err, got = fetch_by_id(w, "g10", [(b, [0]), (stranger, [0, 1]), (a, [1, 0]), (ZERO, [2])])
        assert err == 0
        assert got == [(b, [(0, 3, "m3", 0)]), (a, [(1, 7, "m7", 0), (0, 5, "m5", 0)]),
                       (stranger, [(0, -1, "", UNKNOWN_TOPIC_ID), (1, -1, "", UNKNOWN_TOPIC_ID)]),
                       (ZERO, [(2, -1, "", UNKNOWN_TOPIC_ID)])], "unknown ids answered after the known ones"
        err, every = fetch_by_id(w, "g10", None)
        assert err == 0 and sorted((str(t), ps) for t, ps in every) == sorted(
            [(str(a), [(0, 5, "m5", 0), (1, 7, "m7", 0)]), (str(b), [(0, 3, "m3", 0)])])

        # only unknown ids: every partition UNKNOWN_TOPIC_ID, and no group comes to exist
        assert commit_by_id(w, "ghost", [(stranger, [(0, 1)]), (ZERO, [(0, 1)])]) == [
            (stranger, [(0, UNKNOWN_TOPIC_ID)]), (ZERO, [(0, UNKNOWN_TOPIC_ID)])]
        listed = w.request(ListGroupsRequest(states_filter=[], types_filter=[]), 5)
        assert "ghost" not in {g.group_id for g in listed.groups}
        assert "g10" in {g.group_id for g in listed.groups}
        # the connection is still open and answers
        assert w.request(ApiVersionsRequest(), 3).error_code == 0


def wait_gone(w: WireClient, name: str, old: uuid.UUID, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=old)],
                                       allow_auto_topic_creation=False, include_topic_authorized_operations=False),
                       12)
        if md.topics[0].error_code == UNKNOWN_TOPIC_ID:
            return
        assert time.monotonic() < deadline, f"{name} ({old}) still known after {timeout} s"
        time.sleep(0.1)


@pytest.mark.timeout(90)
def test_a_deleted_topics_id_never_resolves_to_the_topic_recreated_under_its_name(group_broker) -> None:
    bs = group_broker.bootstrap
    create_topic(bs, "phoenix", 2)
    with WireClient(bs) as w:
        coordinators(w, "gp")
        old = topic_id(w, "phoenix")
        assert commit_by_id(w, "gp", [(old, [(0, 40), (1, 41)])]) == [(old, [(0, 0), (1, 0)])]

        admin = KafkaAdminClient(bootstrap_servers=bs)
        try:
            admin.delete_topics(["phoenix"])
            wait_gone(w, "phoenix", old)
            admin.create_topics([NewTopic("phoenix", 2, 1)])
        finally:
            admin.close()
        new = topic_id(w, "phoenix")
        assert new != old, "a re-created topic has a new id"

        # the old id is unknown, to commit and to fetch; nothing it sent lands on the new topic
        assert commit_by_id(w, "gp", [(old, [(0, 99), (1, 99)])]) == [
            (old, [(0, UNKNOWN_TOPIC_ID), (1, UNKNOWN_TOPIC_ID)])]
        err, got = fetch_by_id(w, "gp", [(old, [0, 1]), (new, [0, 1])])
        assert err == 0
        assert got == [(new, [(0, -1, "", 0), (1, -1, "", 0)]),
                       (old, [(0, -1, "", UNKNOWN_TOPIC_ID), (1, -1, "", UNKNOWN_TOPIC_ID)])], \
            "the new topic starts without offsets: neither the old topic's nor the old id's"
        assert fetch_by_name(w, "gp", "phoenix", [0, 1]) == [(0, -1), (1, -1)]

        # the new id commits, and an all-topics fetch names the topic by its new id only
        assert commit_by_id(w, "gp", [(new, [(1, 8)])]) == [(new, [(1, 0)])]
        err, every = fetch_by_id(w, "gp", None)
        assert (err, every) == (0, [(new, [(1, 8, "m8", 0)])])
