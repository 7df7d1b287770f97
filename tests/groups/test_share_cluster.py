"""KIP-932 share groups in a cluster of three (issue 36): a share-partition's state lives where its
`__share_group_state` partition is led, usually another broker, and survives the share-partition's leader.

The group is chosen so that its share-partition's state partition is led by a broker other than the data
partition's leader: every read and write of its state crosses the control plane. Records are accepted on
the leader, the leader is killed, and the broker that takes the partition over recovers the share-partition
from that state: nothing accepted is delivered again, what was only acquired is delivered again (count 2).
A reset and a DeleteGroups sent to a coordinator that leads neither the data nor the state are forwarded to
them over the control plane; a group config set through the broker that dies is applied by the new leader.
"""

from __future__ import annotations

import time
import uuid

from kelp.broker.groups.placement import partition_for_group
from kelp.broker.groups.share.state_log import STATE_TOPIC, state_partition_for
from kelp.errors import ErrorCode
from tests.support.cluster import Cluster
from tests.support.kafka_wire import WireClient, make_batch

from .share_wire import ACCEPT, ShareMember, acquired
from .test_group_configs import alter

STATE_PARTITIONS = 3
SETTINGS = {"offsets.topic.num.partitions": 3, "share.coordinator.state.topic.num.partitions": STATE_PARTITIONS,
            "share.coordinator.state.topic.min.isr": 2}
TOPIC = "share-cluster"


def _leader(cluster: Cluster, topic: str, partition: int) -> int:
    return int(cluster.topic(topic, via=cluster.running[0])["partitions"][partition]["leader"])


def _member(cluster: Cluster, group: str, name: str) -> ShareMember:
    return ShareMember(cluster[_leader(cluster, TOPIC, 0)].bootstrap, group, name, TOPIC)


def _fetch_until(cluster: Cluster, m: ShareMember, want: int, *, timeout_s: float = 30.0) -> list[tuple[int, int, int]]:
    got: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + timeout_s
    while sum(last - f + 1 for f, last, _n in got) < want:
        assert time.monotonic() < deadline, f"only {got} acquired; logs:\n{cluster.logs()}"
        resp = m.fetch(max_wait_ms=300)
        if resp.error_code == 0:
            got += acquired(resp)
            errors = [p.error_code for t in resp.responses for p in t.partitions if p.error_code]
            if errors:
                time.sleep(0.1)  # the state partition's leader is being elected: retry, bounded by the deadline
        else:
            time.sleep(0.1)
    return got


def _served(m: ShareMember) -> bool:
    """One fetch of the member's session: True when its partition answered without error (its state read)."""
    resp = m.fetch(max_wait_ms=0)
    return resp.error_code == 0 and not [p.error_code for t in resp.responses for p in t.partitions if p.error_code]


