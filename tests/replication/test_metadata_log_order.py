"""Cluster metadata is ordered and fenced by construction (issue #17 items 2, 3, 11; docs/metadata.md).

A deposed controller can never write again (its next append targets an
offset its successor used); a broker applies the metadata log strictly in
offset order, ignores anything older, refuses an older controller epoch,
and deletes a topic's logs only for a `remove_topic` record — never because
a delivery or snapshot lacks the topic, and never a replica whose removal
is not newer than what it holds.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from kelp.broker.cluster.member import ClusterMember
from kelp.broker.cluster.metadata_log import MetadataUnreadable
from kelp.broker.cluster.metadata_publisher import MetadataPublisher
from kelp.broker.metadata.image import (
    MetadataCorrupt,
    MetadataImage,
    apply_entry,
    diff_images,
    image_from_log,
    partition_record,
    remove_topic_record,
    snapshot_to_json,
    topic_record,
)
from kelp.broker.metadata.model import BrokerEndpoint, PartitionState, TopicState
from kelp.broker.replica.manager import ReplicaManager
from kelp.broker.topic_manager import TopicManager
from kelp.config.broker import BrokerConfig
from kelp.errors import NotControllerError, StaleControllerEpochError
from tests.replication.test_controller import Harness, ep
from tests.support.memory_metadata_log import MemoryMetadataLog


# -- the controller side: fencing by the log ----------------------------------------------
async def test_a_deposed_controller_cannot_write_once_its_successor_claimed_an_epoch() -> None:
    """Item 2/11: the old instance's lease check still passes (a stall shorter than its margin, or a clock
    it trusts); its write fails all the same, because its successor's `controller` record took the offset."""
    h = Harness()
    old = await h.start()
    await old.topic_admin.create_topic(name="t", partitions=1, replication_factor=3)
    new = h.make()
    await new.start()
    new._task.cancel()
    assert new.state.epoch == old.state.epoch + 1
    before = dict(h.store.entries)
    with pytest.raises(NotControllerError, match="superseded"):
        await old.topic_admin.create_topic(name="zombie", partitions=1, replication_factor=3)
    assert not old.state.active and h.store.entries == before and h.store.topic("zombie") is None
    # the new one carries on at the offsets after its claim
    await new.topic_admin.create_topic(name="u", partitions=1, replication_factor=3)
    assert h.store.topic("u") is not None


async def test_a_deposed_controllers_publisher_stops_delivering() -> None:
    """Item 11: push workers check that their controller is still active before every send."""
    sent: list[int] = []
    active = [True]
    image = [MetadataImage(offset=0, epoch=1)]

    async def send(broker, payload):
        sent.append(broker.id)
        return payload["end_offset"]

    pub = MetadataPublisher(controller_id=0, send=send, image=lambda: image[0], is_active=lambda: active[0],
                            on_stale=lambda why: None)
    pub.set_brokers({1: ep(1)})
    for _ in range(50):
        if sent:
            break
        await asyncio.sleep(0.01)
    assert sent == [1]
    active[0] = False
    image[0] = MetadataImage(offset=1, epoch=1)
    pub.retain({"offset": 1, "epoch": 1, "records": []})
    await asyncio.sleep(0.05)
    assert sent == [1]  # nothing after it was deposed
    await pub.stop()


async def test_an_unreadable_log_stops_a_takeover_instead_of_reading_as_empty() -> None:
    """Item 3: EMFILE/EIO while the new controller loads must not make it believe there are no topics."""
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", partitions=1, replication_factor=3)

    async def broken():
        raise MetadataUnreadable("metadata file 00000000000000000001.json cannot be read (Too many open files)")

    h.store.load = broken
    with pytest.raises(MetadataUnreadable, match="Too many open files"):
        await h.make().start()


# -- the broker side: apply in order -------------------------------------------------------
class Broker:
    """The parts of a broker that applying metadata touches: real topic and replica managers on real logs."""

    def __init__(self, tmp_path, broker_id: int = 1) -> None:
        from kelp.broker.storage import LogManager
        from kelp.config.log_config import LogConfig

        self.config = BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path), "broker.id": broker_id,
                                                           "cluster.dir": str(tmp_path / "cluster")})
        self.topics = TopicManager(self.config, None)
        self.logs = LogManager([tmp_path], LogConfig.from_kafka(self.config.default_topic_config()),
                               config_for=self.topics.log_config_or_none)
        self.topics.logs = self.logs
        self.replicas = ReplicaManager(self.config, self.logs, self.topics)
        self.member = ClusterMember(SimpleNamespace(config=self.config, topics=self.topics))
        # A process the controller registered (tests/replication/test_registration.py).
        self.member.state.registered = True


