"""No replica file work on the event loop: rebuilding producer state, truncating, the epoch checkpoint's fsync,
deleting a log.

Two 1 GiB segments' headers took ≈6.5 s to walk on the loop, at every start and after every follower
truncation: lease renewal stalled, the lease expired, leadership moved, followers truncated — a failover
loop. Each test records which thread did the work and requires it to be a worker thread.
"""

from __future__ import annotations

import asyncio
import os
import threading

import kelp.broker.storage.segment as segment_mod
from tests.replication.replica_harness import TOPIC, Node, PeerStub, batch


def record_threads(monkeypatch, module, name: str) -> list[int]:
    """Wrap `module.name` to note the thread of every call."""
    seen: list[int] = []
    real = getattr(module, name)

    def wrapped(*args, **kwargs):
        seen.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return seen


def idempotent_log(node: Node, batches: int = 30) -> None:
    lg = node.topics.logs.get_or_create(TOPIC, 0)
    for seq in range(batches):
        lg.append_as_leader(bytearray(batch(1, producer_id=9, producer_epoch=0, base_sequence=seq, size=200)),
                            leader_epoch=1)


async def test_opening_a_replica_rebuilds_its_producer_state_in_a_worker_thread(tmp_path, monkeypatch) -> None:
    node = Node(tmp_path, 0, settings={"log.segment.bytes": 2048})
    idempotent_log(node)
    node.topics.logs.close_all()
    for snap in node.dir.glob("*/*.snapshot"):
        snap.unlink()  # no snapshot to start from: the whole log is replayed
    node = Node(tmp_path, 0, settings={"log.segment.bytes": 2048})
    walks = record_threads(monkeypatch, segment_mod, "iter_headers")
    loop_thread = threading.get_ident()

    node.push(replicas=(0,), leader=0, leader_epoch=2, isr=(0,))
    await node.settle()
    assert walks, "the producer state was not rebuilt from the log"
    assert loop_thread not in walks
    retry = await node.rm.append(TOPIC, 0, bytearray(batch(1, producer_id=9, producer_epoch=0, base_sequence=29,
                                                           size=200)), acks=1)
    assert retry.duplicate and retry.base_offset == 29
    node.close()


async def test_a_follower_truncation_rebuilds_producer_state_in_a_worker_thread(tmp_path, monkeypatch) -> None:
    leader, follower = Node(tmp_path, 0), Node(tmp_path, 1, fetching=True)
    idempotent_log(leader, 10)
    idempotent_log(follower, 10)
    follower.log.append_as_leader(bytearray(batch(3, producer_id=4, producer_epoch=0, base_sequence=0)),
                                  leader_epoch=2)  # written as a deposed leader, never replicated
    leader.push(replicas=(0, 1), leader=0, leader_epoch=3, isr=(0,))
    follower.push(replicas=(0, 1), leader=0, leader_epoch=3, isr=(0,))
    await leader.drain()
    await leader.settle(), await follower.settle()
    walks = record_threads(monkeypatch, segment_mod, "iter_headers")
    loop_thread = threading.get_ident()

    await follower.fetcher(0)._truncate(PeerStub(leader, 1))
    await follower.settle()
    assert follower.log.log_end_offset == 10
    assert walks and loop_thread not in walks
    assert follower.part.producers.last_sequence(4) is None  # the truncated producer is gone
    assert follower.part.producers.last_sequence(9) == 9
    leader.close(), follower.close()


