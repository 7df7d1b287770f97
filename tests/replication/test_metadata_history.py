"""A metadata store that goes back in time is noticed and refused, never acted on (issue 31 items 3 and 5).

Brokers skip entries at or below the offset they applied. A controller that loads a log ending below what the
brokers applied — a `cluster.dir` or etcd restored from an older copy, its newest entry files lost — re-claims
offsets the brokers ignore: before these fixes it answered CreateTopics and the rest with success although no
broker acted, and the entries it wrote past the brokers' offsets were applied on top of another history.

Now every entry names the digest of the one before it (`prev`, a chain), a broker refuses a delivery that does
not extend what it applied (`MetadataDiverged`), each broker's lease reports where its metadata is, a
controller refuses a log shorter than (or different from) what a live broker applied — before it writes
anything — and a broker answering an offset past the controller's log stops it too.

Item 5: one broker lease that cannot be read fenced nobody and blinded the controller to every lease (`list`
raised for the whole prefix): no failover at all while it lasted.
"""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

from kelp.broker.cluster.controller import MetadataHistoryRefused
from kelp.broker.cluster.file_leases import FileLeaseBackend
from kelp.broker.cluster.metadata_publisher import HistoryDiverged, MetadataPublisher
from kelp.broker.metadata.image import (
    MetadataDiverged,
    MetadataImage,
    apply_entry,
    entry_digest,
    image_from_log,
    snapshot_to_json,
)
from kelp.errors import MetadataDivergedError
from kelp.leases import LeaseElector, LivenessView
from tests.replication.test_controller import Harness, ep
from tests.replication.test_metadata_log_order import Broker, entries_of, payload
from tests.support.memory_metadata_log import MemoryMetadataLog


def restored(store: MemoryMetadataLog, up_to: int) -> MemoryMetadataLog:
    """The store as an older copy held it: everything up to `up_to`, nothing after."""
    old = MemoryMetadataLog()
    old.entries = {o: copy.deepcopy(e) for o, e in store.entries.items() if o <= up_to}
    old.snapshots = {o: copy.deepcopy(s) for o, s in store.snapshots.items() if o <= up_to}
    return old


async def cluster_with_a_broker(tmp_path):
    """A controller that created two topics, and broker 1, which applied all of it."""
    h = Harness(2)
    c = await h.start()
    await c.topic_admin.create_topic(name="a", assignments={0: [1, 0]})
    backup = c.state.image.offset  # what the older copy of the store will hold
    await c.topic_admin.create_topic(name="b", assignments={0: [1, 0]})
    b = Broker(tmp_path)
    assert b.member.metadata.apply(payload(entries_of(h.store), epoch=c.state.epoch)) == c.state.image.offset
    return h, c, b, backup


# -- the chain ------------------------------------------------------------------------------
def test_every_entry_names_the_digest_of_the_one_before_it() -> None:
    e0 = {"offset": 0, "epoch": 1, "records": [{"type": "controller", "epoch": 1, "broker_id": 0}]}
    image, _ = apply_entry(MetadataImage(), e0)
    assert image.digest == entry_digest(e0) and len(image.digest) == 32
    e1 = {"offset": 1, "epoch": 1, "records": [{"type": "producer_ids", "next": 10}], "prev": image.digest}
    nxt, _ = apply_entry(image, e1)
    assert nxt.offset == 1 and nxt.digest == entry_digest(e1) != image.digest
    other = dict(e1, prev=entry_digest({"offset": 0, "epoch": 1, "records": []}))
    with pytest.raises(MetadataDiverged, match="offset 1"):
        apply_entry(image, other)
    # a snapshot carries the digest of its last entry; the chain goes on from it
    again = image_from_log(snapshot_to_json(image), [e1])
    assert again.digest == nxt.digest


async def test_the_controller_chains_what_it_writes(tmp_path) -> None:
    h = Harness(2)
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [1, 0]})
    entries = entries_of(h.store)
    assert all(e["prev"] == entry_digest(p) for p, e in zip(entries, entries[1:], strict=False))