def entries_of(log: MemoryMetadataLog, after: int = -1) -> list[dict]:
    return [log.entries[o] for o in sorted(log.entries) if o > after]


def payload(entries, *, epoch: int, snapshot=None, controller: int = 0) -> dict:
    p = {"controller_id": controller, "controller_epoch": epoch, "brokers": [ep(0).to_json(), ep(1).to_json()],
         "entries": list(entries), "end_offset": entries[-1]["offset"] if entries else -1}
    if snapshot is not None:
        p["snapshot"] = snapshot
    return p


async def test_entries_apply_in_offset_order_whatever_order_they_arrive_in(tmp_path) -> None:
    """Item 2: a delayed push (aiohttp keeps running a handler whose client timed out) arriving after newer
    ones changes nothing; a gap stops the batch and the answer names where to resume."""
    h = Harness(2)
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 1]})
    first = c.state.image.offset
    s = h.state("t")
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=0, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[0])
    all_entries = entries_of(h.store)
    b = Broker(tmp_path)
    m = b.member
    late = [e for e in all_entries if e["offset"] <= first]
    newer = [e for e in all_entries if e["offset"] > first]
    assert m.metadata.apply(payload(newer, epoch=c.state.epoch)) == -1  # a gap: nothing applied, resume from -1
    assert b.topics.get("t") is None
    assert m.metadata.apply(payload(all_entries, epoch=c.state.epoch)) == c.state.image.offset
    assert b.topics.get("t").partition(0).isr == (0,)
    assert m.metadata.apply(payload(late, epoch=c.state.epoch)) == c.state.image.offset  # the late push: ignored
    assert b.topics.get("t").partition(0).isr == (0,)


async def test_a_deposed_controllers_delivery_is_refused_once_a_newer_epoch_was_seen(tmp_path) -> None:
    b = Broker(tmp_path)
    b.member.metadata.apply(payload([], epoch=5))
    with pytest.raises(StaleControllerEpochError, match="epoch 4"):
        b.member.metadata.apply(payload([], epoch=4))


async def test_only_a_remove_topic_record_deletes_a_topics_logs(tmp_path) -> None:
    """Item 2: the old full push deleted every topic it did not list, with its logs. A snapshot that lacks a
    topic deletes it only if it carries that topic's tombstone; otherwise the topic is forgotten and its
    logs stay on disk."""
    h = Harness(2)
    c = await h.start()
    await c.topic_admin.create_topic(name="keep", assignments={0: [1, 0]})
    await c.topic_admin.create_topic(name="gone", assignments={0: [1, 0]})
    b = Broker(tmp_path)
    b.member.metadata.apply(payload(entries_of(h.store), epoch=c.state.epoch))
    assert b.logs.get("keep", 0) is not None and b.logs.get("gone", 0) is not None
    # a snapshot from elsewhere that simply lacks "keep" (no tombstone): forgotten, never deleted
    foreign = MetadataImage(offset=c.state.image.offset + 10, epoch=c.state.epoch,
                            topics={"gone": c.state.image.topics["gone"]})
    b.member.metadata.apply(payload([], epoch=c.state.epoch, snapshot=snapshot_to_json(foreign)))
    assert b.topics.get("keep") is None and (tmp_path / "keep-0").is_dir()
    # an explicit deletion in the log: the logs go
    h2 = Harness(2)
    c2 = await h2.start()
    await c2.topic_admin.create_topic(name="x", assignments={0: [1, 0]})
    b2 = Broker(tmp_path / "b2")
    b2.member.metadata.apply(payload(entries_of(h2.store), epoch=c2.state.epoch))
    assert (tmp_path / "b2" / "x-0").is_dir()
    await c2.topic_admin.delete_topic(name="x")
    b2.member.metadata.apply(payload(entries_of(h2.store), epoch=c2.state.epoch))
    assert b2.topics.get("x") is None and not (tmp_path / "b2" / "x-0").exists()