async def test_taking_leadership_and_appending_under_a_new_epoch_fsync_nothing_on_the_loop(
        tmp_path, monkeypatch) -> None:
    node = Node(tmp_path, 0)
    node.push(replicas=(0, 1), leader=1, leader_epoch=1, isr=(0, 1))
    theirs = bytearray(batch(1))
    from kelp.records.header import assign_offsets
    from kelp.records.validation import parse_batches

    assign_offsets(theirs, parse_batches(theirs), base_offset=0, leader_epoch=1)
    fsyncs = record_threads(monkeypatch, os, "fsync")
    loop_thread = threading.get_ident()

    node.rm.append_as_follower(TOPIC, 0, bytes(theirs), leader_epoch=1, leader_high_watermark=0)  # epoch 1 is new here
    node.push(replicas=(0, 1), leader=0, leader_epoch=2, isr=(0, 1))
    node.rm.append_sync(TOPIC, 0, bytearray(batch(1)), acks=1)  # the first append of epoch 2
    assert loop_thread not in fsyncs
    assert node.log.leader_epochs.entries == [(1, 0), (2, 1)]
    await node.drain()
    assert fsyncs  # the checkpoint was written — by a worker thread
    from kelp.broker.storage.leader_epoch import LeaderEpochCache

    assert LeaderEpochCache.load(node.log.directory).entries == [(1, 0), (2, 1)]
    node.close()


async def test_deleting_a_replica_log_removes_files_in_a_worker_thread(tmp_path, monkeypatch) -> None:
    import kelp.broker.storage.log as log_mod

    node = Node(tmp_path, 0)
    node.push(replicas=(0,), leader=0, leader_epoch=1, isr=(0,))
    node.rm.append_sync(TOPIC, 0, bytearray(batch(5)), acks=1)
    removals = record_threads(monkeypatch, log_mod.shutil, "rmtree")
    renames = record_threads(monkeypatch, os, "rename")
    loop_thread = threading.get_ident()

    deleting = node.rm.delete_log_later(TOPIC, 0)
    assert node.topics.logs.get(TOPIC, 0) is None  # forgotten at once
    assert not removals and not renames  # nothing touched the disk on the loop
    await deleting
    assert removals and renames and loop_thread not in removals + renames
    assert [p for p in node.dir.iterdir() if p.is_dir()] == []
    node.close()


async def test_a_replica_placed_here_again_before_its_deletion_ran_starts_empty(tmp_path) -> None:
    node = Node(tmp_path, 0)
    node.push(replicas=(0,), leader=0, leader_epoch=1, isr=(0,))
    node.rm.append_sync(TOPIC, 0, bytearray(batch(5)), acks=1)

    deleting = node.rm.delete_log_later(TOPIC, 0)
    fresh = node.topics.logs.get_or_create(TOPIC, 0)  # placed here again at once
    assert fresh.log_end_offset == 0  # a new, empty log: never the old files
    await deleting
    fresh.append_as_leader(bytearray(batch(1)), leader_epoch=1)
    assert sorted(p.name for p in node.dir.iterdir() if p.is_dir()) == ["t-0"]
    assert fresh.log_end_offset == 1 and fresh.read(0, max_bytes=1 << 20)
    node.close()


async def test_flush_messages_fsyncs_in_a_worker_thread_before_the_answer(tmp_path, monkeypatch) -> None:
    """`log.flush.interval.messages=1` (docs/replication.md's setting for power-loss durability): every append is
    fsynced before it is acknowledged — by a worker thread; an fsync on the loop stalls every client of the broker."""
    node = Node(tmp_path, 0, settings={"log.flush.interval.messages": 1})
    node.push(replicas=(0,), leader=0, leader_epoch=1, isr=(0,))
    await node.drain()
    fsyncs = record_threads(monkeypatch, os, "fsync")
    loop_thread = threading.get_ident()
    result = await node.rm.append(TOPIC, 0, bytearray(batch(3)), acks=1)
    assert fsyncs and loop_thread not in fsyncs, "the flush.messages fsync ran on the event loop"
    assert node.log.recovery_point == result.last_offset + 1, "acknowledged before it was fsynced"
    node.close()


