"""A broker's leases: proving it is alive, and competing for the controller lease.

Why a module of its own: liveness and the controller election are one protocol with its own rules
of time — a broker renews `kelp-<cluster>-broker-<id>` (its endpoints ride along as annotations,
like ZooKeeper's `/brokers/ids/N`) and only while that lease is fresh may it compete for
`kelp-<cluster>-controller` and run the `Controller` (what `member.ClusterMember` gives it to run). A second process
with the same broker id cannot take this broker's lease while it is renewed; if it takes it anyway
(this process was paused past the lease), this process finds its lease held by another incarnation of
its id and stops itself (`_fence`) instead of fighting for it.

Each renewal also reports where this broker's metadata is (`kelp.dev/metadata`: the offset it applied and
that entry's digest), so a controller taking over can refuse a log shorter than what a live broker
applied (issue 31 item 3). A broker lease that exists but cannot be read fences that broker (it counts
as gone, with an ERROR and `kelp_metadata_problems{kind="unreadable_leases"}`); it never stops the
controller from seeing the others (item 5).

Freshness is judged on the member's monotonic clock (`monotonic`, injectable), never on the wall
times a lease stores. Composed by `member.ClusterMember`, which gives it the shared state (`member_state`)
and what to run when it wins or loses the controller lease; it never touches the metadata itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Awaitable, Callable, Coroutine

from kelp.errors import KelpError
from kelp.leases import LeaseBackend, LeaseElector, LivenessView

from ..metadata.image import Position
from ..metadata.model import BrokerEndpoint
from .controller import MetadataHistoryRefused
from .member_state import MemberState, bounded_step
from .routing import broker_id_of

__all__ = ["MemberLeases", "ENDPOINT_ANNOTATION", "METADATA_ANNOTATION"]

log = logging.getLogger("kelp.broker.cluster")

ENDPOINT_ANNOTATION = "kelp.dev/endpoint"
METADATA_ANNOTATION = "kelp.dev/metadata"


class MemberLeases:
    """The broker lease's renewal, the controller election's rounds, and the live brokers the leases show."""

    def __init__(self, state: MemberState, *, become_controller: Callable[[], Coroutine[object, object, None]],
                 resign_controller: Callable[[str], Awaitable[None]]) -> None:
        self.state = state
        self._become_controller = become_controller  # run beside the election loop once the lease is taken
        self._resign_controller = resign_controller
        self._broker_elector: LeaseElector | None = None
        self._controller_elector: LeaseElector | None = None
        self._liveness: LivenessView | None = None
        self._controller_renewed = 0.0
        self._broker_renewed = -1e18  # monotonic time of the last renewal of this process's broker lease
        self._controller_start: asyncio.Task[None] | None = None

    def make_electors(self, leases: LeaseBackend) -> None:
        """The electors of this process's broker lease and of the controller lease, over the backend made."""
        state = self.state
        # The broker lease is taken over only once released or expired in this process's view: a second
        # process with the same id must not steal it from a live one (they would take turns forever).
        self._broker_elector = LeaseElector(
            leases, name=state.broker_lease_name, identity=state.identity, duration_ms=state.duration_ms,
            clock_ms=state.clock_ms, monotonic=state.monotonic)
        prefix = f"broker-{state.broker_id}/"
        # The controller lease is competed for only after the broker lease is held, so a previous
        # incarnation of this id holding it is dead or paused past its broker lease: taken over at once.
        self._controller_elector = LeaseElector(
            leases, name=state.controller_lease_name, identity=state.identity, duration_ms=state.duration_ms,
            clock_ms=state.clock_ms, monotonic=state.monotonic,
            may_take_over=lambda holder: holder.startswith(prefix))
        self._liveness = LivenessView(monotonic=state.monotonic)

    async def release(self) -> None:
        """Give up the controller lease and this process's broker lease (bounded; a failure is only logged)."""
        for elector in (self._controller_elector, self._broker_elector):
            if elector is not None:
                await bounded_step(elector.release(), "releasing a lease")

    def _endpoint_annotations(self) -> dict[str, str]:
        """What the broker lease carries: this process's endpoint, and where its metadata is (renewed with it)."""
        endpoint, image = self.state.endpoint, self.state.image
        assert endpoint is not None, "set by ClusterMember.start"
        return {ENDPOINT_ANNOTATION: json.dumps(endpoint.to_json(), sort_keys=True),
                METADATA_ANNOTATION: json.dumps({"offset": image.offset, "digest": image.digest,
                                                 "run": list(image.runs[-1]) if image.runs else None})}

    async def register(self) -> None:
        elector = self._broker_elector
        assert elector is not None, "made by make_electors"
        annotations = self._endpoint_annotations()
        deadline = self.state.monotonic() + 2 * self.state.duration_ms / 1000.0 + 5
        while True:
            rec = await elector.try_acquire_or_renew(annotations)
            if rec is not None:
                self._broker_renewed = self.state.monotonic()
                return
            if self.state.monotonic() > deadline:
                holder = elector.record.holder if elector.record else "?"
                raise KelpError(
                    f"broker id {self.state.broker_id} is in use by a live broker ({holder}) in cluster "
                    f"'{self.state.cluster}': "
                    f"its lease {self.state.broker_lease_name} keeps being renewed; give this broker another broker.id"
                )
            await asyncio.sleep(self.state.renew_s / 2)

    async def renew_loop(self) -> None:
        elector = self._broker_elector
        assert elector is not None, "made by make_electors"
        prefix = f"broker-{self.state.broker_id}/"
        while True:
            await asyncio.sleep(self.state.renew_s)
            try:
                rec = await elector.try_acquire_or_renew(self._endpoint_annotations())
                if rec is not None:
                    self._broker_renewed = self.state.monotonic()
                else:
                    seen = elector.record
                    holder = seen.holder if seen is not None else None
                    if holder and holder != self.state.identity and holder.startswith(prefix):
                        self._fence(f"another process ({holder}) took broker id {self.state.broker_id}'s lease "
                                    f"{self.state.broker_lease_name}")
                        return
                    log.error("broker %d lost its liveness lease %s; the controller treats it as gone until it renews",
                              self.state.broker_id, self.state.broker_lease_name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("renewing lease %s failed: %s", self.state.broker_lease_name, exc)

    def _fence(self, why: str) -> None:
        """This process lost its broker id: it must not act as that broker any more. The broker stops."""
        self.state.fenced = why
        log.critical("%s: this broker process stops (it no longer owns broker id %d)", why, self.state.broker_id)
        if self.state.controller is not None:
            self.state.controller.state.active = False
        self.state.broker.request_stop(why)

    async def election_loop(self) -> None:
        while True:
            try:
                await self.election_round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller election round failed")
            await asyncio.sleep(self.state.renew_s)

    def _broker_lease_fresh(self) -> bool:
        """This process renewed its broker lease recently enough that no other incarnation can hold it.

        A process paused past its lease wakes with both loops due; until its broker lease is renewed
        (or found taken, which fences it) it must not touch the controller lease: the controller
        elector takes over at once from an incarnation of its own id, which may be its successor.
        """
        if self.state.fenced:
            return False
        margin = min(self.state.renew_s, self.state.duration_ms / 4000.0)
        return self.state.monotonic() - self._broker_renewed < self.state.duration_ms / 1000.0 - margin

    async def election_round(self) -> None:
        """One round of the controller election: acquire or renew the lease, take over or resign."""
        elector = self._controller_elector
        assert elector is not None, "made by make_electors"
        rec = None
        if self._broker_lease_fresh():
            rec = await elector.try_acquire_or_renew()
        if rec is not None:
            self._controller_renewed = self.state.monotonic()
            # Taking over (loading the log, claiming an epoch, electing, delivering) runs beside
            # this loop: the lease must keep being renewed however long that takes.
            controller = self.state.controller
            if not self._starting_controller() and (controller is None or not controller.state.active):
                self._controller_start = asyncio.create_task(self._become_controller(),
                                                             name="controller-takeover")
                self._controller_start.add_done_callback(_report_takeover)
            return
        await self.cancel_takeover()
        if self.state.controller is not None:
            why = ("the controller lease is held by another broker" if self._broker_lease_fresh()
                   else "this broker's own lease is not fresh")
            await self._resign_controller(why)
        seen = elector.record
        if seen is not None and seen.holder:
            holder = broker_id_of(seen.holder)
            if holder >= 0:
                self.state.controller_id = holder
        await self.refresh_brokers()  # keep the liveness view warm for a takeover

    def lease_fresh(self) -> bool:
        if self.state.fenced:
            return False
        margin = min(self.state.renew_s, self.state.duration_ms / 4000.0)
        return self.state.monotonic() - self._controller_renewed < self.state.duration_ms / 1000.0 - margin

    def _starting_controller(self) -> bool:
        return self._controller_start is not None and not self._controller_start.done()

    async def cancel_takeover(self) -> None:
        task, self._controller_start = self._controller_start, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def refresh_brokers(self) -> dict[int, BrokerEndpoint]:
        assert self.state.leases is not None and self._liveness is not None, "made by make_electors"
        prefix = f"kelp-{self.state.cluster}-broker-"
        records, unreadable = await self.state.leases.scan(prefix)
        self._liveness.observe(records)
        self._note_unreadable(prefix, unreadable)
        alive: dict[int, BrokerEndpoint] = {}
        positions: dict[int, Position] = {}
        for rec in records:
            if not self._liveness.alive(rec.name):
                continue
            raw = rec.annotations.get(ENDPOINT_ANNOTATION)
            if not raw:
                continue
            try:
                ep = BrokerEndpoint.from_json(json.loads(raw))
            except (ValueError, KeyError, TypeError):
                continue
            alive[ep.id] = ep
            position = _position(rec.annotations.get(METADATA_ANNOTATION))
            if position is not None:
                positions[ep.id] = position
        self.state.positions = positions
        if self.state.controller is None and not self.state.brokers:
            self.state.brokers = dict(alive)
        return alive

    def _note_unreadable(self, prefix: str, unreadable: dict[str, str]) -> None:
        """An unreadable broker lease fences that broker (its lease is not observed, so it is not alive), said each
        time the set changes; the controller goes on with the others."""
        before = self.state.problems.get("unreadable_leases", 0)
        self.state.problems["unreadable_leases"] = len(unreadable)
        if unreadable and len(unreadable) != before:
            for name, why in sorted(unreadable.items()):
                log.error("broker lease %s cannot be read (%s): broker %s counts as gone (out of every ISR, no "
                          "leaderships) until its lease is readable again; repair or delete it", name, why,
                          name.removeprefix(prefix))
        elif before and not unreadable:
            log.warning("every broker lease is readable again")


def _position(raw: str | None) -> Position | None:
    """(offset, digest, run) from a lease's `kelp.dev/metadata`; None when absent (an older broker) or malformed."""
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        run = doc.get("run")
        return (int(doc["offset"]), str(doc.get("digest") or ""),
                (int(run[0]), str(run[1])) if run else None)
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def _report_takeover(task: asyncio.Task[None]) -> None:
    if task.cancelled() or task.exception() is None:
        return
    exc = task.exception()
    if isinstance(exc, MetadataHistoryRefused):  # said at length where it was decided; no stack trace each round
        log.error("taking over as controller refused (the next election round checks again): %s", exc)
        return
    log.error("taking over as controller failed; the next election round retries", exc_info=exc)
