"""Transactions v2 (KIP-890 part 2) in the coordinator: an epoch bump on every commit and abort.

Driven as in `test_coordinator` (in-memory `__transaction_state`, a marker sender double, a manual clock):
EndTxn v5's answers and retries, markers under the bumped epoch, partitions added by leaders, an abort with
nothing added, the producer id rolling over at the last epoch, timeouts fencing with one bump, and a new
coordinator loading all of it from TransactionLogValue v1.
"""

from __future__ import annotations

import asyncio

from kelp.broker.transactions.metadata import MAX_EPOCH, TxnState
from kelp.broker.transactions.txn_log import decode_txn_value
from kelp.errors import ErrorCode
from tests.transactions.harness import coordinator, until
from tests.transactions.test_coordinator import TID, P, init, ready


async def test_each_commit_and_abort_bumps_the_epoch_and_answers_it() -> None:
    coord, store, sender, _ = await ready()
    pid, epoch = await init(coord)
    assert await coord.add_partitions(TID, pid, epoch, P, tv2=True) == ErrorCode.NONE
    r = await coord.end_txn_v2(TID, pid, epoch, True)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.NONE, pid, epoch + 1)
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_COMMIT)
    (_, marker), = sender.sent
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_version) == (pid, epoch + 1, 2)
    # a retry of the answered EndTxn (the old epoch) gets the same answer; the other outcome does not
    again = await coord.end_txn_v2(TID, pid, epoch, True)
    assert (again.error, again.producer_epoch) == (ErrorCode.NONE, epoch + 1)
    assert (await coord.end_txn_v2(TID, pid, epoch, False)).error == ErrorCode.INVALID_TXN_STATE
    # the next transaction runs at the new epoch; the old one is fenced
    assert await coord.add_partitions(TID, pid, epoch, P, tv2=True) == ErrorCode.PRODUCER_FENCED
    assert await coord.add_partitions(TID, pid, epoch + 1, P[:1], tv2=True) == ErrorCode.NONE
    r = await coord.end_txn_v2(TID, pid, epoch + 1, False)
    assert (r.error, r.producer_epoch) == (ErrorCode.NONE, epoch + 2)
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_ABORT)
    assert sender.sent[-1][1].producer_epoch == epoch + 2 and not sender.sent[-1][1].commit
    # every state change was written as TransactionLogValue v1 with the client's transaction version
    value = decode_txn_value(store.partitions[coord.state.partition_for(TID)][-1][1])
    assert value.client_transaction_version == 2 and value.producer_epoch == epoch + 2
    assert (await coord.end_txn_v2(TID, 4242, epoch + 2, True)).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert (await coord.end_txn_v2(TID, pid, epoch + 5, True)).error == ErrorCode.PRODUCER_FENCED


async def test_an_abort_with_nothing_added_completes_without_markers() -> None:
    coord, _, sender, _ = await ready()
    pid, epoch = await init(coord)
    # nothing added yet: a batch may still be on its way (the Java producer's race below), so retriable
    assert (await coord.end_txn_v2(TID, pid, epoch, True)).error == ErrorCode.CONCURRENT_TRANSACTIONS
    r = await coord.end_txn_v2(TID, pid, epoch, False)
    assert (r.error, r.producer_epoch) == (ErrorCode.NONE, epoch + 1)
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_ABORT)
    assert sender.sent == []


async def test_the_producer_id_rolls_over_at_the_last_epoch() -> None:
    coord, store, sender, clock = await ready()
    pid, _ = await init(coord)
    coord.txns[TID].producer_epoch = last = MAX_EPOCH - 1  # as if 32766 transactions had run
    assert await coord.add_partitions(TID, pid, last, P, tv2=True) == ErrorCode.NONE
    sender.gate = asyncio.Event()
    r = await coord.end_txn_v2(TID, pid, last, True)
    new_pid = r.producer_id
    assert r.error == ErrorCode.NONE and new_pid != pid and r.producer_epoch == 0
    meta = coord.txns[TID]
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.next_producer_id) == (
        TxnState.PREPARE_COMMIT, pid, MAX_EPOCH, new_pid)
    # A coordinator that takes over here loads the rollover from the log and finishes it.
    p = coord.state.partition_for(TID)
    coord.on_resign(p, 6)
    sender.gate.set()
    new, _, new_sender, _ = coordinator(store=store, clock=clock)
    await new.on_become_leader(p, 7)
    await until(lambda: new.txns[TID].state is TxnState.COMPLETE_COMMIT)
    (_, marker), = new_sender.sent
    assert (marker.producer_id, marker.producer_epoch) == (pid, MAX_EPOCH)  # the old id, the bumped epoch
    meta = new.txns[TID]
    assert (meta.producer_id, meta.producer_epoch, meta.last_producer_id) == (new_pid, 0, pid)
    retried = await new.end_txn_v2(TID, pid, last, True)  # the client never saw the answer: same one again
    assert (retried.error, retried.producer_id, retried.producer_epoch) == (ErrorCode.NONE, new_pid, 0)
    assert await new.add_partitions(TID, new_pid, 0, P, tv2=True) == ErrorCode.NONE


