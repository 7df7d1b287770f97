"""A broker's controlled shutdown: leadership moved away before it stops, within Kafka's bounds.

Why a module of its own: stopping has rules of its own that must hold when nothing answers — every
broker of a cluster stopping at once, or the controller gone. Kafka's: ask the controller to move
leadership away, up to 1 + `controlled.shutdown.max.retries` attempts `controlled.shutdown.retry.
backoff.ms` apart, all within `controlled.shutdown.timeout.ms`, then stop anyway; the partitions still
led here get a new leader from the liveness check once this broker's lease is released. The clock and
the backoff are the member's (`monotonic`, `sleep`), so tests check the bound exactly without waiting.

Composed by `member.ClusterMember`, which gives it the shared state (`member_state`) and the way to call the
controller; `ClusterMember.stop` runs it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

from kelp.errors import KelpError

from ..metadata.controller_answers import ShutdownAnswer
from .member_state import MemberState
from .routing import ControllerCall

__all__ = ["MemberShutdown"]

log = logging.getLogger("kelp.broker.cluster")


class MemberShutdown:
    """Kafka's controlled shutdown, bounded in attempts and in time."""

    def __init__(self, state: MemberState, call: ControllerCall) -> None:
        self.state = state
        self._call = call  # a controller operation, wherever the controller is (`routing.LeaderRouting.call`)

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move leadership away: up to 1 + controlled.shutdown.max.retries attempts, all
        within controlled.shutdown.timeout.ms, then stop anyway (Kafka's rule) — the partitions still led here
        get a new leader from the liveness check once this broker's lease is released."""
        attempts = 1 + int(self.state.config["controlled.shutdown.max.retries"])
        deadline = self.state.monotonic() + int(self.state.config["controlled.shutdown.timeout.ms"]) / 1000.0
        backoff_s = int(self.state.config["controlled.shutdown.retry.backoff.ms"]) / 1000.0
        left: list[str] = []
        for attempt in range(1, attempts + 1):
            remaining = deadline - self.state.monotonic()
            if remaining <= 0:
                break
            try:
                answer = await asyncio.wait_for(
                    self._call("controlled_shutdown", broker_id=self.state.broker_id, timeout_s=remaining), remaining)
                result = cast(ShutdownAnswer, answer)  # the controller's answer to this operation
                left = list(result.get("remaining_leaderships", []))
                if not left:
                    log.info("controlled shutdown: leadership moved off broker %d", self.state.broker_id)
                    return
                log.warning("controlled shutdown attempt %d of %d: still leading %d partition(s) with no other "
                            "in-sync replica: %s", attempt, attempts, len(left), ", ".join(left[:10]))
                if not result.get("awaiting_replicas"):
                    break  # no other live replica of them at all: retrying cannot move them
            except (KelpError, asyncio.TimeoutError, OSError) as exc:
                log.warning("controlled shutdown attempt %d of %d failed (%s)", attempt, attempts,
                            exc or type(exc).__name__)
            if attempt < attempts:
                await self.state.sleep(max(0.0, min(backoff_s, deadline - self.state.monotonic())))
        log.warning("controlled shutdown of broker %d ends unfinished; stopping anyway%s", self.state.broker_id,
                    f" (still leading {len(left)} partition(s))" if left else "")
