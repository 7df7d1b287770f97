"""Request quotas' measure of a request (issue 33, KIP-124): what counts as the broker's time, and the throttle.

A request is charged the loop's own steps of its handler and the CPU its work took on the CPU pool, never the
time it waited (for the ISR, a fetch's min bytes, a timer); the throttle is Kafka's, bounded by one quota window,
and a request's time after its answer was decided is counted without a throttle. The loop's steps are timed on a
scripted clock, so nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from kelp.broker import cpu_work
from kelp.broker.client_quota_manager import REQUEST, ClientQuotaManager
from kelp.broker.kafka import request_time
from kelp.broker.kafka.request_time import StepTimer
from kelp.broker.metadata.client_quotas import checked_entity


class ScriptedClock:
    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


def test_only_the_handlers_own_steps_count_not_what_it_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ScriptedClock()
    monkeypatch.setattr(request_time, "time", SimpleNamespace(perf_counter=clock.perf_counter))

    async def handler() -> str:
        clock.now += 0.020  # 20 ms of work on the loop
        await asyncio.sleep(0)
        clock.now += 0.005
        waiter = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(waiter.set_result, None)
        await waiter  # what it waits for is not its time...
        clock.now += 0.001
        return "answer"

    async def main() -> tuple[str, list[float]]:
        account = [0.0]
        other = asyncio.ensure_future(_others_work(clock))  # ...nor is another task's work meanwhile
        value = await StepTimer(handler(), account)
        await other
        return value, account

    value, account = asyncio.run(main())
    assert value == "answer"
    assert account[0] == pytest.approx(0.026)


async def _others_work(clock: ScriptedClock) -> None:
    for _ in range(3):
        clock.now += 1.0
        await asyncio.sleep(0)


def test_a_timed_handler_that_fails_or_is_cancelled_is_charged_and_passes_it_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ScriptedClock()
    monkeypatch.setattr(request_time, "time", SimpleNamespace(perf_counter=clock.perf_counter))

    async def fails() -> None:
        clock.now += 0.010
        raise ValueError("bad request")

    async def waits(started: asyncio.Event) -> None:
        clock.now += 0.002
        started.set()
        await asyncio.Event().wait()

    async def main() -> list[float]:
        account = [0.0]
        with pytest.raises(ValueError, match="bad request"):
            await StepTimer(fails(), account)
        started = asyncio.Event()
        task = asyncio.ensure_future(StepTimer(waits(started), account))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return account

    assert asyncio.run(main())[0] == pytest.approx(0.012)


def test_cpu_pool_work_is_charged_to_the_request_whose_task_asked_for_it() -> None:
    def burn(seconds: float) -> str:
        start = time.thread_time()
        while time.thread_time() - start < seconds:
            pass
        return "done"

    def fails() -> None:
        raise KeyError("nope")

    async def main() -> tuple[list[float], list[float]]:
        charged, uncharged = [0.0], [0.0]

        async def request() -> None:
            cpu_work.charge_to(charged)
            assert await cpu_work.run_cpu(burn, 0.02) == "done"
            with pytest.raises(KeyError):
                await cpu_work.run_cpu(fails)

        async def other_request() -> None:  # its own task: charges nothing to the first
            assert await cpu_work.run_cpu(burn, 0.01) == "done"

        await asyncio.gather(asyncio.ensure_future(request()), asyncio.ensure_future(other_request()))
        return charged, uncharged

    charged, uncharged = asyncio.run(main())
    assert charged[0] >= 0.02
    assert uncharged[0] == 0.0


def test_request_percentage_throttle_is_kafkas_bounded_by_one_window() -> None:
    now = [1000.0]
    table = {checked_entity([("client-id", "greedy")]): {REQUEST: 10.0}}  # 10% of the loop
    quotas = ClientQuotaManager(lambda: table, windows=11, window_s=1.0, clock=lambda: now[0])
    assert quotas.limits_requests()
    assert quotas.record_request("alice", "polite", 5.0) == 0  # no quota for this client
    assert quotas.record_request("alice", "greedy", 0.5) == 0  # 50 over the 10 s minimum span: 5%
    # 1.5 s more: 200 percent-seconds over 10 s = 20%, twice the quota: (20 - 10) / 10 x 10 s, bounded by 1 s
    assert quotas.record_request("alice", "greedy", 1.5) == 1000
    assert quotas.throttled[REQUEST] == 1 and quotas.throttle_s[REQUEST] == 1.0
    assert quotas.record_request("alice", "greedy", 1.0, throttle=False) == 0  # counted, never throttled
    assert quotas.throttled[REQUEST] == 1
    now[0] += 0.2
    assert quotas.record_request("alice", "greedy", 0.0) == 1000  # the uncounted-throttle time still counts
    quotas.record_exempt(0.25)
    assert quotas.exempt_s == 0.25


def test_no_request_quota_anywhere_measures_nothing() -> None:
    table: dict = {checked_entity([("user", "alice")]): {"producer_byte_rate": 1000.0}}
    quotas = ClientQuotaManager(lambda: table)
    assert not quotas.limits_requests()
    table = {checked_entity([("user", None)]): {REQUEST: 50.0}}  # a new image with a default user's quota
    assert quotas.limits_requests()
