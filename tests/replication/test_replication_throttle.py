"""Replication quotas (KIP-73) on both sides of a fetch, on a virtual clock.

The promises a reassignment or a drain relies on, each attacked here:
- a replica catching up moves no more than the broker's rate over time, however much the leader holds, on the
  leader's side (`leader.replication.throttled.*`) and the follower's (`follower.replication.throttled.*`);
- an in-sync replica is never throttled, even while the quota is over its rate: acks=all waits for it;
- only the listed partitions on the listed brokers are throttled;
- bad values are refused naming the key, and the rates change while the broker runs.
"""

from __future__ import annotations

import pytest

from kelp.broker.replica.replication_quota import ALL, ReplicationQuotas, throttled_partitions
from kelp.config.broker import BrokerConfig, validate_broker_configs, validate_topic_configs
from kelp.errors import ConfigError
from tests.replication.replica_harness import TOPIC, Node, PeerStub, batch

CHUNK = 16 * 1024  # one batch's value size: a fetch of FETCH_MAX bytes carries 4 of them
FETCH_MAX = 64 * 1024
RATE = 100_000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _throttle(node: Node, clock: Clock, **rates: int) -> ReplicationQuotas:
    """Give `node` these dynamic rates and quotas on `clock` (as a `broker_config` record would)."""
    node.config.set_dynamic(default={}, broker={f"{side}.replication.throttled.rate": str(rate)
                                                for side, rate in rates.items()})
    node.rm.replication_quotas = ReplicationQuotas(node.config, lambda name: node.topics.get(name).configs,
                                                   clock=clock)
    return node.rm.replication_quotas


def _fill(node: Node, batches: int) -> None:
    lg = node.topics.logs.get_or_create(TOPIC, 0)
    for _ in range(batches):
        lg.append_as_leader(bytearray(batch(1, size=CHUNK)), leader_epoch=0)


async def _leader_fetch(node: Node, replica: int, offset: int) -> tuple[int, int]:
    """(bytes, next offset) of one follower fetch from `offset` answered by `node`."""
    from kelp.broker.replica.manager import FetchPartition
    from kelp.records.header import iter_headers

    [res] = await node.rm.fetch([FetchPartition(TOPIC, 0, offset, FETCH_MAX)], max_wait_ms=0, min_bytes=0,
                                max_bytes=FETCH_MAX, replica_id=replica)
    assert res.error is None, res.error
    data = bytes(res.records) if not hasattr(res.records, "read") else res.records.read()
    return len(data), (list(iter_headers(data))[-1].next_offset if data else offset)


async def test_the_leader_moves_a_catching_up_replica_at_its_rate_and_no_faster(tmp_path) -> None:
    leader, clock = Node(tmp_path, 0), Clock()
    leader.push(replicas=(0, 1), leader=0, leader_epoch=0, isr=(0,),
                configs={"leader.replication.throttled.replicas": "0:0,0:1"})
    _throttle(leader, clock, leader=RATE)
    _fill(leader, 400)  # 6.5 MB: far more than 30 s at the rate
    moved, offset, seconds = 0, 0, 30.0
    step = 0.05
    for _ in range(int(seconds / step)):
        n, offset = await _leader_fetch(leader, 1, offset)
        moved += n
        clock.now += step
    # Unthrottled, 600 fetches of 64 KiB would have moved everything; at the rate, about RATE x 30 s.
    assert moved <= RATE * seconds + FETCH_MAX, (moved, RATE * seconds)
    assert moved >= RATE * seconds * 0.85, (moved, RATE * seconds)
    leader.close()


async def test_an_in_sync_replica_and_unlisted_partitions_are_never_throttled(tmp_path) -> None:
    leader, clock = Node(tmp_path, 0), Clock()
    leader.push(replicas=(0, 1), leader=0, leader_epoch=0, isr=(0, 1),
                configs={"leader.replication.throttled.replicas": ALL})
    quotas = _throttle(leader, clock, leader=RATE)
    _fill(leader, 20)
    quotas.leader.record(50 * RATE)  # far over the rate
    assert quotas.leader.exceeded()
    n, _ = await _leader_fetch(leader, 1, 0)
    assert n > 0, "an in-sync follower got nothing while the quota was over its rate"
    # Out of sync, listed: nothing. Out of sync, but the list names partition 0 on another broker only: data.
    leader.push(replicas=(0, 1), leader=0, leader_epoch=0, isr=(0,), partition_epoch=1,
                configs={"leader.replication.throttled.replicas": ALL})
    assert (await _leader_fetch(leader, 1, 0))[0] == 0
    leader.push(replicas=(0, 1), leader=0, leader_epoch=0, isr=(0,), partition_epoch=2,
                configs={"leader.replication.throttled.replicas": "0:2,1:0"})
    assert (await _leader_fetch(leader, 1, 0))[0] > 0
    assert quotas.leader.skipped == 1
    leader.close()


