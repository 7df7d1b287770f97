"""Followers replicate transactions like any batch and end up with the leader's transaction state.

A follower appends the leader's batches (markers included) and must apply them to its producer state and
aborted-transaction index exactly as the leader did: after a leader change the new leader's last stable
offset and the aborted transactions it names to read_committed consumers must be the old leader's.
"""

from __future__ import annotations

from kelp.broker.replica.manager import TxnMarker
from kelp.records.build import build_batch
from kelp.records.record import Record
from tests.replication.replica_harness import TOPIC, Node, batch


def txn(pid: int, seq: int) -> bytearray:
    return bytearray(build_batch([Record(b"k", b"v" * 300)], producer_id=pid, producer_epoch=0, base_sequence=seq,
                                 is_transactional=True, now_ms=1_700_000_000_000))


async def test_a_follower_has_the_leaders_lso_and_aborted_index(tmp_path) -> None:
    small = {"log.segment.bytes": 1024}
    leader, follower = Node(tmp_path, 0, settings=small), Node(tmp_path, 1, settings=small)
    for n in (leader, follower):
        n.push(replicas=(0, 1), leader=0, leader_epoch=1, isr=(0, 1))
    rm = leader.rm
    await rm.append(TOPIC, 0, txn(7, 0), acks=1)
    await rm.append(TOPIC, 0, txn(8, 0), acks=1)
    await rm.append(TOPIC, 0, bytearray(batch(1)), acks=1)
    abort7, commit8 = TxnMarker(7, 0, False, 3, ((TOPIC, 0),)), TxnMarker(8, 0, True, 3, ((TOPIC, 0),))
    rm.append_marker_sync(TOPIC, 0, abort7)
    rm.append_marker_sync(TOPIC, 0, commit8)
    await rm.append(TOPIC, 0, txn(9, 0), acks=1)  # left open

    def replicate() -> None:  # one fetch round: the follower appends what the leader sent, as its fetcher does
        offset = follower.log.log_end_offset
        data = leader.log.read(offset, max_bytes=1 << 20) if offset < leader.log.log_end_offset else b""
        follower.rm.append_as_follower(TOPIC, 0, data, leader_epoch=1, leader_high_watermark=leader.part.high_watermark)

    async def sync() -> None:
        for _ in range(20):
            replicate()
            await leader.follower_fetch(1, follower.log.log_end_offset)
            replicate()  # carries the high watermark the fetch moved
            if follower.part.high_watermark == leader.part.high_watermark == leader.log.log_end_offset:
                return
        raise AssertionError("the follower did not catch up")

    await sync()
    assert leader.part.high_watermark == follower.part.high_watermark == leader.log.log_end_offset
    assert leader.part.last_stable_offset == follower.part.last_stable_offset == 5  # producer 9's open one
    end = leader.log.log_end_offset
    assert follower.log.collect_aborted_txns(0, end) == leader.log.collect_aborted_txns(0, end) != []
    assert follower.part.producers.ongoing_transactions() == leader.part.producers.ongoing_transactions() == {9: 5}
    assert follower.part.producers.entries() == leader.part.producers.entries()
    assert sorted(p.name for p in follower.log.directory.glob("*.txnindex")) == \
        sorted(p.name for p in leader.log.directory.glob("*.txnindex"))

    # leadership moves to the follower: it ends producer 9's transaction as the old leader would have
    for n in (leader, follower):
        n.push(replicas=(0, 1), leader=1, leader_epoch=2, isr=(1,), partition_epoch=1)
    await follower.settle()
    (answer,) = await follower.rm.append_txn_markers([TxnMarker(9, 0, False, 3, ((TOPIC, 0),))], timeout_ms=5000)
    assert answer == {(TOPIC, 0): None}
    assert [t.producer_id for t in follower.log.collect_aborted_txns(0, follower.log.log_end_offset)] == [7, 9]
    assert follower.part.last_stable_offset == follower.part.high_watermark
    leader.close()
    follower.close()
