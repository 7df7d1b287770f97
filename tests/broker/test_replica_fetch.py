"""ReplicaManager fetch without a process: zero-copy ranges stay consistent, metrics count them."""

from __future__ import annotations

import os

import pytest

from kelp.broker.replica.manager import FetchPartition, ReplicaManager, SegmentSlice, close_results
from kelp.broker.storage import Log
from kelp.broker.topic_manager import TopicManager
from kelp.config.broker import BrokerConfig
from kelp.records.build import build_batch
from kelp.records.header import iter_headers
from kelp.records.record import Record


class _Counter:
    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def labels(self, *, topic: str) -> "_Child":
        return _Child(self, topic)


class _Child:
    def __init__(self, parent: _Counter, topic: str) -> None:
        self.parent, self.topic = parent, topic

    def inc(self, n: float = 1) -> None:
        self.parent.values[self.topic] = self.parent.values.get(self.topic, 0) + n


def _replicas(tmp_path) -> ReplicaManager:
    from kelp.broker.metadata.image import MetadataDelta
    from kelp.broker.metadata.model import PartitionState, TopicState
    from kelp.broker.storage import LogManager
    from kelp.config.log_config import LogConfig

    cfg = BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path), "num.partitions": 1})
    tm = TopicManager(cfg, None)
    tm.logs = LogManager([tmp_path], LogConfig.from_kafka(cfg.default_topic_config()), config_for=tm.log_config_or_none)
    rm = ReplicaManager(cfg, tm.logs, tm)
    state = TopicState("t", (PartitionState((0,), 0, 0, (0,), 0),))
    tm.apply_delta(MetadataDelta(changed={"t": state}))  # what the metadata log would deliver
    return rm


def _fill(rm: ReplicaManager, *, batches: int, records: int, size: int) -> int:
    for i in range(batches):
        data = build_batch([Record(b"k", bytes([i % 250]) * size) for _ in range(records)])
        rm.append_sync("t", 0, data, acks=1)
    return rm.partition_info("t", 0).log_end_offset


def _as_bytes(records) -> bytes:
    return records.read() if isinstance(records, SegmentSlice) else bytes(records)


@pytest.mark.parametrize("record_size", [100, 4000])  # a copied read and a zero-copy range
async def test_fetch_serves_the_bytes_the_range_was_cut_on_even_if_the_file_is_swapped(tmp_path, monkeypatch,
                                                                                       record_size) -> None:
    rm = _replicas(tmp_path)
    _fill(rm, batches=5, records=5, size=record_size)
    lg = rm.logs.get("t", 0)
    expected = lg.read(0, max_bytes=1 << 20)
    real_read_slice = Log.read_slice

    def read_slice_then_swap(self: Log, *args, **kwargs):
        found = real_read_slice(self, *args, **kwargs)
        if self is not lg:
            return found
        tmp = found.path.with_name("cleaned.tmp")  # what a cleaner swap leaves under the same name
        tmp.write_bytes(b"\xee" * (found.position + found.size))
        os.replace(tmp, found.path)
        return found

    monkeypatch.setattr(Log, "read_slice", read_slice_then_swap)
    results = await rm.fetch([FetchPartition("t", 0, 0, 1 << 20)], max_wait_ms=0, min_bytes=1,
                             max_bytes=1 << 20, zero_copy=True)
    try:
        assert isinstance(results[0].records, SegmentSlice) == (len(expected) >= 64 * 1024)
        assert _as_bytes(results[0].records) == expected
    finally:
        close_results(results)
        rm.logs.close_all()


async def test_records_and_bytes_out_count_zero_copy_fetches(tmp_path) -> None:
    rm = _replicas(tmp_path)
    _fill(rm, batches=4, records=10, size=3000)  # 4 batches of ~30 KB: one zero-copy range
    rm.fetch_path.bytes_out, rm.fetch_path.records_out = _Counter(), _Counter()
    results = await rm.fetch([FetchPartition("t", 0, 0, 1 << 20)], max_wait_ms=0, min_bytes=1,
                             max_bytes=1 << 20, zero_copy=True)
    try:
        records = results[0].records
        assert isinstance(records, SegmentSlice)
        assert rm.fetch_path.bytes_out.values == {"t": records.size}
        assert rm.fetch_path.records_out.values == {"t": 40}
        assert sum(h.record_count for h in iter_headers(records.read())) == 40
    finally:
        close_results(results)
        rm.logs.close_all()


async def test_a_woken_fetch_reads_again_only_the_partitions_that_moved(tmp_path, monkeypatch) -> None:
    """A follower's parked fetch names every partition it follows; an append to one of them woke it and every
    partition was read again (at 3,000 partitions, RF 3, most of a leader's CPU: issue 23)."""
    import asyncio

    from kelp.broker.metadata.image import MetadataDelta
    from kelp.broker.metadata.model import PartitionState, TopicState

    rm = _replicas(tmp_path)
    states = tuple(PartitionState((0, 1), 0, 1, (0, 1), 0) for _ in range(4))
    rm.topics.apply_delta(MetadataDelta(changed={"t": TopicState("t", states)}))
    read_sizes: list[int] = []
    real = type(rm.fetch_path)._read

    def counting(self, requests, **kwargs):  # the wrapped method's signature
        read_sizes.append(len(requests))
        return real(self, requests, **kwargs)

    monkeypatch.setattr(type(rm.fetch_path), "_read", counting)
    parked = asyncio.ensure_future(rm.fetch([FetchPartition("t", p, 0, 1 << 20) for p in range(4)], max_wait_ms=10_000,
                                            min_bytes=1, max_bytes=1 << 20, replica_id=1))
    await asyncio.sleep(0)  # the fetch reads once, finds nothing and parks
    assert read_sizes == [4] and not parked.done()
    rm.append_sync("t", 2, build_batch([Record(b"k", b"v")]), acks=1)
    results = await asyncio.wait_for(parked, 10)
    assert read_sizes == [4, 1]  # only partition 2 was read again
    assert [bool(r.records) for r in results] == [False, False, True, False]
    assert all(r.error is None for r in results) and results[2].high_watermark == 0
    close_results(results)
