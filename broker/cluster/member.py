"""A broker's membership in the cluster: its lifecycle, and the controller it runs while it holds the lease.

Why: every broker, controller or not, must (1) prove it is alive by renewing
`kelp-<cluster>-broker-<id>` and compete for `kelp-<cluster>-controller`
(`member_leases`), (2) run the `Controller` while it holds that lease (here),
(3) apply the metadata log in offset order — reading it from the store when
it starts, then the entries the controller delivers — and act on it only once
registered (`member_metadata`), (4) send what it cannot decide alone to the
controller or a partition's leader (`routing`), and (5) leave by a controlled
shutdown (`member_shutdown`). `ClusterMember` composes those parts (their
shared state: `member_state`) and owns their order: backends, registration,
metadata, loops on `start`; shutdown, loops, controller, leases, backends on
`stop`.

Time: the member's clocks are injectable (`clock_ms` for what a lease
stores, `monotonic` for freshness and bounds, `sleep` for backoffs); the
defaults are the real ones (`kelp.clock`).

This module never touches logs: it hands metadata deltas to the
TopicManager, which the ReplicaManager follows.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import replace
from typing import TypedDict, cast

from kelp import clock
from kelp.clock import Monotonic, WallClockMs
from kelp.leases import LeaseBackend, LeaseElector, LivenessView

from ..metadata.controller_answers import ProducerIdsAnswer
from ..metadata.image import MetadataImage, Position, diff_images
from ..metadata.model import BrokerEndpoint, BrokerEndpointJson
from .controller import Controller, ControllerSettings
from .file_leases import FileLeaseBackend
from .inter_broker import InterBrokerSecurity
from .member_leases import ENDPOINT_ANNOTATION, MemberLeases
from .member_metadata import MemberMetadata
from .member_shutdown import MemberShutdown
from .member_state import MemberHost, Sleep
from .metadata_log import FileMetadataLog
from .routing import LeaderRouting, broker_id_of, error_for

__all__ = ["ClusterMember", "ClusterDescription", "ENDPOINT_ANNOTATION", "error_for", "broker_id_of"]

log = logging.getLogger("kelp.broker.cluster")


class ClusterDescription(TypedDict):
    """The cluster as this broker sees it (`GET /admin/v1/cluster`)."""

    cluster: str
    controller: int
    controller_epoch: int
    metadata_offset: int
    metadata_digest: str  # the digest of the entry at metadata_offset: equal on two brokers, equal histories
    brokers: list[BrokerEndpointJson]
    decommissioned: list[int]  # broker ids leaving the cluster: no new replicas or leaders (decommission.py)


class ClusterMember(MemberLeases, MemberMetadata, MemberShutdown, LeaderRouting):
    def __init__(self, broker: MemberHost, *, clock_ms: WallClockMs = clock.wall_clock_ms,
                 monotonic: Monotonic = clock.monotonic, sleep: Sleep = asyncio.sleep) -> None:
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
        # Wall clock for what the leases store; monotonic clock and sleep for freshness, bounds and backoffs.
        self.clock_ms = clock_ms
        self.monotonic = monotonic
        self.sleep = sleep
        self.leases = None
        self.metadata_log = None
        self.endpoint = None
        self.brokers = {}
        self.controller_id = -1
        self.controller = None
        self.image = MetadataImage()
        self.delta_listeners = []  # beside the topic manager, who follows the metadata deltas (the ACLs)
        self._seen_epoch = -1           # the newest controller epoch any delivery carried
        self._applied_waiters = []
        self._liveness = None
        self._broker_elector = None
        self._controller_elector = None
        self._controller_renewed = 0.0
        self._broker_renewed = -1e18   # monotonic time of the last renewal of this process's broker lease
        self._controller_start = None
        self._tasks: list[asyncio.Task[None]] = []
        self._http = None
        self._http_closed = False
        self.inter_broker = None
        self._producer_ids: list[int] = []  # [next, end)
        self._pid_lock = asyncio.Lock()
        self.started = False            # deliveries are accepted (the image is loaded)
        self.registered = False         # the image registers this process: the managers follow it
        self._registration = asyncio.Event()
        self.fenced = ""  # why this process lost its broker id to another one ("" while it holds it)
        self.positions = {}
        self.problems = {}

    @property
    def controller_epoch(self) -> int:
        return max(self._seen_epoch, self.image.epoch)

    # -- backends -----------------------------------------------------------
    def _make_backends(self) -> None:
        cfg = self.config
        if cfg["cluster.backend"] == "kube":
            from kelp.kube.api import api_client_from
            from kelp.kube.leases import KubeLeaseBackend

            from .kube_metadata_log import KubeMetadataLog

            namespace = cfg["kube.namespace"] or _service_account_namespace()
            api = api_client_from(kubeconfig=cfg["kube.config"] or None)
            labels = {"kelp.dev/cluster": self.cluster, "app.kubernetes.io/name": "kelp"}
            leases: LeaseBackend = KubeLeaseBackend(api, namespace=namespace, labels=labels)
            self.metadata_log = KubeMetadataLog(api, namespace=namespace, cluster=self.cluster)
        else:
            directory = cfg.cluster_dir
            directory.mkdir(parents=True, exist_ok=True)
            leases = FileLeaseBackend(directory)
            self.metadata_log = FileMetadataLog(directory)
        self.leases = leases
        # The broker lease is taken over only once released or expired in this process's view: a second
        # process with the same id must not steal it from a live one (they would take turns forever).
        self._broker_elector = LeaseElector(
            leases, name=self.broker_lease_name, identity=self.identity, duration_ms=self.duration_ms,
            clock_ms=self.clock_ms, monotonic=self.monotonic)
        prefix = f"broker-{self.broker_id}/"
        # The controller lease is competed for only after the broker lease is held, so a previous
        # incarnation of this id holding it is dead or paused past its broker lease: taken over at once.
        self._controller_elector = LeaseElector(
            leases, name=self.controller_lease_name, identity=self.identity, duration_ms=self.duration_ms,
            clock_ms=self.clock_ms, monotonic=self.monotonic, may_take_over=lambda holder: holder.startswith(prefix),
        )
        self._liveness = LivenessView(monotonic=self.monotonic)

    # -- lifecycle ----------------------------------------------------------------
    async def start(self, endpoint: BrokerEndpoint) -> None:
        self.endpoint = endpoint = replace(endpoint, incarnation=self.identity)
        self._make_backends()
        # The control plane's HTTP: HTTPS and the inter-broker credentials as the listeners require (inter_broker.py);
        # its session is opened by the first call to another broker (routing.py's `_session`).
        self.inter_broker = self.inter_broker or InterBrokerSecurity(self.config.listener_setup)
        await self._register()
        self.image = await self._load_metadata()
        self.tell_listeners(diff_images(MetadataImage(), self.image))
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
        self._http_closed = True  # no session is opened after this
        if self._http is not None:
            await self._http.close()
        for backend in (self.leases, self.metadata_log):
            if backend is not None:
                try:
                    await asyncio.wait_for(backend.close(), 5.0)
                except Exception as exc:
                    log.debug("closing a cluster backend failed: %s", exc)

    # -- the controller this process runs ---------------------------------------------
    async def _become_controller(self) -> None:
        # An earlier incarnation of the controller in this process (deposed, or stopped by a stale lease)
        # is stopped first: its publisher must never deliver beside the new one's.
        await self._resign_controller("a new controller incarnation takes over")
        assert self.metadata_log is not None, "made by _make_backends"
        topics = self.broker.topics
        controller = Controller(
            broker_id=self.broker_id, settings=ControllerSettings(self.config), log=self.metadata_log,
            live_brokers=self._refresh_brokers, send=self._push, lease_fresh=self._lease_fresh,
            topic_config_check=topics.check_topic_configs, monotonic=self.monotonic,
            positions=self._positions,
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

    def _positions(self) -> dict[int, Position]:
        """Where each live broker's metadata is, for the controller's history check: the leases' reports, and this
        broker's own image (fresher than its lease)."""
        own = (self.image.offset, self.image.digest, self.image.runs[-1] if self.image.runs else None)
        return {**self.positions, self.broker_id: own}

    async def _resign_controller(self, why: str) -> None:
        controller, self.controller = self.controller, None
        if controller is not None:
            if controller.state.active:
                log.warning("broker %d stops being the controller (epoch %d): %s", self.broker_id,
                            controller.state.epoch, why)
            await controller.stop()

    # -- producer ids ------------------------------------------------------------------
    async def next_producer_id(self) -> int:
        async with self._pid_lock:
            if not self._producer_ids or self._producer_ids[0] >= self._producer_ids[1]:
                answer = await self.call("allocate_producer_ids", broker_id=self.broker_id)
                block = cast(ProducerIdsAnswer, answer)  # the controller's answer to this operation
                self._producer_ids = [int(block["first"]), int(block["first"]) + int(block["count"])]
            pid = self._producer_ids[0]
            self._producer_ids[0] += 1
            return pid

    def metadata_problems(self) -> dict[str, int]:
        """`kelp_metadata_problems`: what is wrong with the metadata as this broker sees it (each kind; 0: fine)."""
        refused = self.controller is not None and bool(self.controller.refused)
        return {"diverged": self.problems.get("diverged", 0),
                "unreadable_leases": self.problems.get("unreadable_leases", 0),
                "snapshot_fallback": self.problems.get("snapshot_fallback", 0),
                "history_refused": int(refused or bool(self.problems.get("history_refused", 0)))}

    def describe(self) -> ClusterDescription:
        return {
            "cluster": self.cluster,
            "controller": self.controller_id,
            "controller_epoch": self.controller_epoch,
            "metadata_offset": self.image.offset,
            "metadata_digest": self.image.digest,
            "brokers": [b.to_json() for b in sorted(self.brokers.values(), key=lambda b: b.id)],
            "decommissioned": sorted(b for b, reg in self.image.brokers.items() if reg.decommissioned),
        }


def _service_account_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as fh:
            return fh.read().strip() or "default"
    except OSError:
        return "default"
