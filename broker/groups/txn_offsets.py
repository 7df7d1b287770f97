"""Transactional offset commits (TxnOffsetCommit): offsets that count only once their transaction commits.

Why: a consume-transform-produce application commits its consumer offsets inside the producer's
transaction (`send_offsets_to_transaction`), so they must become visible to OffsetFetch exactly when the
transaction's output does, and never if it aborts. As in Kafka's GroupMetadataManager: the offsets are
written to `__consumer_offsets` at once, as a transactional batch of the producer (producer id and epoch,
no sequence), and kept pending per producer id; the transaction's marker, written to the same partition by
its leader (WriteTxnMarkers), ends them: `complete(producer_id, partitions, commit)` moves them into the
committed offsets on COMMIT (unless a plain commit of the partition was written after them) or drops them
on ABORT. A replay of the partition does the same from the log: a control batch resolves the producer's
pending records (`decode_partition` in `partition_loader`).

This module must never decide membership beyond Kafka's TxnOffsetCommit checks, and must never import
`group_coordinator`.
"""

from __future__ import annotations

import logging

from kelp.errors import ErrorCode

from .append_errors import commit_error_code
from .group import CommittedOffset, Group, GroupState
from .group_metadata_manager import GroupMetadataManager
from .offsets_log import ReplayItem, TxnMarker, TxnRecord
from .ownership import PartitionState
from .placement import OFFSETS_TOPIC

__all__ = ["TxnRecord", "TxnMarker", "ReplayItem", "TxnOffsets"]

log = logging.getLogger("kelp.broker.groups")


class TxnOffsets:
    """TxnOffsetCommit's writes and the markers that end them, on the coordinator's cache."""

    def __init__(self, manager: GroupMetadataManager) -> None:
        self.manager = manager
        # Completions that arrived while their partition was loading: applied once the load is (`after_load`).
        self._deferred: dict[int, list[tuple[int, bool]]] = {}

    async def commit(self, group: Group, *, producer_id: int, producer_epoch: int,
                     offsets: dict[tuple[str, int], CommittedOffset]) -> dict[tuple[str, int], int]:
        """Validate each partition, append the offsets as the producer's transactional batch, keep them pending;
        per-partition codes. The caller has decided that the committer may commit for `group`."""
        m = self.manager
        results, accepted, records = await m.offset_records(group.group_id, offsets)
        if not records:
            return results
        partition = m.partition_for(group.group_id)
        token = m.ownership.token(partition)
        try:
            await m.store.append_transactional(partition, records, producer_id=producer_id,
                                               producer_epoch=producer_epoch)
        except Exception as exc:
            code = ErrorCode.NOT_COORDINATOR if m.ownership.token(partition) != token else commit_error_code(exc)
            log.warning("transactional commit of %d offset(s) for group '%s' (producer %d) to %s-%d failed "
                        "(answering error %d): %s", len(records), group.group_id, producer_id, OFFSETS_TOPIC,
                        partition, code, exc, exc_info=getattr(exc, "code", None) is None)
            return {**results, **{tp: code for tp in accepted}}
        if m.ownership.token(partition) == token:
            order = m.next_order()
            pending = group.pending_txn_offsets.setdefault(producer_id, {})
            for tp, co in accepted.items():
                pending[tp] = (co, order)
        return {**results, **{tp: ErrorCode.NONE for tp in accepted}}

    def complete(self, producer_id: int, partitions: list[int], commit: bool) -> None:
        """The transaction of `producer_id` ended on these `__consumer_offsets` partitions (its markers are
        written): its pending offsets become committed (commit) or are dropped (abort)."""
        m = self.manager
        for p in partitions:
            state = m.ownership.state(p)
            if state is PartitionState.LOADING:
                self._deferred.setdefault(p, []).append((producer_id, commit))
            elif state is PartitionState.OWNED:
                self._complete_partition(p, producer_id, commit)

    def after_load(self, partition: int) -> None:
        """The load of `partition` was applied: the completions that arrived meanwhile take effect now."""
        for producer_id, commit in self._deferred.pop(partition, []):
            self._complete_partition(partition, producer_id, commit)

    def forget(self, partition: int) -> None:
        self._deferred.pop(partition, None)

    def _complete_partition(self, partition: int, producer_id: int, commit: bool) -> None:
        m = self.manager
        for group in list(m.groups.values()):
            if m.partition_for(group.group_id) != partition or group.is_(GroupState.DEAD):
                continue
            pending = group.pending_txn_offsets.pop(producer_id, None)
            if not pending or not commit:
                continue
            for tp, (co, order) in pending.items():
                if order > group.offset_order.get(tp, -1):
                    group.offsets[tp] = co
                    group.offset_order[tp] = order
            log.info("group '%s': %d transactional offset(s) of producer %d committed", group.group_id,
                     len(pending), producer_id)

    @staticmethod
    def has_pending(group: Group, tp: tuple[str, int]) -> bool:
        """OffsetFetch with require_stable: a transaction still holds an offset of `tp` (UNSTABLE_OFFSET_COMMIT)."""
        return any(tp in pending for pending in group.pending_txn_offsets.values())
