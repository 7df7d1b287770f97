"""Share-group membership outlives its coordinator (issue 36), as Kafka's: members, epochs and assignments are
Kafka's share-group records in `__consumer_offsets` (types 10, 11, 14), replayed by the coordinator that loads
the partition.

Attacked on the wire across a broker kill: a member heartbeats with its member id and epoch after the restart
and is served (before: UNKNOWN_MEMBER_ID, it had to rejoin), a member that left before the kill stays gone, a
member that does not come back is removed after its session timeout, and that removal holds after another kill.
The records alone: replay folds members, epochs and assignments, and tombstones remove them.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Iterator

import pytest

from kelp.broker.groups.share.membership import ShareMember
from kelp.broker.groups.share.records import (
    assignment_record,
    group_epoch_record,
    group_tombstones,
    member_record,
    member_tombstones,
    replay,
    share_record_key_of,
)
from kelp.broker.kafka.messages import ShareGroupDescribeRequest
from kelp.errors import ErrorCode
from tests.broker.helpers import create_topic_wire
from tests.support.broker_process import BrokerProcess
from tests.support.kafka_wire import WireClient

from .share_wire import ShareMember as WireMember

SETTINGS = {"offsets.topic.num.partitions": 1, "share.coordinator.state.topic.num.partitions": 3,
            "group.share.session.timeout.ms": 3000, "group.share.heartbeat.interval.ms": 1000}
TID = uuid.uuid4().hex


def _fold(*batches: list[tuple[bytes, bytes | None]]) -> dict[Any, bytes | None]:
    values: dict[Any, bytes | None] = {}
    for batch in batches:
        for key, value in batch:
            found = share_record_key_of(key)
            assert found is not None
            values[found] = value
    return values


def test_replay_folds_members_epochs_and_assignments_and_tombstones_remove_them() -> None:
    a = ShareMember("a", 2, "client-a", "/10.0.0.1", "rack-1", ("t",), {TID: frozenset({0, 1})})
    b = ShareMember("b", 3, "client-b", "/10.0.0.2", None, ("t", "u"), {TID: frozenset({0, 1})})
    written = [member_record("g", a), assignment_record("g", a, 0), member_record("g", b),
               assignment_record("g", b, 2), group_epoch_record("g", 3)]
    groups = replay(_fold(written))
    assert set(groups) == {"g"} and groups["g"].group_epoch == 3
    got = groups["g"].members
    assert {m: (x.member_epoch, x.client_id, x.client_host, x.rack_id, x.subscribed_topic_names, x.assigned)
            for m, x in got.items()} == {
        "a": (2, "client-a", "/10.0.0.1", "rack-1", ("t",), {TID: frozenset({0, 1})}),
        "b": (3, "client-b", "/10.0.0.2", None, ("t", "u"), {TID: frozenset({0, 1})})}
    left = replay(_fold(written, [*member_tombstones("g", "b"), group_epoch_record("g", 4)]))
    assert set(left["g"].members) == {"a"} and left["g"].group_epoch == 4
    assert replay(_fold(written, member_tombstones("g", "a"), member_tombstones("g", "b"), group_tombstones("g"))) \
        == {}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-share-members"), settings=SETTINGS)
    bp.start()
    yield bp
    bp.kill()


def describe(bp: BrokerProcess, group: str, *, timeout_s: float = 30.0) -> Any:
    """ShareGroupDescribe of one group, again while the coordinator is loading its partition."""
    deadline = time.monotonic() + timeout_s
    with WireClient(bp.bootstrap) as c:
        while True:
            g = c.request(ShareGroupDescribeRequest(group_ids=[group], include_authorized_operations=False),
                          1).groups[0]
            if g.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                return g
            time.sleep(0.1)  # the partition is being replayed after a restart: poll, bounded


def _joined(bp: BrokerProcess, group: str, name: str, topic: str) -> WireMember:
    m = WireMember(bp.bootstrap, group, name, topic)
    m.find_coordinator()
    hb = m.heartbeat()
    assert hb.error_code == 0 and hb.member_epoch > 0, hb
    return m


def test_members_keep_their_ids_epochs_and_assignments_across_a_coordinator_restart(broker: BrokerProcess) -> None:
    assert create_topic_wire(broker.bootstrap, "sm-t", partitions=2) == 0
    stays, leaves, silent = (_joined(broker, "sm-g", n, "sm-t") for n in ("stays", "leaves", "silent"))
    assert leaves.heartbeat(epoch=-1).error_code == 0
    epoch = stays.heartbeat().member_epoch  # moved to the group epoch the leave bumped
    before = describe(broker, "sm-g")
    assert sorted(m.member_id for m in before.members) == ["silent", "stays"]
    silent_epoch = _epoch(before, "silent")
    for m in (stays, leaves, silent):
        m.close()
    broker.restart(kill=True)

    after = describe(broker, "sm-g")
    assert after.error_code == 0 and after.group_epoch == before.group_epoch
    assert {m.member_id: (m.member_epoch, sorted(p for t in m.assignment.topic_partitions for p in t.partitions))
            for m in after.members} == {"stays": (epoch, [0, 1]), "silent": (silent_epoch, [0, 1])}
    back = WireMember(broker.bootstrap, "sm-g", "stays", "sm-t")
    back.member_epoch = epoch
    try:
        hb = back.heartbeat()  # its member id and epoch from before the restart
        assert (hb.error_code, hb.member_epoch) == (0, epoch), hb
        # "silent" does not come back: removed after its session timeout (3 s), and that removal is written
        deadline = time.monotonic() + 20
        while [m.member_id for m in describe(broker, "sm-g").members] != ["stays"]:
            assert time.monotonic() < deadline, describe(broker, "sm-g")
            assert back.heartbeat().error_code == 0  # "stays" keeps its session meanwhile
            time.sleep(0.5)  # its heartbeat interval is 1 s: poll, bounded by the deadline
    finally:
        back.close()
    broker.restart(kill=True)
    assert [m.member_id for m in describe(broker, "sm-g").members] == ["stays"]


def _epoch(group: Any, member_id: str) -> int:
    return next(m.member_epoch for m in group.members if m.member_id == member_id)
