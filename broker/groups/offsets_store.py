"""`__consumer_offsets` as the coordinator's durable store, on the broker's own logs.

Why: commits must be acknowledged only once they are in the log (appended as
RecordBatch v2 through the ReplicaManager, like any produce), and a restarted
broker must find every group's offsets by replaying the topic. The topic is
created on first start as an internal, compacted topic so the log cleaner
keeps it bounded to the newest record per key.

This module must never interpret record contents (that is `offsets_log`).
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

from kelp.records import build_batch, iter_records

from .placement import OFFSETS_TOPIC

__all__ = ["BrokerOffsetStore"]

log = logging.getLogger("kelp.broker.groups")

REPLAY_CHUNK_BYTES = 4 << 20


class BrokerOffsetStore:
    def __init__(self, broker: Any, *, num_partitions: int) -> None:
        self.broker = broker
        self.num_partitions = num_partitions

    def ensure_topic(self) -> None:
        topics = self.broker.topics
        info = topics.get(OFFSETS_TOPIC)
        if info is None:
            topics.create_topic(
                OFFSETS_TOPIC, self.num_partitions, 1, {"cleanup.policy": "compact"},
            )
            log.info("created internal topic %s with %d partitions (compacted)", OFFSETS_TOPIC, self.num_partitions)
        elif info.partitions != self.num_partitions:
            log.warning(
                "%s has %d partitions but offsets.topic.num.partitions is %d; using %d",
                OFFSETS_TOPIC, info.partitions, self.num_partitions, info.partitions,
            )
            self.num_partitions = info.partitions

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        data = build_batch([(k, v) for k, v in records])
        await self.broker.replicas.append(OFFSETS_TOPIC, partition, data, acks=-1)

    def replay(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        lg = self.broker.logs.get(OFFSETS_TOPIC, partition)
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
                from kelp.records import read_header

                h = read_header(data, 0)
                last = h.base_offset + h.last_offset_delta
            offset = last + 1