# -- a broker refuses another history --------------------------------------------------------
async def test_a_broker_refuses_entries_that_do_not_extend_what_it_applied(tmp_path) -> None:
    """The store lost its tail after broker 1 applied it; a controller that does not know (no positions
    reported) writes past broker 1's offset on the older copy: broker 1 refuses, loudly, and keeps its image."""
    h, c, b, backup = await cluster_with_a_broker(tmp_path)
    applied = b.member.state.image
    h.store = restored(h.store, backup)
    h.controller = h.make()  # no positions: it cannot know broker 1 is ahead
    new = await h.start()
    for name in ("c", "d", "e"):
        await new.topic_admin.create_topic(name=name, assignments={0: [1, 0]})
    assert new.state.image.offset > applied.offset
    with pytest.raises(MetadataDivergedError, match="another history"):
        b.member.metadata.apply(payload(entries_of(h.store), epoch=new.state.epoch))
    assert b.member.state.image is applied and b.topics.get("c") is None
    assert b.member.metadata_problems()["diverged"] == 1


async def test_a_controller_refuses_a_log_shorter_than_what_a_live_broker_applied(tmp_path) -> None:
    """Before it writes anything: no epoch claimed, no entry, no answer of success for work no broker does."""
    h, c, b, backup = await cluster_with_a_broker(tmp_path)
    h.store = restored(h.store, backup)
    before = dict(h.store.entries)
    new = h.make()
    new._positions = lambda: {1: (b.member.state.image.offset, b.member.state.image.digest)}
    with pytest.raises(MetadataHistoryRefused, match="broker 1 applied metadata offset"):
        await new.start()
    assert not new.state.active and new.refused and h.store.entries == before


async def test_a_controller_refuses_a_log_that_differs_from_what_a_live_broker_applied(tmp_path) -> None:
    """Same length, another history: the restored copy was written on by a controller that did not check."""
    h, c, b, backup = await cluster_with_a_broker(tmp_path)
    h.store = restored(h.store, backup)
    h.controller = h.make()
    other = await h.start()
    await other.topic_admin.create_topic(name="z", assignments={0: [0]})  # another entry where broker 1 holds "b"'s
    assert other.state.image.offset >= b.member.state.image.offset
    new = h.make()
    new._positions = lambda: {1: (b.member.state.image.offset, b.member.state.image.digest)}
    with pytest.raises(MetadataHistoryRefused, match="another history"):
        await new.start()


async def history_stops(send, image: MetadataImage) -> list[str]:
    """What a publisher delivering `image` to broker 1 through `send` reported as another history (bounded)."""
    stopped: list[str] = []
    pub = MetadataPublisher(controller_id=0, send=send, image=lambda: image, is_active=lambda: not stopped,
                            on_stale=lambda why: None, on_history=stopped.append)
    pub.set_brokers({1: ep(1)})
    for _ in range(200):
        if stopped:
            break
        await asyncio.sleep(0.005)
    await pub.stop()
    return stopped


async def test_a_broker_answering_past_the_controllers_log_stops_it(tmp_path) -> None:
    """The lease report can lag: the first delivery's answer is checked too."""
    async def send(broker, push):
        return 9  # broker 1 applied offset 9 of a history this controller's log lost

    stopped = await history_stops(send, MetadataImage(offset=3, epoch=2))
    assert stopped and "applied metadata offset 9" in stopped[0]


async def test_a_refused_delivery_stops_the_controller(tmp_path) -> None:
    async def send(broker, push):
        raise HistoryDiverged("broker 1 refuses metadata after offset 7")

    stopped = await history_stops(send, MetadataImage(offset=8, epoch=2))
    assert stopped and "refuses metadata" in stopped[0]


