"""One share-partition's delivery state (KIP-932's SharePartition): which records are in flight, to whom.

Why: a share group reads a topic-partition cooperatively: every record is handed to one member at a time under
an acquisition lock, and the member acknowledges it (ACCEPT, RELEASE, REJECT) or the lock runs out. The state
of that exchange must be exact — a record held by one member is never handed to another while the lock holds,
nothing accepted or rejected is delivered again, a released or expired record goes back with its delivery
count raised and is archived once that count reaches `group.share.delivery.count.limit` — and it is what
`__share_group_state` stores (`state_log`), so it must be foldable into Kafka's state batches and back.

The window is [start, end): `start` (Kafka's SPSO) is the first offset not yet acknowledged or archived,
`end` (SPEO) one past the highest offset ever acquired; below `start` everything is done, at or above `end`
nothing was delivered yet. Each offset of the window has a `Slot` (state, delivery count, holder, lock
deadline); offsets the log does not have (compacted away, control records) are archived as they are met.
An acknowledgement is validated whole before anything changes (`prepare`), held as pending while its state is
written, then applied (`commit`) or dropped (`abort`): nothing is half-applied.

This module must never touch logs, timers or sockets: offsets and member ids in, decisions out.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from kelp.errors import ErrorCode

__all__ = ["RecordState", "AckType", "Slot", "SharePartition", "StateBatch", "AckBatch", "Acquired", "AckError"]


class RecordState(enum.IntEnum):
    """A record's delivery state; the values are Kafka's (ShareSnapshotValue.DeliveryState)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    """Kafka's AcknowledgeType on the wire (ShareFetch/ShareAcknowledge AcknowledgeTypes)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass(slots=True)
class Slot:
    state: RecordState
    delivery_count: int = 0
    member: str | None = None
    deadline_ms: int = 0
    pending: bool = False  # an acknowledgement of it is being written


@dataclass(frozen=True)
class StateBatch:
    """Kafka's persisted StateBatch: offsets first..last in one delivery state with one delivery count."""

    first: int
    last: int
    state: int
    delivery_count: int


@dataclass(frozen=True)
class AckBatch:
    """One AcknowledgementBatch of a request: offsets first..last, one type for all or one type per offset."""

    first: int
    last: int
    types: tuple[int, ...]

    def type_of(self, offset: int) -> int:
        return self.types[0] if len(self.types) == 1 else self.types[offset - self.first]


@dataclass(frozen=True)
class Acquired:
    """A run of offsets acquired by one fetch, all with the same delivery count (Kafka's AcquiredRecords)."""

    first: int
    last: int
    delivery_count: int