async def test_the_follower_leaves_throttled_partitions_out_of_its_fetch_while_over_its_rate(tmp_path) -> None:
    leader, follower, clock = Node(tmp_path, 0), Node(tmp_path, 1, fetching=True), Clock()
    configs = {"follower.replication.throttled.replicas": "0:1"}
    leader.push(replicas=(0, 1), leader=0, leader_epoch=0, isr=(0,), configs=configs)
    follower.push(replicas=(0, 1), leader=0, leader_epoch=0, isr=(0,), configs=configs)
    await follower.settle()
    quotas = _throttle(follower, clock, follower=RATE)
    _fill(leader, 400)
    fetcher = follower.fetcher(0)
    fetcher.max_bytes = FETCH_MAX
    fetcher.backoff_s = 0.0
    fetcher.state[(TOPIC, 0)].truncating = False
    stub = PeerStub(leader, 1)
    seconds, step = 20.0, 0.05
    for _ in range(int(seconds / step)):
        await fetcher._fetch(stub)
        clock.now += step
    moved = follower.log.log_end_offset  # one record a batch: the batches moved
    assert moved * CHUNK <= RATE * seconds + FETCH_MAX, (moved * CHUNK, RATE * seconds)
    assert moved * CHUNK >= RATE * seconds * 0.85, (moved * CHUNK, RATE * seconds)
    assert quotas.follower.skipped > 0
    rounds = int(seconds / step)
    assert 0 < len(stub.requests) < rounds / 2, "the partition was never (or always) left out of a fetch"
    # In the ISR, the same follower fetches at every round, over the rate or not.
    follower.push(replicas=(0, 1), leader=0, leader_epoch=0, isr=(0, 1), partition_epoch=1, configs=configs)
    fetcher = follower.fetcher(0)
    fetcher.state[(TOPIC, 0)].truncating = False
    before = len(stub.requests)
    quotas.follower.record(50 * RATE)
    for _ in range(3):
        await fetcher._fetch(stub)
    assert len(stub.requests) == before + 3 and all(r.topics for r in stub.requests[before:])
    leader.close()
    follower.close()


def test_throttled_replica_lists_are_read_per_broker() -> None:
    assert throttled_partitions("*", 3) == ALL
    assert throttled_partitions("0:1, 1:2,2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("", 1) == frozenset()


@pytest.mark.parametrize("value", ["0-1", "0:1,x", "all", "0:1;1:2", "*,0:1"])
def test_a_bad_throttled_replica_list_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError, match="leader.replication.throttled.replicas.*partition:broker"):
        validate_topic_configs({"leader.replication.throttled.replicas": value}, topic="t")


def test_the_rates_are_dynamic_broker_configs_and_must_not_be_negative() -> None:
    assert validate_broker_configs({"leader.replication.throttled.rate": "1000",
                                    "follower.replication.throttled.rate": 0}) == {
        "leader.replication.throttled.rate": "1000", "follower.replication.throttled.rate": "0"}
    with pytest.raises(ConfigError, match="follower.replication.throttled.rate.*>= 0"):
        validate_broker_configs({"follower.replication.throttled.rate": "-5"})
    with pytest.raises(ConfigError, match="Cannot update these configs dynamically: replication.quota.window.num"):
        validate_broker_configs({"replication.quota.window.num": "5"})
    cfg = BrokerConfig.load(env={})
    assert cfg["leader.replication.throttled.rate"] == 2**63 - 1  # Kafka's default: no limit


def test_the_intra_broker_move_throttle_deletes_as_a_no_op_and_is_refused_saying_why() -> None:
    key = "replica.alter.log.dirs.io.max.bytes.per.second"
    assert validate_broker_configs({key: None, "leader.replication.throttled.rate": None}) == {
        "leader.replication.throttled.rate": None}
    with pytest.raises(ConfigError, match=f"'{key}' cannot be set: .*AlterReplicaLogDirs"):
        validate_broker_configs({key: "1000"})
