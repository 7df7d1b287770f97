"""How much of the broker's time one request took, for request quotas (`request_percentage`, KIP-124).

Why: a client under a byte-rate quota can still take the broker's one event loop with small requests that cost
much (Metadata of every topic, ListOffsets of thousands of partitions, a stream of tiny produce requests).
Kafka bounds that with `request_percentage`: the time a client's requests spend on the broker's request handler
threads, throttled like a byte rate. Kelp's handler "thread" is the event loop: a request's time is the loop's
own steps of its handler (every `send` into its coroutine, timed: what the loop could not spend on anyone else)
plus the CPU seconds its work took on the CPU pool (`cpu_work.charge_to`). Time spent waiting (for the ISR, for a
fetch's min bytes, for the pool) is not the client's.

As in Kafka's KafkaApis, the time so far is recorded when the answer is built (`throttle_ms`: the answer carries
the throttle time, the connection is muted for it), and what the request costs after that (encoding the answer)
is recorded without a throttle (`finish`, Kafka's recordNetworkThreadTimeCallback). A follower's fetch and the
brokers' own WriteTxnMarkers are exempt: counted apart, never throttled.

Nothing is measured when no entity sets `request_percentage` (`ClientQuotaManager.limits_requests`): the timer
adds one generator frame per step of a request, which a broker without request quotas does not pay.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, Protocol, TypeVar

from kelp.security.principal import KafkaPrincipal

from ..client_quota_manager import ClientQuotaManager
from ..cpu_work import charge_to

__all__ = ["RequestTime", "StepTimer", "throttle_ms", "exempt", "finish"]

T = TypeVar("T")


class StepTimer(Generic[T]):
    """Awaits `coro`, adding the wall time of each of its steps on the loop to `account[0]`."""

    __slots__ = ("_coro", "_account")

    def __init__(self, coro: Coroutine[Any, Any, T], account: list[float]) -> None:
        self._coro, self._account = coro, account

    def __await__(self) -> Generator[Any, Any, T]:
        coro, account, clock = self._coro, self._account, time.perf_counter
        value: Any = None
        error: BaseException | None = None
        while True:
            start = clock()
            try:
                step = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as done:
                account[0] += clock() - start
                return done.value  # type: ignore[no-any-return]  # the coroutine's result: a T
            except BaseException:
                account[0] += clock() - start
                raise
            account[0] += clock() - start
            try:
                value, error = (yield step), None
            except BaseException as exc:  # a cancellation, or what the awaited future raised: passed in
                value, error = None, exc


class _Broker(Protocol):
    @property
    def quotas(self) -> ClientQuotaManager: ...


class RequestContext(Protocol):
    """What this module reads of a handler's `RequestContext` (handlers/registry.py imports this module)."""

    request_time: RequestTime | None
    client_id: str | None

    @property
    def broker(self) -> _Broker: ...

    @property
    def principal(self) -> KafkaPrincipal: ...

    @property
    def throttle(self) -> Callable[[int], None] | None: ...


class RequestTime:
    """One request's account of broker time; `exempt` when it is never throttled."""

    __slots__ = ("account", "exempt", "recorded", "throttle_ms")

    def __init__(self, *, exempt: bool = False) -> None:
        self.account = [0.0]
        self.exempt = exempt
        self.recorded = False
        self.throttle_ms = 0

    def start(self) -> None:
        """Charge the CPU pool's work of the current task (the request's) to this account."""
        charge_to(self.account)

    def timed(self, coro: Coroutine[Any, Any, T]) -> StepTimer[T]:
        return StepTimer(coro, self.account)


def throttle_ms(ctx: RequestContext) -> int:
    """The request's time so far recorded against its client's `request_percentage`: the throttle time in ms
    (the connection is muted for it) or 0. Recorded once: a handler that builds its own answer (Fetch) calls it
    before encoding, the server for every other answer."""
    spent = ctx.request_time
    if spent is None or spent.exempt or spent.recorded:
        return spent.throttle_ms if spent is not None else 0
    spent.recorded = True
    seconds, spent.account[0] = spent.account[0], 0.0
    ms = ctx.broker.quotas.record_request(ctx.principal.name, ctx.client_id or "", seconds)
    spent.throttle_ms = ms
    if ms and ctx.throttle is not None:
        ctx.throttle(ms)
    return ms


def exempt(ctx: RequestContext) -> None:
    """This request is never throttled (a follower's fetch): its time is counted as exempt."""
    if ctx.request_time is not None:
        ctx.request_time.exempt = True


def finish(ctx: RequestContext) -> None:
    """The answer is encoded: what the request cost since `throttle_ms` is recorded, without a throttle."""
    spent = ctx.request_time
    if spent is None:
        return
    charge_to(None)
    seconds, spent.account[0] = spent.account[0], 0.0
    quotas = ctx.broker.quotas
    if spent.exempt:
        quotas.record_exempt(seconds)
    elif seconds > 0:
        quotas.record_request(ctx.principal.name, ctx.client_id or "", seconds, throttle=False)
