"""The leader keeps a proposed ISR expansion until its outcome is known (KIP-497).

The controller may have committed an expansion whose answer was lost: the new member can then be
elected, so until the leader knows, its high watermark must not pass what that member lacks. An unknown
outcome is asked again (the very same request); a definite refusal ends it; newer metadata settles it.
"""

from __future__ import annotations

import asyncio

from kelp.errors import IneligibleReplicaError, InvalidUpdateVersionError, RequestTimedOutError
from tests.replication.replica_harness import TOPIC, Node, batch, until

REPLICAS = (0, 1, 2)


class Controller:
    """A stand-in for LeaderRouting.alter_partition: records each request and answers as told."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.answers: asyncio.Queue = asyncio.Queue()

    async def __call__(self, topic: str, partition: int, **request) -> dict:
        self.requests.append({"topic": topic, "partition": partition, **request})
        answer = await self.answers.get()
        if isinstance(answer, BaseException):
            raise answer
        return answer


async def expanding_leader(tmp_path) -> tuple[Node, Controller]:
    node = Node(tmp_path, 0)
    node.push(replicas=REPLICAS, leader=0, leader_epoch=3, isr=(0, 1), partition_epoch=4)
    controller = Controller()
    node.rm.alter_partition = controller
    node.rm.alter_partition_backoff_s = (0.0, 0.0)
    for _ in range(10):
        node.rm.append_sync(TOPIC, 0, bytearray(batch(1)), acks=1)
    await node.follower_fetch(1, 10)
    assert node.part.high_watermark == 10
    for _ in range(5):
        node.rm.append_sync(TOPIC, 0, bytearray(batch(1)), acks=1)
    await node.follower_fetch(2, 10)  # broker 2 caught up to the high watermark: proposed for the ISR
    assert node.part.pending_isr == (0, 1, 2)
    return node, controller


async def test_an_unknown_outcome_keeps_the_larger_isr_and_asks_again(tmp_path) -> None:
    node, controller = await expanding_leader(tmp_path)
    controller.answers.put_nowait(RequestTimedOutError("no controller answered 'alter_partition' within 10s"))
    assert await until(lambda: len(controller.requests) == 2), "the request was not sent again"
    first, again = controller.requests
    assert first == again == {"topic": TOPIC, "partition": 0, "leader_epoch": 3, "partition_epoch": 4,
                              "isr": [0, 1, 2]}

    await node.follower_fetch(1, 15)
    assert node.part.maximal_isr == (0, 1, 2)
    assert node.part.high_watermark == 10  # not 15: broker 2 (perhaps in the ISR already) has only 10

    # The controller had committed it: the metadata arrives, then the retried request's answer.
    node.push(replicas=REPLICAS, leader=0, leader_epoch=3, isr=(0, 1, 2), partition_epoch=5)
    assert node.part.pending_isr is None
    controller.answers.put_nowait({"isr": [0, 1, 2], "partition_epoch": 5})
    await node.follower_fetch(2, 15)
    assert node.part.high_watermark == 15
    assert await node.drain()
    assert len(controller.requests) == 2
    node.close()


async def test_a_stale_view_answer_keeps_the_larger_isr_until_metadata_settles_it(tmp_path) -> None:
    """INVALID_UPDATE_VERSION after a lost answer: the first attempt may have been applied."""
    node, controller = await expanding_leader(tmp_path)
    controller.answers.put_nowait(InvalidUpdateVersionError("partition epoch 4, current is 5"))
    assert await node.drain()
    assert node.part.pending_isr == (0, 1, 2) and len(controller.requests) == 1
    await node.follower_fetch(1, 15)
    assert node.part.high_watermark == 10
    node.push(replicas=REPLICAS, leader=0, leader_epoch=3, isr=(0, 1), partition_epoch=5)  # it was not
    assert node.part.pending_isr is None
    await node.follower_fetch(1, 15)
    assert node.part.high_watermark == 15
    node.close()


async def test_a_definite_refusal_drops_the_proposal(tmp_path) -> None:
    node, controller = await expanding_leader(tmp_path)
    controller.answers.put_nowait(IneligibleReplicaError("broker(s) [2] cannot join the ISR: shutting down"))
    assert await node.drain()
    assert node.part.pending_isr is None and len(controller.requests) == 1
    await node.follower_fetch(1, 15)
    assert node.part.high_watermark == 15
    node.close()
