"""Transactions on the partition leader (issue 21's log side), through the replica manager.

What a Kafka user relies on: a read_committed consumer sees nothing of an open transaction (the last stable
offset holds it back), nothing of an aborted one (the fetch names it in `aborted_transactions`, from the
segments' `.txnindex`), and everything of a committed one; ListOffsets read_committed answers the LSO for
"latest"; markers are checked against the producer's state as Kafka's ProducerAppendInfo does; and all of
it survives a restart — clean (the producer snapshot carries the open transaction) or killed (the
aborted-transaction index is re-derived from the markers).
"""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch

from kelp.broker.replica.manager import FetchPartition, TxnMarker
from kelp.broker.storage.indexes.txn_index import ENTRY_SIZE, TXNINDEX_SUFFIX
from kelp.control_records import build_marker_batch, read_marker
from kelp.errors import ErrorCode
from kelp.records.build import build_batch
from kelp.records.header import iter_headers
from kelp.records.record import Record
from kelp.records.validation import parse_batches
from tests.replication.replica_harness import TOPIC, Node, batch

# Two ~370-byte batches fill a segment: an append past segment.bytes goes in and the roll follows it (issue 23).
SMALL_SEGMENTS = {"log.segment.bytes": 700}


def txn(n: int, pid: int, seq: int, *, epoch: int = 0, value: bytes = b"t", size: int = 0) -> bytearray:
    """A transactional batch of `n` records from producer `pid`."""
    return bytearray(build_batch([Record(b"k", value + b"." * size) for _ in range(n)], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, is_transactional=True,
                                 now_ms=1_700_000_000_000))


def marker(pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0) -> TxnMarker:
    return TxnMarker(pid, epoch, commit, coordinator_epoch, ((TOPIC, 0),))


async def end(node: Node, pid: int, commit: bool, **kw: int) -> None:
    (answer,) = await node.rm.append_txn_markers([marker(pid, commit, **kw)], timeout_ms=5000)
    assert answer == {(TOPIC, 0): None}


async def fetch(node: Node, offset: int = 0, *, isolation: int = 1, max_bytes: int = 1 << 20):
    (res,) = await node.rm.fetch([FetchPartition(TOPIC, 0, offset, max_bytes)], max_wait_ms=0, min_bytes=0,
                                 max_bytes=max_bytes, isolation=isolation)
    assert res.error is None, res.error
    return res


async def read_committed(node: Node, max_bytes: int = 400) -> tuple[list[int], set[tuple[int, int]]]:
    """Read as a read_committed consumer does, fetch after fetch up to the LSO: (data batch offsets,
    aborted transactions named)."""
    offset, seen, named = 0, [], set()
    while offset < node.part.last_stable_offset:
        res = await fetch(node, offset, max_bytes=max_bytes)
        raw = res.records.read() if hasattr(res.records, "read") else bytes(res.records)
        heads = list(iter_headers(raw))
        assert heads, f"nothing read at {offset} below the LSO {node.part.last_stable_offset}"
        seen += [h.base_offset for h in heads if not h.is_control]
        named |= set(res.aborted_transactions or [])
        offset = heads[-1].next_offset
    return seen, named


def data_offsets(res) -> list[int]:
    """Offsets of the data (non-control) batches a fetch returned."""
    raw = res.records.read() if hasattr(res.records, "read") else bytes(res.records)
    return [h.base_offset for h in iter_headers(raw) if not h.is_control]


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path, 0)
    n.push(replicas=(0,), leader=0, leader_epoch=1, isr=(0,))
    yield n
    n.close()


# -- the marker's bytes ----------------------------------------------------------------------------------
def test_marker_batch_is_what_kafka_clients_read_as_an_end_transaction_marker() -> None:
    for commit, kind in ((True, 1), (False, 0)):
        data = build_marker_batch(42, 3, commit=commit, coordinator_epoch=7, timestamp_ms=1_700_000_000_000)
        theirs = DefaultRecordBatch(bytes(data))
        assert theirs.is_control_batch and theirs.is_transactional
        assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (42, 3, -1)
        (record,) = list(theirs)
        assert record.key == struct.pack(">hh", 0, kind)  # ControlRecordType: version 0, ABORT 0 / COMMIT 1
        assert record.value == struct.pack(">hi", 0, 7)  # EndTransactionMarker: version 0, coordinator epoch
        (info,) = parse_batches(data)
        assert info.is_control and info.is_transactional and info.record_count == 1
        found = read_marker(data, info)
        assert found is not None and (found.commit, found.coordinator_epoch) == (commit, 7)


