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

import logging
from typing import Iterator

from kelp.records import build_batch, iter_records, read_header

from ..replica_manager import ReplicaManager
from ..storage import LogManager
from .placement import OFFSETS_TOPIC

__all__ = ["BrokerOffsetStore"]

log = logging.getLogger("kelp.broker.groups")

REPLAY_CHUNK_BYTES = 4 << 20


class BrokerOffsetStore:
    """The coordinator's `OffsetStore` on this broker: appends through `replicas`, replays from `logs`."""

    def __init__(self, replicas: ReplicaManager, logs: LogManager, *, commit_timeout_ms: int = 5000) -> None:
        self.replicas = replicas
        self.logs = logs
        self.commit_timeout_ms = commit_timeout_ms

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append and wait for the in-sync replicas; raises the replica manager's KelpError on failure."""
        data = build_batch([(k, v) for k, v in records])
        await self.replicas.append(OFFSETS_TOPIC, partition, data, acks=-1, timeout_ms=self.commit_timeout_ms,
                                   internal_allowed=True)

    def replay(self, partition: int) -> Iterator[tuple[bytes | None, bytes | None]]:
        lg = self.logs.get(OFFSETS_TOPIC, partition)
        if lg is None:
            return
        offset = lg.log_start_offset
        end = lg.log_end_offset
        while offset < end:
            data = lg.read(offset, max_bytes=REPLAY_CHUNK_BYTES, min_one_batch=True)
            if not data:
                break
            last = offset - 1
            for rec in iter_records(data):
                last = rec.offset
                if rec.offset >= offset:
                    yield rec.key, rec.value
            if last < offset:
                # A batch emptied by compaction: step past it using its header.
                h = read_header(data, 0)
                last = h.base_offset + h.last_offset_delta
            offset = last + 1
