"""Transactional offset commits in the group coordinator (TxnOffsetCommit, Kafka's pending offsets).

A consume-transform-produce application relies on: offsets sent with `send_offsets_to_transaction` are
invisible to OffsetFetch until the transaction commits (`handle_txn_completion(..., commit=True)`, called
when its marker is written on the group's `__consumer_offsets` partition), never visible if it aborts,
not able to overwrite a plain commit written after them, and resolved the same way when a new coordinator
replays the partition (a control batch in the log decides).
"""

from __future__ import annotations

from kelp.broker.groups.group import CommittedOffset
from kelp.errors import ErrorCode
from tests.groups.harness import make_coordinator

G = "g1"
TP = ("t", 0)


async def txn_commit(coord, pid: int, offset: int, tp=TP, **kw) -> dict:
    return await coord.txn_commit_offsets(G, producer_id=pid, producer_epoch=0,
                                          offsets={tp: CommittedOffset(offset)}, **kw)


def fetched(coord, tp=TP) -> int | None:
    err, offsets = coord.fetch_offsets(G, [tp])
    assert err == 0
    co = offsets[tp]
    return None if co is None else co.offset


async def test_offsets_visible_only_after_commit() -> None:
    coord, _, store = make_coordinator()
    assert await txn_commit(coord, 7, 42) == {TP: ErrorCode.NONE}
    assert fetched(coord) is None
    assert coord.unstable_offsets(G, [TP, ("t", 1)]) == {TP}
    p = coord.partition_for(G)
    coord.handle_txn_completion(7, [p], True)
    assert fetched(coord) == 42 and coord.unstable_offsets(G, [TP]) == set()
    assert store.appends == 1


async def test_abort_drops_them() -> None:
    coord, _, _ = make_coordinator()
    await coord.commit_offsets(G, offsets={TP: CommittedOffset(5)})
    await txn_commit(coord, 7, 42)
    coord.handle_txn_completion(7, [coord.partition_for(G)], False)
    assert fetched(coord) == 5
    coord.handle_txn_completion(7, [coord.partition_for(G)], True)  # nothing pending any more
    assert fetched(coord) == 5


async def test_completion_for_another_partition_or_producer_changes_nothing() -> None:
    coord, _, _ = make_coordinator()
    await txn_commit(coord, 7, 42)
    p = coord.partition_for(G)
    coord.handle_txn_completion(8, [p], True)
    coord.handle_txn_completion(7, [(p + 1) % coord.config.num_partitions], True)
    assert fetched(coord) is None


async def test_a_plain_commit_written_after_wins() -> None:
    coord, _, _ = make_coordinator()
    await txn_commit(coord, 7, 42)
    await coord.commit_offsets(G, offsets={TP: CommittedOffset(50)})
    coord.handle_txn_completion(7, [coord.partition_for(G)], True)
    assert fetched(coord) == 50


async def test_member_and_generation_are_checked_when_given() -> None:
    coord, _, _ = make_coordinator()
    assert await txn_commit(coord, 7, 1, member_id="ghost", generation=3) == {TP: ErrorCode.UNKNOWN_MEMBER_ID}
    assert await txn_commit(coord, 7, 1, tp=("nope", 0)) == {("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


async def test_replay_resolves_pending_offsets_by_the_markers_in_the_log() -> None:
    coord, _, store = make_coordinator()
    p = coord.partition_for(G)
    await txn_commit(coord, 7, 42)
    await txn_commit(coord, 8, 99, tp=("t", 1))
    await txn_commit(coord, 9, 77, tp=("t", 2))
    store.marker(p, 7, True)
    store.marker(p, 8, False)
    # A new coordinator (after a failover) replays the partition: 7 committed, 8 aborted, 9 still open.
    new, _, _ = make_coordinator(store=store)
    assert fetched(new) == 42
    assert fetched(new, ("t", 1)) is None and fetched(new, ("t", 2)) is None
    assert new.unstable_offsets(G, [("t", 1), ("t", 2)]) == {("t", 2)}
    new.handle_txn_completion(9, [p], True)
    assert fetched(new, ("t", 2)) == 77


async def test_replay_keeps_a_plain_commit_written_after_a_transactional_one() -> None:
    coord, _, store = make_coordinator()
    p = coord.partition_for(G)
    await txn_commit(coord, 7, 42)
    await coord.commit_offsets(G, offsets={TP: CommittedOffset(50)})
    store.marker(p, 7, True)
    new, _, _ = make_coordinator(store=store)
    assert fetched(new) == 50


async def test_completion_while_loading_applies_after_the_load() -> None:
    coord, _, store = make_coordinator()
    p = coord.partition_for(G)
    await txn_commit(coord, 7, 42)
    new, _, _ = make_coordinator(store=store, owned=False)
    fut = new.on_become_leader(p, 3)
    new.handle_txn_completion(7, [p], True)  # the marker landed while the replay ran
    await fut
    assert fetched(new) == 42
