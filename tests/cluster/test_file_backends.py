"""The file lease and metadata-store backends keep the backend contract (and survive crashes mid-write)."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from kelp.broker.cluster.file_leases import FileLeaseBackend
from kelp.broker.cluster.metadata_log import FileMetadataLog, MetadataUnreadable
from kelp.leases import LeaseElector

from . import contract


async def test_leases_create_update_and_list(tmp_path) -> None:
    await contract.leases_create_update_and_list(FileLeaseBackend(tmp_path), "kelp-t")


async def test_elector_acquires_renews_and_is_fenced(tmp_path) -> None:
    await contract.elector_acquires_renews_and_is_fenced_by_observed_time(FileLeaseBackend(tmp_path), "kelp-c")


async def test_racing_electors_elect_exactly_one(tmp_path) -> None:
    await contract.racing_electors_elect_exactly_one(FileLeaseBackend(tmp_path), "kelp-c")


async def test_restarted_broker_takes_its_own_lease(tmp_path) -> None:
    await contract.a_restarted_broker_takes_its_own_lease_at_once(FileLeaseBackend(tmp_path), "kelp-b3")


async def test_liveness_view(tmp_path) -> None:
    await contract.liveness_view_follows_renewals(FileLeaseBackend(tmp_path), "kelp-x")


async def test_metadata_log_appends_are_create_if_absent(tmp_path) -> None:
    await contract.metadata_log_appends_are_create_if_absent(FileMetadataLog(tmp_path))


async def test_metadata_log_racing_appends_land_once(tmp_path) -> None:
    await contract.metadata_log_racing_appends_land_once(FileMetadataLog(tmp_path))


async def test_metadata_log_snapshot_then_compact(tmp_path) -> None:
    await contract.metadata_log_snapshot_then_compact(FileMetadataLog(tmp_path))


async def test_metadata_log_refuses_a_zombie_append_into_a_compacted_slot(tmp_path) -> None:
    await contract.metadata_log_refuses_a_zombie_append_into_a_compacted_slot(FileMetadataLog(tmp_path))


async def test_metadata_log_refuses_an_append_after_a_hole(tmp_path) -> None:
    async def remove(offset: int) -> None:
        (tmp_path / "metadata" / "log" / f"{offset:020d}.json").unlink()

    await contract.metadata_log_refuses_an_append_after_a_hole(FileMetadataLog(tmp_path), remove)


async def test_metadata_log_falls_back_to_the_older_snapshot(tmp_path) -> None:
    async def damage(offset: int) -> None:
        (tmp_path / "metadata" / "snapshots" / f"{offset:020d}.json").write_text('{"offset": 4, "ep')

    await contract.metadata_log_falls_back_to_the_older_snapshot(FileMetadataLog(tmp_path), damage)


async def test_the_memory_log_keeps_the_same_contract() -> None:
    from tests.support.memory_metadata_log import MemoryMetadataLog

    await contract.metadata_log_appends_are_create_if_absent(MemoryMetadataLog())
    await contract.metadata_log_racing_appends_land_once(MemoryMetadataLog())
    await contract.metadata_log_snapshot_then_compact(MemoryMetadataLog())
    await contract.metadata_log_refuses_a_zombie_append_into_a_compacted_slot(MemoryMetadataLog())
    memory = MemoryMetadataLog()

    async def damage(offset: int) -> None:
        memory.unreadable.add(("snapshot", offset))

    await contract.metadata_log_falls_back_to_the_older_snapshot(memory, damage)
    holed = MemoryMetadataLog()

    async def remove(offset: int) -> None:
        del holed.entries[offset]

    await contract.metadata_log_refuses_an_append_after_a_hole(holed, remove)


async def test_a_torn_temp_file_is_ignored(tmp_path) -> None:
    log = FileMetadataLog(tmp_path)
    await log.append({"offset": 0, "epoch": 1, "records": []})
    (tmp_path / "metadata" / "log" / ".123.456.tmp").write_text('{"offset": 1, "ep')  # crash before the link
    loaded = await FileMetadataLog(tmp_path).load()
    assert [e["offset"] for e in loaded.entries] == [0]
    await log.append({"offset": 1, "epoch": 1, "records": []})  # the slot is free: nothing was linked


async def test_unreadable_metadata_is_an_error_never_absence(tmp_path) -> None:
    """Issue #17 item 3: an entry that exists but cannot be read (EIO, damage) stops the reader with its name;
    the old store returned None and the controller's next full push deleted that topic everywhere."""
    import pytest

    log = FileMetadataLog(tmp_path)
    for o in range(3):
        await log.append({"offset": o, "epoch": 1, "records": []})
    (tmp_path / "metadata" / "log" / f"{1:020d}.json").write_text('{"offset": 1, "epo')
    with pytest.raises(MetadataUnreadable, match=f"{1:020d}.json"):
        await log.load()
    (tmp_path / "metadata" / "log" / f"{1:020d}.json").unlink()
    with pytest.raises(MetadataUnreadable, match="hole"):
        await log.load()


