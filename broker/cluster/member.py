"""A broker's membership in the cluster: its lifecycle, and the controller it runs while it holds the lease.

Why: every broker, controller or not, must (1) prove it is alive by renewing
`kelp-<cluster>-broker-<id>` and compete for `kelp-<cluster>-controller`
(`member_leases`), (2) run the `Controller` while it holds that lease (here),
(3) apply the metadata log in offset order — reading it from the store when
it starts, then the entries the controller delivers — and act on it only once
registered (`member_metadata`), (4) send what it cannot decide alone to the
controller or a partition's leader (`routing`), and (5) leave by a controlled
shutdown (`member_shutdown`). `ClusterMember` composes those parts as
objects, no mixins, each given what it needs: the shared state and the HTTP
session to the other brokers (`member_state`), and the other parts' methods
it calls. Callers reach a part by its role (`member.routing.call`,
`member.metadata.receive`, `member.state.image`). It owns their order: backends, registration,
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
from dataclasses import replace
from typing import TypedDict, cast

from kelp import clock
from kelp.clock import Monotonic, WallClockMs
from kelp.leases import LeaseBackend

from ..metadata.controller_answers import ProducerIdsAnswer
from ..metadata.image import MetadataImage, Position, diff_images
from ..metadata.model import BrokerEndpoint, BrokerEndpointJson
from .controller import Controller, ControllerSettings
from .file_leases import FileLeaseBackend
from .inter_broker import InterBrokerSecurity
from .member_leases import ENDPOINT_ANNOTATION, MemberLeases
from .member_metadata import MemberMetadata
from .member_shutdown import MemberShutdown
from .member_state import ControlSession, MemberHost, MemberState, Sleep, bounded_step
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


class ClusterMember:
    """This broker's membership: the parts by role over one shared state, and their order on start and stop."""

    def __init__(self, broker: MemberHost, *, clock_ms: WallClockMs = clock.wall_clock_ms,
                 monotonic: Monotonic = clock.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.state = state = MemberState(broker, clock_ms=clock_ms, monotonic=monotonic, sleep=sleep)
        self.session = ControlSession(state)
        self.metadata = MemberMetadata(state, self.session)
        self.leasing = MemberLeases(state, become_controller=self._become_controller,
                                    resign_controller=self._resign_controller)
        self.routing = LeaderRouting(state, self.session, wait_applied=self.metadata.wait_applied,
                                     refresh_brokers=self.leasing.refresh_brokers)
        self.shutdown = MemberShutdown(state, self.routing.call)
        self._tasks: list[asyncio.Task[None]] = []
        self._producer_ids: list[int] = []  # [next, end)
        self._pid_lock = asyncio.Lock()

    # -- backends -----------------------------------------------------------
    def make_backends(self) -> None:
        state = self.state
        cfg = state.config
        if cfg["cluster.backend"] == "kube":
            from kelp.kube.api import api_client_from
            from kelp.kube.leases import KubeLeaseBackend

            from .kube_metadata_log import KubeMetadataLog

            namespace = cfg["kube.namespace"] or _service_account_namespace()
            api = api_client_from(kubeconfig=cfg["kube.config"] or None)
            labels = {"kelp.dev/cluster": state.cluster, "app.kubernetes.io/name": "kelp"}
            leases: LeaseBackend = KubeLeaseBackend(api, namespace=namespace, labels=labels)
            state.metadata_log = KubeMetadataLog(api, namespace=namespace, cluster=state.cluster)
        else:
            directory = cfg.cluster_dir
            directory.mkdir(parents=True, exist_ok=True)
            leases = FileLeaseBackend(directory)
            state.metadata_log = FileMetadataLog(directory)
        state.leases = leases
        self.leasing.make_electors(leases)

    # -- lifecycle ----------------------------------------------------------------
    async def start(self, endpoint: BrokerEndpoint) -> None:
        state = self.state
        state.endpoint = endpoint = replace(endpoint, incarnation=state.identity)
        self.make_backends()
        # The control plane's HTTP: HTTPS and the inter-broker credentials as the listeners require (inter_broker.py);
        # its session is opened by the first call to another broker (`member_state.ControlSession`).
        state.inter_broker = state.inter_broker or InterBrokerSecurity(state.config.listener_setup)
        await self.leasing.register()
        state.image = await self.metadata.load_metadata()
        self.metadata.tell_listeners(diff_images(MetadataImage(), state.image))
        await self.leasing.refresh_brokers()
        self._tasks = [
            asyncio.create_task(self.leasing.renew_loop(), name="broker-lease"),
            asyncio.create_task(self.leasing.election_loop(), name="controller-election"),
        ]
        state.started = True
        await self.metadata.await_registration()
        image = state.image
        log.info("broker %d joined cluster '%s' (%s backend): metadata offset %d (controller epoch %d), "
                 "%d topic(s), live brokers %s", state.broker_id, state.cluster, state.config["cluster.backend"],
                 image.offset, image.epoch, len(image.topics), sorted(state.brokers))

    async def stop(self) -> None:
        """Controlled shutdown (bounded: Kafka's controlled.shutdown.max.retries), then leases are released.

        A fenced process (another took its broker id) skips both: they are the other process's now.
        """
        state = self.state
        if state.registered and state.config["controlled.shutdown.enable"] and not state.fenced:
            await self.shutdown.controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.leasing.cancel_takeover()
        await self._resign_controller("the broker is stopping")
        if not state.fenced:
            await self.leasing.release()
        self.metadata.fail_waiters()
        await self.session.close()
        for backend in (state.leases, state.metadata_log):
            if backend is not None:
                await bounded_step(backend.close(), "closing a cluster backend")

    # -- the controller this process runs ---------------------------------------------
    async def _become_controller(self) -> None:
        # An earlier incarnation of the controller in this process (deposed, or stopped by a stale lease)
        # is stopped first: its publisher must never deliver beside the new one's.
        await self._resign_controller("a new controller incarnation takes over")
        state = self.state
        assert state.metadata_log is not None, "made by make_backends"
        topics = state.broker.topics
        controller = Controller(
            broker_id=state.broker_id, settings=ControllerSettings(state.config), log=state.metadata_log,
            live_brokers=self.leasing.refresh_brokers, send=self.metadata.push, lease_fresh=self.leasing.lease_fresh,
            topic_config_check=topics.check_topic_configs, monotonic=state.monotonic,
            positions=self._positions,
        )
        state.controller = controller
        try:
            await controller.start()
        except BaseException:  # failed, or cancelled because the lease was lost meanwhile
            if state.controller is controller:
                state.controller = None
            await controller.stop()
            raise
        state.controller_id = state.broker_id

    def _positions(self) -> dict[int, Position]:
        """Where each live broker's metadata is, for the controller's history check: the leases' reports, and this
        broker's own image (fresher than its lease)."""
        image = self.state.image
        own = (image.offset, image.digest, image.runs[-1] if image.runs else None)
        return {**self.state.positions, self.state.broker_id: own}

    async def _resign_controller(self, why: str) -> None:
        state = self.state
        controller, state.controller = state.controller, None
        if controller is not None:
            if controller.state.active:
                log.warning("broker %d stops being the controller (epoch %d): %s", state.broker_id,
                            controller.state.epoch, why)
            await controller.stop()

    # -- producer ids ------------------------------------------------------------------
    async def next_producer_id(self) -> int:
        async with self._pid_lock:
            if not self._producer_ids or self._producer_ids[0] >= self._producer_ids[1]:
                answer = await self.routing.call("allocate_producer_ids", broker_id=self.state.broker_id)
                block = cast(ProducerIdsAnswer, answer)  # the controller's answer to this operation
                self._producer_ids = [int(block["first"]), int(block["first"]) + int(block["count"])]
            pid = self._producer_ids[0]
            self._producer_ids[0] += 1
            return pid

    def metadata_problems(self) -> dict[str, int]:
        """`kelp_metadata_problems`: what is wrong with the metadata as this broker sees it (each kind; 0: fine)."""
        problems = self.state.problems
        controller = self.state.controller
        refused = controller is not None and bool(controller.refused)
        return {"diverged": problems.get("diverged", 0),
                "unreadable_leases": problems.get("unreadable_leases", 0),
                "snapshot_fallback": problems.get("snapshot_fallback", 0),
                "history_refused": int(refused or bool(problems.get("history_refused", 0)))}

    def describe(self) -> ClusterDescription:
        state = self.state
        return {
            "cluster": state.cluster,
            "controller": state.controller_id,
            "controller_epoch": state.controller_epoch,
            "metadata_offset": state.image.offset,
            "metadata_digest": state.image.digest,
            "brokers": [b.to_json() for b in sorted(state.brokers.values(), key=lambda b: b.id)],
            "decommissioned": sorted(b for b, reg in state.image.brokers.items() if reg.decommissioned),
        }


def _service_account_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as fh:
            return fh.read().strip() or "default"
    except OSError:
        return "default"
