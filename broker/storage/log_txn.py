"""The transactional side of a partition log: its segments' aborted-transaction indexes.

Why it exists: read_committed fetches need the aborted transactions overlapping a fetched range, and the
cleaner needs those of the segments it rewrites; both are answered from the per-segment `.txnindex`
(`txn_index.py`) held in memory. The replica layer, which owns producer state and so knows when a marker
closed a transaction, appends entries here — on the leader right after it appended the marker, on a
follower right after it appended fetched batches, in a rebuild for markers whose entry a crash may have
lost (`ensure_aborted_txn`). `Log` composes it; it runs under the log lock.

Recovery: an entry is written after its marker, to the page cache; segments below the recovery point
were fsynced with their index, the tail above it may have lost entries (never gained wrong ones: an
entry whose marker is gone is cut by `TransactionIndex.load` and by truncation). `txn_recovery_from` is
where that tail starts after an unclean shutdown; the producer-state rebuild replays from a snapshot at
or below it and re-adds the missing entries, as Kafka's segment recovery re-derives the index.

It must never decide which transaction was aborted (the replica layer's producer state does), never
import networking, and never do more on the event loop than append one entry (no fsync).
"""

from __future__ import annotations

import logging

from kelp.errors import KafkaStorageError

from .indexes.txn_index import AbortedTxn
from .log_state import LogState
from .segment import LogSegment

__all__ = ["AbortedTxnIndexes"]

log = logging.getLogger("kelp.broker.storage")


class AbortedTxnIndexes:
    """The aborted-transaction indexes of one `Log`'s segments."""

    __slots__ = ("_state", "_segments", "_lock", "_recovery_from")

    def __init__(self, state: LogState, *, recovery_from: int | None) -> None:
        self._state = state
        self._segments = state.segments
        self._lock = state.lock
        # Markers from here on may lack their aborted-transaction entry (an unclean shutdown): `txn_recovery_from`.
        self._recovery_from = recovery_from

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        """Index `txn`, aborted by a marker just appended (in the segment holding `txn.last_offset`)."""
        state = self._state
        with self._lock:
            state.check_open()
            self._append(self._segments[state.segment_index_for(txn.last_offset)], txn)

    def _append(self, segment: LogSegment, txn: AbortedTxn) -> None:
        try:
            segment.txn_index.append(txn)
        except OSError as exc:
            raise KafkaStorageError(f"{self._state.name}: write to {segment.txn_index.path} failed: {exc}") from exc

    def ensure_aborted_txn(self, txn: AbortedTxn) -> bool:
        """Index `txn` unless its segment's index already reaches its marker (a rebuild replaying markers
        whose entries may be there already). True if added. Worker threads."""
        state = self._state
        with self._lock:
            state.check_open()
            if txn.last_offset < state.log_start_offset or txn.last_offset >= state.log_end_offset:
                return False
            segment = self._segments[state.segment_index_for(txn.last_offset)]
            if not segment.base_offset <= txn.last_offset < segment.next_offset:
                return False
            if segment.txn_index.last_offset >= txn.last_offset:
                return False
            self._append(segment, txn)
            log.warning("%s: re-indexed the transaction of producer %d aborted at offset %d (lost in a crash)",
                        state.name, txn.producer_id, txn.last_offset)
            return True

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound), oldest marker first: from the
        segment holding `fetch_offset` on, until an entry's last stable offset reaches `upper_bound`
        (Kafka's `collectAbortedTransactions`). In memory; per aborted transaction, never per batch."""
        found: list[AbortedTxn] = []
        segments = self._segments
        with self._lock:
            for i in range(self._state.segment_index_for(fetch_offset), len(segments)):
                index = segments[i].txn_index
                if index.entries and index.collect(fetch_offset, upper_bound, found):
                    break
        return found

    def aborted_txns_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Every indexed aborted transaction whose marker lies in [start, end) (the cleaner's view)."""
        with self._lock:
            return [t for s in self._segments if s.base_offset < end and s.next_offset > start
                    for t in s.txn_index.entries if start <= t.last_offset < end]

    @property
    def txn_recovery_from(self) -> int | None:
        """After an unclean shutdown, the offset from which markers may lack their index entry; None when
        every entry is known to be there."""
        return self._recovery_from

    def txn_indexes_recovered(self) -> None:
        """A rebuild replayed every marker from `txn_recovery_from` on (`ensure_aborted_txn`)."""
        self._recovery_from = None