async def test_a_snapshot_past_a_deletion_deletes_by_its_tombstone(tmp_path) -> None:
    h = Harness(2)
    c = await h.start()
    await c.topic_admin.create_topic(name="x", assignments={0: [1, 0]})
    b = Broker(tmp_path)
    b.member.metadata.apply(payload(entries_of(h.store), epoch=c.state.epoch))
    await c.topic_admin.delete_topic(name="x")
    await c.topic_admin.create_topic(name="y", assignments={0: [1, 0]})
    # It missed the entries.
    b.member.metadata.apply(payload([], epoch=c.state.epoch, snapshot=snapshot_to_json(c.state.image)))
    assert b.topics.get("x") is None and not (tmp_path / "x-0").exists()
    assert b.topics.get("y") is not None


async def test_a_replica_is_deleted_only_by_a_newer_partition_state(tmp_path) -> None:
    """Item 2: 'this broker is not in the replica list' deleted the log before any epoch comparison."""
    b = Broker(tmp_path)
    t = TopicState("t", (PartitionState((1, 0), 1, 3, (1, 0), 5),), topic_id="a" * 32)
    from kelp.broker.metadata.image import MetadataDelta

    b.topics.apply_delta(MetadataDelta(changed={"t": t}))
    assert b.replicas.get_partition("t", 0) is not None
    stale = t.with_partition(0, PartitionState((0, 2), 0, 3, (0, 2), 5))  # same epochs: not newer
    b.replicas.topics._topics["t"] = stale
    b.replicas.apply_topic("t")
    assert b.replicas.get_partition("t", 0) is not None and (tmp_path / "t-0").is_dir()
    newer = t.with_partition(0, PartitionState((0, 2), 0, 4, (0, 2), 6))
    b.replicas.topics._topics["t"] = newer
    b.replicas.apply_topic("t")
    assert b.replicas.get_partition("t", 0) is None and b.logs.get("t", 0) is None
    await asyncio.gather(*b.replicas._tasks)  # the files go in a worker thread
    assert not (tmp_path / "t-0").exists()


# -- the image's invariants -----------------------------------------------------------------
def test_the_image_refuses_what_would_break_an_invariant() -> None:
    t = TopicState("t", (PartitionState((0, 1), 0, 2, (0, 1), 4),), topic_id="b" * 32)
    image, _ = apply_entry(MetadataImage(), {"offset": 0, "epoch": 1, "records": [topic_record(t)]})
    older = PartitionState((0, 1), 0, 1, (0, 1), 9)
    with pytest.raises(MetadataCorrupt, match="older"):
        apply_entry(image, {"offset": 1, "epoch": 1, "records": [partition_record(t, 0, older)]})
    outside = PartitionState((0, 1), 2, 3, (2,), 5)
    with pytest.raises(MetadataCorrupt, match="not one of the replicas"):
        apply_entry(image, {"offset": 1, "epoch": 1, "records": [partition_record(t, 0, outside)]})
    with pytest.raises(MetadataCorrupt, match="below epoch"):
        apply_entry(image, {"offset": 1, "epoch": 0, "records": []})
    other = TopicState("t", t.partition_states, topic_id="c" * 32)
    with pytest.raises(MetadataCorrupt, match="without a remove_topic"):
        apply_entry(image, {"offset": 1, "epoch": 1, "records": [topic_record(other)]})
    image2, delta = apply_entry(image, {"offset": 1, "epoch": 1, "records": [remove_topic_record(t),
                                                                               topic_record(other)]})
    assert delta.removed["t"].topic_id == "b" * 32 and delta.changed["t"].topic_id == "c" * 32
    assert image2.removed == {"b" * 32: "t"}
    assert image_from_log(snapshot_to_json(image2), []) == image2
    vanished = diff_images(image2, MetadataImage(offset=5, epoch=1))
    assert vanished.vanished == ["t"] and not vanished.removed


