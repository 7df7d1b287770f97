"""Brokers retrying controller calls at once read the controller lease once at a time (issue 38).

Why: when a controller fails over, every pending controller call of a broker retries and looks the controller up
again in its lease; at 3,000 partitions that was thousands of ISR changes (before they were batched), thousands
of lease reads queued at once on the control plane's threads (`kelp.control_io`), ahead of the broker's own lease
renewal — which, late, fenced the broker and made thousands more. The lookups in flight share one read.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kelp.broker.cluster.routing import LeaderRouting
from kelp.leases import LeaseRecord


class HeldLeases:
    """A lease backend whose reads wait until released, counting them."""

    def __init__(self) -> None:
        self.reads = 0
        self.release = asyncio.Event()

    async def get(self, name: str) -> LeaseRecord | None:
        self.reads += 1
        await self.release.wait()
        return LeaseRecord(name, "broker-2/abc", 1, 1, 3000, 0, {})


async def test_lookups_in_flight_share_one_lease_read() -> None:
    leases = HeldLeases()
    state: Any = SimpleNamespace(leases=leases, controller_lease_name="kelp-c-controller", controller_id=-1,
                                 brokers={2: object()})

    async def no_brokers() -> dict[int, Any]:
        return {}

    async def applied(offset: int, timeout_s: float) -> bool:
        return True

    routing = LeaderRouting(state, SimpleNamespace(), wait_applied=applied, refresh_brokers=no_brokers)  # type: ignore[arg-type]
    lookups = [asyncio.ensure_future(routing._learn_controller()) for _ in range(500)]
    for _ in range(5):
        await asyncio.sleep(0)  # every lookup started (yields, not time)
    assert leases.reads == 1  # was 500: one read each
    leases.release.set()
    await asyncio.wait_for(asyncio.gather(*lookups), 10)
    assert state.controller_id == 2
    await asyncio.wait_for(routing._learn_controller(), 10)  # a later lookup reads the lease again
    assert leases.reads == 2
