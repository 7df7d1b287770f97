"""One pass per Cluster at a time, and nothing done without the Lease (finding 5 of issue 18).

What a user relies on: kopf's handlers and the resync loop never act on the
same Cluster at once (two passes would submit the same moves, delete two
pods, or undo each other's status), and an operator replica that lost its
Lease — or can no longer prove it holds it — stops acting at once, not up to
a lease duration later. Interleavings are driven by explicit gates and a
fake monotonic clock, never by sleeping; the Lease is a real compare-and-swap
backend (files).
"""

from __future__ import annotations

import asyncio

import pytest

from kelp.operator.kube.leadership import LeadershipLost
from kelp.operator.reconcile.resync import resync_once
from kelp.operator.reconcile.runner import Runner
from tests.kelp_operator.fakes import (
    Clock,
    FakeAdmin,
    FakeKube,
    admin_of,
    broker_pod,
    lease_holder,
    resource,
    statefulset,
)


def draining_cluster() -> tuple[FakeKube, FakeAdmin]:
    body = resource("Cluster", "demo", {"brokers": 2})
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], topics={"orders": [{"replicas": [2, 0], "isr": [2, 0]},
                                                            {"replicas": [0, 1], "isr": [0, 1]}]})
    return kube, admin


async def until(predicate, what: str, rounds: int = 1000) -> None:
    """Let other tasks run until `predicate()` holds (bounded by scheduler rounds, not time)."""
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not reached after {rounds} scheduler rounds: {what}")


def test_a_handler_and_the_resync_pass_never_reconcile_one_cluster_at_once() -> None:
    async def scenario() -> None:
        kube, admin = draining_cluster()
        admin.gate = asyncio.Event()  # the first pass's reassign call waits here
        runner = Runner(kube, admin_of(admin))
        handler = asyncio.create_task(runner.reconcile("Cluster", "ns", "demo"))
        await until(lambda: len(admin.reassign_calls()) == 1, "the handler's pass submits its moves")
        resync = asyncio.create_task(resync_once(kube, None, None, runner=runner))
        for _ in range(200):  # give the resync pass every chance to run alongside
            await asyncio.sleep(0)
        assert len(admin.reassign_calls()) == 1, "the resync pass acted while the handler's pass was running"
        assert not resync.done()
        admin.gate.set()
        await asyncio.wait_for(asyncio.gather(handler, resync), 10)
        # The resync pass ran after, on the fresh state: the partition is moving, nothing submitted twice.
        assert len(admin.reassign_calls()) == 1
        status = kube.objects[("Cluster", "ns", "demo")]["status"]
        progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
        assert progressing["reason"] == "Draining", progressing
    asyncio.run(scenario())


def test_the_resync_pass_rereads_what_a_handler_changed_after_its_list() -> None:
    async def scenario() -> None:
        kube, admin = draining_cluster()
        runner = Runner(kube, admin_of(admin))
        listed = asyncio.Event()

        async def on_list(*_args) -> None:  # a handler handles a spec change right after the resync listed
            if not listed.is_set():
                listed.set()
                kube.objects[("Cluster", "ns", "demo")]["spec"]["brokers"] = 3
                kube.objects[("Cluster", "ns", "demo")]["metadata"]["generation"] = 2
                await runner.reconcile("Cluster", "ns", "demo")
        stale = await kube.list_everywhere("Cluster", None)
        kube.hooks[("get", "Cluster")] = on_list
        mark = runner.mark()
        await on_list()
        await runner.reconcile("Cluster", "ns", "demo", listed=stale[0], listed_after=mark)
        # The stale body said 2 brokers; acting on it would have started a drain again.
        assert admin.reassign_calls() == []
        assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 3
    asyncio.run(scenario())


def rolling_cluster() -> tuple[FakeKube, FakeAdmin]:
    body = resource("Cluster", "demo", {"brokers": 3})
    kube = FakeKube(body, statefulset("demo", 3, revision="rev-2"),
                    *(broker_pod("demo", n, revision="rev-1") for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], topics={"orders": [{"replicas": [0, 1, 2], "isr": [0, 1, 2]}]})
    return kube, admin