# -- LSO and read_committed ------------------------------------------------------------------------------
async def test_an_open_transaction_holds_the_lso_until_its_commit(node: Node) -> None:
    await node.rm.append(TOPIC, 0, bytearray(batch(1)), acks=1)  # offset 0, plain
    await node.rm.append(TOPIC, 0, txn(2, 7, 0), acks=1)  # offsets 1-2, producer 7's transaction
    await node.rm.append(TOPIC, 0, bytearray(batch(1)), acks=1)  # offset 3, plain, after it
    part = node.part
    assert part.high_watermark == 4 and part.last_stable_offset == 1
    committed = await fetch(node)
    assert committed.last_stable_offset == 1 and committed.high_watermark == 4
    assert data_offsets(committed) == [0] and committed.aborted_transactions == []
    uncommitted = await fetch(node, isolation=0)
    assert data_offsets(uncommitted) == [0, 1, 3] and uncommitted.aborted_transactions is None
    assert node.rm.list_offset(TOPIC, 0, -1, isolation_level=1) == (1, -1)
    assert node.rm.list_offset(TOPIC, 0, -1, isolation_level=0) == (4, -1)
    assert node.log.first_unstable_offset == 1  # the cleaner stops there

    await end(node, 7, True)  # the COMMIT marker at offset 4
    assert part.last_stable_offset == part.high_watermark == 5
    after = await fetch(node)
    assert data_offsets(after) == [0, 1, 3] and after.aborted_transactions == []
    assert node.rm.list_offset(TOPIC, 0, -1, isolation_level=1) == (5, -1)
    assert node.log.first_unstable_offset is None


async def test_the_lso_waits_for_the_marker_to_be_replicated(tmp_path) -> None:
    """A closed transaction stays unstable until the high watermark passes its marker (Kafka's
    unreplicatedTxns): a new leader without the marker would still hold it open."""
    leader = Node(tmp_path, 0)
    leader.push(replicas=(0, 1), leader=0, leader_epoch=1, isr=(0, 1))
    await leader.rm.append(TOPIC, 0, txn(1, 7, 0), acks=1)  # offset 0
    await leader.follower_fetch(1, 1)  # the follower has offset 0: HW 1
    assert leader.part.high_watermark == 1 and leader.part.last_stable_offset == 0
    result = leader.rm.append_marker_sync(TOPIC, 0, marker(7, True))  # offset 1, not replicated yet
    assert result.base_offset == 1
    assert leader.part.last_stable_offset == 0  # the marker is above the HW: still unstable
    await leader.follower_fetch(1, 2)
    assert leader.part.high_watermark == 2 and leader.part.last_stable_offset == 2
    leader.close()


async def test_read_committed_names_aborted_transactions_over_several_segments(tmp_path) -> None:
    node = Node(tmp_path, 0, settings=SMALL_SEGMENTS)
    node.push(replicas=(0,), leader=0, leader_epoch=1, isr=(0,))
    rm = node.rm
    # producer 7 aborts a transaction spread over segments; producer 8 commits one interleaved with it.
    await rm.append(TOPIC, 0, txn(1, 7, 0, size=300), acks=1)
    await rm.append(TOPIC, 0, txn(1, 8, 0, size=300), acks=1)
    await rm.append(TOPIC, 0, txn(1, 7, 1, size=300), acks=1)
    await rm.append(TOPIC, 0, txn(1, 7, 2, size=300), acks=1)
    await end(node, 7, False)  # ABORT at 4
    await rm.append(TOPIC, 0, txn(1, 8, 1, size=300), acks=1)
    await end(node, 8, True)  # COMMIT at 6
    await rm.append(TOPIC, 0, txn(1, 9, 0, size=300), acks=1)  # producer 9 aborts later: 7..8
    await end(node, 9, False)
    await rm.append(TOPIC, 0, bytearray(batch(1, size=300)), acks=1)  # 9
    if node.part.busy is not None:
        await node.part.busy  # the roll the last append left due (made in a worker thread)
    assert len(node.log.segments) >= 4
    # the marker's segment indexes the aborted transaction in Kafka's .txnindex format
    index_files = sorted(node.log.directory.glob(f"*{TXNINDEX_SUFFIX}"))
    entries = [struct.unpack_from(">hqqqq", f.read_bytes(), i) for f in index_files
               for i in range(0, f.stat().st_size, ENTRY_SIZE)]
    assert entries == [(0, 7, 0, 4, 1), (0, 9, 7, 8, 9)]  # version, pid, first, last, LSO after it

    def aborted(offset: int) -> list[tuple[int, int]]:
        return [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
                for t in node.log.collect_aborted_txns(offset, node.log.log_end_offset)]

    assert aborted(0) == [(7, 0, 4, 1), (9, 7, 8, 9)]
    # a consumer reads segment by segment: each fetch names the aborted transactions overlapping it
    offset, seen, named = 0, [], set()
    while offset < node.part.last_stable_offset:
        res = await fetch(node, offset, max_bytes=400)
        raw = res.records.read() if hasattr(res.records, "read") else bytes(res.records)
        heads = list(iter_headers(raw))
        seen += [h.base_offset for h in heads if not h.is_control]
        named |= set(res.aborted_transactions or [])
        if heads[-1].next_offset <= 4:
            assert (7, 0) in res.aborted_transactions  # the abort marker is in a later segment
        if heads[0].base_offset > 4 and heads[-1].next_offset <= 7:
            assert res.aborted_transactions == []  # nothing aborted overlaps offsets 5..6
        offset = heads[-1].next_offset
    assert seen == [0, 1, 2, 3, 5, 7, 9] and named == {(7, 0), (9, 7)}
    node.close()