class AckError(Exception):
    """An acknowledgement refused as a whole: `code` is Kafka's (INVALID_RECORD_STATE, INVALID_REQUEST)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class SharePartition:
    """The delivery state of (group, topic, partition) on the partition's leader."""

    start: int
    delivery_limit: int
    max_in_flight: int
    slots: dict[int, Slot] = field(default_factory=dict)
    end: int = -1

    def __post_init__(self) -> None:
        if self.end < self.start:
            self.end = self.start

    # -- recovery -------------------------------------------------------------------------------------------
    @classmethod
    def recovered(cls, start: int, batches: Iterable[StateBatch], *, delivery_limit: int,
                  max_in_flight: int) -> "SharePartition":
        """The state a snapshot describes: acquired records were not persisted as such, so whatever was in
        flight is available again with its delivery count (Kafka's recovery)."""
        sp = cls(start=start, delivery_limit=delivery_limit, max_in_flight=max_in_flight)
        for b in batches:
            state = RecordState(b.state) if b.state in (0, 2, 4) else RecordState.AVAILABLE
            for off in range(max(b.first, start), b.last + 1):
                sp.slots[off] = Slot(state, b.delivery_count)
            sp.end = max(sp.end, b.last + 1)
        for off in range(start, sp.end):  # offsets the snapshot did not name were never delivered
            sp.slots.setdefault(off, Slot(RecordState.AVAILABLE))
        sp._advance()
        return sp

    # -- what a fetch reads ---------------------------------------------------------------------------------
    def fetch_offset(self) -> int | None:
        """Where a fetch should read from: the first available record of the window, else the window's end;
        None when the window is full (`max_in_flight` records between start and end) and none is available."""
        for off in range(self.start, self.end):
            slot = self.slots.get(off)
            if slot is not None and slot.state is RecordState.AVAILABLE:
                return off
        if self.end - self.start >= self.max_in_flight:
            return None
        return self.end

    def acquire(self, member: str, batches: Sequence[tuple[int, int, bool]], *, high_watermark: int,
                max_records: int, now_ms: int, lock_ms: int) -> list[Acquired]:
        """Acquire for `member` what the read batches hold: `batches` are (base offset, last offset, is
        control) of the bytes read, in order. Available records of the window and new records up to the high
        watermark are acquired, at most `max_records` but never splitting a batch; control records and the
        offsets no batch has are archived as the window grows over them. Synchronous: two fetches reading the
        same bytes cannot both acquire a record."""
        got: list[int] = []
        counts: dict[int, int] = {}
        for base, last, control in batches:
            if len(got) >= max_records:
                break
            gap_end = min(base, high_watermark)
            if gap_end > self.end:  # offsets no batch has (compacted away): nothing to deliver there
                if self.start == self.end:
                    self.start = self.end = gap_end  # nothing in flight: the window moves past the gap at once
                elif gap_end - self.start > self.max_in_flight:
                    break  # the gap would overfill the window: acquire past it once what is in flight is done
                else:
                    for off in range(self.end, gap_end):
                        self.slots[off] = Slot(RecordState.ARCHIVED)
                    self.end = gap_end
            for off in range(base, min(last + 1, high_watermark)):
                if off < self.start:
                    continue
                if off >= self.end:
                    if off - self.start >= self.max_in_flight:
                        break
                    self.slots[off] = Slot(RecordState.ARCHIVED if control else RecordState.AVAILABLE)
                    self.end = off + 1
                slot = self.slots.get(off)
                if slot is None or slot.state is not RecordState.AVAILABLE or control:
                    continue
                slot.state = RecordState.ACQUIRED
                slot.delivery_count += 1
                slot.member = member
                slot.deadline_ms = now_ms + lock_ms
                got.append(off)
                counts[off] = slot.delivery_count
        self._advance()
        return _runs(got, counts)

    # -- acknowledgements -----------------------------------------------------------------------------------
    def prepare(self, member: str, batches: Sequence[AckBatch]) -> list[tuple[int, RecordState]]:
        """Check a request's acknowledgements for this partition as a whole and mark them pending; returns the
        new state of each offset. Raises AckError (nothing marked) if any offset is not acquired by `member`
        (already acknowledged, released, expired, another member's, or pending), or the batch is malformed."""
        changes: list[tuple[int, RecordState]] = []
        seen: set[int] = set()
        for b in batches:
            if b.last < b.first or not b.types or (len(b.types) != 1 and len(b.types) != b.last - b.first + 1):
                raise AckError(ErrorCode.INVALID_REQUEST,
                               f"acknowledgement batch {b.first}-{b.last} with {len(b.types)} types is malformed")
            for off in range(b.first, b.last + 1):
                kind = b.type_of(off)
                if kind not in (AckType.GAP, AckType.ACCEPT, AckType.RELEASE, AckType.REJECT):
                    raise AckError(ErrorCode.INVALID_REQUEST, f"unknown acknowledge type {kind} at offset {off}")
                slot = self.slots.get(off)
                if off in seen or slot is None or slot.state is not RecordState.ACQUIRED or slot.pending \
                        or slot.member != member:
                    raise AckError(ErrorCode.INVALID_RECORD_STATE,
                                   f"offset {off} is not acquired by member {member}")
                seen.add(off)
                changes.append((off, self._after(slot, AckType(kind))))
        for off, _state in changes:
            self.slots[off].pending = True
        return changes

    def _after(self, slot: Slot, kind: AckType) -> RecordState:
        if kind is AckType.ACCEPT:
            return RecordState.ACKNOWLEDGED
        if kind is AckType.RELEASE:
            return RecordState.AVAILABLE if slot.delivery_count < self.delivery_limit else RecordState.ARCHIVED
        return RecordState.ARCHIVED  # REJECT, and GAP (no record there)

    def commit(self, changes: Sequence[tuple[int, RecordState]]) -> None:
        for off, state in changes:
            slot = self.slots.get(off)
            if slot is None:
                continue
            slot.state, slot.pending, slot.member = state, False, None
        self._advance()

    def abort(self, changes: Sequence[tuple[int, RecordState]]) -> None:
        for off, _state in changes:
            slot = self.slots.get(off)
            if slot is not None:
                slot.pending = False

    def release_member(self, member: str) -> int:
        """A member's session closed or it left: its acquired records (not pending) are available again, or
        archived at the delivery limit. Returns how many records changed."""
        n = 0
        for slot in self.slots.values():
            if slot.state is RecordState.ACQUIRED and slot.member == member and not slot.pending:
                self._unlock(slot)
                n += 1
        self._advance()
        return n

    def expire(self, now_ms: int) -> int:
        """Records whose acquisition lock ran out go back (or are archived at the limit). Returns how many."""
        n = 0
        for slot in self.slots.values():
            if slot.state is RecordState.ACQUIRED and not slot.pending and slot.deadline_ms <= now_ms:
                self._unlock(slot)
                n += 1
        self._advance()
        return n

    def next_deadline(self) -> int | None:
        deadlines = [s.deadline_ms for s in self.slots.values() if s.state is RecordState.ACQUIRED and not s.pending]
        return min(deadlines) if deadlines else None

    def _unlock(self, slot: Slot) -> None:
        slot.state = RecordState.AVAILABLE if slot.delivery_count < self.delivery_limit else RecordState.ARCHIVED
        slot.member = None

    def move_start(self, log_start: int) -> None:
        """The log's start moved past the window's (retention, DeleteRecords): what is gone is archived."""
        if log_start > self.start:
            for off in range(self.start, min(log_start, self.end)):
                self.slots.pop(off, None)
            self.start = log_start
            self.end = max(self.end, log_start)
            self._advance()

    def _advance(self) -> None:
        while self.start < self.end:
            slot = self.slots.get(self.start)
            if slot is None or slot.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            del self.slots[self.start]
            self.start += 1

    # -- what is persisted ----------------------------------------------------------------------------------
    def state_batches(self, pending: Sequence[tuple[int, RecordState]] = ()) -> tuple[int, list[StateBatch]]:
        """The start offset and the window as Kafka's state batches, with `pending` changes as if applied (the
        snapshot written before an acknowledgement is answered); acquired records are written as available
        (a lock does not survive a restart), and runs of one state and count share a batch."""
        after = dict(pending)
        start = self.start
        while start < self.end and after.get(start, _state_of(self.slots.get(start))) in (
                RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
            start += 1
        out: list[StateBatch] = []
        for off in range(start, self.end):
            slot = self.slots.get(off)
            state = after.get(off, _state_of(slot))
            if state is RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            count = slot.delivery_count if slot is not None else 0
            if out and out[-1].last == off - 1 and out[-1].state == state and out[-1].delivery_count == count:
                out[-1] = StateBatch(out[-1].first, off, int(state), count)
            else:
                out.append(StateBatch(off, off, int(state), count))
        return start, out

    def in_flight(self) -> int:
        return sum(1 for s in self.slots.values() if s.state is RecordState.ACQUIRED)


def _state_of(slot: Slot | None) -> RecordState:
    return slot.state if slot is not None else RecordState.ARCHIVED


def _runs(offsets: list[int], counts: dict[int, int]) -> list[Acquired]:
    out: list[Acquired] = []
    for off in offsets:
        n = counts[off]
        if out and out[-1].last == off - 1 and out[-1].delivery_count == n:
            out[-1] = Acquired(out[-1].first, off, n)
        else:
            out.append(Acquired(off, off, n))
    return out
