"""A restarted broker acts on the metadata only once the controller registered its new process (issue 17 item 8).

What a user relies on: a broker that crashed while leading a partition
(kill -9: its log may end shorter than what its followers hold) must never
lead that partition again at the leader epoch decided for its previous
process — followers would fetch from a leader whose log differs from theirs
at the same offsets, and producers would be acknowledged on it. KRaft's
rule: a broker publishes its metadata image only once its own registration
(the new incarnation) is in it; the controller's entry that registers it
also fences what the old process held. Driven by hand: the real controller
(in-memory log) decides, the real topic and replica managers apply.
"""

from __future__ import annotations

import asyncio

import pytest

from kelp.broker.cluster.file_leases import FileLeaseBackend
from kelp.config.broker import BrokerConfig
from kelp.errors import KelpError
from kelp.leases import LeaseElector, LivenessView
from tests.replication.test_controller import Harness, ep
from tests.replication.test_metadata_log_order import Broker, entries_of, payload


def restarted_broker(tmp_path, store) -> Broker:
    """Broker 1's new process, started for real (`ClusterMember.start`) on the controller's stored log; its own
    election and renew loops are left out (the controller here is driven by hand)."""
    b = Broker(tmp_path, broker_id=1)
    m = b.member
    m.state.registered = False

    def backends() -> None:
        m.state.leases = FileLeaseBackend(tmp_path / "leases")
        m.state.metadata_log = store
        m.leasing._broker_elector = LeaseElector(m.state.leases, name=m.state.broker_lease_name,
                                                 identity=m.state.identity, duration_ms=m.state.duration_ms)
        m.leasing._controller_elector = None
        m.leasing._liveness = LivenessView()

    async def idle() -> None:
        await asyncio.Event().wait()
    m.make_backends = backends
    m.leasing.renew_loop = m.leasing.election_loop = idle
    return b


async def test_a_restarted_leader_serves_nothing_until_registered_and_never_leads_at_its_old_epoch(tmp_path) -> None:
    h = Harness(3)
    h.alive = {i: ep(i, incarnation=f"broker-{i}/first") for i in range(3)}
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [1, 2, 0]})
    old = h.state("t")
    assert old.leader == 1

    # Broker 1's process is SIGKILLed and a new one starts on the stored log, where it leads t-0.
    b = restarted_broker(tmp_path, h.store)
    m = b.member
    seen: list[tuple[int, int]] = []  # (leader, leader epoch) of t-0 each time the managers were told anything
    apply = b.topics.apply_delta

    def spy(delta):
        apply(delta)
        t = b.topics.get("t")
        if t is not None:
            seen.append((t.partition(0).leader, t.partition(0).leader_epoch))
    b.topics.apply_delta = spy
    start = asyncio.create_task(m.start(ep(1)))
    try:
        # The start does file work in worker threads (its lease, the lease list): wait on the condition, bounded.
        deadline = asyncio.get_running_loop().time() + 10
        while not (m.state.started or start.done()) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
        assert b.topics.get("t") is None and seen == [], f"served from the stored image before registration: {seen}"
        assert m.state.started and not start.done(), "the start waits for the controller to register this process"

        # The controller decides other things before it notices the new process: still not registered.
        await c.topic_admin.create_topic(name="other", assignments={0: [0, 2]})
        m.metadata.apply(payload(entries_of(h.store), epoch=c.state.epoch))
        assert not m.state.registered and b.topics.get("t") is None and seen == []
        assert m.state.image.offset == c.state.image.offset, "deliveries still advance the image"

        # The controller sees broker 1's lease held by a new process: one entry fences and registers it.
        h.alive[1] = ep(1, incarnation=m.state.identity)
        await c._on_liveness(dict(h.alive))
        now = h.state("t")
        assert now.leader != 1 and now.leader_epoch > old.leader_epoch and 1 not in now.isr
        m.metadata.apply(payload(entries_of(h.store), epoch=c.state.epoch))
        await asyncio.wait_for(start, 5)
        assert m.state.registered
        assert seen and all(leader != 1 for leader, _ in seen), f"broker 1 led t-0 as its old process did: {seen}"
        assert seen[0] == (now.leader, now.leader_epoch), "the first state the managers saw is the fenced one"
        assert b.topics.get("other") is not None, "from registration on, everything in the log is applied"
    finally:
        start.cancel()
        await asyncio.gather(start, return_exceptions=True)
        for task in m._tasks:
            task.cancel()
        await asyncio.gather(*m._tasks, return_exceptions=True)
        await m.session.close()


async def test_a_broker_nobody_registers_gives_up_within_its_bound(tmp_path) -> None:
    h = Harness(3)
    await h.start()
    b = restarted_broker(tmp_path, h.store)
    b.member.state.config = BrokerConfig.load(env={}, overrides={
        "log.dirs": str(tmp_path), "broker.id": 1, "initial.broker.registration.timeout.ms": 200})
    m = b.member
    try:
        with pytest.raises(KelpError, match="was not registered by a controller"):
            await asyncio.wait_for(m.start(ep(1)), 10)
        assert b.topics.get("t") is None
    finally:
        for task in m._tasks:
            task.cancel()
        await asyncio.gather(*m._tasks, return_exceptions=True)
        await m.session.close()
