"""Deleting a share group (DeleteGroups) and its offsets on some topics (DeleteShareGroupOffsets, API 92) on the
wire (issue 36), as Kafka 4 answers them.

Attacked: a group with a member is NON_EMPTY_GROUP and keeps its state; an id that is no group is
GROUP_ID_NOT_FOUND; a topic the group has no state for, or that does not exist, is UNKNOWN_TOPIC_OR_PARTITION
while the other topics' offsets go. What deletion does: the group's accepted records are forgotten (with
`share.auto.offset.reset=earliest` a member of the same group id reads them all again), another topic's state is
kept by a DeleteShareGroupOffsets that does not name it, and the tombstones hold after a broker restart.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest
from kafka.protocol.admin import DeleteGroupsRequest

from kelp.broker.kafka.messages import DeleteShareGroupOffsetsRequest
from kelp.errors import ErrorCode
from tests.broker.helpers import create_topic_wire, produce
from tests.support.broker_process import BrokerProcess
from tests.support.kafka_wire import WireClient, make_batch

from .share_wire import ACCEPT, ShareMember, acquired_offsets
from .test_group_configs import alter

SETTINGS = {"offsets.topic.num.partitions": 1, "share.coordinator.state.topic.num.partitions": 3}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-share-delete"), settings=SETTINGS)
    bp.start()
    yield bp
    bp.kill()


def _topic(bp: BrokerProcess, name: str, count: int) -> None:
    assert create_topic_wire(bp.bootstrap, name) == 0
    with WireClient(bp.bootstrap) as c:
        for i in range(count):
            assert produce(c, name, make_batch([(None, f"v{i}".encode())]), acks=-1)[0] == 0


def _accept_all(bp: BrokerProcess, group: str, topic: str, *, leave: bool = True) -> tuple[list[int], ShareMember]:
    """A member joins, fetches what it can and accepts it (answered once written); it leaves unless told not to."""
    m = ShareMember(bp.bootstrap, group, f"m-{topic}", topic)
    m.find_coordinator()
    assert m.heartbeat().error_code == 0
    got = acquired_offsets(m.fetch(max_wait_ms=300))
    if got:
        assert m.acknowledge([(got[0], got[-1], ACCEPT)]).error_code == 0
    assert m.fetch(epoch=-1).error_code == 0
    if leave:
        assert m.heartbeat(epoch=-1).error_code == 0
        m.close()
    return got, m


def delete_groups(bp: BrokerProcess, *groups: str, timeout_s: float = 30.0) -> dict[str, int]:
    """DeleteGroups, again while the coordinator is loading its partition (as an admin client retries)."""
    deadline = time.monotonic() + timeout_s
    with WireClient(bp.bootstrap) as c:
        while True:
            got = {r.group_id: r.error_code for r in c.request(DeleteGroupsRequest(groups_names=list(groups)),
                                                                2).results}
            if ErrorCode.COORDINATOR_LOAD_IN_PROGRESS not in got.values() or time.monotonic() > deadline:
                return got
            time.sleep(0.1)  # the partition is being replayed after a restart: poll, bounded


def delete_offsets(bp: BrokerProcess, group: str, *topics: str) -> Any:
    T = DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic
    with WireClient(bp.bootstrap) as c:
        return c.request(DeleteShareGroupOffsetsRequest(group_id=group, topics=[T(topic_name=t) for t in topics]), 0)


def test_delete_groups_of_a_share_group_only_when_empty_then_it_starts_over(broker: BrokerProcess) -> None:
    _topic(broker, "sd-a", 5)
    assert alter(broker, "sd-g", {"share.auto.offset.reset": "earliest"}).error_code == 0
    got, member = _accept_all(broker, "sd-g", "sd-a", leave=False)
    assert got == [0, 1, 2, 3, 4]
    assert delete_groups(broker, "sd-g", "sd-nobody") == {"sd-g": ErrorCode.NON_EMPTY_GROUP,
                                                          "sd-nobody": ErrorCode.GROUP_ID_NOT_FOUND}
    assert member.heartbeat(epoch=-1).error_code == 0
    member.close()
    assert _accept_all(broker, "sd-g", "sd-a")[0] == []  # the state was kept: everything stays accepted
    assert delete_groups(broker, "sd-g") == {"sd-g": 0}
    assert _accept_all(broker, "sd-g", "sd-a")[0] == [0, 1, 2, 3, 4]  # a new group of that id: from the start
    assert delete_groups(broker, "sd-g") == {"sd-g": 0}
    broker.restart(kill=True)  # the tombstones are in __share_group_state: nothing comes back
    assert delete_groups(broker, "sd-g") == {"sd-g": ErrorCode.GROUP_ID_NOT_FOUND}


def test_delete_share_group_offsets_deletes_the_named_topics_only(broker: BrokerProcess) -> None:
    _topic(broker, "sd-x", 3)
    _topic(broker, "sd-y", 2)
    _topic(broker, "sd-z", 1)
    assert alter(broker, "sd-o", {"share.auto.offset.reset": "earliest"}).error_code == 0
    assert _accept_all(broker, "sd-o", "sd-x")[0] == [0, 1, 2]
    assert _accept_all(broker, "sd-o", "sd-y")[0] == [0, 1]
    resp = delete_offsets(broker, "sd-o", "sd-x", "sd-z", "sd-missing")
    assert resp.error_code == 0, resp
    assert [(t.topic_name, t.error_code, t.error_message) for t in resp.responses] == [
        ("sd-x", 0, None),
        ("sd-z", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "There is no offset information to delete."),
        ("sd-missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")]
    assert _accept_all(broker, "sd-o", "sd-x")[0] == [0, 1, 2]  # sd-x starts over
    assert _accept_all(broker, "sd-o", "sd-y")[0] == []  # sd-y kept its state
    assert delete_offsets(broker, "sd-nobody", "sd-x").error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_delete_share_group_offsets_of_a_group_with_members_is_refused(broker: BrokerProcess) -> None:
    _topic(broker, "sd-busy", 2)
    _, member = _accept_all(broker, "sd-busy-g", "sd-busy", leave=False)
    try:
        resp = delete_offsets(broker, "sd-busy-g", "sd-busy")
        assert (resp.error_code, resp.responses) == (ErrorCode.NON_EMPTY_GROUP, [])
    finally:
        member.heartbeat(epoch=-1)
        member.close()
