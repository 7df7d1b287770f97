"""Idempotent-producer state survives restarts whole: snapshots at segment rolls, replay after the newest one.

Before, the state was rebuilt from the last two segments only, and an unknown producer is accepted at any
sequence (Kafka's rule, KIP-360): a producer whose last batch lay in an older segment was unknown after a
restart, and its retry was stored a second time. Now, as Kafka's ProducerStateManager: a snapshot file is
written when a segment rolls, the rebuild loads the newest snapshot in [log start, log end] and replays
the batches after it (every batch from the log start when none qualifies), truncation removes the
snapshots above the new end, and a clean shutdown leaves one at the log end.
"""

from __future__ import annotations

import pytest

from kelp.broker.replica.producer_state import ProducerStateManager
from tests.replication.replica_harness import TOPIC, Node, batch

SMALL_SEGMENTS = {"log.segment.bytes": 1024}


@pytest.fixture
def snapshots():
    from kelp.broker.replica.producer_recovery import rebuild_producer_state
    from kelp.broker.storage.producer_snapshot import list_snapshots, snapshot_path

    return rebuild_producer_state, list_snapshots, snapshot_path


async def produce_history(node: Node) -> bytes:
    """Producer 5's last batch lands in the first segment; producer 6 fills several more. Returns 5's batch."""
    node.push(replicas=(0,), leader=0, leader_epoch=1, isr=(0,))
    last_of_5 = batch(1, producer_id=5, producer_epoch=0, base_sequence=0, size=300)
    await node.rm.append(TOPIC, 0, bytearray(last_of_5), acks=1)
    for seq in range(12):
        await node.rm.append(TOPIC, 0, bytearray(batch(1, producer_id=6, producer_epoch=0, base_sequence=seq,
                                                       size=300)), acks=1)
    assert len(node.log.segments) >= 4
    await node.drain()  # the roll snapshots are written in worker threads
    return last_of_5


async def rolled_log(tmp_path) -> tuple[Node, object, list[int]]:
    """A node after `produce_history`, its log and the segments' base offsets."""
    node = Node(tmp_path, 0, settings=SMALL_SEGMENTS)
    await produce_history(node)
    return node, node.log, [s.base_offset for s in node.log.segments]


async def restarted(node: Node, tmp_path) -> Node:
    again = Node(tmp_path, 0, settings=SMALL_SEGMENTS)
    again.push(replicas=(0,), leader=0, leader_epoch=2, isr=(0,))
    await again.settle()
    return again


async def test_a_retry_from_an_old_segment_is_recognised_after_a_crash(tmp_path) -> None:
    node = Node(tmp_path, 0, settings=SMALL_SEGMENTS)
    retry = await produce_history(node)
    # kill -9: no clean close (the page cache keeps what was written); a new process opens the same files.
    again = await restarted(node, tmp_path)
    end = again.log.log_end_offset
    result = await again.rm.append(TOPIC, 0, bytearray(retry), acks=1)
    assert result.duplicate and result.base_offset == 0
    assert again.log.log_end_offset == end  # not stored twice
    again.close()


async def test_without_any_snapshot_the_whole_log_is_replayed(tmp_path) -> None:
    node = Node(tmp_path, 0, settings=SMALL_SEGMENTS)
    retry = await produce_history(node)
    for snap in node.log.directory.glob("*.snapshot"):
        snap.unlink()
    again = await restarted(node, tmp_path)
    result = await again.rm.append(TOPIC, 0, bytearray(retry), acks=1)
    assert result.duplicate and result.base_offset == 0
    again.close()


async def test_snapshots_are_taken_at_rolls_and_the_rebuild_replays_only_after_the_newest(tmp_path, snapshots) -> None:
    rebuild_producer_state, list_snapshots, snapshot_path = snapshots
    node, lg, bases = await rolled_log(tmp_path)
    assert list_snapshots(lg.directory) == bases[1:]  # one per roll, at the new segment's base
    rebuilt = rebuild_producer_state(lg, TOPIC, 0, write_snapshot=False)
    assert rebuilt.snapshot_offset == bases[-1]
    assert rebuilt.batches_replayed == lg.log_end_offset - bases[-1]  # one record per batch here
    assert rebuilt.producers.entries() == node.part.producers.entries()

    # A corrupt newest snapshot is skipped (and removed): the one before it serves.
    snapshot_path(lg.directory, bases[-1]).write_bytes(b"\x00\x01garbage")
    rebuilt = rebuild_producer_state(lg, TOPIC, 0, write_snapshot=False)
    assert rebuilt.snapshot_offset == bases[-2]
    assert rebuilt.producers.entries() == node.part.producers.entries()
    assert bases[-1] not in list_snapshots(lg.directory)
    node.close()


async def test_a_clean_shutdown_leaves_a_snapshot_at_the_log_end(tmp_path, snapshots) -> None:
    rebuild_producer_state, list_snapshots, snapshot_path = snapshots
    node = Node(tmp_path, 0, settings=SMALL_SEGMENTS)
    await produce_history(node)
    end = node.log.log_end_offset
    entries = node.part.producers.entries()
    node.close()
    again = Node(tmp_path, 0, settings=SMALL_SEGMENTS)
    rebuilt = rebuild_producer_state(again.topics.logs.get(TOPIC, 0), TOPIC, 0, write_snapshot=False)
    assert (rebuilt.snapshot_offset, rebuilt.batches_replayed) == (end, 0)
    assert rebuilt.producers.entries() == entries
    again.close()


async def test_truncation_removes_the_snapshots_above_the_new_end(tmp_path, snapshots) -> None:
    rebuild_producer_state, list_snapshots, snapshot_path = snapshots
    node, lg, bases = await rolled_log(tmp_path)
    generation = lg.truncation_generation
    lg.truncate_to(bases[2])
    assert list_snapshots(lg.directory) == bases[1:3]  # the one at the new end still describes it
    # A snapshot captured before the truncation is never installed after it.
    assert not lg.write_producer_snapshot(bases[2], [(6, 0, ((0, 0, 1, 1, 0),))], generation=generation)
    assert list_snapshots(lg.directory) == bases[1:3]
    rebuilt = rebuild_producer_state(lg, TOPIC, 0, write_snapshot=False)
    assert rebuilt.snapshot_offset == bases[2] and rebuilt.batches_replayed == 0
    assert rebuilt.producers.last_sequence(6) == bases[2] - 2  # producer 6's batches below the new end
    node.close()


def test_an_unknown_producer_is_accepted_at_any_sequence() -> None:
    """Kafka's rule since KIP-360 (ProducerAppendInfo.checkSequence): with the state complete, a producer
    unknown here has no batch in the log, so nothing it sends can duplicate a stored batch."""
    state = ProducerStateManager(TOPIC, 0)
    assert state.check(11, 0, 7, 7) is None
    state.update(11, 0, 7, 7, 0, 0, 0)
    assert state.check(11, 0, 7, 7) is not None  # from then on it is known: its retry is a duplicate
