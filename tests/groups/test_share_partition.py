"""The share-partition's rules without a broker (issue 36): `kelp.broker.groups.share.partition`.

Each test plays an adversary's interleaving against one rule: two fetches that read the same bytes; an
acknowledgement mixing the member's records with another's; a lock running out while an acknowledgement of
it is being written; a snapshot taken while another acknowledgement is pending; a restart from a snapshot.
"""

from __future__ import annotations

from kelp.broker.groups.share.partition import (
    AckBatch,
    AckError,
    Acquired,
    RecordState,
    SharePartition,
    StateBatch,
)
from kelp.errors import ErrorCode

ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0
LOCK = 1000


def _sp(start: int = 0, limit: int = 3, max_in_flight: int = 100) -> SharePartition:
    return SharePartition(start=start, delivery_limit=limit, max_in_flight=max_in_flight)


def _batches(*spans: tuple[int, int]) -> list[tuple[int, int, bool]]:
    return [(f, last, False) for f, last in spans]


def _refused(sp: SharePartition, member: str, *acks: tuple[int, int, int]) -> int:
    try:
        sp.prepare(member, [AckBatch(f, last, (t,)) for f, last, t in acks])
    except AckError as exc:
        return exc.code
    raise AssertionError("accepted")


def _ack(sp: SharePartition, member: str, *acks: tuple[int, int, int]) -> None:
    sp.commit(sp.prepare(member, [AckBatch(f, last, (t,)) for f, last, t in acks]))


def test_two_fetches_reading_the_same_bytes_never_both_acquire_a_record() -> None:
    sp = _sp()
    read = _batches((0, 4), (5, 9))
    a = sp.acquire("a", read, high_watermark=10, max_records=6, now_ms=0, lock_ms=LOCK)
    b = sp.acquire("b", read, high_watermark=10, max_records=100, now_ms=0, lock_ms=LOCK)
    # a's limit of 6 stops at a batch boundary (the whole first two batches would be 10; 6 ends inside the second)
    assert a == [Acquired(0, 9, 1)]
    assert b == []
    c = _sp()
    assert c.acquire("a", read, high_watermark=10, max_records=5, now_ms=0, lock_ms=LOCK) == [Acquired(0, 4, 1)]
    assert c.acquire("b", read, high_watermark=10, max_records=5, now_ms=0, lock_ms=LOCK) == [Acquired(5, 9, 1)]


def test_nothing_at_or_above_the_high_watermark_is_acquired() -> None:
    sp = _sp()
    assert sp.acquire("a", _batches((0, 9)), high_watermark=4, max_records=100, now_ms=0,
                      lock_ms=LOCK) == [Acquired(0, 3, 1)]
    assert sp.end == 4


def test_an_acknowledgement_mixing_in_another_members_record_changes_nothing() -> None:
    sp = _sp()
    sp.acquire("a", _batches((0, 1)), high_watermark=10, max_records=2, now_ms=0, lock_ms=LOCK)
    sp.acquire("b", _batches((2, 3)), high_watermark=10, max_records=2, now_ms=0, lock_ms=LOCK)
    assert _refused(sp, "b", (2, 2, ACCEPT), (0, 0, ACCEPT)) == ErrorCode.INVALID_RECORD_STATE
    assert not any(s.pending for s in sp.slots.values())  # nothing half-marked
    assert sp.slots[2].state is RecordState.ACQUIRED and sp.slots[0].member == "a"
    _ack(sp, "b", (2, 2, ACCEPT))
    assert _refused(sp, "b", (2, 2, ACCEPT)) == ErrorCode.INVALID_RECORD_STATE  # already acknowledged
    assert _refused(sp, "a", (0, 0, ACCEPT), (0, 0, REJECT)) == ErrorCode.INVALID_RECORD_STATE  # twice in one


def test_malformed_acknowledgements_are_invalid_requests() -> None:
    sp = _sp()
    sp.acquire("a", _batches((0, 3)), high_watermark=10, max_records=10, now_ms=0, lock_ms=LOCK)
    assert _refused(sp, "a", (3, 1, ACCEPT)) == ErrorCode.INVALID_REQUEST
    assert _refused(sp, "a", (0, 0, 9)) == ErrorCode.INVALID_REQUEST
    try:
        sp.prepare("a", [AckBatch(0, 3, (ACCEPT, ACCEPT))])  # two types for four offsets
        raise AssertionError("accepted")
    except AckError as exc:
        assert exc.code == ErrorCode.INVALID_REQUEST


def test_release_redelivers_with_a_higher_count_until_the_limit_archives_it() -> None:
    sp = _sp(limit=2)
    read = _batches((0, 0), (1, 1))
    assert sp.acquire("a", read, high_watermark=2, max_records=10, now_ms=0, lock_ms=LOCK) == [Acquired(0, 1, 1)]
    _ack(sp, "a", (0, 0, RELEASE), (1, 1, ACCEPT))
    assert sp.start == 0 and sp.fetch_offset() == 0
    assert sp.acquire("b", read, high_watermark=2, max_records=10, now_ms=0, lock_ms=LOCK) == [Acquired(0, 0, 2)]
    _ack(sp, "b", (0, 0, RELEASE))  # the second delivery was the last: archived
    assert sp.start == 2 and not sp.slots
    assert sp.acquire("c", read, high_watermark=2, max_records=10, now_ms=0, lock_ms=LOCK) == []


