"""The file lease and metadata-store backends keep the backend contract (and survive crashes mid-write)."""

from __future__ import annotations

import multiprocessing

from kelp.broker.cluster.leases import FileLeaseBackend, LeaseElector
from kelp.broker.cluster.store import FileMetadataStore

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


async def test_store_compare_and_swap(tmp_path) -> None:
    await contract.store_compare_and_swap(FileMetadataStore(tmp_path))


async def test_a_torn_temp_file_is_ignored(tmp_path) -> None:
    store = FileMetadataStore(tmp_path)
    v = await store.put_topic("t", {"name": "t"}, expected_version=None)
    (tmp_path / "metadata" / "topics" / "t.json.tmp").write_text('{"version": 9, "doc": {"na')  # crash mid-write
    (tmp_path / "metadata" / "topics" / "u.tmp").write_text("garbage")
    _, topics = await FileMetadataStore(tmp_path).load()
    assert list(topics) == ["t"] and topics["t"].version == v


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
    """A broker SIGSTOPped while holding the cluster directory's lock must not hang every other broker's
    lease renewals and the controller's writes (the fault-injection flake): they fail after a bounded
    wait, and succeed again once the lock is free."""
    import fcntl
    import time

    import pytest

    from kelp.broker.cluster import file_lock
    from kelp.broker.cluster.leases import LeaseRecord

    store, leases = FileMetadataStore(tmp_path), FileLeaseBackend(tmp_path)
    v1 = await store.put_topic("t", {"name": "t"}, expected_version=None)
    rec = await leases.create(LeaseRecord("kelp-l", "a", 1, 1, 3000, 0, {}))
    real = file_lock.exclusive
    monkeypatch.setattr("kelp.broker.cluster.store.exclusive", lambda p: real(p, timeout_s=0.3))
    monkeypatch.setattr("kelp.broker.cluster.leases.exclusive", lambda p: real(p, timeout_s=0.3))
    for lock_path in (tmp_path / "metadata" / ".lock", tmp_path / "leases" / ".lock"):
        with open(lock_path, "a") as held:  # another open file description: as another process's lock
            fcntl.flock(held, fcntl.LOCK_EX)
            began = time.monotonic()
            with pytest.raises(file_lock.LockTimeout, match="stayed locked"):
                if lock_path.parent.name == "metadata":
                    await store.put_topic("t", {"name": "t", "x": 1}, expected_version=v1)
                else:
                    await leases.update(rec)
            assert time.monotonic() - began < 5
    v2 = await store.put_topic("t", {"name": "t", "x": 2}, expected_version=v1)
    _, topics = await store.load()
    assert topics["t"].doc == {"name": "t", "x": 2} and topics["t"].version == v2
    assert list((tmp_path / "metadata" / "topics").glob("*.tmp")) == []  # the failed write left nothing behind
    assert (await leases.update(rec)).version != rec.version
