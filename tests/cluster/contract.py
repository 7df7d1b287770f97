"""The contract every lease and metadata-store backend keeps, as plain async checks.

Why: the file backends (clusters on one machine) and the Kubernetes backends
(Lease and ConfigMap objects) must behave the same, so the same checks run
against both: `tests/cluster/test_file_backends.py` and
`tests/kube/test_kube_cluster_backends.py` call these with a backend.
Expiry is judged by an injected monotonic clock, so nothing sleeps.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from kelp.broker.cluster.metadata_log import MetadataLogConflict, MetadataUnreadable
from kelp.leases import LeaseConflict, LeaseElector, LeaseRecord, LivenessView


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def leases_create_update_and_list(backend, prefix: str) -> None:
    rec = LeaseRecord(f"{prefix}-a", "one", 1_000, 1_000, 3000, 0, {"kelp.dev/endpoint": '{"id": 1}'})
    made = await backend.create(rec)
    assert made.version and made.holder == "one" and made.annotations["kelp.dev/endpoint"] == '{"id": 1}'
    with pytest.raises(LeaseConflict):
        await backend.create(rec)
    newer = await backend.update(replace(made, renew_time_ms=2_000))
    assert newer.version != made.version and newer.renew_time_ms == 2_000 and newer.duration_ms == 3000
    with pytest.raises(LeaseConflict):
        await backend.update(replace(made, renew_time_ms=3_000))  # stale version
    await backend.create(LeaseRecord(f"{prefix}-b", None, 0, 0, 3000, 0, {}))
    await backend.create(LeaseRecord(f"other-{prefix}", "x", 0, 0, 3000, 0, {}))
    names = sorted(r.name for r in await backend.list(f"{prefix}-"))
    assert names == [f"{prefix}-a", f"{prefix}-b"]
    assert (await backend.get(f"{prefix}-missing")) is None


async def elector_acquires_renews_and_is_fenced_by_observed_time(backend, name: str) -> None:
    clock = Clock()
    a = LeaseElector(backend, name=name, identity="broker-0/a", duration_ms=3000, monotonic=clock)
    b = LeaseElector(backend, name=name, identity="broker-1/b", duration_ms=3000, monotonic=clock)
    first = await a.try_acquire_or_renew()
    assert first is not None and first.holder == "broker-0/a" and first.transitions == 0
    assert await b.try_acquire_or_renew() is None  # held
    again = await a.try_acquire_or_renew()
    assert again is not None and again.transitions == 0  # renewing keeps the epoch
    clock.t += 2.0
    assert await b.try_acquire_or_renew() is None  # b saw a change 2 s ago: not expired in its view
    clock.t += 3.1
    taken = await b.try_acquire_or_renew()  # unchanged for longer than the duration in b's view
    assert taken is not None and taken.holder == "broker-1/b" and taken.transitions == 1
    assert await a.try_acquire_or_renew() is None  # a is fenced: b renewed within its view
    await b.release()
    freed = await a.try_acquire_or_renew()  # released: no need to wait for expiry
    assert freed is not None and freed.holder == "broker-0/a" and freed.transitions == 2


async def racing_electors_elect_exactly_one(backend, name: str) -> None:
    clock = Clock()
    electors = [LeaseElector(backend, name=name, identity=f"broker-{i}/x", duration_ms=3000, monotonic=clock)
                for i in range(4)]
    results = await asyncio.gather(*(e.try_acquire_or_renew() for e in electors))
    assert sum(r is not None for r in results) == 1


async def a_restarted_broker_takes_its_own_lease_at_once(backend, name: str) -> None:
    clock = Clock()
    old = LeaseElector(backend, name=name, identity="broker-3/old", duration_ms=3000, monotonic=clock)
    assert await old.try_acquire_or_renew() is not None
    new = LeaseElector(backend, name=name, identity="broker-3/new", duration_ms=3000, monotonic=clock,
                       may_take_over=lambda holder: holder.startswith("broker-3/"))
    rec = await new.try_acquire_or_renew()
    assert rec is not None and rec.holder == "broker-3/new" and rec.transitions == 1


async def liveness_view_follows_renewals(backend, prefix: str) -> None:
    clock = Clock()
    e = LeaseElector(backend, name=f"{prefix}-broker-0", identity="broker-0/a", duration_ms=3000, monotonic=clock)
    await e.try_acquire_or_renew()
    view = LivenessView(monotonic=clock)
    view.observe(await backend.list(f"{prefix}-broker-"))
    assert view.alive(f"{prefix}-broker-0")
    clock.t += 2.0
    await e.try_acquire_or_renew()
    view.observe(await backend.list(f"{prefix}-broker-"))
    clock.t += 2.0
    assert view.alive(f"{prefix}-broker-0")  # renewed 2 s ago in the view's clock
    clock.t += 1.5
    view.observe(await backend.list(f"{prefix}-broker-"))
    assert not view.alive(f"{prefix}-broker-0") and view.alive_names() == set()


def _entry(offset: int, epoch: int = 1, *records: dict) -> dict:
    return {"offset": offset, "epoch": epoch, "records": list(records) or [{"type": "producer_ids", "next": offset}]}


async def metadata_log_appends_are_create_if_absent(log) -> None:
    """Appends land at exactly their offset, a taken offset is refused (the fence), reads come back in order."""
    loaded = await log.load()
    assert loaded.snapshot is None and loaded.entries == [] and loaded.end_offset == -1
    await log.append(_entry(0, 1, {"type": "controller", "epoch": 1, "broker_id": 0}))
    await log.append(_entry(1))
    with pytest.raises(MetadataLogConflict):
        await log.append(_entry(1, 2))  # a deposed controller's write at an offset its successor used
    assert (await log.read_entry(1))["epoch"] == 1 and await log.read_entry(7) is None
    loaded = await log.load()
    assert [e["offset"] for e in loaded.entries] == [0, 1] and loaded.end_offset == 1


async def metadata_log_racing_appends_land_once(log) -> None:
    results = await asyncio.gather(*(log.append(_entry(0, e)) for e in range(1, 5)), return_exceptions=True)
    assert sum(r is None for r in results) == 1
    assert all(isinstance(r, MetadataLogConflict) for r in results if r is not None)


def _snap(offset: int) -> dict:
    return {"offset": offset, "epoch": 1, "controller_id": 0, "next_producer_id": offset, "topics": [], "removed": []}


async def metadata_log_snapshot_then_compact(log) -> None:
    """A snapshot bounds what a reader gets; compaction keeps the newest two snapshots and the entries after the
    older one, raising the log start first; later entries follow."""
    for o in range(6):
        await log.append(_entry(o))
    await log.write_snapshot(_snap(2))
    loaded = await log.load()
    assert loaded.snapshot == _snap(2) and [e["offset"] for e in loaded.entries] == [3, 4, 5]
    assert await log.compact(2) == 0  # one snapshot: nothing is covered twice yet
    await log.write_snapshot(_snap(4))
    assert await log.compact(4) == 3  # entries 0..2 (covered by both snapshots)
    assert await log.read_entry(3) is not None and await log.read_entry(6) is None
    await log.append(_entry(6))
    loaded = await log.load()
    assert loaded.snapshot["offset"] == 4 and [e["offset"] for e in loaded.entries] == [5, 6]
    assert not loaded.fell_back
    await log.write_snapshot(_snap(6))
    assert await log.compact(6) == 3  # entries 3, 4 and the snapshot at 2
    assert (await log.load()).snapshot["offset"] == 6


async def metadata_log_refuses_a_zombie_append_into_a_compacted_slot(log) -> None:
    """Issue 31 item 1: create-if-absent alone let a deposed controller's append land in a slot compaction had
    freed (its caller was told it happened; it was never read). The log start refuses it, whatever the slot."""
    for o in range(5):
        await log.append(_entry(o))
    await log.write_snapshot(_snap(1))
    await log.write_snapshot(_snap(3))
    await log.compact(3)  # log start 1: slots 0 and 1 are free again
    for zombie in (0, 1):
        with pytest.raises(MetadataLogConflict, match="log start"):
            await log.append(_entry(zombie, 1))
        with pytest.raises(MetadataLogConflict):
            await log.read_entry(zombie)  # a controller in doubt about this slot is deposed, never adopts it
    with pytest.raises(MetadataLogConflict, match="taken"):
        await log.append(_entry(2, 1))  # kept for the older snapshot: still fenced by the slot
    loaded = await log.load()
    assert loaded.snapshot["offset"] == 3 and [e["offset"] for e in loaded.entries] == [4]
    await log.append(_entry(5))  # the next slot is open to the writer that owns it


async def metadata_log_falls_back_to_the_older_snapshot(log, damage) -> None:
    """Issue 31 item 7: the newest snapshot unreadable, the older one and its entries are used (and said so);
    both unreadable is an error naming both, never an empty log."""
    for o in range(6):
        await log.append(_entry(o))
    await log.write_snapshot(_snap(2))
    await log.write_snapshot(_snap(4))
    await log.compact(4)
    await damage(4)
    loaded = await log.load()
    assert loaded.snapshot["offset"] == 2 and [e["offset"] for e in loaded.entries] == [3, 4, 5]
    assert loaded.fell_back and "4" in loaded.fell_back[0]
    await damage(2)
    with pytest.raises(MetadataUnreadable, match="no snapshot"):
        await log.load()


async def metadata_log_refuses_an_append_after_a_hole(log, remove) -> None:
    """Issue 31 item 3: a store that went back in time under a running controller (its newest entries removed, or
    an older copy restored) refuses the controller's next write: taking it after a hole would make a log no reader
    can cross — and hand the writer a success for a change the next reader never sees."""
    for o in range(4):
        await log.append(_entry(o))
    await remove(3)
    await remove(2)
    with pytest.raises(MetadataLogConflict, match="went back in time"):
        await log.append(_entry(4))
    assert await log.read_entry(4) is None
    await log.append(_entry(2))  # what the store holds does extend: the writer that reloaded goes on