def test_an_expired_lock_returns_the_record_but_not_while_its_acknowledgement_is_written() -> None:
    sp = _sp()
    sp.acquire("a", _batches((0, 1)), high_watermark=2, max_records=10, now_ms=0, lock_ms=LOCK)
    pending = sp.prepare("a", [AckBatch(0, 0, (ACCEPT,))])
    assert sp.expire(LOCK) == 1  # offset 1 expired; offset 0 is being acknowledged
    assert sp.slots[0].state is RecordState.ACQUIRED and sp.slots[1].state is RecordState.AVAILABLE
    assert _refused(sp, "a", (0, 0, ACCEPT)) == ErrorCode.INVALID_RECORD_STATE  # pending: not twice
    assert _refused(sp, "a", (1, 1, ACCEPT)) == ErrorCode.INVALID_RECORD_STATE  # expired: no longer a's
    sp.commit(pending)
    assert sp.start == 1
    # a write that fails drops the pending mark and the record is a's again, acknowledgeable
    sp.acquire("b", _batches((1, 1)), high_watermark=2, max_records=10, now_ms=0, lock_ms=LOCK)
    failed = sp.prepare("b", [AckBatch(1, 1, (ACCEPT,))])
    sp.abort(failed)
    assert sp.slots[1].state is RecordState.ACQUIRED and not sp.slots[1].pending
    _ack(sp, "b", (1, 1, ACCEPT))
    assert sp.start == 2


def test_a_snapshot_holds_pending_changes_and_writes_acquired_records_as_available() -> None:
    sp = _sp()
    sp.acquire("a", _batches((0, 4)), high_watermark=5, max_records=10, now_ms=0, lock_ms=LOCK)
    _ack(sp, "a", (1, 1, REJECT))
    pending = sp.prepare("a", [AckBatch(0, 0, (ACCEPT,)), AckBatch(3, 3, (ACCEPT,))])
    start, batches = sp.state_batches(pending)
    assert start == 2  # 0 accepted (pending, written as applied), 1 rejected
    assert batches == [StateBatch(2, 2, 0, 1), StateBatch(3, 3, 2, 1), StateBatch(4, 4, 0, 1)]
    assert sp.state_batches()[0] == 0  # without the pending changes: nothing moved yet


def test_recovery_from_a_snapshot_never_redelivers_what_was_done() -> None:
    snap = [StateBatch(10, 11, 2, 1), StateBatch(12, 12, 0, 2), StateBatch(13, 13, 4, 3), StateBatch(14, 14, 2, 1)]
    sp = SharePartition.recovered(10, snap, delivery_limit=3, max_in_flight=100)
    assert sp.start == 12 and sp.end == 15
    assert sp.fetch_offset() == 12
    got = sp.acquire("m", _batches((10, 14), (15, 16)), high_watermark=17, max_records=100, now_ms=0, lock_ms=LOCK)
    assert got == [Acquired(12, 12, 3), Acquired(15, 16, 1)]


def test_gaps_and_control_records_are_archived_and_the_window_is_bounded() -> None:
    sp = _sp(max_in_flight=8)
    read = [(0, 0, False), (1, 1, True), (5, 9, False)]  # 1 is a control record, 2-4 compacted away
    got = sp.acquire("a", read, high_watermark=10, max_records=100, now_ms=0, lock_ms=LOCK)
    assert got == [Acquired(0, 0, 1), Acquired(5, 7, 1)]  # the window is 8 offsets (Kafka counts them all)
    assert [sp.slots[o].state for o in range(1, 5)] == [RecordState.ARCHIVED] * 4
    assert sp.fetch_offset() is None  # full: nothing more until something is acknowledged
    _ack(sp, "a", (0, 0, ACCEPT))
    assert sp.start == 5 and sp.fetch_offset() == 8


def test_a_member_leaving_releases_only_its_own_records() -> None:
    sp = _sp()
    sp.acquire("a", _batches((0, 1)), high_watermark=4, max_records=2, now_ms=0, lock_ms=LOCK)
    sp.acquire("b", _batches((2, 3)), high_watermark=4, max_records=2, now_ms=0, lock_ms=LOCK)
    assert sp.release_member("a") == 2
    assert [sp.slots[o].state for o in range(4)] == [RecordState.AVAILABLE] * 2 + [RecordState.ACQUIRED] * 2
    assert sp.move_start(3) is None and sp.start == 3 and sp.slots[3].member == "b"


def test_a_huge_compacted_gap_moves_the_window_without_a_slot_per_offset() -> None:
    sp = _sp(max_in_flight=100)
    assert sp.acquire("a", _batches((0, 0), (10_000_000, 10_000_001)), high_watermark=10_000_002, max_records=10,
                      now_ms=0, lock_ms=LOCK) == [Acquired(0, 0, 1)]  # 0 in flight: the gap waits
    assert len(sp.slots) == 1
    _ack(sp, "a", (0, 0, ACCEPT))
    got = sp.acquire("a", _batches((10_000_000, 10_000_001)), high_watermark=10_000_002, max_records=10, now_ms=0,
                     lock_ms=LOCK)
    assert got == [Acquired(10_000_000, 10_000_001, 1)] and len(sp.slots) == 2 and sp.start == 10_000_000
