"""The transaction coordinator's state machine, as a transactional producer relies on it.

Each test drives `TransactionCoordinator` directly on an in-memory `__transaction_state` with a marker
sender double and a manual clock (`harness`): InitProducerId's epochs and fencing, AddPartitionsToTxn,
EndTxn with its Prepare -> markers -> Complete sequence, CONCURRENT_TRANSACTIONS while a transaction
completes, transaction.timeout.ms, transactional.id.expiration.ms, and a new coordinator resuming the
markers of a transaction it loads in a Prepare state.
"""

from __future__ import annotations

import asyncio

from kelp.broker.transactions.metadata import TxnState
from kelp.errors import ErrorCode, NotEnoughReplicasError
from tests.transactions.harness import coordinator, until

TID = "tx-1"
P = [("out", 0), ("out", 1)]


async def ready(**settings):
    coord, store, sender, clock = coordinator(**settings)
    coord.state.load(range(coord.config.num_partitions), epoch=5)
    return coord, store, sender, clock


async def init(coord, tid=TID, timeout_ms=60000, expected=None):
    r = await coord.init_producer_id(tid, timeout_ms, expected=expected)
    assert r.error == ErrorCode.NONE, r
    return r.producer_id, r.producer_epoch


async def test_init_gives_an_id_and_bumps_the_epoch_on_each_init() -> None:
    coord, store, _, _ = await ready()
    pid, epoch = await init(coord)
    assert epoch == 0
    pid2, epoch2 = await init(coord)
    assert (pid2, epoch2) == (pid, 1)
    assert coord.txns[TID].state is TxnState.EMPTY
    assert sum(len(v) for v in store.partitions.values()) == 2  # each init durable before it was answered


async def test_invalid_timeouts_and_empty_id_are_refused() -> None:
    coord, _, _, _ = await ready(max_timeout_ms=1000)
    assert (await coord.init_producer_id(TID, 1001)).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert (await coord.init_producer_id(TID, 0)).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert (await coord.init_producer_id("", 100)).error == ErrorCode.INVALID_REQUEST
    assert (await coord.init_producer_id(TID, 1000)).error == ErrorCode.NONE


async def test_commit_writes_prepare_answers_then_markers_then_complete() -> None:
    coord, _, sender, _ = await ready()
    pid, epoch = await init(coord)
    assert await coord.add_partitions(TID, pid, epoch, P) == ErrorCode.NONE
    assert coord.txns[TID].state is TxnState.ONGOING
    sender.gate = asyncio.Event()
    assert await coord.end_txn(TID, pid, epoch, True) == ErrorCode.NONE
    assert coord.txns[TID].state is TxnState.PREPARE_COMMIT  # answered before the markers
    # While it completes: the producer's next transaction waits (CONCURRENT_TRANSACTIONS), a retry of the
    # commit too, and the opposite outcome is an invalid state.
    assert await coord.add_partitions(TID, pid, epoch, P) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert await coord.end_txn(TID, pid, epoch, True) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert await coord.end_txn(TID, pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
    assert (await coord.init_producer_id(TID, 60000)).error == ErrorCode.CONCURRENT_TRANSACTIONS
    sender.gate.set()
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_COMMIT)
    (leader, marker), = sender.sent
    assert leader == 7 and marker.commit and marker.partitions == tuple(P)
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch) == (pid, epoch, 5)
    assert coord.txns[TID].partitions == set()
    assert await coord.end_txn(TID, pid, epoch, True) == ErrorCode.NONE  # a retry of the completed commit
    assert await coord.add_partitions(TID, pid, epoch, [("out", 0)]) == ErrorCode.NONE  # the next transaction


