"""acks=all answers as Kafka's DelayedProduce does: only once the high watermark passes the batch, and only
under the leader epoch the batch was appended at.

- A retried idempotent batch (a duplicate) is answered with its original offsets only after the ISR has
  them — after a failover the new leader holds the retried batch while its high watermark lags, and an
  early answer would be lost with the next broker death.
- A wait registered while the ISR met min.insync.replicas is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND if
  the ISR shrank below it before the high watermark passed the batch: min.insync is checked again when the
  wait completes, for a new batch and a retried one alike (the check before the append cannot see it).
- A wait whose partition changed leader epoch since the append fails with NOT_LEADER_OR_FOLLOWER, whether
  the change came before the wait was registered (the produce handler awaits between append and wait) or
  while it waited: the offset may since hold another producer's record.
"""

from __future__ import annotations

import asyncio

import pytest

from kelp.errors import NotEnoughReplicasAfterAppendError, NotLeaderOrFollowerError
from tests.replication.replica_harness import TOPIC, Node, batch, until

REPLICAS = (0, 1)


def leader_node(tmp_path, *, epoch: int = 3) -> Node:
    node = Node(tmp_path, 0)
    node.push(replicas=REPLICAS, leader=0, leader_epoch=epoch, isr=REPLICAS)
    return node


async def test_a_retried_idempotent_batch_waits_for_the_isr_like_the_original(tmp_path) -> None:
    node = leader_node(tmp_path)
    first = batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    original = asyncio.create_task(node.rm.append(TOPIC, 0, bytearray(first), acks=-1, timeout_ms=10_000))
    assert await until(lambda: node.log.log_end_offset == 2)
    retry = asyncio.create_task(node.rm.append(TOPIC, 0, bytearray(first), acks=-1, timeout_ms=10_000))
    await until(lambda: retry.done(), rounds=20)
    assert not retry.done(), "a duplicate was acknowledged before the follower had the batch"
    assert node.log.log_end_offset == 2  # stored once

    # acks=1 needs only the leader's copy: a duplicate is answered at once, with the original offsets.
    quick = await node.rm.append(TOPIC, 0, bytearray(first), acks=1)
    assert quick.duplicate and (quick.base_offset, quick.last_offset) == (0, 1)

    await node.follower_fetch(1, 2)  # broker 1 has both records: the high watermark reaches 2
    done = await asyncio.wait_for(asyncio.gather(original, retry), 5)
    assert [(r.base_offset, r.last_offset, r.duplicate) for r in done] == [(0, 1, False), (0, 1, True)]
    node.close()


async def test_a_retry_on_the_new_leader_of_a_batch_it_got_as_a_follower_waits_for_its_high_watermark(
        tmp_path) -> None:
    """Item 1 as the issue tells it: broker 1 fetched the producer's batch from leader 0, which died before
    anyone acknowledged it; broker 1 becomes leader with its high watermark behind the batch; the producer's
    retry lands there and is a duplicate. Answering it at once would acknowledge records that broker 1 alone
    holds: its death next loses them. It is answered once broker 2 has them, with the original offsets."""
    replicas = (0, 1, 2)
    node = Node(tmp_path, 1)
    node.push(replicas=replicas, leader=0, leader_epoch=3, isr=replicas)
    sent = batch(3, producer_id=7, producer_epoch=0, base_sequence=0)
    replicated = bytearray(sent)
    from kelp.records.header import assign_offsets
    from kelp.records.validation import parse_batches

    assign_offsets(replicated, parse_batches(replicated), base_offset=0, leader_epoch=3)
    node.rm.append_as_follower(TOPIC, 0, bytes(replicated), leader_epoch=3, leader_high_watermark=0)
    assert node.log.log_end_offset == 3

    node.push(replicas=replicas, leader=1, leader_epoch=4, isr=(1, 2), partition_epoch=1)  # broker 0 died
    await node.settle()
    assert node.part.is_leader and node.part.high_watermark < 3
    retry = asyncio.create_task(node.rm.append(TOPIC, 0, bytearray(sent), acks=-1, timeout_ms=10_000))
    await until(lambda: retry.done(), rounds=50)
    assert not retry.done(), "a retried batch only the new leader holds was acknowledged"
    assert node.log.log_end_offset == 3  # not stored again

    await node.follower_fetch(2, 3)  # broker 2 has the batch: the high watermark passes it
    done = await asyncio.wait_for(retry, 5)
    assert (done.base_offset, done.last_offset, done.duplicate) == (0, 2, True)
    node.close()


