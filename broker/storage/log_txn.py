"""The transactional side of a partition log: its segments' aborted-transaction indexes.

Why it exists: read_committed fetches need the aborted transactions overlapping a fetched range, and the
cleaner needs those of the segments it rewrites; both are answered from the per-segment `.txnindex`
(`txn_index.py`) held in memory. The replica layer, which owns producer state and so knows when a marker
closed a transaction, appends entries here — on the leader right after it appended the marker, on a
follower right after it appended fetched batches, in a rebuild for markers whose entry a crash may have
lost (`ensure_aborted_txn`). `Log` mixes it in; it runs under `Log`'s lock.

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

from .log_state import LogState
from .txn_index import AbortedTxn

__all__ = ["LogTransactions"]

log = logging.getLogger("kelp.broker.storage")


class LogTransactions(LogState):
    """Aborted-transaction indexes of `Log` (mixed in; the state they share is `LogState`'s)."""

    _txn_recovery_from: int | None

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        """Index `txn`, aborted by a marker just appended (in the segment holding `txn.last_offset`)."""
        with self._lock:
            self._check_open()
            segment = self._segments[self._segment_index_for(txn.last_offset)]
            try:
                segment.txn_index.append(txn)
            except OSError as exc:
                raise KafkaStorageError(f"{self.name}: write to {segment.txn_index.path} failed: {exc}") from exc

    def ensure_aborted_txn(self, txn: AbortedTxn) -> bool:
        """Index `txn` unless its segment's index already reaches its marker (a rebuild replaying markers
        whose entries may be there already). True if added. Worker threads."""
        with self._lock:
            self._check_open()
            if txn.last_offset < self._log_start_offset or txn.last_offset >= self.log_end_offset:
                return False
            segment = self._segments[self._segment_index_for(txn.last_offset)]
            if not segment.base_offset <= txn.last_offset < segment.next_offset:
                return False
            if segment.txn_index.last_offset >= txn.last_offset:
                return False
            try:
                segment.txn_index.append(txn)
            except OSError as exc:
                raise KafkaStorageError(f"{self.name}: write to {segment.txn_index.path} failed: {exc}") from exc
            log.warning("%s: re-indexed the transaction of producer %d aborted at offset %d (lost in a crash)",
                        self.name, txn.producer_id, txn.last_offset)
            return True

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound), oldest marker first: from the
        segment holding `fetch_offset` on, until an entry's last stable offset reaches `upper_bound`
        (Kafka's `collectAbortedTransactions`). In memory; per aborted transaction, never per batch."""
        found: list[AbortedTxn] = []
        with self._lock:
            for i in range(self._segment_index_for(fetch_offset), len(self._segments)):
                index = self._segments[i].txn_index
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
        return self._txn_recovery_from

    def txn_indexes_recovered(self) -> None:
        """A rebuild replayed every marker from `txn_recovery_from` on (`ensure_aborted_txn`)."""
        self._txn_recovery_from = None