# -- a broker that is paused past its lease while another process takes its id -----------------
async def test_a_process_that_lost_its_broker_id_to_another_stops_itself(tmp_path) -> None:
    """Item 15: two processes with the same broker id took the lease from each other forever. Now the
    newcomer may take it only once released or expired, and the old one, finding its lease held by another
    incarnation of its id, stops instead of taking it back."""
    stops: list[str] = []
    cfg = BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path), "broker.id": 3,
                                               "cluster.dir": str(tmp_path / "c"), "lease.renew.interval.ms": 20})
    broker = SimpleNamespace(config=cfg, topics=None, request_stop=stops.append)
    m = ClusterMember(broker)
    m.state.endpoint = BrokerEndpoint(3, "127.0.0.1", 1, "127.0.0.1", 2, incarnation=m.state.identity)
    m.make_backends()
    await m.leasing.register()
    intruder = ClusterMember(SimpleNamespace(config=cfg, topics=None))
    intruder.state.endpoint = BrokerEndpoint(3, "127.0.0.1", 5, "127.0.0.1", 6, incarnation=intruder.state.identity)
    intruder.make_backends()
    assert await intruder.leasing._broker_elector.try_acquire_or_renew() is None  # live: not taken at once
    # the old process pauses past its lease; the intruder's view expires it and takes it
    rec = await m.state.leases.get(m.state.broker_lease_name)
    from dataclasses import replace

    await m.state.leases.update(replace(rec, holder=intruder.state.identity))
    task = asyncio.create_task(m.leasing.renew_loop())
    for _ in range(200):
        if stops:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert stops and "took broker id 3" in stops[0] and m.state.fenced
    assert (await m.state.leases.get(m.state.broker_lease_name)).holder == intruder.state.identity  # not taken back


async def test_a_process_paused_past_its_lease_does_not_take_the_controller_lease_from_its_successor(
        tmp_path) -> None:
    """Item 15: the controller lease is taken over at once from an incarnation of the same broker id (its
    previous life). A process paused past its broker lease wakes with both loops due; if its election
    round ran first, it took the controller lease from its successor — the live incarnation — and deposed
    it. It must first renew its own broker lease (or find it taken and stop)."""
    cfg = BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path), "broker.id": 3,
                                               "cluster.dir": str(tmp_path / "c")})
    takeovers: list[str] = []

    def member() -> ClusterMember:
        m = ClusterMember(SimpleNamespace(config=cfg, topics=None, request_stop=lambda why: None))
        m.state.endpoint = BrokerEndpoint(3, "127.0.0.1", 1, "127.0.0.1", 2, incarnation=m.state.identity)
        m.make_backends()

        async def become() -> None:
            takeovers.append(m.state.identity)
        m.leasing._become_controller = become  # the takeover itself is not under test
        return m

    old, new = member(), member()
    await old.leasing.register()
    # Before the pause: a fresh broker lease lets it compete (the control: the round does take a free lease).
    await old.leasing.election_round()
    await asyncio.sleep(0)
    assert takeovers == [old.state.identity]
    assert (await old.state.leases.get(old.state.controller_lease_name)).holder == old.state.identity
    # It pauses past its lease; its successor takes the broker lease and then the controller lease.
    takeovers.clear()
    from dataclasses import replace

    rec = await old.state.leases.get(old.state.broker_lease_name)
    await old.state.leases.update(replace(rec, holder=new.state.identity))
    assert await new.leasing._controller_elector.try_acquire_or_renew() is not None
    old.leasing._broker_renewed -= old.state.duration_ms / 1000.0
    # It wakes: its election round comes first. It must leave the controller lease alone.
    await old.leasing.election_round()
    await asyncio.sleep(0)
    assert takeovers == []
    assert (await old.state.leases.get(old.state.controller_lease_name)).holder == new.state.identity


async def test_a_new_controller_incarnation_stops_the_old_one_before_it_starts(tmp_path, monkeypatch) -> None:
    """Item 2: a controller whose lease check failed after a stall restarted itself at the same epoch while
    its old instance's push workers kept delivering snapshots from a frozen copy. A new incarnation in the
    same process now stops the old one (its publisher included) before it starts."""
    import kelp.broker.cluster.member as member_mod

    events: list[str] = []
    made: list[object] = []

    class FakeController:
        def __init__(self, **kwargs: object) -> None:
            self.name = f"controller-{len(made)}"
            made.append(self)
            self.state = SimpleNamespace(active=False, epoch=1)

        async def start(self) -> None:
            events.append(f"start {self.name}")
            self.state.active = True

        async def stop(self) -> None:
            events.append(f"stop {self.name}")
            self.state.active = False

    monkeypatch.setattr(member_mod, "Controller", FakeController)
    cfg = BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path), "broker.id": 0,
                                               "cluster.dir": str(tmp_path / "c")})
    m = ClusterMember(SimpleNamespace(config=cfg, topics=SimpleNamespace(check_topic_configs=None)))
    m.make_backends()
    await m._become_controller()
    first = m.state.controller
    await m._become_controller()  # the takeover runs again while the first instance still counts as active
    assert events == ["start controller-0", "stop controller-0", "start controller-1"]
    assert m.state.controller is not first and not first.state.active