# -- Kafka's ProducerAppendInfo checks --------------------------------------------------------------------
async def test_producer_state_rules_for_transactions(node: Node) -> None:
    rm = node.rm
    await rm.append(TOPIC, 0, txn(1, 7, 0, epoch=2), acks=1)
    # a plain batch while the producer's transaction is open: INVALID_TXN_STATE
    with pytest.raises(Exception) as plain:
        await rm.append(TOPIC, 0, bytearray(batch(1, producer_id=7, producer_epoch=2, base_sequence=1)), acks=1)
    assert getattr(plain.value, "code", None) == ErrorCode.INVALID_TXN_STATE
    # markers: an older producer epoch, then an older coordinator epoch are refused, nothing written
    await end(node, 7, False, epoch=2, coordinator_epoch=5)
    leo = node.log.log_end_offset
    (stale,) = await rm.append_txn_markers([marker(7, True, epoch=1, coordinator_epoch=5)], timeout_ms=5000)
    assert stale[(TOPIC, 0)].code == ErrorCode.INVALID_PRODUCER_EPOCH
    (zombie,) = await rm.append_txn_markers([marker(7, True, epoch=2, coordinator_epoch=4)], timeout_ms=5000)
    assert zombie[(TOPIC, 0)].code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert node.log.log_end_offset == leo
    # a data batch of an older epoch than the marker's: INVALID_PRODUCER_EPOCH
    with pytest.raises(Exception) as old:
        await rm.append(TOPIC, 0, txn(1, 7, 1, epoch=1), acks=1)
    assert getattr(old.value, "code", None) == ErrorCode.INVALID_PRODUCER_EPOCH
    # per partition: a partition that does not exist, and one not led here
    missing = TxnMarker(7, 2, True, 5, ((TOPIC, 3), ("nope", 0)))
    (answer,) = await rm.append_txn_markers([missing], timeout_ms=5000)
    assert {k: e.code for k, e in answer.items() if e} == {
        (TOPIC, 3): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    node.push(replicas=(0, 1), leader=1, leader_epoch=2, isr=(0, 1))
    (moved,) = await rm.append_txn_markers([marker(7, True, epoch=2, coordinator_epoch=5)], timeout_ms=5000)
    assert moved[(TOPIC, 0)].code == ErrorCode.NOT_LEADER_OR_FOLLOWER


# -- restarts ---------------------------------------------------------------------------------------------
async def test_an_open_transaction_survives_a_clean_restart(tmp_path) -> None:
    node = Node(tmp_path, 0)
    node.push(replicas=(0,), leader=0, leader_epoch=1, isr=(0,))
    await node.rm.append(TOPIC, 0, bytearray(batch(1)), acks=1)
    await node.rm.append(TOPIC, 0, txn(1, 7, 0), acks=1)  # offset 1, open
    await node.rm.append(TOPIC, 0, bytearray(batch(1)), acks=1)
    node.close()  # the snapshot at the log end carries producer 7's open transaction
    again = Node(tmp_path, 0)
    again.push(replicas=(0,), leader=0, leader_epoch=2, isr=(0,))
    await again.settle()
    assert again.part.producers.ongoing_transactions() == {7: 1}
    assert again.part.last_stable_offset == 1
    await end(again, 7, False)
    (aborted,) = again.log.collect_aborted_txns(0, 10)
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset) == (7, 1, 3)
    again.close()


async def test_a_kill_loses_no_aborted_transaction(tmp_path) -> None:
    """kill -9 after the abort markers, and the unflushed tail of the .txnindex lost as after a power
    failure: the restart re-derives the index from the markers (Kafka's segment recovery)."""
    node = Node(tmp_path, 0, settings=SMALL_SEGMENTS)
    node.push(replicas=(0,), leader=0, leader_epoch=1, isr=(0,))
    rm = node.rm
    for pid in (7, 8):
        await rm.append(TOPIC, 0, txn(1, pid, 0, size=300), acks=1)
    await rm.append(TOPIC, 0, txn(1, 7, 1, size=300), acks=1)
    await end(node, 7, False)
    await rm.append(TOPIC, 0, txn(1, 8, 1, size=300), acks=1)
    await end(node, 8, False)
    await rm.append(TOPIC, 0, txn(1, 9, 0, size=300), acks=1)  # still open at the kill
    await node.drain()
    want = node.log.collect_aborted_txns(0, node.log.log_end_offset)
    assert [t.producer_id for t in want] == [7, 8]
    for f in node.log.directory.glob(f"*{TXNINDEX_SUFFIX}"):
        f.unlink()  # no clean close: what the page cache held of the indexes is gone
    again = Node(tmp_path, 0, settings=SMALL_SEGMENTS)
    again.push(replicas=(0,), leader=0, leader_epoch=2, isr=(0,))
    await again.settle()
    assert again.log.collect_aborted_txns(0, again.log.log_end_offset) == want
    assert again.part.producers.ongoing_transactions() == {9: 6}
    assert again.part.last_stable_offset == 6
    assert await read_committed(again) == ([0, 1, 2, 4], {(7, 0), (8, 1)})
    again.close()
    node.close()