def test_share_state_across_brokers_survives_the_partition_leaders_death(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(3, settings=SETTINGS)
    cluster.admin("/admin/v1/topics", "POST", {"name": TOPIC, "partitions": 1, "replication_factor": 3})
    cluster.wait_fully_replicated(TOPIC)
    # a first share fetch creates __share_group_state; wait until its partitions are led
    probe = _member(cluster, "probe", "p")
    try:
        probe.find_coordinator()  # creates __consumer_offsets
        cluster.wait_for("the state topic", lambda: _served(probe) and all(
            p["leader"] >= 0 for p in cluster.topic(STATE_TOPIC, via=cluster.running[0])["partitions"]), timeout=60)
        tid = uuid.UUID(str(probe.tid)).hex
    finally:
        probe.close()
    cluster.wait_fully_replicated(STATE_TOPIC)
    data_leader = _leader(cluster, TOPIC, 0)
    state_leaders = [int(p["leader"]) for p in cluster.topic(STATE_TOPIC, via=cluster.running[0])["partitions"]]
    # the share-partition's state on another broker than the partition's leader
    group = next(g for g in (f"g{i}" for i in range(100))
                 if state_leaders[state_partition_for((g, tid, 0), STATE_PARTITIONS)] != data_leader)

    m = _member(cluster, group, "init")
    try:
        cluster.wait_for("the share-partition's state", lambda: _served(m))  # starts at the log end (0): remote
    finally:
        m.close()
    with WireClient(cluster[data_leader].bootstrap) as c:
        from tests.broker.helpers import produce

        for i in range(4):
            assert produce(c, TOPIC, make_batch([(None, f"v{i}".encode())]), acks=-1)[0] == 0
    m = _member(cluster, group, "a")
    try:
        assert sorted(o for f, last, _n in _fetch_until(cluster, m, 4) for o in range(f, last + 1)) == [0, 1, 2, 3]
        resp = m.acknowledge([(0, 1, ACCEPT), (3, 3, ACCEPT)])  # 2 stays acquired
        assert [p.error_code for t in resp.responses for p in t.partitions] == [0]
    finally:
        m.close()
    # a group config set through the broker about to die is in the cluster metadata, not on that broker
    assert alter(cluster[data_leader], "early", {"share.auto.offset.reset": "earliest"}).error_code == 0
    cluster[data_leader].kill()
    cluster.wait_for("a new leader", lambda: _leader(cluster, TOPIC, 0) not in (-1, data_leader), timeout=60)
    m = _member(cluster, "early", "e")
    try:  # the new leader starts that new share group at the log start
        assert sorted(o for f, last, _n in _fetch_until(cluster, m, 4, timeout_s=60) for o in range(f, last + 1)) \
            == [0, 1, 2, 3]
    finally:
        m.close()
    m = _member(cluster, group, "b")
    try:
        assert _fetch_until(cluster, m, 1, timeout_s=60) == [(2, 2, 2)]
        assert acquired(m.fetch(max_wait_ms=300)) == []
    finally:
        m.close()
    # a broker that does not lead the partition neither serves nor takes acknowledgements for it
    follower = next(b for b in cluster.running if b.broker_id != _leader(cluster, TOPIC, 0))
    f = ShareMember(follower.bootstrap, group, "c", TOPIC)
    try:
        fetched = f.fetch(max_wait_ms=0)
        assert [p.error_code for t in fetched.responses for p in t.partitions] == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        acked = f.acknowledge([(2, 2, ACCEPT)])
        assert [p.error_code for t in acked.responses for p in t.partitions] == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    finally:
        f.close()
    # kafka-share-groups --reset-offsets: a group whose coordinator is neither the dead broker nor the partition's
    # leader, so the reset is forwarded to the leader over the control plane
    from kelp.broker.kafka.messages import AlterShareGroupOffsetsRequest as A

    leader_now = _leader(cluster, TOPIC, 0)
    coordinators = [int(p["leader"]) for p in cluster.topic("__consumer_offsets", via=cluster.running[0])["partitions"]]
    reset_group = next(g for g in (f"r{i}" for i in range(500))
                       if coordinators[partition_for_group(g, 3)] not in (leader_now, data_leader))
    m = _member(cluster, reset_group, "init")
    try:
        cluster.wait_for("the share-partition's state", lambda: _served(m))  # starts at the log end, 4
    finally:
        m.close()
    T = A.AlterShareGroupOffsetsRequestTopic
    with WireClient(cluster[coordinators[partition_for_group(reset_group, 3)]].bootstrap) as c:
        done = c.request(A(group_id=reset_group, topics=[T(topic_name=TOPIC, partitions=[
            T.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=1)])]), 0)
    assert done.error_code == 0 and [p.error_code for t in done.responses for p in t.partitions] == [0], done
    m = _member(cluster, reset_group, "d")
    try:
        assert _fetch_until(cluster, m, 3) == [(1, 3, 1)]  # from the new start, first deliveries
    finally:
        m.close()
    # kafka-share-groups --delete of that group, through its coordinator: its state is found where each state
    # partition is led, and deleted on the partition's leader, which tombstones it where it is kept
    from kafka.protocol.admin import DeleteGroupsRequest

    with WireClient(cluster[coordinators[partition_for_group(reset_group, 3)]].bootstrap) as c:
        for expected in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):  # then no state is left anywhere
            deleted = c.request(DeleteGroupsRequest(groups_names=[reset_group]), 2)
            assert [r.error_code for r in deleted.results] == [expected], deleted
    m = _member(cluster, reset_group, "e")
    try:
        cluster.wait_for("the share-partition's state", lambda: _served(m))
        assert acquired(m.fetch(max_wait_ms=300)) == []  # started anew at the log end, not at 1
    finally:
        m.close()