async def test_a_duplicate_is_refused_when_the_isr_is_below_min_insync(tmp_path) -> None:
    node = Node(tmp_path, 0, settings={"min.insync.replicas": 2})
    node.push(replicas=REPLICAS, leader=0, leader_epoch=3, isr=REPLICAS)
    first = batch(1, producer_id=7, producer_epoch=0, base_sequence=0)
    task = asyncio.create_task(node.rm.append(TOPIC, 0, bytearray(first), acks=-1, timeout_ms=10_000))
    assert await until(lambda: node.log.log_end_offset == 1)
    await node.follower_fetch(1, 1)
    assert (await asyncio.wait_for(task, 5)).base_offset == 0
    node.push(replicas=REPLICAS, leader=0, leader_epoch=3, isr=(0,), partition_epoch=1)
    from kelp.errors import NotEnoughReplicasError

    with pytest.raises(NotEnoughReplicasError):
        await node.rm.append(TOPIC, 0, bytearray(first), acks=-1, timeout_ms=10_000)
    node.close()


@pytest.mark.parametrize("shrunk_isr, hw_passes_by", [
    ((0,), "the shrink itself"),          # the leader alone: its log end is the high watermark at once
    ((0, 1), "broker 1's next fetch"),    # the high watermark passes later, still below min.insync
])
async def test_an_isr_shrinking_below_min_insync_during_the_wait_fails_new_and_retried_batches(
        tmp_path, shrunk_isr, hw_passes_by) -> None:
    """Item 1 of issue 17, its min.insync half (Kafka's DelayedProduce re-checks min.insync.replicas when it
    completes): both waits are registered while the ISR (0, 1, 2) meets min.insync.replicas=3, so the
    check before the append lets them through; the ISR then shrinks below it before the high watermark
    passes the batch. Acknowledging either would promise a durability the partition no longer has."""
    replicas = (0, 1, 2)
    node = Node(tmp_path, 0, settings={"min.insync.replicas": 3})
    node.push(replicas=replicas, leader=0, leader_epoch=3, isr=replicas)
    first = batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    fresh = asyncio.create_task(node.rm.append(TOPIC, 0, bytearray(first), acks=-1, timeout_ms=10_000))
    assert await until(lambda: node.log.log_end_offset == 2)
    retry = asyncio.create_task(node.rm.append(TOPIC, 0, bytearray(first), acks=-1, timeout_ms=10_000))
    await until(lambda: retry.done(), rounds=20)
    assert not fresh.done() and not retry.done(), "answered before the ISR had the batch"
    assert node.log.log_end_offset == 2  # the retry was not stored again: it waits on the original offsets

    node.push(replicas=replicas, leader=0, leader_epoch=3, isr=shrunk_isr, partition_epoch=1)
    if hw_passes_by == "broker 1's next fetch":
        await until(lambda: fresh.done() or retry.done(), rounds=20)
        assert not fresh.done() and not retry.done(), "answered before the high watermark passed the batch"
        await node.follower_fetch(1, 2)
    assert node.part.high_watermark == 2
    for waiting in (fresh, retry):
        with pytest.raises(NotEnoughReplicasAfterAppendError, match="below min.insync.replicas=3"):
            await asyncio.wait_for(waiting, 5)
    node.close()