async def test_a_follower_past_flush_messages_fsyncs_in_a_worker_thread_before_it_fetches_again(
        tmp_path, monkeypatch) -> None:
    node = Node(tmp_path, 0, settings={"log.flush.interval.messages": 1})
    node.push(replicas=(0, 1), leader=1, leader_epoch=1, isr=(0, 1))
    await node.drain()
    theirs = bytearray(batch(2))
    from kelp.records.header import assign_offsets
    from kelp.records.validation import parse_batches

    assign_offsets(theirs, parse_batches(theirs), base_offset=0, leader_epoch=1)
    fsyncs = record_threads(monkeypatch, os, "fsync")
    loop_thread = threading.get_ident()
    node.rm.append_as_follower(TOPIC, 0, bytes(theirs), leader_epoch=1, leader_high_watermark=0)
    assert not fsyncs and node.log.recovery_point == 0, "the follower append fsynced on the event loop"
    await node.rm.flush_followers()  # what the replica fetcher awaits before its next fetch
    assert fsyncs and loop_thread not in fsyncs
    assert node.log.recovery_point == 2
    node.close()


async def test_deleting_a_topic_in_a_running_broker_removes_its_files_in_a_worker_thread(
        tmp_path, monkeypatch) -> None:
    """The broker as `app.py` composes it: a topic's deletion (any door, or its `remove_topic` record)
    goes through the replica manager's deleter, so no topic's files are removed on the event loop."""
    from aiohttp.test_utils import TestClient, TestServer

    import kelp.broker.storage.log as log_mod
    from kelp.broker.app import Broker
    from kelp.broker.http.app import build_http_app
    from kelp.config.broker import BrokerConfig

    broker = Broker(BrokerConfig.load(env={}, overrides={
        "log.dirs": str(tmp_path), "port": 0, "http.port": 0, "offsets.topic.num.partitions": 1}))
    await broker.start()
    try:
        async with TestClient(TestServer(build_http_app(broker))) as client:
            assert (await client.post("/admin/v1/topics", json={"name": "gone", "partitions": 3})).status == 201
            for p in range(3):
                r = await client.post(f"/topics/gone/partitions/{p}", json={"records": [{"value": p}]})
                assert r.status == 200
            removals = record_threads(monkeypatch, log_mod.shutil, "rmtree")
            renames = record_threads(monkeypatch, os, "rename")
            loop_thread = threading.get_ident()
            assert (await client.delete("/admin/v1/topics/gone")).status in (200, 202, 204)
            await asyncio.wait_for(_until_gone(tmp_path, "gone"), 10)
            assert removals and loop_thread not in removals + renames
    finally:
        await broker.stop()


async def _until_gone(root, topic: str) -> None:
    while any(p.name.startswith(f"{topic}-") for p in root.iterdir()):
        await asyncio.sleep(0.01)


async def test_a_segment_roll_makes_its_files_in_a_worker_thread_while_the_loop_serves(tmp_path, monkeypatch) -> None:
    """A produce that fills the active segment: the new segment's files are made in a worker thread (here a
    file system that blocks in `open`), the event loop serves meanwhile — a read of the same log and an append
    to it that waits its turn — and the producer state is snapshotted at the new segment's base."""
    from kelp.broker.storage.segment import segment_name
    from tests.storage.helpers import WAIT_S, BlockingOpen

    node = Node(tmp_path, 0, settings={"log.segment.bytes": 400})
    node.push(replicas=(0,), leader=0, leader_epoch=1, isr=(0,))
    await node.drain()
    first = await node.rm.append(TOPIC, 0, bytearray(batch(1, size=300)), acks=1)
    fs = BlockingOpen(monkeypatch, f"{segment_name(first.last_offset + 2)}.log")
    second = await node.rm.append(TOPIC, 0, bytearray(batch(1, size=300)), acks=1)  # past segment.bytes
    assert len(node.log.segments) == 1, "the roll was made inside the append"
    try:
        assert await asyncio.to_thread(fs.entered.wait, WAIT_S), "no roll started"
        # The roll's worker is inside `open`: the loop runs this coroutine, the log lock is free.
        assert node.log.read(0, max_bytes=1 << 20)
        third = asyncio.ensure_future(node.rm.append(TOPIC, 0, bytearray(batch(1)), acks=1))
        await asyncio.sleep(0)
        assert not third.done() and node.part.busy is not None  # held back: no append to a half-made segment
    finally:
        fs.release.set()
    result = await asyncio.wait_for(third, WAIT_S)
    assert fs.threads and threading.get_ident() not in fs.threads
    assert result.base_offset == second.last_offset + 1 == node.log.active_segment.base_offset
    await node.drain()
    assert (node.log.directory / f"{segment_name(result.base_offset)}.snapshot").exists()
    node.close()