def test_a_deposed_operator_is_fenced_before_it_restarts_a_pod(tmp_path) -> None:
    async def scenario() -> None:
        clock = Clock()
        mine = lease_holder(tmp_path, "operator-a", clock)
        assert await mine.acquire_or_renew()
        # A stand-by takes the Lease over while this replica's clock says it renewed a moment ago (CLOCK_MONOTONIC
        # stands still while a VM is suspended): the stand-by saw the Lease unchanged for a whole duration.
        their_clock = Clock()
        other = lease_holder(tmp_path, "operator-b", their_clock)
        assert not await other.acquire_or_renew()
        their_clock.t += 7
        assert await other.acquire_or_renew()
        mine.check()  # nothing local tells it
        kube, admin = rolling_cluster()
        kube.guard = mine
        with pytest.raises(LeadershipLost, match="another writer took it"):
            await Runner(kube, admin_of(admin)).reconcile("Cluster", "ns", "demo")
        assert kube.deleted == [] and kube.fences == 1, "no pod may be restarted without the Lease"
        assert "status" not in kube.objects[("Cluster", "ns", "demo")] or \
            not kube.objects[("Cluster", "ns", "demo")]["status"], "nor any status written"
        with pytest.raises(LeadershipLost):
            mine.check()  # and from now on, nothing at all
        assert not await mine.acquire_or_renew()
    asyncio.run(scenario())


def test_nothing_is_written_once_leadership_is_in_doubt(tmp_path) -> None:
    async def scenario() -> None:
        clock = Clock()
        mine = lease_holder(tmp_path, "operator-a", clock, duration_s=6.0)
        assert await mine.acquire_or_renew()
        kube, admin = rolling_cluster()
        kube.guard = mine
        clock.t += 3.9  # renewed 3.9 s ago: within duration - margin (6 - 2)
        await Runner(kube, admin_of(admin)).reconcile("Cluster", "ns", "demo")
        assert kube.deleted == [("Pod", "demo-2")]  # fenced (a fresh Lease write), then restarted
        clock.t += 4.1  # the fence renewed at 1003.9; now 4.1 s later: in doubt
        kube.put(broker_pod("demo", 2, revision="rev-2"))
        with pytest.raises(LeadershipLost, match="leadership in doubt"):
            await Runner(kube, admin_of(admin)).reconcile("Cluster", "ns", "demo")
        assert kube.deleted == [("Pod", "demo-2")] and len(kube.applied) == 9  # one pass's children, no more
    asyncio.run(scenario())


def test_an_unexpected_failure_sets_ready_unknown_before_it_propagates() -> None:
    # The Cluster was Ready; a pass then fails in a way no condition covers. Status must stop claiming Ready.
    body = resource("Cluster", "demo", {"brokers": 3}, status={"conditions": [
        {"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "3 brokers",
         "lastTransitionTime": "2026-11-01T00:00:00Z", "observedGeneration": 1}]})
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2])

    def explode(method, path, body):
        raise RuntimeError("disk of the fake exploded")
    admin.fail = explode
    with pytest.raises(RuntimeError, match="exploded"):
        asyncio.run(Runner(kube, admin_of(admin)).reconcile("Cluster", "ns", "demo"))
    ready = next(c for c in kube.objects[("Cluster", "ns", "demo")]["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "ReconcileFailed"), ready
    assert "RuntimeError: disk of the fake exploded" in ready["message"]


def test_every_operator_process_has_its_own_lease_identity(monkeypatch) -> None:
    """A container the kubelet restarts in the same pod is a new candidate for the Lease, never the holder it
    replaces: with the pod's name alone as identity, the restarted process found itself in the Lease, took it
    as its own renewal and acted at once, before any stand-by could take over (found by churn case (d))."""
    from kelp.operator.run import lease_identity

    monkeypatch.setenv("POD_NAME", "kelp-operator-7f9-abcde")
    first, restarted = lease_identity(), lease_identity()
    assert first != restarted
    assert first.startswith("kelp-operator-7f9-abcde-") and restarted.startswith("kelp-operator-7f9-abcde-")
    monkeypatch.delenv("POD_NAME")
    assert lease_identity() != lease_identity()