async def test_a_wait_registered_after_leadership_moved_and_came_back_fails(tmp_path) -> None:
    """The handler appended at epoch 3, then (while other partitions were appended) leadership went to
    broker 1 — which wrote another producer's record at the same offset — and came back at epoch 5."""
    node = leader_node(tmp_path)
    for i in range(5):
        node.rm.append_sync(TOPIC, 0, bytearray(batch(1, value=b"old%d" % i)), acks=1)
    await node.follower_fetch(1, 5)
    assert node.part.high_watermark == 5
    appended = await node.rm.append_local(TOPIC, 0, bytearray(batch(1, value=b"mine")), acks=-1)
    assert appended.base_offset == 5

    node.push(replicas=REPLICAS, leader=1, leader_epoch=4, isr=REPLICAS)  # broker 1 leads, without offset 5
    node.log.truncate_to(5)  # what the follower's truncation does: offset 5 was never replicated
    theirs = bytearray(batch(1, value=b"theirs"))
    from kelp.records.header import assign_offsets
    from kelp.records.validation import parse_batches

    assign_offsets(theirs, parse_batches(theirs), base_offset=5, leader_epoch=4)
    node.rm.append_as_follower(TOPIC, 0, bytes(theirs), leader_epoch=4, leader_high_watermark=5)
    node.push(replicas=REPLICAS, leader=0, leader_epoch=5, isr=REPLICAS)  # and back to broker 0
    await node.settle()
    await node.follower_fetch(1, 6)
    assert node.part.high_watermark == 6  # offset 5 is committed — but it holds "theirs"

    with pytest.raises(NotLeaderOrFollowerError, match="epoch"):
        await node.rm.wait_for_isr(appended, acks=-1, timeout_ms=1000)
    node.close()


async def test_a_wait_in_flight_fails_when_the_leader_epoch_changes(tmp_path) -> None:
    node = leader_node(tmp_path)
    waiting = asyncio.create_task(node.rm.append(TOPIC, 0, bytearray(batch(1)), acks=-1, timeout_ms=10_000))
    assert await until(lambda: node.log.log_end_offset == 1)
    node.push(replicas=REPLICAS, leader=0, leader_epoch=5, isr=REPLICAS)  # re-elected at a newer epoch
    await node.follower_fetch(1, 1)  # the high watermark passes the batch under epoch 5
    with pytest.raises(NotLeaderOrFollowerError, match="epoch"):
        await asyncio.wait_for(waiting, 5)
    # A batch appended under epoch 5 completes as usual.
    fresh = asyncio.create_task(node.rm.append(TOPIC, 0, bytearray(batch(1)), acks=-1, timeout_ms=10_000))
    assert await until(lambda: node.log.log_end_offset == 2)
    await node.follower_fetch(1, 2)
    assert (await asyncio.wait_for(fresh, 5)).base_offset == 1
    node.close()


async def test_a_requests_waits_share_one_deadline_and_each_answers_for_itself(tmp_path) -> None:
    """`wait_all_for_isr` (issue 33: one request's acks=all waits in turn, not a task each): an append the ISR has
    is answered with its offsets, one it never gets REQUEST_TIMED_OUT once the request's one deadline passed, and
    an append after it that the ISR has is answered at once, though the deadline is behind."""
    from kelp.errors import RequestTimedOutError

    node = leader_node(tmp_path)
    first = await node.rm.append(TOPIC, 0, bytearray(batch(2)), acks=1)
    second = await node.rm.append(TOPIC, 0, bytearray(batch(3)), acks=1)
    await node.follower_fetch(1, 2)  # broker 1 has the first batch only: the high watermark is 2
    outcomes = await asyncio.wait_for(node.rm.wait_all_for_isr([first, second, first], timeout_ms=300), 10)
    assert outcomes[0] is first
    assert isinstance(outcomes[1], RequestTimedOutError) and "within 300 ms" in str(outcomes[1])
    assert outcomes[2] is first  # past the deadline, an append the ISR has is still answered with its offsets
    node.close()