async def test_the_next_transaction_waits_for_the_previous_one_to_complete() -> None:
    """AddPartitionsToTxn / AddOffsetsToTxn right after a commit wait (bounded) for its markers instead of
    answering CONCURRENT_TRANSACTIONS at once: a Java producer would back off 100 ms for a few ms of markers."""
    coord, _, sender, _ = await ready(completion_wait_ms=5000)
    pid, epoch = await init(coord)
    await coord.add_partitions(TID, pid, epoch, P)
    sender.gate = asyncio.Event()
    assert await coord.end_txn(TID, pid, epoch, True) == ErrorCode.NONE
    loop = asyncio.get_running_loop()
    started = loop.time()
    next_txn = asyncio.ensure_future(coord.add_partitions(TID, pid, epoch, [("out", 0)]))
    await asyncio.sleep(0.01)
    assert not next_txn.done()  # held while the markers are written
    sender.gate.set()
    assert await asyncio.wait_for(next_txn, 5) == ErrorCode.NONE
    assert loop.time() - started < 2.0
    assert coord.txns[TID].state is TxnState.ONGOING and coord.txns[TID].partitions == {("out", 0)}
    # A fenced producer that waited gets the fencing, not a transaction.
    await coord.end_txn(TID, pid, epoch, True)
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_COMMIT)
    await coord.add_partitions(TID, pid, epoch, P)
    sender.gate = asyncio.Event()
    assert await coord.end_txn(TID, pid, epoch, False) == ErrorCode.NONE
    zombie = asyncio.ensure_future(coord.add_partitions(TID, pid, epoch, P))
    await asyncio.sleep(0.01)
    coord.txns[TID].producer_epoch += 1  # as a fence during the wait would
    sender.gate.set()
    assert await asyncio.wait_for(zombie, 5) == ErrorCode.PRODUCER_FENCED


async def test_two_leaders_adding_to_one_transaction_at_once_both_get_in() -> None:
    """Issue 34: a transactions v2 producer's batches for partitions of two leaders reach them together, and
    both leaders ask the coordinator to add their partition. The second ask arrives while the first one's
    transition is being written (pending): it waits for that write and is judged again — added, not
    CONCURRENT_TRANSACTIONS, which sends a Java producer into a retry backoff of 100 ms or more for every
    transaction (a Kafka Connect exactly-once task ran four transactions a second)."""
    coord, store, _, _ = await ready(completion_wait_ms=5000)
    pid, epoch = await init(coord)
    store.gate = asyncio.Event()  # the first add's write is in flight
    first = asyncio.ensure_future(coord.add_partitions(TID, pid, epoch, [("out", 0)], tv2=True))
    await until(lambda: coord.txns[TID].pending is not None)
    second = asyncio.ensure_future(coord.add_partitions(TID, pid, epoch, [("offsets", 1)], tv2=True))
    same = asyncio.ensure_future(coord.add_partitions(TID, pid, epoch, [("out", 0)], tv2=True))
    await asyncio.sleep(0.01)
    assert not second.done() and not same.done()  # waiting for the write, not answered CONCURRENT_TRANSACTIONS
    store.gate.set()
    assert await asyncio.wait_for(asyncio.gather(first, second, same), 5) == [ErrorCode.NONE] * 3
    assert coord.txns[TID].partitions == {("out", 0), ("offsets", 1)}
    # Still bounded: a write that never ends is CONCURRENT_TRANSACTIONS after completion_wait_ms.
    coord.config.completion_wait_ms = 30
    store.gate = asyncio.Event()
    stuck = asyncio.ensure_future(coord.add_partitions(TID, pid, epoch, [("out", 5)], tv2=True))
    await until(lambda: coord.txns[TID].pending is not None)
    assert await asyncio.wait_for(coord.add_partitions(TID, pid, epoch, [("out", 6)], tv2=True), 2) \
        == ErrorCode.CONCURRENT_TRANSACTIONS
    store.gate.set()
    assert await stuck == ErrorCode.NONE


async def test_the_wait_for_completion_is_bounded() -> None:
    coord, _, sender, _ = await ready(completion_wait_ms=30)
    pid, epoch = await init(coord)
    await coord.add_partitions(TID, pid, epoch, P)
    sender.gate = asyncio.Event()  # the markers never get through
    assert await coord.end_txn(TID, pid, epoch, True) == ErrorCode.NONE
    assert await asyncio.wait_for(coord.add_partitions(TID, pid, epoch, P), 2) == ErrorCode.CONCURRENT_TRANSACTIONS
    sender.gate.set()