async def test_unreadable_lease_is_an_error_never_overwritten(tmp_path) -> None:
    """Issue #17 item 3: an unreadable lease file was read as absent and re-created with change count 0."""
    import pytest

    from kelp.leases import LeaseUnreadable

    backend = FileLeaseBackend(tmp_path)
    elector = LeaseElector(backend, name="kelp-c-controller", identity="broker-0/a", duration_ms=3000)
    assert await elector.try_acquire_or_renew() is not None
    path = tmp_path / "leases" / "kelp-c-controller.json"
    path.write_text('{"name": "kelp-c-contr')
    other = LeaseElector(backend, name="kelp-c-controller", identity="broker-1/b", duration_ms=3000)
    with pytest.raises(LeaseUnreadable, match="kelp-c-controller"):
        await other.try_acquire_or_renew()
    with pytest.raises(LeaseUnreadable):
        await backend.list("kelp-c-")
    assert path.read_text() == '{"name": "kelp-c-contr'  # left for a human to look at, not overwritten


@pytest.mark.parametrize("errno_name", ["EMFILE", "EIO"])
async def test_an_io_error_reading_metadata_or_a_lease_is_an_error_never_absence(
        tmp_path, monkeypatch, errno_name) -> None:
    """Issue #17 item 3, as the issue names it: EMFILE or EIO while the controller loads the log (or a broker
    reads a lease) must stop the reader with the file named, never read as "no such topic" or "no lease"."""
    import errno
    from pathlib import Path

    code = getattr(errno, errno_name)
    log = FileMetadataLog(tmp_path)
    for o in range(3):
        await log.append({"offset": o, "epoch": 1, "records": []})
    backend = FileLeaseBackend(tmp_path)
    elector = LeaseElector(backend, name="kelp-c-controller", identity="broker-0/a", duration_ms=3000)
    assert await elector.try_acquire_or_renew() is not None
    failing = {f"{1:020d}.json", "kelp-c-controller.json"}
    real_bytes, real_text = Path.read_bytes, Path.read_text

    def read_bytes(self: Path) -> bytes:
        if self.name in failing:
            raise OSError(code, os.strerror(code), str(self))
        return real_bytes(self)

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if self.name in failing:
            raise OSError(code, os.strerror(code), str(self))
        return real_text(self, *args, **kwargs)  # type: ignore[arg-type]  # Path.read_text's own arguments

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(Path, "read_text", read_text)
    with pytest.raises(MetadataUnreadable, match=f"{1:020d}.json"):
        await log.load()
    other = LeaseElector(backend, name="kelp-c-controller", identity="broker-1/b", duration_ms=3000)
    from kelp.leases import LeaseUnreadable

    with pytest.raises(LeaseUnreadable, match="kelp-c-controller"):
        await other.try_acquire_or_renew()
    monkeypatch.undo()
    loaded = await log.load()  # the error passed: everything is there, nothing was rewritten
    assert [e["offset"] for e in loaded.entries] == [0, 1, 2]
    assert (await backend.get("kelp-c-controller")).holder == "broker-0/a"