async def test_a_timed_out_v2_transaction_is_fenced_by_one_bump() -> None:
    coord, _, sender, clock = await ready()
    pid, epoch = await init(coord, timeout_ms=1000)
    await coord.add_partitions(TID, pid, epoch, P, tv2=True)
    clock.now += 2000
    assert await coord.abort_timed_out() == 1
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_ABORT)
    assert coord.txns[TID].producer_epoch == epoch + 1 and sender.sent[-1][1].producer_epoch == epoch + 1
    # the client's commit, in flight when the coordinator aborted: fenced (recoverable), as Kafka since
    # KAFKA-20785 — INVALID_TXN_STATE, the answer before, is fatal to the producer
    assert (await coord.end_txn_v2(TID, pid, epoch, True)).error == ErrorCode.PRODUCER_FENCED
    assert await coord.add_partitions(TID, pid, epoch, P, tv2=True) == ErrorCode.PRODUCER_FENCED


async def test_an_end_txn_sent_before_its_batches_is_retriable_until_they_are_added() -> None:
    """The Java producer's race (seen killing a Connect exactly-once task): its Sender reads "no incomplete
    batches", the application appends the next transaction's records and commits, and the EndTxn goes out
    before the batch, which waits for the EndTxn's answer. Whether that EndTxn meets the previous transaction's
    markers still being written (Prepare) or already written (Complete), it must be retriable
    (CONCURRENT_TRANSACTIONS), and the commit after the batch's partition was added commits it. Before, the
    first answer was PRODUCER_FENCED and the second INVALID_TXN_STATE, both fatal to the producer."""
    coord, _, sender, _ = await ready()
    pid, epoch = await init(coord)
    for markers_done in (False, True):
        assert await coord.add_partitions(TID, pid, epoch, P, tv2=True) == ErrorCode.NONE
        sender.gate = None if markers_done else asyncio.Event()
        r = await coord.end_txn_v2(TID, pid, epoch, True)
        assert (r.error, r.producer_epoch) == (ErrorCode.NONE, epoch + 1)
        epoch += 1
        if markers_done:
            await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_COMMIT)
        else:
            assert coord.txns[TID].state is TxnState.PREPARE_COMMIT
        early = await coord.end_txn_v2(TID, pid, epoch, True)  # the next transaction's EndTxn, before its batch
        assert early.error == ErrorCode.CONCURRENT_TRANSACTIONS
        added = asyncio.ensure_future(coord.add_partitions(TID, pid, epoch, P[:1], tv2=True))  # the batch
        if sender.gate is not None:
            sender.gate.set()
        assert await added == ErrorCode.NONE
        assert coord.txns[TID].state is TxnState.ONGOING and coord.txns[TID].partitions == set(P[:1])
        r = await coord.end_txn_v2(TID, pid, epoch, True)  # the retried EndTxn
        assert (r.error, r.producer_epoch) == (ErrorCode.NONE, epoch + 1)
        epoch += 1
        await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_COMMIT)


async def test_every_request_waits_out_a_prepare_state_then_an_old_epoch_is_fenced() -> None:
    """Kafka (KAFKA-18464) answers CONCURRENT_TRANSACTIONS to any EndTxn of the producer id while the previous
    transaction's markers are written, before judging the epoch; afterwards the stale epoch is fenced."""
    coord, _, sender, _ = await ready()
    pid, epoch = await init(coord)
    assert await coord.add_partitions(TID, pid, epoch, P, tv2=True) == ErrorCode.NONE
    sender.gate = asyncio.Event()
    assert (await coord.end_txn_v2(TID, pid, epoch, True)).error == ErrorCode.NONE
    for stale in (epoch - 1, epoch + 1, epoch + 7):
        assert (await coord.end_txn_v2(TID, pid, stale, True)).error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert (await coord.end_txn_v2(TID, pid, epoch, False)).error == ErrorCode.CONCURRENT_TRANSACTIONS
    sender.gate.set()
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_COMMIT)
    assert (await coord.end_txn_v2(TID, pid, epoch - 1, True)).error == ErrorCode.PRODUCER_FENCED
    assert (await coord.end_txn_v2(TID, pid, epoch + 7, True)).error == ErrorCode.PRODUCER_FENCED
    assert (await coord.end_txn_v2(TID, pid, epoch, False)).error == ErrorCode.INVALID_TXN_STATE
