"""`__consumer_offsets` as the coordinator's durable store, on the broker's own logs.

Why: commits must be acknowledged only once they are on the in-sync replicas
(appended as RecordBatch v2 through the ReplicaManager with acks=all, like
any produce), and a broker that becomes leader of a partition must find its
groups by replaying it. The topic itself is created by the controller on the
first FindCoordinator (`coordinator_lookup`), compacted so the log cleaner
keeps it bounded to the newest record per key.

This module must never interpret record contents (that is `offsets_log`), and
`replay` must never be iterated on the event loop (it reads segment files).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Iterator

from kelp.records.build import build_batch
from kelp.records.header import BatchInfo, iter_headers
from kelp.records.record import Record, batch_records

from ..cpu_work import run_cpu
from ..replica.manager import ReplicaManager
from ..storage import Log, LogManager
from .offsets_log import ReplayItem, TxnMarker, TxnRecord
from .placement import OFFSETS_TOPIC

__all__ = ["BrokerOffsetStore", "replay_log", "control_commit"]

log = logging.getLogger("kelp.broker.groups")
OFF_LOOP_RECORDS = 256  # records of one commit built on the CPU pool beyond this

REPLAY_CHUNK_BYTES = 4 << 20


class BrokerOffsetStore:
    """The coordinator's `OffsetStore` on this broker: appends through `replicas`, replays from `logs`."""

    def __init__(self, replicas: ReplicaManager, logs: LogManager, *, commit_timeout_ms: int = 5000) -> None:
        self.replicas = replicas
        self.logs = logs
        self.commit_timeout_ms = commit_timeout_ms

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append and wait for the in-sync replicas; raises the replica manager's KelpError on failure."""
        data = await _built(records)
        await self.replicas.append(OFFSETS_TOPIC, partition, data, acks=-1, timeout_ms=self.commit_timeout_ms,
                                   internal_allowed=True)

    async def append_transactional(self, partition: int, records: list[tuple[bytes, bytes | None]], *,
                                   producer_id: int, producer_epoch: int) -> None:
        """TxnOffsetCommit's records: one transactional batch of the producer (no sequence: the coordinator's
        own write is never a client's retry), pending until the transaction's marker."""
        data = await _built(records, producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True)
        await self.replicas.append(OFFSETS_TOPIC, partition, data, acks=-1, timeout_ms=self.commit_timeout_ms,
                                   internal_allowed=True)

    def replay(self, partition: int) -> Iterator[ReplayItem]:
        """The partition's records in log order: plain `(key, value)` pairs, `TxnRecord`s for records of
        transactional batches (TxnOffsetCommit) and a `TxnMarker` per control batch (a transaction's end)."""
        lg = self.logs.get(OFFSETS_TOPIC, partition)
        if lg is None:
            return
        for info, records in replay_log(lg):
            if info.is_control:
                for rec in records:
                    commit = control_commit(rec.key)
                    if commit is not None:
                        yield TxnMarker(info.producer_id, commit)
            elif info.is_transactional:
                for rec in records:
                    yield TxnRecord(info.producer_id, rec.key, rec.value)
            else:
                for rec in records:
                    yield rec.key, rec.value


def control_commit(key: bytes | None) -> bool | None:
    """A control record's key (Kafka's ControlRecordType: version:int16, type:int16): True for COMMIT (1),
    False for ABORT (0), None for any other control record."""
    if key is None or len(key) < 4:
        return None
    kind = int.from_bytes(key[2:4], "big", signed=True)
    return True if kind == 1 else False if kind == 0 else None


def replay_log(lg: Log) -> Iterator[tuple[BatchInfo, list[Record]]]:
    """Every batch of `lg` from its start, with its records (control batches included), oldest first.

    Reads segment files: never iterate it on the event loop.
    """
    offset = lg.log_start_offset
    end = lg.log_end_offset
    while offset < end:
        data = lg.read(offset, max_bytes=REPLAY_CHUNK_BYTES, min_one_batch=True)
        if not data:
            break
        last = offset - 1
        for info in iter_headers(data):
            records = [r for r in batch_records(data, info) if r.offset >= offset]
            last = max(last, info.base_offset + info.last_offset_delta)
            yield info, records
        if last < offset:
            break
        offset = last + 1


async def _built(records: list[tuple[bytes, bytes | None]], **header: Any) -> bytes:
    """One batch of the records; on the CPU pool past OFF_LOOP_RECORDS (a commit of thousands of partitions is
    tens of milliseconds of encoding the loop must not spend)."""
    build = functools.partial(build_batch, list(records), **header)
    return await run_cpu(build) if len(records) > OFF_LOOP_RECORDS else build()
