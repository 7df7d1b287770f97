"""Rebuild a partition's idempotent-producer state from its log: newest snapshot, then the batches after it.

Why: after a restart or a follower truncation the state must describe every
producer with a batch in the log, or a retried batch is stored twice. As
Kafka's `UnifiedLog.rebuildProducerState` / `ProducerStateManager.truncateAndReload`:
load the newest producer snapshot whose offset lies in [log start, log end]
(skipping, and removing, one that is corrupt), replay the header of every
batch from there to the log end (from the log start when no snapshot
qualifies), and write a snapshot at the log end so the next rebuild starts
there. Per batch, never per record (a marker's one record is read to learn
commit or abort).

Transactions: the replay re-opens and closes transactions as the markers
say, and re-indexes every aborted one the log's `.txnindex` lacks
(`Log.ensure_aborted_txn`). After an unclean shutdown the indexes may lack
entries from `Log.txn_recovery_from` on, so the replay then starts from a
snapshot at or below it (Kafka's segment recovery re-derives the index from
the producer state at the segment's start the same way).

Worker threads only: this reads segment and snapshot files (two 1 GiB
segments' headers took ≈6.5 s on the event loop and let leases expire). The
replica manager gates the partition meanwhile and installs the result on the
loop. It must never change the log's records.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..storage import Log
from ..storage.indexes.txn_index import AbortedTxn
from .producer_state import ProducerStateManager

__all__ = ["RebuiltState", "rebuild_producer_state"]

log = logging.getLogger("kelp.broker.replica")


@dataclass(slots=True)
class RebuiltState:
    producers: ProducerStateManager
    snapshot_offset: int | None  # the snapshot it started from (None: replayed from the log start)
    batches_replayed: int
    end_offset: int  # the log end it describes


def rebuild_producer_state(lg: Log, topic: str, partition: int, *, write_snapshot: bool = True) -> RebuiltState:
    """The producer state of `lg` at its current log end (the caller keeps appends away meanwhile); the
    log's aborted-transaction indexes are completed on the way."""
    producers = ProducerStateManager(topic, partition)
    generation = lg.truncation_generation
    start, end = lg.log_start_offset, lg.log_end_offset
    if end <= start:
        return RebuiltState(producers, None, 0, end)
    replay_from, loaded = start, None
    offsets = lg.producer_snapshot_offsets()
    stale = [o for o in offsets if o > end or o < start]
    if stale:
        lg.delete_producer_snapshots(stale)
    txn_from = lg.txn_recovery_from
    newest = end if txn_from is None else min(end, txn_from)
    for offset in reversed([o for o in offsets if start <= o <= newest]):
        try:
            entries = lg.read_producer_snapshot(offset)
        except (ValueError, OSError) as exc:
            log.warning("%s-%d: ignoring producer snapshot at offset %d (%s); trying an older one",
                        topic, partition, offset, exc)
            lg.delete_producer_snapshots([offset])
            continue
        producers.load_entries(entries)
        replay_from, loaded = offset, offset
        break
    replayed = reindexed = 0
    for h, marker in lg.replay_batches(replay_from, end):
        replayed += 1
        done = producers.apply_batch(h, marker)
        if done is not None and done.aborted:
            reindexed += lg.ensure_aborted_txn(
                AbortedTxn(done.producer_id, done.first_offset, done.last_offset, done.last_stable_offset))
    if txn_from is not None:
        lg.txn_indexes_recovered()
        if reindexed:
            log.warning("%s-%d: %d aborted transaction(s) re-indexed after an unclean shutdown",
                        topic, partition, reindexed)
    if write_snapshot and replayed and loaded != end:
        try:
            lg.write_producer_snapshot(end, producers.entries(), generation=generation)
        except OSError as exc:  # the state in memory is right; the next rebuild just replays more
            log.warning("%s-%d: producer snapshot at offset %d not written: %s", topic, partition, end, exc)
    if len(producers) or replayed:
        log.info("%s-%d: producer state rebuilt from %s and %d batch header(s): %d producer(s)",
                 topic, partition, f"the snapshot at offset {loaded}" if loaded is not None else "the log start",
                 replayed, len(producers))
    return RebuiltState(producers, loaded, replayed, end)
