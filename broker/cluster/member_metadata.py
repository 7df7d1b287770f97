"""The metadata a broker applies: read from the store at start, then delivered by the controller in order.

Why a module of its own: applying the metadata log is the one rule every broker's view of the cluster
rests on, apart from leases and requests. An entry is applied only if it follows the offset this
broker has; older ones are ignored, a gap stops the batch (the controller resends from the offset the
answer names), a delivery from a deposed controller (an older epoch) is refused. Nothing is inferred
from absence: a topic goes only by its `remove_topic` record (see `metadata.image`). Metadata that
cannot be read stops the broker's start with the reason; it is never taken for "no topics".

A (re)started process acts on the metadata only once it is **registered**: the controller has
appended a `broker` record naming this process's incarnation (KRaft: a broker publishes its image only
after its own registration is in it). The entry that registers a restarted process also fences what
its broker id led or was in sync for before, so the new process never leads a partition at an epoch
decided for its previous life. Until then deliveries are applied to the image, the topic and replica
managers see nothing, and the broker does not serve; after `initial.broker.registration.timeout.ms`
it gives up.

Composed by `member.ClusterMember`, which gives it the shared state (`member_state`) and the HTTP session its
deliveries to other brokers use. It never touches logs: it hands
metadata deltas to the TopicManager, which the ReplicaManager follows (and, before a delivery with new
topics, their topic states, whose local logs the TopicManager creates in a worker thread).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kelp.errors import KelpError, MetadataDivergedError, StaleControllerEpochError

from ..metadata.image import (
    MetadataCorrupt,
    MetadataDelta,
    MetadataDiverged,
    MetadataGap,
    MetadataImage,
    apply_entry,
    diff_images,
    history_covers,
    image_from_log,
    image_from_snapshot,
)
from ..metadata.model import BrokerEndpoint
from ..metadata.records import MetadataPush
from .member_state import ControlSession, DeltaListener, MemberState
from .metadata_log import MetadataUnreadable
from .metadata_publisher import HistoryDiverged, StaleEpoch

__all__ = ["MemberMetadata", "LOAD_ATTEMPTS"]

log = logging.getLogger("kelp.broker.cluster")

LOAD_ATTEMPTS = 5


@dataclass(slots=True)
class _Plan:
    """A delivery applied to an image in memory (`MemberMetadata._plan`): the image and delta it gives, what the
    delivery says of the controller, and the error that stopped it after what applied (None: none)."""

    epoch: int
    controller_id: int
    brokers: dict[int, BrokerEndpoint]
    image: MetadataImage
    delta: MetadataDelta
    error: Exception | None = None


class MemberMetadata:
    """Loading, applying and awaiting the metadata log on one broker."""

    def __init__(self, state: MemberState, session: ControlSession) -> None:
        self.state = state
        self._session = session  # deliveries to the other brokers, when this broker's controller sends them
        self.delta_listeners: list[DeltaListener] = []  # beside the topic manager, who follows the deltas (the ACLs)
        self._applied_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._registration = asyncio.Event()

    async def await_registration(self) -> None:
        """Wait (bounded) until the controller registered this process; the managers get the image then."""
        timeout_s = int(self.state.config["initial.broker.registration.timeout.ms"]) / 1000.0
        try:
            await asyncio.wait_for(self._registration.wait(), timeout_s)
        except asyncio.TimeoutError:
            raise KelpError(
                f"broker {self.state.broker_id} was not registered by a controller of cluster '{self.state.cluster}' "
                f"within initial.broker.registration.timeout.ms ({timeout_s:.0f} s; metadata offset "
                f"{self.state.image.offset}, controller {self.state.controller_id}): no controller is running or it "
                "cannot deliver to this broker's "
                "HTTP listener; it exits rather than serve metadata decided for an earlier process") from None

    def _registered_in(self, image: MetadataImage) -> bool:
        reg = image.brokers.get(self.state.broker_id)
        return reg is not None and reg.incarnation == self.state.identity

    async def load_metadata(self) -> MetadataImage:
        """The metadata log replayed; unreadable metadata (after a few tries) stops the start with the reason."""
        assert self.state.metadata_log is not None, "made by ClusterMember.make_backends"
        last: Exception | None = None
        for attempt in range(LOAD_ATTEMPTS):
            try:
                loaded = await self.state.metadata_log.load()
                image = image_from_log(loaded.snapshot, loaded.entries)
                self.state.problems["snapshot_fallback"] = int(bool(loaded.fell_back))
                if loaded.fell_back:
                    log.error("the newest metadata snapshot cannot be read; broker %d loaded the older one and its "
                              "entries instead: %s", self.state.broker_id, "; ".join(loaded.fell_back))
                return image
            except (MetadataUnreadable, MetadataCorrupt, MetadataGap, OSError) as exc:
                last = exc
                log.error("reading the cluster metadata failed (attempt %d of %d): %s", attempt + 1, LOAD_ATTEMPTS, exc)
                await asyncio.sleep(min(2.0, 0.2 * 2 ** attempt))
        raise KelpError(f"broker {self.state.broker_id} cannot read the cluster metadata of cluster "
                        f"'{self.state.cluster}' "
                        f"({last}); it does not start without it. Repair or restore the metadata store "
                        f"({self.state.config['cluster.backend']} backend) and start it again")

    async def push(self, broker: BrokerEndpoint, payload: MetadataPush) -> int:
        """Deliver to one broker; returns the offset it has applied."""
        if broker.id == self.state.broker_id:
            try:
                return await self.receive(payload)
            except StaleControllerEpochError as exc:
                raise StaleEpoch(str(exc)) from None
            except MetadataDivergedError as exc:
                raise HistoryDiverged(str(exc)) from None
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=max(1.0, min(5.0, self.state.duration_ms / 1000.0)))
        async with self._session.session().post(f"{broker.http_url}/cluster/v1/metadata", json=payload,
                                        timeout=timeout) as resp:
            body = await resp.json(content_type=None)
            if resp.status == 409 and isinstance(body, dict):
                if body.get("error_code") == StaleControllerEpochError.code:
                    raise StaleEpoch(body.get("message", "stale controller epoch"))
                if body.get("error_code") == MetadataDivergedError.code:
                    raise HistoryDiverged(body.get("message", "another metadata history"))
            if resp.status >= 300 or not isinstance(body, dict) or "applied_offset" not in body:
                raise KelpError(f"broker {broker.id} answered {resp.status}: {str(body)[:200]}")
            return int(body["applied_offset"])

    async def receive(self, payload: MetadataPush) -> int:
        """`apply` a delivery, once the logs it places on this broker are ready — created, or another topic's of
        the same name set aside — in a worker thread (the TopicManager's `prepare_logs`): a delta creating 3,000
        of them held the event loop for seconds, on every path that brings new partitions (entries, a snapshot
        for a broker far behind, the whole image when this process is registered, a reassignment adding it).

        The delivery is planned first (`_plan`: pure, every check `apply` makes), so files are only touched for
        metadata that will be applied; if another delivery was applied while the files were prepared, it is
        planned again."""
        before = self.state.image
        plan = self._plan(payload)
        registers = not self.state.registered and self._registered_in(plan.image)
        if plan.image is not before and (self.state.registered or registers):
            if registers:  # the managers get everything in the image at once: every log it places here
                await self.state.broker.topics.prepare_logs(plan.image, plan.image.topics.values(), full=True)
            else:
                await self.state.broker.topics.prepare_logs(plan.image, plan.delta.changed.values())
        if self.state.image is not before:
            plan = self._plan(payload)
        return self._commit(plan)

    def apply(self, payload: MetadataPush) -> int:
        """Apply a delivery from the controller; returns this broker's metadata offset afterwards.

        Refuses an older controller epoch than one already seen (STALE_CONTROLLER_EPOCH). Entries at or
        below the offset already applied are skipped; an entry that does not follow stops the batch. A
        snapshot is loaded only if it is ahead. A delivery is decoded JSON that only claims its shape:
        every field is converted as it is read, and one that is not raises KelpError. What applied before
        an entry that breaks a rule is kept; the error is raised after it.
        """
        return self._commit(self._plan(payload))

    def _plan(self, payload: MetadataPush) -> _Plan:
        """What applying `payload` to the current image gives, without changing anything."""
        epoch = int(payload["controller_epoch"])
        if epoch < self.state.controller_epoch:
            raise StaleControllerEpochError(
                f"metadata from controller {payload.get('controller_id')} at epoch {epoch} refused: "
                f"broker {self.state.broker_id} has seen epoch {self.state.controller_epoch}")
        plan = _Plan(epoch=epoch, controller_id=int(payload["controller_id"]),
                     brokers={b.id: b for b in (BrokerEndpoint.from_json(d) for d in payload.get("brokers", []))},
                     image=self.state.image, delta=MetadataDelta())
        image = self.state.image
        try:
            snap = payload.get("snapshot")
            if (snap is not None and int(snap["offset"]) == image.offset and image.digest and snap.get("digest")
                    and snap.get("digest") != image.digest):
                raise MetadataDiverged(f"the snapshot at metadata offset {image.offset} has digest "
                                       f"{snap.get('digest')}, the entry applied there has digest {image.digest}: "
                                       "another history")
            if snap is not None and int(snap["offset"]) > image.offset:
                new = image_from_snapshot(snap)
                if image.runs and history_covers(new.runs, image.runs[-1], image.offset) is False:
                    start, digest = image.runs[-1]
                    raise MetadataDiverged(
                        f"the snapshot at metadata offset {new.offset} does not extend what this broker applied: "
                        f"its entries up to offset {image.offset} belong to the controller run that starts at offset "
                        f"{start} (entry digest {digest}), which the snapshot's history does not hold there — the "
                        "metadata store lost entries this broker applied and another history was written; refused")
                plan.delta.merge(diff_images(image, new))
                image = new
            for entry in payload.get("entries", []):
                offset = int(entry["offset"])
                if offset <= image.offset:
                    continue
                if offset != image.offset + 1:
                    break  # a gap: the controller resends from the offset answered
                image, d = apply_entry(image, entry)
                plan.delta.merge(d)
        except MetadataDiverged as exc:
            plan.error = exc
        except (MetadataCorrupt, KeyError, TypeError, ValueError) as exc:
            plan.error = exc
        plan.image = image
        return plan

    def _commit(self, plan: _Plan) -> int:
        """Make a plan this broker's metadata: the image, the managers told; then its error, if it has one."""
        self.state.seen_epoch = max(self.state.seen_epoch, plan.epoch)
        self.state.controller_id = plan.controller_id
        self.state.brokers = plan.brokers
        image = plan.image
        if image is not self.state.image:
            self.state.image = image
            self.tell_listeners(plan.delta)
            if self.state.registered:
                self.state.broker.topics.apply_delta(plan.delta)
            elif self._registered_in(image):
                # The entry that registers this process also fenced what its id held before: from here on
                # the managers follow the log, starting from everything in it.
                self.state.registered = True
                log.info("broker %d registered by controller %d at metadata offset %d", self.state.broker_id,
                         self.state.controller_id, image.offset)
                self.state.broker.topics.apply_delta(diff_images(MetadataImage(), image))
                self._registration.set()
            self._wake_waiters()
        exc = plan.error
        if isinstance(exc, MetadataDiverged):
            self.state.problems["diverged"] = self.state.problems.get("diverged", 0) + 1
            log.error("metadata from controller %s at epoch %d refused: %s", plan.controller_id, plan.epoch, exc)
            raise MetadataDivergedError(f"broker {self.state.broker_id} refuses metadata after offset {image.offset}: "
                                        f"{exc}")
        if exc is not None:
            log.error("metadata from controller %s at epoch %d cannot be applied after offset %d: %s",
                      plan.controller_id, plan.epoch, image.offset, exc)
            raise KelpError(f"metadata cannot be applied after offset {image.offset}: {exc}")
        return self.state.image.offset

    def tell_listeners(self, delta: MetadataDelta) -> None:
        """Every change to the image, as it is applied, to the listeners beside the topic manager (the ACLs). They
        are not held back until this process is registered, as the topic manager is: an ACL is not a decision about
        this broker's replicas, and a starting broker must authorize the deliveries that register it."""
        for listener in self.delta_listeners:
            try:
                listener(delta)
            except Exception:  # one listener must not keep the metadata from the others
                log.exception("a metadata listener failed on the delta up to offset %d", self.state.image.offset)

    async def wait_applied(self, offset: int, timeout_s: float) -> bool:
        """Wait (bounded) until this broker applied metadata `offset`; False on timeout."""
        if self.state.image.offset >= offset:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._applied_waiters.append((offset, fut))
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except asyncio.TimeoutError:
            log.warning("metadata offset %d not applied on broker %d within %.1fs (it has %d)",
                        offset, self.state.broker_id, timeout_s, self.state.image.offset)
            return False
        finally:
            self._applied_waiters = [(o, f) for o, f in self._applied_waiters if f is not fut]

    def _wake_waiters(self) -> None:
        keep = []
        for offset, fut in self._applied_waiters:
            if offset <= self.state.image.offset:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((offset, fut))
        self._applied_waiters = keep

    def fail_waiters(self) -> None:
        for _offset, fut in self._applied_waiters:
            if not fut.done():
                fut.cancel()
        self._applied_waiters = []
