"""ISR lag is measured on the monotonic clock: a step of the wall clock shrinks no ISR (issue 31 item 6).

Followers' progress was stamped with the wall clock, so a forward step (NTP correcting a drifted clock, a VM
resumed) made every follower look silent for the size of the step: the leader's periodic check asked to shrink
every ISR to itself, and acks=all writes then waited on — or, with min.insync.replicas 1, were acknowledged by —
the leader alone. A backward step hid real lag for as long. The lag clock here is driven separately from the wall
clock, as the kernel keeps them.
"""

from __future__ import annotations

from tests.replication.replica_harness import TOPIC, Node, batch


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


class Requests:
    def __init__(self) -> None:
        self.isrs: list[list[int]] = []

    async def __call__(self, topic: str, partition: int, **request) -> dict:
        self.isrs.append(list(request["isr"]))
        raise AssertionError("no ISR change was expected")


def leader(tmp_path, wall: Clock, lag: Clock) -> tuple[Node, Requests]:
    node = Node(tmp_path, 0, settings={"replica.lag.time.max.ms": 10_000})
    node.rm._now_ms = wall
    node.rm._lag_clock_ms = lag
    node.push(replicas=(0, 1, 2), leader=0, leader_epoch=1, isr=(0, 1, 2), partition_epoch=1)
    requests = Requests()
    node.rm.alter_partition = requests
    return node, requests


async def test_a_forward_step_of_the_wall_clock_shrinks_no_isr(tmp_path) -> None:
    wall, lag = Clock(1_700_000_000_000), Clock(5_000)
    node, requests = leader(tmp_path, wall, lag)
    for _ in range(3):
        node.rm.append_sync(TOPIC, 0, bytearray(batch(1)), acks=1)
    await node.follower_fetch(1, 3)
    await node.follower_fetch(2, 3)
    wall.ms += 60_000  # the wall clock jumps a minute; a second passes
    lag.ms += 1_000
    node.rm.check_isr()
    assert await node.drain()
    assert requests.isrs == [] and node.part.isr == (0, 1, 2)


async def test_a_backward_step_hides_no_lag(tmp_path) -> None:
    """The follower that stopped fetching still leaves the ISR after the lag time, although the wall clock went
    back by more than that."""
    wall, lag = Clock(1_700_000_000_000), Clock(5_000)
    node, requests = leader(tmp_path, wall, lag)
    asked: list[list[int]] = []

    async def record(topic: str, partition: int, **request) -> dict:
        asked.append(list(request["isr"]))
        return {}

    node.rm.alter_partition = record
    node.rm.append_sync(TOPIC, 0, bytearray(batch(1)), acks=1)
    await node.follower_fetch(1, 1)
    await node.follower_fetch(2, 1)
    node.rm.append_sync(TOPIC, 0, bytearray(batch(1)), acks=1)
    wall.ms -= 120_000
    lag.ms += 11_000
    await node.follower_fetch(1, 2)  # broker 1 keeps up; broker 2 has been silent for 11 s
    node.rm.check_isr()
    assert await node.drain()
    assert asked and asked[0] == [0, 1]
