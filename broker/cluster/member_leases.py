"""A broker's leases: proving it is alive, and competing for the controller lease.

Why a module of its own: liveness and the controller election are one protocol with its own rules
of time — a broker renews `kelp-<cluster>-broker-<id>` (its endpoints ride along as annotations,
like ZooKeeper's `/brokers/ids/N`) and only while that lease is fresh may it compete for
`kelp-<cluster>-controller` and run the `Controller` (`member._become_controller`). A second process
with the same broker id cannot take this broker's lease while it is renewed; if it takes it anyway
(this process was paused past the lease), this process finds its lease held by another incarnation of
its id and stops itself (`_fence`) instead of fighting for it.

Each renewal also reports where this broker's metadata is (`kelp.dev/metadata`: the offset it applied and
that entry's digest), so a controller taking over can refuse a log shorter than what a live broker
applied (issue 31 item 3). A broker lease that exists but cannot be read fences that broker (it counts
as gone, with an ERROR and `kelp_metadata_problems{kind="unreadable_leases"}`); it never stops the
controller from seeing the others (item 5).

Freshness is judged on the member's monotonic clock (`monotonic`, injectable), never on the wall
times a lease stores. Mixed into `member.ClusterMember` (its state: `member_state`); it never
touches the metadata itself.
"""

from __future__ import annotations

import asyncio
import json
import logging

from kelp.errors import KelpError

from ..metadata.image import Position
from ..metadata.model import BrokerEndpoint
from .controller import MetadataHistoryRefused
from .member_state import MemberState
from .routing import broker_id_of

__all__ = ["MemberLeases", "ENDPOINT_ANNOTATION", "METADATA_ANNOTATION"]

log = logging.getLogger("kelp.broker.cluster")

ENDPOINT_ANNOTATION = "kelp.dev/endpoint"
METADATA_ANNOTATION = "kelp.dev/metadata"


class MemberLeases(MemberState):
    """The broker lease's renewal, the controller election's rounds, and the live brokers the leases show."""

    def _endpoint_annotations(self) -> dict[str, str]:
        """What the broker lease carries: this process's endpoint, and where its metadata is (renewed with it)."""
        assert self.endpoint is not None, "set by ClusterMember.start"
        return {ENDPOINT_ANNOTATION: json.dumps(self.endpoint.to_json(), sort_keys=True),
                METADATA_ANNOTATION: json.dumps({"offset": self.image.offset, "digest": self.image.digest,
                                                 "run": list(self.image.runs[-1]) if self.image.runs else None})}

    async def _register(self) -> None:
        elector = self._broker_elector
        assert elector is not None, "made by ClusterMember._make_backends"
        annotations = self._endpoint_annotations()
        deadline = self.monotonic() + 2 * self.duration_ms / 1000.0 + 5
        while True:
            rec = await elector.try_acquire_or_renew(annotations)
            if rec is not None:
                self._broker_renewed = self.monotonic()
                return
            if self.monotonic() > deadline:
                holder = elector.record.holder if elector.record else "?"
                raise KelpError(
                    f"broker id {self.broker_id} is in use by a live broker ({holder}) in cluster '{self.cluster}': "
                    f"its lease {self.broker_lease_name} keeps being renewed; give this broker another broker.id"
                )
            await asyncio.sleep(self.renew_s / 2)

    async def _renew_loop(self) -> None:
        elector = self._broker_elector
        assert elector is not None, "made by ClusterMember._make_backends"
        prefix = f"broker-{self.broker_id}/"
        while True:
            await asyncio.sleep(self.renew_s)
            try:
                rec = await elector.try_acquire_or_renew(self._endpoint_annotations())
                if rec is not None:
                    self._broker_renewed = self.monotonic()
                else:
                    seen = elector.record
                    holder = seen.holder if seen is not None else None
                    if holder and holder != self.identity and holder.startswith(prefix):
                        self._fence(f"another process ({holder}) took broker id {self.broker_id}'s lease "
                                    f"{self.broker_lease_name}")
                        return
                    log.error("broker %d lost its liveness lease %s; the controller treats it as gone until it renews",
                              self.broker_id, self.broker_lease_name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("renewing lease %s failed: %s", self.broker_lease_name, exc)

    def _fence(self, why: str) -> None:
        """This process lost its broker id: it must not act as that broker any more. The broker stops."""
        self.fenced = why
        log.critical("%s: this broker process stops (it no longer owns broker id %d)", why, self.broker_id)
        if self.controller is not None:
            self.controller.state.active = False
        self.broker.request_stop(why)

    async def _election_loop(self) -> None:
        while True:
            try:
                await self._election_round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller election round failed")
            await asyncio.sleep(self.renew_s)

    def _broker_lease_fresh(self) -> bool:
        """This process renewed its broker lease recently enough that no other incarnation can hold it.

        A process paused past its lease wakes with both loops due; until its broker lease is renewed
        (or found taken, which fences it) it must not touch the controller lease: the controller
        elector takes over at once from an incarnation of its own id, which may be its successor.
        """
        if self.fenced:
            return False
        margin = min(self.renew_s, self.duration_ms / 4000.0)
        return self.monotonic() - self._broker_renewed < self.duration_ms / 1000.0 - margin

    async def _election_round(self) -> None:
        """One round of the controller election: acquire or renew the lease, take over or resign."""
        elector = self._controller_elector
        assert elector is not None, "made by ClusterMember._make_backends"
        rec = None
        if self._broker_lease_fresh():
            rec = await elector.try_acquire_or_renew()
        if rec is not None:
            self._controller_renewed = self.monotonic()
            # Taking over (loading the log, claiming an epoch, electing, delivering) runs beside
            # this loop: the lease must keep being renewed however long that takes.
            if not self._starting_controller() and (self.controller is None or not self.controller.state.active):
                self._controller_start = asyncio.create_task(self._become_controller(),
                                                             name="controller-takeover")
                self._controller_start.add_done_callback(_report_takeover)
            return
        await self._cancel_takeover()
        if self.controller is not None:
            why = ("the controller lease is held by another broker" if self._broker_lease_fresh()
                   else "this broker's own lease is not fresh")
            await self._resign_controller(why)
        seen = elector.record
        if seen is not None and seen.holder:
            holder = broker_id_of(seen.holder)
            if holder >= 0:
                self.controller_id = holder
        await self._refresh_brokers()  # keep the liveness view warm for a takeover

    def _lease_fresh(self) -> bool:
        if self.fenced:
            return False
        margin = min(self.renew_s, self.duration_ms / 4000.0)
        return self.monotonic() - self._controller_renewed < self.duration_ms / 1000.0 - margin

    def _starting_controller(self) -> bool:
        return self._controller_start is not None and not self._controller_start.done()

    async def _cancel_takeover(self) -> None:
        task, self._controller_start = self._controller_start, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _refresh_brokers(self) -> dict[int, BrokerEndpoint]:
        assert self.leases is not None and self._liveness is not None, "made by ClusterMember._make_backends"
        prefix = f"kelp-{self.cluster}-broker-"
        records, unreadable = await self.leases.scan(prefix)
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
        self.positions = positions
        if self.controller is None and not self.brokers:
            self.brokers = dict(alive)
        return alive

    def _note_unreadable(self, prefix: str, unreadable: dict[str, str]) -> None:
        """An unreadable broker lease fences that broker (its lease is not observed, so it is not alive), said each
        time the set changes; the controller goes on with the others."""
        before = self.problems.get("unreadable_leases", 0)
        self.problems["unreadable_leases"] = len(unreadable)
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