class _Clock:
    """The member's monotonic clock and backoff sleep, moved only by the test's fake controller calls."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("answer, timeout_ms, calls_given, elapsed", [
    # every broker stopping at once: nobody answers, each attempt waits out all the time it is given
    ("no answer", 625, [0.625], 0.625),
    # refused at once: retried controlled.shutdown.retry.backoff.ms apart, the last backoff cut at the deadline
    ("refused", 625, [0.625, 0.375, 0.125], 0.625),
    # refused, with time to spare: 1 + controlled.shutdown.max.retries attempts, then it stops anyway
    ("refused", 10_000, [10.0, 9.75, 9.5, 9.25], 0.75),
])
async def test_controlled_shutdown_is_bounded_when_no_controller_answers(
        tmp_path, answer, timeout_ms, calls_given, elapsed) -> None:
    """Item 16: with every broker stopping at once, nobody answers; the broker stops trying within
    controlled.shutdown.timeout.ms (all attempts together) and after 1 + controlled.shutdown.max.retries
    attempts, whichever comes first, and goes on stopping. The member's clock is the test's."""
    cfg = BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path), "broker.id": 1,
                                               "controlled.shutdown.timeout.ms": timeout_ms,
                                               "controlled.shutdown.max.retries": 3,
                                               "controlled.shutdown.retry.backoff.ms": 250})
    m = ClusterMember(SimpleNamespace(config=cfg, topics=None))
    clock = _Clock()
    m.state.monotonic, m.state.sleep = clock.monotonic, clock.sleep
    calls: list[float] = []

    async def call(op, **kwargs):
        assert op == "controlled_shutdown"
        calls.append(kwargs["timeout_s"])
        if answer == "no answer":
            clock.now += max(kwargs["timeout_s"], 0.0)  # the controller call's own timeout elapses
            raise asyncio.TimeoutError()
        raise OSError("connection refused")

    m.shutdown._call = call
    began = clock.now
    await asyncio.wait_for(m.shutdown.controlled_shutdown(), 5.0)  # a loop that never ends fails, never hangs
    assert calls == pytest.approx(calls_given)
    assert clock.now - began == pytest.approx(elapsed)
    assert clock.now - began <= timeout_ms / 1000.0


async def test_a_fetcher_stops_even_when_its_cancellation_is_swallowed() -> None:
    """Item 16's root cause (found by the chaos suite): on Python 3.11 `wait_for` can swallow the cancel that
    races with a refused connection; the fetcher then looped forever and the broker never stopped.

    Bounded by itself: `asyncio.wait` with a timeout (never `wait_for`, which would cancel `stop()` and wait
    for it without limit — the very hang), and a fetcher that still runs afterwards is made to honour its
    next cancel so the loop can close: a regression fails with a message instead of hanging the run."""
    from kelp.broker.cluster.replica_fetcher import ReplicaFetcher, ReplicaFetcherManager
    from kelp.kafka_client import BrokerUnavailable

    cfg = BrokerConfig.load(env={}, overrides={"log.dirs": "/tmp/unused", "replica.fetch.backoff.ms": 10})
    manager = ReplicaFetcherManager(replicas=None, broker_id=1, endpoint_of=lambda b: None, config=cfg)
    fetcher = ReplicaFetcher(manager, leader=0)
    swallowed: list[bool] = []
    fetching = asyncio.Event()
    swallow = True

    async def fetch(conn):  # as wait_for on Python 3.11 when the refused connect lands with the cancel
        fetching.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if not swallow:
                raise
            swallowed.append(True)
            raise BrokerUnavailable("connection refused") from None

    async def no_connection() -> None:  # `_connection` is a coroutine since a moved leader gets a new one
        return None

    fetcher._connection = no_connection
    fetcher._fetch = fetch
    fetcher.state[("t", 0)] = SimpleNamespace(truncating=False)
    await asyncio.wait_for(fetching.wait(), 5.0)
    stopping = asyncio.ensure_future(fetcher.stop())
    try:
        done, _ = await asyncio.wait({stopping}, timeout=5.0)
        assert stopping in done, "ReplicaFetcher.stop() did not return within 5 s of a swallowed cancellation"
        stopping.result()
        assert fetcher._task.done() and swallowed
    finally:
        if not fetcher._task.done():  # only after a failure: end the fetcher so the event loop can close
            swallow = False
            fetcher._task.cancel()
            await asyncio.wait({stopping, fetcher._task}, timeout=5.0)