async def test_a_push_applies_only_the_partitions_whose_state_changed(tmp_path, monkeypatch) -> None:
    """One ISR change of a 3,000-partition topic re-applied all 3,000 (after a creation, one ISR change per
    partition: O(n^2) on the loop, fetchers starved, ISRs shrank — issue 23). Unchanged states are the image's
    same objects and are skipped; the changed one is taken as before."""
    from kelp.broker.metadata.image import MetadataDelta
    from kelp.broker.metadata.model import PartitionState, TopicState
    from tests.replication.replica_harness import TOPIC_ID

    node = Node(tmp_path, 0)
    states = tuple(PartitionState((0, 1), 0, 1, (0, 1), 0) for _ in range(20))
    first = TopicState(TOPIC, states, topic_id=TOPIC_ID)
    node.topics.apply_delta(MetadataDelta(changed={TOPIC: first}))
    await node.drain()
    taken = record_threads(monkeypatch, type(node.part), "update_state")
    shrunk = PartitionState((0, 1), 0, 1, (0,), 1)
    node.topics.apply_delta(MetadataDelta(changed={TOPIC: first.with_partition(7, shrunk)}))
    assert len(taken) == 1
    assert node.rm.get_partition(TOPIC, 7).isr == (0,) and node.rm.get_partition(TOPIC, 7).applied is shrunk
    assert all(node.rm.get_partition(TOPIC, p).applied is states[p] for p in range(20) if p != 7)
    node.close()


async def test_a_new_topics_logs_are_created_in_a_worker_thread_before_its_delta_is_applied(
        tmp_path, monkeypatch) -> None:
    """3,000 new logs opened while the delta creating them was applied held the loop for seconds, past the
    broker's 3 s lease (issue 23): the cluster member has the TopicManager create them in a worker thread
    first (`prepare_logs`), with the topic's configs, and applying the delta opens none."""
    import kelp.broker.storage.log as log_mod
    from kelp.broker.metadata.image import MetadataDelta, MetadataImage
    from kelp.broker.metadata.model import PartitionState, TopicState
    from tests.replication.replica_harness import TOPIC_ID

    node = Node(tmp_path, 0)
    mine, theirs = PartitionState((0, 1), 0, 1, (0, 1), 0), PartitionState((1, 2), 1, 1, (1, 2), 0)
    topic = TopicState(TOPIC, (mine, theirs, mine), configs={"segment.bytes": "4096"}, topic_id=TOPIC_ID)
    opens = record_threads(monkeypatch, log_mod.Log, "open")
    loop_thread = threading.get_ident()

    image = MetadataImage(topics={TOPIC: topic})
    assert await node.topics.prepare_logs(image, [topic]) == 2  # partitions 0 and 2; 1 is not placed here
    assert opens and loop_thread not in opens
    assert node.topics.logs.get(TOPIC, 1) is None and node.topics.logs.get(TOPIC, 2).config.segment_bytes == 4096
    assert await node.topics.prepare_logs(image, [topic]) == 0  # made already
    opens.clear()
    node.topics.apply_delta(MetadataDelta(changed={TOPIC: topic}))
    assert opens == [], "applying the delta opened a log on the event loop"
    assert node.rm.get_partition(TOPIC, 2).log is node.topics.logs.get(TOPIC, 2)
    grown = TopicState(TOPIC, (mine, theirs, mine, mine), configs=topic.configs, topic_id=TOPIC_ID)
    assert await node.topics.prepare_logs(image, [grown]) == 1  # CreatePartitions: only the new one
    node.close()
