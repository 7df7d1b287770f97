"""A deposed controller writes nothing, whatever its successor did to the log meanwhile (issue 31 item 1).

The fence of the metadata log is two halves: create-if-absent on every slot, and the log start that
compaction raises before it frees slots. These tests drive two controllers over one store and stop the
older one exactly where a paused process stops — after its lease check, inside its append, before its
slot is taken — while the newer one claims that slot, writes past it, snapshots twice and compacts it
away. On the code before the log start, the old controller's append then landed in the freed slot, it
stayed active, and its caller was told the write happened: with `allocate_producer_ids` two brokers were
handed the same producer ids.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from kelp.broker.cluster.controller import Controller, ControllerSettings
from kelp.broker.cluster.metadata_log import FileMetadataLog, LoadedLog, MetadataLog
from kelp.config.broker import BrokerConfig
from kelp.errors import NotControllerError
from tests.replication.test_controller import Harness, ep
from tests.support.memory_metadata_log import MemoryMetadataLog


class Pausable(MetadataLog):
    """A real store whose appends first run `before_append(entry)`: where a paused process stops."""

    def __init__(self, inner: FileMetadataLog) -> None:
        self.inner = inner
        self.before_append = None

    async def load(self) -> LoadedLog:
        return await self.inner.load()

    async def append(self, entry) -> None:
        if self.before_append is not None:
            await self.before_append(entry)
        await self.inner.append(entry)

    async def read_entry(self, offset: int):
        return await self.inner.read_entry(offset)

    async def write_snapshot(self, snapshot) -> None:
        await self.inner.write_snapshot(snapshot)

    async def compact(self, snapshot_offset: int) -> int:
        return await self.inner.compact(snapshot_offset)

    def has(self, offset: int) -> bool:
        return (self.inner.log_dir / f"{offset:020d}.json").exists()


@pytest.fixture(params=["memory", "file"])
def store(request, tmp_path):
    if request.param == "memory":
        memory = MemoryMetadataLog()
        memory.has = lambda offset: offset in memory.entries
        return memory
    return Pausable(FileMetadataLog(tmp_path))


def controller(store: MetadataLog, broker_id: int, **cfg: object) -> Controller:
    config = BrokerConfig.load(env={}, overrides={"log.dirs": "/tmp/unused", "broker.id": broker_id,
                                                  "producer.id.block.size": 10, **cfg})

    async def live():
        return {i: ep(i) for i in range(3)}

    async def send(broker, payload):
        return payload["end_offset"]

    return Controller(broker_id=broker_id, settings=ControllerSettings(config), log=store, live_brokers=live,
                      send=send, lease_fresh=lambda: True)


async def start(c: Controller) -> Controller:
    await c.start()
    c._task.cancel()  # the watch loop is driven by hand
    return c


async def settle_snapshots(c: Controller) -> None:
    for _ in range(100):
        task = c.writer.snapshot_task
        if task is None:
            return
        await asyncio.wait_for(asyncio.shield(task), 5)
    raise AssertionError("snapshots kept being written")


async def test_a_controller_paused_inside_its_append_is_fenced_after_compaction_freed_its_slot(store) -> None:
    old = await start(controller(store, 0))
    first = await old.broker_requests.allocate_producer_ids(broker_id=0)
    paused, resume = asyncio.Event(), asyncio.Event()

    async def pause_the_old_one(entry: dict) -> None:
        if entry["epoch"] == old.state.epoch:
            paused.set()
            await resume.wait()

    store.before_append = pause_the_old_one
    late = asyncio.create_task(old.broker_requests.allocate_producer_ids(broker_id=0))
    await asyncio.wait_for(paused.wait(), 5)
    slot = old.state.image.offset + 1  # what the old controller is writing

    # Its successor claims that very slot, hands out ids, and writes past it until two snapshots cover it.
    new = await start(controller(store, 1, **{"metadata.log.max.record.bytes.between.snapshots": 1}))
    assert new.state.epoch == old.state.epoch + 1 and (await store.read_entry(slot))["epoch"] == new.state.epoch
    handed = [await new.broker_requests.allocate_producer_ids(broker_id=1)]
    for _ in range(4):
        handed.append(await new.broker_requests.allocate_producer_ids(broker_id=1))
        await settle_snapshots(new)
    assert not store.has(slot)  # compacted away: the slot is free again

    resume.set()
    with pytest.raises(NotControllerError, match="superseded"):
        await asyncio.wait_for(late, 5)
    assert not old.state.active
    assert not store.has(slot)  # nothing of the old controller's is left in the store
    blocks = [first] + handed
    ids = [i for b in blocks for i in range(b["first"], b["first"] + b["count"])]
    assert len(ids) == len(set(ids)), "a producer id was handed out twice"
    loaded = await store.load()
    assert all(e["epoch"] == new.state.epoch for e in loaded.entries)


async def test_a_controller_in_doubt_about_a_compacted_slot_steps_down() -> None:
    """A write whose outcome was unknown is read back before the next one; when that slot was compacted by a
    newer controller meanwhile, what lies there is not in the log: the controller steps down, it never adopts it."""
    from kelp.errors import CoordinatorLoadInProgressError

    store = MemoryMetadataLog()
    old = await start(controller(store, 0))
    store.fail_next_append(OSError(5, "Input/output error"), landed=False)
    with pytest.raises(CoordinatorLoadInProgressError):
        await old.broker_requests.allocate_producer_ids(broker_id=0)
    assert old.writer.doubt is not None
    new = await start(controller(store, 1, **{"metadata.log.max.record.bytes.between.snapshots": 1}))
    for _ in range(4):
        await new.broker_requests.allocate_producer_ids(broker_id=1)
        await settle_snapshots(new)
    assert store.start >= old.writer.doubt[0]
    with pytest.raises(NotControllerError):
        await old.broker_requests.allocate_producer_ids(broker_id=0)
    assert not old.state.active


def test_lease_freshness_is_judged_on_a_clock_that_counts_a_suspended_host(tmp_path) -> None:
    """CLOCK_MONOTONIC stops while a host is suspended, so a lease checked against it looks fresh to a process
    that slept through its expiry. Kelp's clock is CLOCK_BOOTTIME: in a time namespace whose boot time runs an
    hour ahead of its monotonic time — what an hour of suspend leaves behind — it reads the hour."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to make a time namespace")
    code = ("import time; from kelp import clock; "
            "print(round(clock.monotonic() - time.monotonic()))")
    out = subprocess.run(["unshare", "--time", "--boottime", "3600", sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) == 3600


async def test_an_append_cancelled_by_its_caller_is_read_back_not_taken_for_a_successor(tmp_path, monkeypatch) -> None:
    """Found by a review of this issue: an operation cancelled while its append ran in a worker thread (a client
    gone, a bounded wait around an in-process call) was not put in doubt; the thread linked the entry anyway, and
    the controller's next write "conflicted" with its own entry: it deposed itself with no other controller."""
    h = Harness(2)
    h.store = FileMetadataLog(tmp_path)
    h.controller = h.make()
    c = await h.start()
    real = FileMetadataLog._write_private
    entered, release = threading.Event(), threading.Event()

    def slow(self, directory, doc):
        entered.set()
        release.wait(10)  # a slow disk, released once the caller has gone
        return real(self, directory, doc)

    monkeypatch.setattr(FileMetadataLog, "_write_private", slow)
    op = asyncio.create_task(c.topic_admin.create_topic(name="a", assignments={0: [1, 0]}))
    assert await asyncio.to_thread(entered.wait, 10)
    op.cancel()
    with pytest.raises(asyncio.CancelledError):
        await op
    monkeypatch.setattr(FileMetadataLog, "_write_private", real)
    release.set()
    for _ in range(200):  # the worker thread finishes the link (bounded)
        if (await h.store.load()).end_offset == c.state.image.offset + 1:
            break
        await asyncio.sleep(0.01)
    await c.topic_admin.create_topic(name="b", assignments={0: [1, 0]})
    assert c.state.active and set(c.state.image.topics) >= {"a", "b"}, \
        "the landed entry is adopted, the controller goes on"
    await c.stop()