async def test_markers_retry_until_the_leader_takes_them() -> None:
    coord, _, sender, _ = await ready()
    pid, epoch = await init(coord)
    await coord.add_partitions(TID, pid, epoch, P)
    sender.codes = {("out", 1): ErrorCode.NOT_LEADER_OR_FOLLOWER}
    assert await coord.end_txn(TID, pid, epoch, False) == ErrorCode.NONE
    await until(lambda: len(sender.sent) >= 3)
    assert coord.txns[TID].state is TxnState.PREPARE_ABORT
    sender.codes = {}
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_ABORT)
    # Only the partition that failed was sent again.
    assert all(m.partitions == (("out", 1),) for _, m in sender.sent[1:])


async def test_a_second_producer_fences_the_first() -> None:
    coord, _, _, _ = await ready()
    pid, zombie = await init(coord)
    assert await coord.add_partitions(TID, pid, zombie, [("out", 0)]) == ErrorCode.NONE
    # The new instance's InitProducerId aborts the zombie's Ongoing transaction under a bumped epoch first.
    first = await coord.init_producer_id(TID, 60000)
    assert first.error == ErrorCode.CONCURRENT_TRANSACTIONS
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_ABORT)
    pid2, epoch = await init(coord)
    assert pid2 == pid and epoch == zombie + 2
    # The zombie is fenced on every call.
    assert await coord.add_partitions(TID, pid, zombie, [("out", 1)]) == ErrorCode.PRODUCER_FENCED
    assert await coord.end_txn(TID, pid, zombie, True) == ErrorCode.PRODUCER_FENCED
    assert await coord.end_txn(TID, pid + 1, epoch, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


async def test_fence_abort_markers_carry_the_bumped_epoch() -> None:
    coord, _, sender, _ = await ready()
    pid, epoch = await init(coord)
    await coord.add_partitions(TID, pid, epoch, P)
    await coord.init_producer_id(TID, 60000)
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_ABORT)
    (_, marker), = sender.sent
    assert not marker.commit and marker.producer_epoch == epoch + 1  # the zombie's late writes are refused


async def test_reinit_with_the_current_id_and_epoch_kip360() -> None:
    coord, _, _, _ = await ready()
    pid, epoch = await init(coord)
    assert await init(coord, expected=(pid, epoch)) == (pid, epoch + 1)
    # A retry with the epoch before gets the same answer again; an older one is fenced.
    assert await init(coord, expected=(pid, epoch)) == (pid, epoch + 1)
    assert (await coord.init_producer_id(TID, 60000, expected=(pid + 5, 0))).error == ErrorCode.PRODUCER_FENCED


async def test_exhausted_epoch_rotates_the_producer_id() -> None:
    coord, _, _, _ = await ready()
    pid, _ = await init(coord)
    coord.txns[TID].producer_epoch = 32766
    pid2, epoch2 = await init(coord)
    assert pid2 != pid and epoch2 == 0


async def test_failed_write_is_not_applied_and_answers_a_retriable_error() -> None:
    coord, store, _, _ = await ready()
    pid, epoch = await init(coord)
    store.fail_with = NotEnoughReplicasError("1 in sync, 2 required")
    assert await coord.add_partitions(TID, pid, epoch, P) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert coord.txns[TID].state is TxnState.EMPTY and coord.txns[TID].pending is None
    store.fail_with = None
    assert await coord.add_partitions(TID, pid, epoch, P) == ErrorCode.NONE


async def test_requests_for_ids_of_partitions_not_led_here() -> None:
    coord, _, _, _ = coordinator()
    assert (await coord.init_producer_id(TID, 1000)).error == ErrorCode.NOT_COORDINATOR
    coord.state.ownership.begin_load(coord.state.partition_for(TID), 1)  # elected, still replaying
    assert (await coord.init_producer_id(TID, 1000)).error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


