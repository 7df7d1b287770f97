"""Producer-id blocks: an id is never handed out twice, whatever the metadata store does.

A failed write of the next block (a full disk) answers InitProducerId with a
retriable error at once and leaves the counter where it was; after a restart
no id repeats, so an idempotent producer's first batch is stored, not taken
for a retry of someone else's. Metadata that exists but cannot be read stops
the broker's start with an error naming the file, instead of the counter
restarting at 0. Runs a real broker in this process so the metadata log's
file I/O can be made to fail.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from kelp.broker.app import Broker
from kelp.broker.cluster import metadata_log as store_module
from kelp.config.broker import BrokerConfig
from kelp.errors import ErrorCode, KelpError
from tests.broker.helpers import create_topic_wire
from tests.support.kafka_wire import WireClient, make_batch


def _config(directory: Path) -> BrokerConfig:
    return BrokerConfig.load(env={}, overrides={
        "log.dirs": str(directory), "port": 0, "http.port": 0, "producer.id.block.size": 3,
        "offsets.topic.num.partitions": 1,
    })


async def _started(directory: Path) -> tuple[Broker, str]:
    broker = Broker(_config(directory))
    await broker.start()
    return broker, f"127.0.0.1:{broker.kafka_server.port}"


def _init_pid(bootstrap: str) -> tuple[int, int, float]:
    with WireClient(bootstrap, timeout=60) as c:
        t0 = time.monotonic()
        r = c.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 1)
        return r.error_code, r.producer_id, time.monotonic() - t0


def _produce(bootstrap: str, topic: str, pid: int, seq: int, value: bytes) -> tuple[int, int]:
    T = ProduceRequest.TopicProduceData
    batch = make_batch([(None, value)], producer_id=pid, producer_epoch=0, base_sequence=seq)
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=batch)])])
    with WireClient(bootstrap) as c:
        p = c.request(req, 7).responses[0].partition_responses[0]
        return p.error_code, p.base_offset


async def _ids(bootstrap: str, n: int) -> list[int]:
    out = []
    for _ in range(n):
        code, pid, _ = await asyncio.to_thread(_init_pid, bootstrap)
        assert code == 0
        out.append(pid)
    return out


async def test_failed_block_write_answers_retriable_error_and_no_id_repeats_after_restart(
        tmp_path: Path, monkeypatch) -> None:
    broker, bootstrap = await _started(tmp_path)
    try:
        assert await asyncio.to_thread(create_topic_wire, bootstrap, "pids") == 0
        handed = await _ids(bootstrap, 3)  # the first block (3 ids) is used up
        for i, pid in enumerate(handed):
            assert await asyncio.to_thread(_produce, bootstrap, "pids", pid, 0, b"before-%d" % i) == (0, i)
        real_fsync, calls = store_module.os.fsync, []

        def full_disk(fd: int) -> None:
            calls.append(fd)
            if len(calls) == 1:
                raise OSError(28, "No space left on device")
            real_fsync(fd)

        monkeypatch.setattr(store_module.os, "fsync", full_disk)
        code, pid, took = await asyncio.to_thread(_init_pid, bootstrap)
        assert (code, pid) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1) and took < 5.0  # retriable, not a 30 s stall
        assert not list((tmp_path / "cluster" / "metadata" / "log").glob(".*.tmp"))  # the half-written block is gone
        handed += await _ids(bootstrap, 2)  # the retry gets a block
        monkeypatch.setattr(store_module.os, "fsync", real_fsync)
    finally:
        await broker.stop()
    broker, bootstrap = await _started(tmp_path)
    try:
        after = await _ids(bootstrap, 4)
        assert not set(after) & set(handed) and len(set(handed + after)) == len(handed + after)
        # A producer started after the restart: its first batch (sequence 0) is stored, not a "duplicate".
        assert await asyncio.to_thread(_produce, bootstrap, "pids", after[0], 0, b"after") == (0, 3)
    finally:
        await broker.stop()


async def test_unreadable_metadata_stops_the_start_instead_of_restarting_the_counter_at_zero(
        tmp_path: Path, caplog) -> None:
    broker, bootstrap = await _started(tmp_path)
    try:
        handed = await _ids(bootstrap, 4)
    finally:
        await broker.stop()
    log_dir = tmp_path / "cluster" / "metadata" / "log"
    entry = next(p for p in sorted(log_dir.glob("*.json")) if '"producer_ids"' in p.read_text())
    entry.write_text('{"offset": 2, "epoch": 1, "records": [{"type": "produ')  # torn by a disk fault
    caplog.set_level(logging.ERROR, logger="kelp.broker.cluster")
    broker = Broker(_config(tmp_path))
    try:
        try:
            await broker.start()
        except KelpError as exc:
            assert "cannot read the cluster metadata" in str(exc) and entry.name in str(exc)
        else:
            raise AssertionError("a broker started on metadata it cannot read")
    finally:
        await broker.stop()
    assert any(entry.name in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    assert entry.read_text().startswith('{"offset": 2, "epoch": 1')  # left for the operator to repair
    assert handed == [0, 1, 2, 3]
