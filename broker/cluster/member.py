"""A broker's membership in the cluster: its liveness lease, the controller election, and the metadata it applies.

Why: every broker, controller or not, must (1) prove it is alive by renewing
`kelp-<cluster>-broker-<id>` (its endpoints ride along as annotations, like
ZooKeeper's `/brokers/ids/N`), (2) compete for `kelp-<cluster>-controller`
and run the `Controller` while it holds it, (3) apply the metadata log in
offset order — reading it from the store when it starts, then the entries
the controller delivers — and refuse deliveries from a deposed controller
(older epoch), and (4) send what it cannot decide alone to the controller
or a partition's leader (`routing.LeaderRouting`).

Applying (`apply`): an entry is applied only if it follows the offset this
broker has; older ones are ignored, a gap stops the batch (the controller
resends from the offset the answer names). Nothing is inferred from
absence: a topic goes only by its `remove_topic` record (see
`metadata_image`). Metadata that cannot be read stops the broker's start
with the reason; it is never taken for "no topics".

A (re)started process acts on the metadata only once it is **registered**:
the controller has appended a `broker` record naming this process's
incarnation (KRaft: a broker publishes its image only after its own
registration is in it). The entry that registers a restarted process also
fences what its broker id led or was in sync for before, so the new process
never leads a partition at an epoch decided for its previous life — with a
log that a crash may have cut shorter. Until then deliveries are applied to
the image, the topic and replica managers see nothing, and the broker does
not serve; after `initial.broker.registration.timeout.ms` it gives up.

A second process with the same broker id cannot take this broker's lease
while it is renewed; if it takes it anyway (this process was paused past
the lease), this process finds its lease held by another incarnation of its
id and stops itself instead of fighting for it.

This module never touches logs: it hands metadata deltas to the
TopicManager, which the ReplicaManager follows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import replace
from typing import Any, Awaitable, Callable

from kelp.errors import KelpError, StaleControllerEpochError

from .controller import Controller, ControllerSettings
from .metadata_image import (
    MetadataCorrupt,
    MetadataDelta,
    MetadataGap,
    MetadataImage,
    apply_entry,
    diff_images,
    image_from_log,
    image_from_snapshot,
)
from .metadata_log import MetadataUnreadable
from .metadata_publisher import StaleEpoch
from .model import BrokerEndpoint
from .routing import LeaderRouting, broker_id_of, error_for

__all__ = ["ClusterMember", "ENDPOINT_ANNOTATION", "error_for", "broker_id_of"]

log = logging.getLogger("kelp.broker.cluster")

ENDPOINT_ANNOTATION = "kelp.dev/endpoint"
LOAD_ATTEMPTS = 5


class ClusterMember(LeaderRouting):
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        cfg = broker.config
        self.config = cfg
        self.broker_id = cfg.broker_id
        self.cluster = cfg["cluster.name"]
        self.identity = f"broker-{self.broker_id}/{uuid.uuid4().hex[:12]}"
        self.duration_ms = int(cfg["lease.duration.ms"])
        self.renew_s = int(cfg["lease.renew.interval.ms"]) / 1000.0
        self.broker_lease_name = f"kelp-{self.cluster}-broker-{self.broker_id}"
        self.controller_lease_name = f"kelp-{self.cluster}-controller"
        self.leases: Any = None
        self.metadata_log: Any = None
        self.endpoint: BrokerEndpoint | None = None
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.controller_id = -1
        self.controller: Controller | None = None
        self.image = MetadataImage()
        self._seen_epoch = -1           # the newest controller epoch any delivery carried
        self._applied_waiters: list[tuple[int, asyncio.Future]] = []
        self._liveness: Any = None
        self._broker_elector: Any = None
        self._controller_elector: Any = None
        self._controller_renewed = 0.0
        self._broker_renewed = -1e18   # monotonic time of the last renewal of this process's broker lease
        self._controller_start: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self._http: Any = None
        self._producer_ids: list[int] = []  # [next, end)
        self._pid_lock = asyncio.Lock()
        self.started = False            # deliveries are accepted (the image is loaded)
        self.registered = False         # the image registers this process: the managers follow it
        self._registration = asyncio.Event()
        self.fenced = ""  # why this process lost its broker id to another one ("" while it holds it)
        # The controlled shutdown's clock and backoff: tests inject their own, so its bound is checked exactly.
        self.monotonic: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    @property
    def controller_epoch(self) -> int:
        return max(self._seen_epoch, self.image.epoch)

    # -- backends -----------------------------------------------------------
    def _make_backends(self) -> None:
        from .leases import FileLeaseBackend, LeaseElector, LivenessView
        from .metadata_log import FileMetadataLog

        cfg = self.config
        if cfg["cluster.backend"] == "kube":
            from .kube_api import api_client_from
            from .kube_leases import KubeLeaseBackend
            from .kube_metadata_log import KubeMetadataLog

            namespace = cfg["kube.namespace"] or _service_account_namespace()
            api = api_client_from(kubeconfig=cfg["kube.config"] or None)
            labels = {"kelp.dev/cluster": self.cluster, "app.kubernetes.io/name": "kelp"}
            self.leases = KubeLeaseBackend(api, namespace=namespace, labels=labels)
            self.metadata_log = KubeMetadataLog(api, namespace=namespace, cluster=self.cluster)
        else:
            directory = cfg.cluster_dir
            directory.mkdir(parents=True, exist_ok=True)
            self.leases = FileLeaseBackend(directory)
            self.metadata_log = FileMetadataLog(directory)
        # The broker lease is taken over only once released or expired in this process's view: a second
        # process with the same id must not steal it from a live one (they would take turns forever).
        self._broker_elector = LeaseElector(
            self.leases, name=self.broker_lease_name, identity=self.identity, duration_ms=self.duration_ms)
        prefix = f"broker-{self.broker_id}/"
        # The controller lease is competed for only after the broker lease is held, so a previous
        # incarnation of this id holding it is dead or paused past its broker lease: taken over at once.
        self._controller_elector = LeaseElector(
            self.leases, name=self.controller_lease_name, identity=self.identity, duration_ms=self.duration_ms,
            may_take_over=lambda holder: holder.startswith(prefix),
        )
        self._liveness = LivenessView()

    # -- lifecycle ----------------------------------------------------------------
    async def start(self, endpoint: BrokerEndpoint) -> None:
        import aiohttp

        self.endpoint = endpoint = replace(endpoint, incarnation=self.identity)
        self._make_backends()
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        await self._register()
        self.image = await self._load_metadata()
        await self._refresh_brokers()
        self._tasks = [
            asyncio.create_task(self._renew_loop(), name="broker-lease"),
            asyncio.create_task(self._election_loop(), name="controller-election"),
        ]
        self.started = True
        await self._await_registration()
        image = self.image
        log.info("broker %d joined cluster '%s' (%s backend): metadata offset %d (controller epoch %d), "
                 "%d topic(s), live brokers %s", self.broker_id, self.cluster, self.config["cluster.backend"],
                 image.offset, image.epoch, len(image.topics), sorted(self.brokers))

    async def _await_registration(self) -> None:
        """Wait (bounded) until the controller registered this process; the managers get the image then."""
        timeout_s = int(self.config["initial.broker.registration.timeout.ms"]) / 1000.0
        try:
            await asyncio.wait_for(self._registration.wait(), timeout_s)
        except asyncio.TimeoutError:
            raise KelpError(
                f"broker {self.broker_id} was not registered by a controller of cluster '{self.cluster}' within "
                f"initial.broker.registration.timeout.ms ({timeout_s:.0f} s; metadata offset {self.image.offset}, "
                f"controller {self.controller_id}): no controller is running or it cannot deliver to this broker's "
                "HTTP listener; it exits rather than serve metadata decided for an earlier process") from None

    def _registered_in(self, image: MetadataImage) -> bool:
        reg = image.brokers.get(self.broker_id)
        return reg is not None and reg.incarnation == self.identity

    async def _load_metadata(self) -> MetadataImage:
        """The metadata log replayed; unreadable metadata (after a few tries) stops the start with the reason."""
        last: Exception | None = None
        for attempt in range(LOAD_ATTEMPTS):
            try:
                loaded = await self.metadata_log.load()
                return image_from_log(loaded.snapshot, loaded.entries)
            except (MetadataUnreadable, MetadataCorrupt, MetadataGap, OSError) as exc:
                last = exc
                log.error("reading the cluster metadata failed (attempt %d of %d): %s", attempt + 1, LOAD_ATTEMPTS, exc)
                await asyncio.sleep(min(2.0, 0.2 * 2 ** attempt))
        raise KelpError(f"broker {self.broker_id} cannot read the cluster metadata of cluster '{self.cluster}' "
                        f"({last}); it does not start without it. Repair or restore the metadata store "
                        f"({self.config['cluster.backend']} backend) and start it again")

    async def _register(self) -> None:
        assert self.endpoint is not None
        annotations = {ENDPOINT_ANNOTATION: json.dumps(self.endpoint.to_json(), sort_keys=True)}
        deadline = time.monotonic() + 2 * self.duration_ms / 1000.0 + 5
        while True:
            rec = await self._broker_elector.try_acquire_or_renew(annotations)
            if rec is not None:
                self._broker_renewed = time.monotonic()
                return
            if time.monotonic() > deadline:
                holder = self._broker_elector.record.holder if self._broker_elector.record else "?"
                raise KelpError(
                    f"broker id {self.broker_id} is in use by a live broker ({holder}) in cluster '{self.cluster}': "
                    f"its lease {self.broker_lease_name} keeps being renewed; give this broker another broker.id"
                )
            await asyncio.sleep(self.renew_s / 2)

    async def _renew_loop(self) -> None:
        assert self.endpoint is not None
        annotations = {ENDPOINT_ANNOTATION: json.dumps(self.endpoint.to_json(), sort_keys=True)}
        prefix = f"broker-{self.broker_id}/"
        while True:
            await asyncio.sleep(self.renew_s)
            try:
                rec = await self._broker_elector.try_acquire_or_renew(annotations)
                if rec is not None:
                    self._broker_renewed = time.monotonic()
                else:
                    seen = self._broker_elector.record
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
            self.controller.active = False
        stop = getattr(self.broker, "request_stop", None)
        if stop is not None:
            stop(why)

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
        return time.monotonic() - self._broker_renewed < self.duration_ms / 1000.0 - margin

    async def _election_round(self) -> None:
        """One round of the controller election: acquire or renew the lease, take over or resign."""
        rec = None
        if self._broker_lease_fresh():
            rec = await self._controller_elector.try_acquire_or_renew()
        if rec is not None:
            self._controller_renewed = time.monotonic()
            # Taking over (loading the log, claiming an epoch, electing, delivering) runs beside
            # this loop: the lease must keep being renewed however long that takes.
            if not self._starting_controller() and (self.controller is None or not self.controller.active):
                self._controller_start = asyncio.create_task(self._become_controller(),
                                                             name="controller-takeover")
                self._controller_start.add_done_callback(_report_takeover)
            return
        await self._cancel_takeover()
        if self.controller is not None:
            why = ("the controller lease is held by another broker" if self._broker_lease_fresh()
                   else "this broker's own lease is not fresh")
            await self._resign_controller(why)
        seen = self._controller_elector.record
        if seen is not None and seen.holder:
            holder = broker_id_of(seen.holder)
            if holder >= 0:
                self.controller_id = holder
        await self._refresh_brokers()  # keep the liveness view warm for a takeover

    def _lease_fresh(self) -> bool:
        if self.fenced:
            return False
        margin = min(self.renew_s, self.duration_ms / 4000.0)
        return time.monotonic() - self._controller_renewed < self.duration_ms / 1000.0 - margin

    def _starting_controller(self) -> bool:
        return self._controller_start is not None and not self._controller_start.done()

    async def _cancel_takeover(self) -> None:
        task, self._controller_start = self._controller_start, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _become_controller(self) -> None:
        # An earlier incarnation of the controller in this process (deposed, or stopped by a stale lease)
        # is stopped first: its publisher must never deliver beside the new one's.
        await self._resign_controller("a new controller incarnation takes over")
        topics = self.broker.topics
        controller = Controller(
            broker_id=self.broker_id, settings=ControllerSettings(self.config), log=self.metadata_log,
            live_brokers=self._refresh_brokers, send=self._push, lease_fresh=self._lease_fresh,
            topic_config_check=topics.check_topic_configs,
        )
        self.controller = controller
        try:
            await controller.start()
        except BaseException:  # failed, or cancelled because the lease was lost meanwhile
            if self.controller is controller:
                self.controller = None
            await controller.stop()
            raise
        self.controller_id = self.broker_id

    async def _resign_controller(self, why: str) -> None:
        controller, self.controller = self.controller, None
        if controller is not None:
            if controller.active:
                log.warning("broker %d stops being the controller (epoch %d): %s", self.broker_id, controller.epoch,
                            why)
            await controller.stop()

    async def _refresh_brokers(self) -> dict[int, BrokerEndpoint]:
        records = await self.leases.list(f"kelp-{self.cluster}-broker-")
        self._liveness.observe(records)
        alive: dict[int, BrokerEndpoint] = {}
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
        if self.controller is None and not self.brokers:
            self.brokers = dict(alive)
        return alive

    async def stop(self) -> None:
        """Controlled shutdown (bounded: Kafka's controlled.shutdown.max.retries), then leases are released.

        A fenced process (another took its broker id) skips both: they are the other process's now.
        """
        if self.registered and self.config["controlled.shutdown.enable"] and not self.fenced:
            await self._controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._cancel_takeover()
        await self._resign_controller("the broker is stopping")
        if not self.fenced:
            for elector in (self._controller_elector, self._broker_elector):
                if elector is not None:
                    try:
                        await asyncio.wait_for(elector.release(), 5.0)
                    except Exception as exc:
                        log.debug("releasing a lease failed: %s", exc)
        self._fail_waiters()
        if self._http is not None:
            await self._http.close()
        for backend in (self.leases, self.metadata_log):
            if backend is not None:
                try:
                    await asyncio.wait_for(backend.close(), 5.0)
                except Exception as exc:
                    log.debug("closing a cluster backend failed: %s", exc)

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move leadership away: up to 1 + controlled.shutdown.max.retries attempts, all
        within controlled.shutdown.timeout.ms, then stop anyway (Kafka's rule) — the partitions still led here
        get a new leader from the liveness check once this broker's lease is released."""
        attempts = 1 + int(self.config["controlled.shutdown.max.retries"])
        deadline = self.monotonic() + int(self.config["controlled.shutdown.timeout.ms"]) / 1000.0
        backoff_s = int(self.config["controlled.shutdown.retry.backoff.ms"]) / 1000.0
        left: list[str] = []
        for attempt in range(1, attempts + 1):
            remaining = deadline - self.monotonic()
            if remaining <= 0:
                break
            try:
                result = await asyncio.wait_for(
                    self.call("controlled_shutdown", broker_id=self.broker_id, timeout_s=remaining), remaining)
                left = list(result.get("remaining_leaderships", []))
                if not left:
                    log.info("controlled shutdown: leadership moved off broker %d", self.broker_id)
                    return
                log.warning("controlled shutdown attempt %d of %d: still leading %d partition(s) with no other "
                            "in-sync replica: %s", attempt, attempts, len(left), ", ".join(left[:10]))
                if not result.get("awaiting_replicas"):
                    break  # no other live replica of them at all: retrying cannot move them
            except (KelpError, asyncio.TimeoutError, OSError) as exc:
                log.warning("controlled shutdown attempt %d of %d failed (%s)", attempt, attempts,
                            exc or type(exc).__name__)
            if attempt < attempts:
                await self.sleep(max(0.0, min(backoff_s, deadline - self.monotonic())))
        log.warning("controlled shutdown of broker %d ends unfinished; stopping anyway%s", self.broker_id,
                    f" (still leading {len(left)} partition(s))" if left else "")

    # -- metadata from the controller -------------------------------------------------
    async def _push(self, broker: BrokerEndpoint, payload: dict) -> int:
        """Deliver to one broker; returns the offset it has applied."""
        if broker.id == self.broker_id:
            try:
                return self.apply(payload)
            except StaleControllerEpochError as exc:
                raise StaleEpoch(str(exc)) from None
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=max(1.0, min(5.0, self.duration_ms / 1000.0)))
        async with self._http.post(f"{broker.http_url}/cluster/v1/metadata", json=payload, timeout=timeout) as resp:
            body = await resp.json(content_type=None)
            if (resp.status == 409 and isinstance(body, dict)
                    and body.get("error_code") == StaleControllerEpochError.code):
                raise StaleEpoch(body.get("message", "stale controller epoch"))
            if resp.status >= 300 or not isinstance(body, dict) or "applied_offset" not in body:
                raise KelpError(f"broker {broker.id} answered {resp.status}: {str(body)[:200]}")
            return int(body["applied_offset"])

    def apply(self, payload: dict) -> int:
        """Apply a delivery from the controller; returns this broker's metadata offset afterwards.

        Refuses an older controller epoch than one already seen (STALE_CONTROLLER_EPOCH). Entries at or
        below the offset already applied are skipped; an entry that does not follow stops the batch. A
        snapshot is loaded only if it is ahead.
        """
        epoch = int(payload["controller_epoch"])
        if epoch < self.controller_epoch:
            raise StaleControllerEpochError(
                f"metadata from controller {payload.get('controller_id')} at epoch {epoch} refused: "
                f"broker {self.broker_id} has seen epoch {self.controller_epoch}")
        self._seen_epoch = max(self._seen_epoch, epoch)
        self.controller_id = int(payload["controller_id"])
        self.brokers = {b.id: b for b in (BrokerEndpoint.from_json(d) for d in payload.get("brokers", []))}
        delta = MetadataDelta()
        image = self.image
        try:
            snap = payload.get("snapshot")
            if snap is not None and int(snap["offset"]) > image.offset:
                new = image_from_snapshot(snap)
                delta.merge(diff_images(image, new))
                image = new
            for entry in payload.get("entries", []):
                offset = int(entry["offset"])
                if offset <= image.offset:
                    continue
                if offset != image.offset + 1:
                    break  # a gap: the controller resends from the offset answered
                image, d = apply_entry(image, entry)
                delta.merge(d)
        except (MetadataCorrupt, KeyError, TypeError, ValueError) as exc:
            log.error("metadata from controller %s at epoch %d cannot be applied after offset %d: %s",
                      payload.get("controller_id"), epoch, image.offset, exc)
            raise KelpError(f"metadata cannot be applied after offset {image.offset}: {exc}") from None
        finally:
            if image is not self.image:
                self.image = image
                if self.registered:
                    self.broker.topics.apply_delta(delta)
                elif self._registered_in(image):
                    # The entry that registers this process also fenced what its id held before: from here on
                    # the managers follow the log, starting from everything in it.
                    self.registered = True
                    log.info("broker %d registered by controller %d at metadata offset %d", self.broker_id,
                             self.controller_id, image.offset)
                    self.broker.topics.apply_delta(diff_images(MetadataImage(), image))
                    self._registration.set()
                self._wake_waiters()
        return self.image.offset

    async def wait_applied(self, offset: int, timeout_s: float) -> bool:
        """Wait (bounded) until this broker applied metadata `offset`; False on timeout."""
        if self.image.offset >= offset:
            return True
        fut = asyncio.get_running_loop().create_future()
        self._applied_waiters.append((offset, fut))
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except asyncio.TimeoutError:
            log.warning("metadata offset %d not applied on broker %d within %.1fs (it has %d)",
                        offset, self.broker_id, timeout_s, self.image.offset)
            return False
        finally:
            self._applied_waiters = [(o, f) for o, f in self._applied_waiters if f is not fut]

    def _wake_waiters(self) -> None:
        keep = []
        for offset, fut in self._applied_waiters:
            if offset <= self.image.offset:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((offset, fut))
        self._applied_waiters = keep

    def _fail_waiters(self) -> None:
        for _offset, fut in self._applied_waiters:
            if not fut.done():
                fut.cancel()
        self._applied_waiters = []

    # -- producer ids ------------------------------------------------------------------
    async def next_producer_id(self) -> int:
        async with self._pid_lock:
            if not self._producer_ids or self._producer_ids[0] >= self._producer_ids[1]:
                block = await self.call("allocate_producer_ids", broker_id=self.broker_id)
                self._producer_ids = [int(block["first"]), int(block["first"]) + int(block["count"])]
            pid = self._producer_ids[0]
            self._producer_ids[0] += 1
            return pid

    def describe(self) -> dict:
        return {
            "cluster": self.cluster,
            "controller": self.controller_id,
            "controller_epoch": self.controller_epoch,
            "metadata_offset": self.image.offset,
            "brokers": [b.to_json() for b in sorted(self.brokers.values(), key=lambda b: b.id)],
        }


def _report_takeover(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("taking over as controller failed; the next election round retries", exc_info=task.exception())


def _service_account_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as fh:
            return fh.read().strip() or "default"
    except OSError:
        return "default"