async def test_timed_out_transaction_is_aborted_and_its_producer_fenced() -> None:
    coord, _, sender, clock = await ready()
    pid, epoch = await init(coord, timeout_ms=10000)
    await coord.add_partitions(TID, pid, epoch, P)
    clock.now += 10000
    assert await coord.abort_timed_out() == 0  # not older than its timeout yet
    clock.now += 1
    assert await coord.abort_timed_out() == 1
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_ABORT)
    assert not sender.sent[0][1].commit
    assert coord.txns[TID].producer_epoch == epoch + 1
    assert await coord.end_txn(TID, pid, epoch, True) == ErrorCode.PRODUCER_FENCED


async def test_idle_ids_expire_and_come_back_as_new() -> None:
    coord, store, _, clock = await ready(id_expiration_ms=5000)
    pid, _ = await init(coord)
    other_pid, other_epoch = await init(coord, "busy")
    await coord.add_partitions("busy", other_pid, other_epoch, P)
    clock.now += 5000
    assert await coord.expire_ids() == 1  # the Ongoing one stays
    assert TID not in coord.txns and "busy" in coord.txns
    p = coord.state.partition_for(TID)
    assert store.partitions[p][-1][1] is None  # a tombstone
    pid2, epoch2 = await init(coord)
    assert pid2 != pid and epoch2 == 0


async def test_new_coordinator_resumes_the_markers_of_a_prepared_transaction() -> None:
    coord, store, sender, clock = await ready()
    pid, epoch = await init(coord)
    await coord.add_partitions(TID, pid, epoch, P)
    sender.gate = asyncio.Event()  # the old coordinator never gets its markers out
    assert await coord.end_txn(TID, pid, epoch, True) == ErrorCode.NONE
    p = coord.state.partition_for(TID)
    coord.on_resign(p, 6)
    assert coord.check(TID) == ErrorCode.NOT_COORDINATOR
    sender.gate.set()
    await asyncio.sleep(0)
    new, _, new_sender, _ = coordinator(store=store, clock=clock)
    await new.on_become_leader(p, 7)
    await until(lambda: new.txns[TID].state is TxnState.COMPLETE_COMMIT)
    (_, marker), = new_sender.sent
    assert marker.commit and marker.coordinator_epoch == 7 and set(marker.partitions) == set(P)
    assert await new.end_txn(TID, pid, epoch, True) == ErrorCode.NONE


async def test_reload_keeps_epochs_and_ongoing_transactions() -> None:
    coord, store, _, clock = await ready()
    pid, epoch = await init(coord)
    await coord.add_partitions(TID, pid, epoch, P)
    new, _, _, _ = coordinator(store=store, clock=clock)
    new.state.load(range(3), epoch=9)
    meta = new.txns[TID]
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.partitions) == (
        TxnState.ONGOING, pid, epoch, set(P))
    assert await new.end_txn(TID, pid, epoch, False) == ErrorCode.NONE


async def test_verify_only_answers_per_partition() -> None:
    coord, _, _, _ = await ready()
    pid, epoch = await init(coord)
    await coord.add_partitions(TID, pid, epoch, [("out", 0)])
    assert coord.verify_partitions(TID, pid, epoch, P) == {
        ("out", 0): ErrorCode.NONE, ("out", 1): ErrorCode.TRANSACTION_ABORTABLE}
    assert set(coord.verify_partitions(TID, pid, epoch + 1, P).values()) == {ErrorCode.PRODUCER_FENCED}


async def test_describe_and_list() -> None:
    coord, _, _, _ = await ready()
    pid, epoch = await init(coord)
    await coord.add_partitions(TID, pid, epoch, P)
    await init(coord, "idle")
    d = coord.describe(TID)
    assert (d.error, d.state, d.producer_id, d.partitions) == (0, "Ongoing", pid, tuple(P))
    assert coord.describe("nope").error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    unknown, found = await coord.list_transactions(states=["Ongoing", "Bogus"])
    assert unknown == ["Bogus"] and [f[0] for f in found] == [TID]
    assert {f[0] for f in (await coord.list_transactions())[1]} == {TID, "idle"}