# -- item 5: an unreadable broker lease ------------------------------------------------------
async def test_an_unreadable_broker_lease_fences_that_broker_and_the_controller_sees_the_others(tmp_path) -> None:
    b = Broker(tmp_path)
    m = b.member
    m.state.leases = FileLeaseBackend(tmp_path / "cluster")
    m.leasing._liveness = LivenessView()
    for i in range(3):
        e = LeaseElector(m.state.leases, name=f"kelp-{m.state.cluster}-broker-{i}", identity=f"broker-{i}/x",
                         duration_ms=3000)
        await e.try_acquire_or_renew({"kelp.dev/endpoint": json.dumps(ep(i).to_json())})
    assert sorted(await m.leasing.refresh_brokers()) == [0, 1, 2]
    lease = tmp_path / "cluster" / "leases" / f"kelp-{m.state.cluster}-broker-2.json"
    lease.write_text('{"name": "kelp-')  # torn, or damaged on disk
    alive = await m.leasing.refresh_brokers()
    assert sorted(alive) == [0, 1], "the unreadable lease's broker is fenced, the others seen"
    assert m.metadata_problems()["unreadable_leases"] == 1
    assert lease.read_text() == '{"name": "kelp-'  # never overwritten as if absent


# -- below the controller's snapshot: controller runs ------------------------------------------
async def diverged_below_a_snapshot(tmp_path):
    """Broker 1 applied topic "b"; the store lost it; a controller that did not know (broker 1 was partitioned
    away, not live) wrote another history over broker 1's offsets and snapshotted past them, so no digest of the
    offsets broker 1 holds is left in the log."""
    h, c, b, backup = await cluster_with_a_broker(tmp_path)
    applied = b.member.state.image
    h.store = restored(h.store, backup)
    h.controller = h.make()
    other = await h.start()
    for name in ("z", "y", "x"):
        await other.topic_admin.create_topic(name=name, assignments={0: [0]})
    assert other.state.image.offset > applied.offset
    await other.writer.snapshot(other.state.image)
    return h, other, b, applied


async def test_a_controller_refuses_a_history_that_differs_below_its_snapshot(tmp_path) -> None:
    """Found by a review of this issue: the controller compared digests only from its snapshot on, so a broker
    holding another history below it was never noticed. The broker's lease now names the controller run its
    offset belongs to, and the log's runs do not hold that run there."""
    h, other, b, applied = await diverged_below_a_snapshot(tmp_path)
    new = h.make()
    new._positions = lambda: {1: (applied.offset, applied.digest, applied.runs[-1])}
    with pytest.raises(MetadataHistoryRefused, match="controller run"):
        await new.start()
    assert not new.state.active and new.refused


async def test_a_broker_refuses_a_snapshot_of_another_history(tmp_path) -> None:
    """The publisher sends a broker further behind than its retained entries a snapshot: one that does not hold the
    broker's controller run up to its offset is refused, loudly, and the broker keeps what it applied."""
    h, other, b, applied = await diverged_below_a_snapshot(tmp_path)
    snap = snapshot_to_json(other.state.image)
    with pytest.raises(MetadataDivergedError, match="does not extend what this broker applied"):
        b.member.metadata.apply(payload(entries_of(h.store, snap["offset"]), epoch=other.state.epoch, snapshot=snap))
    assert b.member.state.image is applied and b.topics.get("b") is not None and b.topics.get("z") is None
    assert b.member.metadata_problems()["diverged"] == 1


async def test_a_broker_takes_a_snapshot_of_its_own_history(tmp_path) -> None:
    """The same check passes a broker that was only behind: the snapshot holds its run past its offset."""
    h = Harness(2)
    c = await h.start()
    await c.topic_admin.create_topic(name="a", assignments={0: [1, 0]})
    b = Broker(tmp_path)
    b.member.metadata.apply(payload(entries_of(h.store), epoch=c.state.epoch))
    c.controller_elected = None
    h.controller = h.make()
    successor = await h.start()  # a new controller run, then more entries, then a snapshot past all of it
    for name in ("c", "d"):
        await successor.topic_admin.create_topic(name=name, assignments={0: [1, 0]})
    await successor.writer.snapshot(successor.state.image)
    snap = snapshot_to_json(successor.state.image)
    applied_offset = b.member.metadata.apply(payload([], epoch=successor.state.epoch, snapshot=snap))
    assert applied_offset == successor.state.image.offset
    assert b.topics.get("d") is not None and b.member.metadata_problems()["diverged"] == 0
    new = h.make()
    image = b.member.state.image
    new._positions = lambda: {1: (image.offset, image.digest, image.runs[-1])}
    await new.start()
    new._task.cancel()
    assert new.state.active and not new.refused