async def test_legacy_store_documents_are_read_for_import(tmp_path) -> None:
    import json

    topics = tmp_path / "metadata" / "topics"
    topics.mkdir(parents=True)
    (tmp_path / "metadata" / "cluster.json").write_text(json.dumps({"version": 3, "doc": {"next_producer_id": 2000}}))
    doc = {"name": "orders", "topic_id": "abc", "configs": {}, "partitions": [
        {"replicas": [0], "leader": 0, "leader_epoch": 4, "isr": [0], "partition_epoch": 7}]}
    (topics / "orders.json").write_text(json.dumps({"version": 2, "doc": doc}))
    legacy = await FileMetadataLog(tmp_path).legacy()
    assert legacy.cluster == {"next_producer_id": 2000} and legacy.topics == {"orders": doc}
    assert await FileMetadataLog(tmp_path / "empty").legacy() is None


def _append_race(directory: str, epoch: int, out) -> None:
    import asyncio

    from kelp.broker.cluster.metadata_log import MetadataLogConflict

    try:
        asyncio.run(FileMetadataLog(directory).append({"offset": 0, "epoch": epoch, "records": []}))
        out.put(True)
    except MetadataLogConflict:
        out.put(False)


def test_processes_racing_for_one_metadata_offset_write_it_once(tmp_path) -> None:
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_append_race, args=(str(tmp_path), i, out)) for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [out.get(timeout=5) for _ in procs].count(True) == 1


def _race(directory: str, identity: str, out) -> None:
    import asyncio

    backend = FileLeaseBackend(directory)
    out.put(asyncio.run(LeaseElector(backend, name="kelp-c-controller", identity=identity,
                                     duration_ms=3000).try_acquire_or_renew()) is not None)


def test_processes_racing_on_one_directory_elect_one(tmp_path) -> None:
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), f"broker-{i}/p", out)) for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    wins = [out.get(timeout=5) for _ in procs]
    assert wins.count(True) == 1


async def test_a_lock_held_by_a_stopped_process_fails_writes_after_a_bounded_wait(tmp_path, monkeypatch) -> None:
    """A broker SIGSTOPped while holding the lease directory's lock must not hang every other broker's lease
    renewals: they fail after a bounded wait, and succeed again once the lock is free. (The metadata log
    takes no lock at all: its appends are atomic links.)"""
    import fcntl
    import time

    import pytest

    from kelp.broker.cluster import file_lock
    from kelp.leases import LeaseRecord

    leases = FileLeaseBackend(tmp_path)
    rec = await leases.create(LeaseRecord("kelp-l", "a", 1, 1, 3000, 0, {}))
    real = file_lock.exclusive
    monkeypatch.setattr("kelp.broker.cluster.file_leases.exclusive", lambda p: real(p, timeout_s=0.3))
    with open(tmp_path / "leases" / ".lock", "a") as held:  # another open file description: as another process's lock
        fcntl.flock(held, fcntl.LOCK_EX)
        began = time.monotonic()
        with pytest.raises(file_lock.LockTimeout, match="stayed locked"):
            await leases.update(rec)
        assert time.monotonic() - began < 5
    assert (await leases.update(rec)).version != rec.version


async def test_lease_renewals_and_metadata_writes_never_wait_behind_the_data_planes_file_work(tmp_path) -> None:
    """A broker taking the leadership of thousands of partitions queues an fsync per partition on the loop's default
    executor (its leader-epoch checkpoint); a lease renewal queued behind them waited past the lease and the broker
    was fenced, again and again (issue 38). Every default-executor thread is held here, and more work waits behind
    them: the renewal and the controller's metadata append must complete all the same (bounded waits)."""
    import asyncio
    import threading

    from kelp.leases import LeaseRecord

    loop = asyncio.get_running_loop()
    held = threading.Event()
    blocked = [loop.run_in_executor(None, held.wait, 60) for _ in range(64)]  # more than the executor's threads
    try:
        leases, log = FileLeaseBackend(tmp_path), FileMetadataLog(tmp_path)
        rec = await asyncio.wait_for(leases.create(LeaseRecord("kelp-b0", "a", 1, 1, 3000, 0, {})), 10)
        await asyncio.wait_for(leases.update(rec), 10)
        await asyncio.wait_for(leases.scan("kelp-"), 10)
        await asyncio.wait_for(log.append({"offset": 0, "epoch": 1, "records": []}), 10)
        assert len((await asyncio.wait_for(log.load(), 10)).entries) == 1
    finally:
        held.set()
        await asyncio.gather(*blocked)
