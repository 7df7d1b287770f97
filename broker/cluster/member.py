"""A broker's membership in the cluster: its liveness lease, the controller election, and the metadata it applies.

Why: every broker, controller or not, must (1) prove it is alive by renewing
`kelp-<cluster>-broker-<id>` (its endpoints ride along as annotations, like
ZooKeeper's `/brokers/ids/N`), (2) compete for `kelp-<cluster>-controller`
and run the `Controller` while it holds it, (3) apply the metadata the
controller pushes — refusing pushes from a deposed controller (older epoch)
— and read the store itself when it starts, and (4) send changes it cannot
decide alone (topic admin, ISR changes, producer-id blocks, controlled
shutdown) to the controller: in-process when it is the controller, over
HTTP otherwise, retried within a bound while a new controller is elected.

This module never touches logs: it hands topic states to the TopicManager,
which the ReplicaManager follows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

from kelp.errors import (
    CoordinatorNotAvailableError,
    KelpError,
    NotControllerError,
    RequestTimedOutError,
    StaleControllerEpochError,
)

from .controller import Controller, ControllerSettings
from .model import BrokerEndpoint, topic_from_json

__all__ = ["ClusterMember", "ENDPOINT_ANNOTATION"]

log = logging.getLogger("kelp.broker.cluster")

ENDPOINT_ANNOTATION = "kelp.dev/endpoint"
CONTROLLER_CALL_TIMEOUT_S = 30.0


def broker_id_of(identity: str | None) -> int:
    """`broker-3/<uuid>` -> 3; -1 for anything else."""
    if not identity or not identity.startswith("broker-"):
        return -1
    head = identity[len("broker-"):].split("/", 1)[0]
    return int(head) if head.isdigit() else -1


class ClusterMember:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        cfg = broker.config
        self.config = cfg
        self.broker_id = cfg.broker_id
        self.cluster = cfg["cluster.name"]
        self.identity = f"broker-{self.broker_id}/{uuid.uuid4().hex[:12]}"
        self.duration_ms = int(cfg["lease.duration.ms"])
        self.renew_s = int(cfg["lease.renew.interval.ms"]) / 1000.0
        self.check_s = int(cfg["controller.liveness.check.interval.ms"]) / 1000.0
        self.broker_lease_name = f"kelp-{self.cluster}-broker-{self.broker_id}"
        self.controller_lease_name = f"kelp-{self.cluster}-controller"
        self.leases: Any = None
        self.store: Any = None
        self.endpoint: BrokerEndpoint | None = None
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.controller_id = -1
        self.controller_epoch = -1
        self.controller: Controller | None = None
        self._liveness: Any = None
        self._broker_elector: Any = None
        self._controller_elector: Any = None
        self._controller_renewed = 0.0
        self._controller_start: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self._http: Any = None
        self._producer_ids: list[int] = []  # [next, end)
        self._pid_lock = asyncio.Lock()
        self.started = False
        self._stopping = False

    # -- backends -----------------------------------------------------------
    def _make_backends(self) -> None:
        from .leases import FileLeaseBackend, LeaseElector, LivenessView
        from .store import FileMetadataStore

        cfg = self.config
        if cfg["cluster.backend"] == "kube":
            from .kube_api import api_client_from
            from .kube_leases import KubeLeaseBackend
            from .kube_store import KubeMetadataStore

            namespace = cfg["kube.namespace"] or _service_account_namespace()
            api = api_client_from(kubeconfig=cfg["kube.config"] or None)
            labels = {"kelp.dev/cluster": self.cluster, "app.kubernetes.io/name": "kelp"}
            self.leases = KubeLeaseBackend(api, namespace=namespace, labels=labels)
            self.store = KubeMetadataStore(api, namespace=namespace, cluster=self.cluster)
        else:
            directory = cfg.cluster_dir
            directory.mkdir(parents=True, exist_ok=True)
            self.leases = FileLeaseBackend(directory)
            self.store = FileMetadataStore(directory)
        prefix = f"broker-{self.broker_id}/"
        self._broker_elector = LeaseElector(
            self.leases, name=self.broker_lease_name, identity=self.identity, duration_ms=self.duration_ms,
            may_take_over=lambda holder: holder.startswith(prefix),
        )
        self._controller_elector = LeaseElector(
            self.leases, name=self.controller_lease_name, identity=self.identity, duration_ms=self.duration_ms,
            may_take_over=lambda holder: holder.startswith(prefix),
        )
        self._liveness = LivenessView()

    # -- lifecycle ----------------------------------------------------------------
    async def start(self, endpoint: BrokerEndpoint) -> None:
        import aiohttp

        from dataclasses import replace

        self.endpoint = endpoint = replace(endpoint, incarnation=self.identity)
        self._make_backends()
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        await self._register()
        cluster, topics = await self.store.load()
        states = []
        for name, versioned in topics.items():
            try:
                states.append(topic_from_json(versioned.doc))
            except (KeyError, TypeError, ValueError) as exc:
                log.error("metadata of topic '%s' in the store is unreadable: %s", name, exc)
        self.broker.topics.apply_full(states)
        await self._refresh_brokers()
        self._tasks = [
            asyncio.create_task(self._renew_loop(), name="broker-lease"),
            asyncio.create_task(self._election_loop(), name="controller-election"),
        ]
        self.started = True
        log.info("broker %d joined cluster '%s' (%s backend): %d topic(s) from the store, live brokers %s",
                 self.broker_id, self.cluster, self.config["cluster.backend"], len(states), sorted(self.brokers))

    async def _register(self) -> None:
        assert self.endpoint is not None
        annotations = {ENDPOINT_ANNOTATION: json.dumps(self.endpoint.to_json(), sort_keys=True)}
        deadline = time.monotonic() + 2 * self.duration_ms / 1000.0 + 5
        while True:
            rec = await self._broker_elector.try_acquire_or_renew(annotations)
            if rec is not None:
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
        while True:
            await asyncio.sleep(self.renew_s)
            try:
                rec = await self._broker_elector.try_acquire_or_renew(annotations)
                if rec is None:
                    log.error("broker %d lost its liveness lease %s; the controller treats it as gone until it renews",
                              self.broker_id, self.broker_lease_name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("renewing lease %s failed: %s", self.broker_lease_name, exc)

    async def _election_loop(self) -> None:
        while True:
            try:
                rec = await self._controller_elector.try_acquire_or_renew()
                if rec is not None:
                    self._controller_renewed = time.monotonic()
                    # Taking over (loading the store, electing leaders, pushing metadata) runs beside
                    # this loop: the lease must keep being renewed however long that takes, or another
                    # broker takes it meanwhile and two controllers act at once.
                    if not self._starting_controller() and (self.controller is None or not self.controller.active):
                        self._controller_start = asyncio.create_task(
                            self._become_controller(rec.transitions), name="controller-takeover")
                        self._controller_start.add_done_callback(_report_takeover)
                else:
                    await self._cancel_takeover()
                    if self.controller is not None:
                        await self._resign_controller("the controller lease is held by another broker")
                    seen = self._controller_elector.record
                    if seen is not None and seen.holder:
                        holder = broker_id_of(seen.holder)
                        if holder >= 0 and seen.transitions >= self.controller_epoch:
                            self.controller_id = holder
                if self.controller is None:
                    await self._refresh_brokers()  # keep the liveness view warm for a takeover
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller election round failed")
            await asyncio.sleep(self.renew_s if self.controller is None else self.renew_s)

    def _lease_fresh(self) -> bool:
        margin = min(self.renew_s, self.duration_ms / 4000.0)
        return time.monotonic() - self._controller_renewed < self.duration_ms / 1000.0 - margin

    def _starting_controller(self) -> bool:
        return self._controller_start is not None and not self._controller_start.done()

    async def _cancel_takeover(self) -> None:
        task, self._controller_start = self._controller_start, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _become_controller(self, epoch: int) -> None:
        settings = ControllerSettings(self.config)
        topics = self.broker.topics
        controller = Controller(
            broker_id=self.broker_id, epoch=epoch, settings=settings, store=self.store,
            live_brokers=self._refresh_brokers, push=self._push, lease_fresh=self._lease_fresh,
            topic_config_check=topics.check_topic_configs,
        )
        self.controller = controller
        self.controller_id = self.broker_id
        self.controller_epoch = max(self.controller_epoch, epoch)
        try:
            await controller.start()
        except BaseException:  # failed, or cancelled because the lease was lost meanwhile
            if self.controller is controller:
                self.controller = None
            await controller.stop()
            raise

    async def _resign_controller(self, why: str) -> None:
        controller, self.controller = self.controller, None
        if controller is not None:
            log.warning("broker %d stops being the controller (epoch %d): %s", self.broker_id, controller.epoch, why)
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
        """Controlled shutdown: leadership moves away first; then leases are released."""
        self._stopping = True
        if self.started and self.config["controlled.shutdown.enable"]:
            try:
                result = await asyncio.wait_for(
                    self.call("controlled_shutdown", broker_id=self.broker_id),
                    int(self.config["controlled.shutdown.timeout.ms"]) / 1000.0)
                left = result.get("remaining_leaderships", [])
                if left:
                    log.warning("controlled shutdown: still leading %d partition(s) with no other in-sync replica: %s",
                                len(left), ", ".join(left[:10]))
                else:
                    log.info("controlled shutdown: leadership moved off broker %d", self.broker_id)
            except (KelpError, asyncio.TimeoutError, OSError) as exc:
                log.warning("controlled shutdown not completed (%s); stopping anyway", exc or type(exc).__name__)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._cancel_takeover()
        await self._resign_controller("the broker is stopping")
        for elector in (self._controller_elector, self._broker_elector):
            if elector is not None:
                try:
                    await elector.release()
                except Exception as exc:
                    log.debug("releasing a lease failed: %s", exc)
        if self._http is not None:
            await self._http.close()
        for backend in (self.leases, self.store):
            if backend is not None:
                await backend.close()

    # -- pushes from the controller ---------------------------------------------
    async def _push(self, broker: BrokerEndpoint, payload: dict) -> None:
        if broker.id == self.broker_id:
            self.apply(payload)
            return
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=max(1.0, min(5.0, self.duration_ms / 1000.0)))
        async with self._http.post(f"{broker.http_url}/cluster/v1/metadata", json=payload, timeout=timeout) as resp:
            if resp.status == 409:
                body = await resp.json(content_type=None)
                if body.get("error_code") == StaleControllerEpochError.code:
                    from .controller import StaleEpoch

                    raise StaleEpoch(body.get("message", "stale controller epoch"))
            if resp.status >= 300:
                raise KelpError(f"broker {broker.id} answered {resp.status}: {(await resp.text())[:200]}")

    def apply(self, payload: dict) -> None:
        """Apply a controller push (full or delta); refuses an older controller epoch."""
        epoch = int(payload["controller_epoch"])
        if epoch < self.controller_epoch:
            raise StaleControllerEpochError(
                f"metadata push from controller {payload.get('controller_id')} at epoch {epoch} refused: "
                f"broker {self.broker_id} has seen epoch {self.controller_epoch}"
            )
        self.controller_epoch = epoch
        self.controller_id = int(payload["controller_id"])
        self.brokers = {b.id: b for b in (BrokerEndpoint.from_json(d) for d in payload.get("brokers", []))}
        states = [topic_from_json(d) for d in payload.get("topics", [])]
        topics = self.broker.topics
        if payload.get("full"):
            topics.apply_full(states)
        else:
            for name in payload.get("deleted", []):
                topics.apply_deleted(name)
            for state in states:
                topics.apply_state(state)

    # -- requests to the controller ------------------------------------------------
    def _controller_url(self) -> str | None:
        ep = self.brokers.get(self.controller_id)
        return ep.http_url if ep is not None else None

    async def call(self, op: str, *, timeout_s: float = CONTROLLER_CALL_TIMEOUT_S, **kwargs: Any) -> Any:
        """Run a controller operation (in-process if this broker is the controller), retrying while none is elected."""
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        last: Exception | None = None
        while True:
            try:
                controller = self.controller
                if controller is not None and controller.active:
                    return await getattr(controller, op)(**kwargs)
                url = self._controller_url()
                if url is None or self.controller_id == self.broker_id:
                    raise NotControllerError(f"no controller known yet in cluster '{self.cluster}'")
                return await self._remote(url, op, kwargs)
            except (NotControllerError, OSError, asyncio.TimeoutError) as exc:
                last = exc
            except Exception as exc:
                import aiohttp

                if not isinstance(exc, aiohttp.ClientError):
                    raise
                last = exc
            if time.monotonic() + delay > deadline:
                raise RequestTimedOutError(
                    f"no controller answered '{op}' within {timeout_s:.0f}s (last: {last}); is a majority of brokers up?"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
            await self._learn_controller()

    async def _learn_controller(self) -> None:
        try:
            rec = await self.leases.get(self.controller_lease_name)
        except Exception:
            return
        if rec is not None and rec.holder:
            holder = broker_id_of(rec.holder)
            if holder >= 0:
                self.controller_id = holder
                if holder not in self.brokers:
                    await self._refresh_brokers_into_view()

    async def _refresh_brokers_into_view(self) -> None:
        alive = await self._refresh_brokers()
        for b, ep in alive.items():
            self.brokers.setdefault(b, ep)

    async def _remote(self, url: str, op: str, kwargs: dict) -> Any:
        async with self._http.post(f"{url}/cluster/v1/controller/{op}", json=kwargs) as resp:
            body = await resp.json(content_type=None)
            if resp.status < 300:
                return body
            code = int(body.get("error_code", -1)) if isinstance(body, dict) else -1
            message = body.get("message", "") if isinstance(body, dict) else str(body)
            raise error_for(code, message)

    # -- conveniences used by request paths ---------------------------------------------
    def partition_leader(self, topic: str, partition: int) -> tuple[int, str, int] | None:
        info = self.broker.topics.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            return None
        leader = info.partition_states[partition].leader
        ep = self.brokers.get(leader)
        if ep is None:
            return None
        return ep.id, ep.host, ep.port

    async def ensure_internal_topic(self, name: str, *, partitions: int, configs: dict[str, str]) -> None:
        if self.broker.topics.exists(name):
            return
        result = await self.call("ensure_internal_topic", name=name, partitions=partitions, configs=configs,
                                 replication_factor=int(self.config["offsets.topic.replication.factor"]),
                                 timeout_s=5.0)
        self.broker.topics.apply_state(topic_from_json(result))
        if not self.broker.topics.exists(name):
            raise CoordinatorNotAvailableError(f"internal topic '{name}' is being created; retry")

    async def alter_partition(self, topic: str, partition: int, *, leader_epoch: int, partition_epoch: int,
                              isr: list[int]) -> Any:
        from .model import PartitionState

        result = await self.call("alter_partition", topic=topic, partition=partition, leader=self.broker_id,
                                 leader_epoch=leader_epoch, partition_epoch=partition_epoch, isr=isr, timeout_s=10.0)
        self.broker.topics.apply_partition(topic, partition, PartitionState.from_json(result))
        return result

    async def next_producer_id(self) -> int:
        async with self._pid_lock:
            if not self._producer_ids or self._producer_ids[0] >= self._producer_ids[1]:
                block = await self.call("allocate_producer_ids", broker_id=self.broker_id)
                self._producer_ids = [int(block["first"]), int(block["first"]) + int(block["count"])]
            pid = self._producer_ids[0]
            self._producer_ids[0] += 1
            return pid

    async def partition_infos(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], Any]:
        """Log start/end, high watermark and size of partitions as their leaders know them (None where unknown)."""
        from kelp.broker.replica_manager import PartitionInfo

        replicas = self.broker.replicas
        out: dict[tuple[str, int], Any] = {}
        remote: dict[int, list[tuple[str, int]]] = {}
        for topic, p in keys:
            part = replicas.get_partition(topic, p)
            if part is not None and part.is_leader:
                out[(topic, p)] = replicas.partition_info(topic, p)
                continue
            info = self.broker.topics.get(topic)
            leader = info.partition_states[p].leader if info is not None and 0 <= p < info.partitions else -1
            if leader in self.brokers and leader != self.broker_id:
                remote.setdefault(leader, []).append((topic, p))
            else:
                out[(topic, p)] = replicas.partition_info(topic, p) if part is not None else None

        async def ask(leader: int, wanted: list[tuple[str, int]]) -> None:
            try:
                async with self._http.post(f"{self.brokers[leader].http_url}/cluster/v1/partitions/info",
                                           json={"partitions": [[t, p] for t, p in wanted]}) as resp:
                    body = await resp.json(content_type=None) if resp.status == 200 else {}
            except Exception as exc:
                log.debug("partition info from broker %d failed: %s", leader, exc)
                body = {}
            for item in body.get("partitions", []):
                if item.get("log_end_offset") is None:
                    continue
                out[(item["topic"], item["partition"])] = PartitionInfo(
                    item["topic"], item["partition"], item["log_start_offset"], item["log_end_offset"],
                    item["high_watermark"], item["size_bytes"])
            for key in wanted:
                out.setdefault(key, None)

        await asyncio.gather(*(ask(b, ks) for b, ks in remote.items()))
        return out

    async def append(self, topic: str, partition: int, batch: bytes, *, acks: int = 1, timeout_ms: int = 30000) -> Any:
        """Append one batch where the partition's leader is: here, or over HTTP on the leader (REST produce)."""
        from kelp.broker.replica_manager import ProduceResult

        part = self.broker.replicas.get_partition(topic, partition)
        info = self.broker.topics.get(topic)
        leader = info.partition_states[partition].leader if info is not None and 0 <= partition < info.partitions else -1
        if (part is not None and part.is_leader) or leader == self.broker_id or leader not in self.brokers:
            return await self.broker.replicas.append(topic, partition, batch, acks=acks, timeout_ms=timeout_ms)
        url = f"{self.brokers[leader].http_url}/cluster/v1/partitions/{topic}/{partition}/append?acks={acks}&timeout_ms={timeout_ms}"
        async with self._http.post(url, data=batch, headers={"Content-Type": "application/octet-stream"}) as resp:
            body = await resp.json(content_type=None)
            if resp.status >= 300:
                raise error_for(int(body.get("error_code", -1)), body.get("message", f"broker {leader} answered {resp.status}"))
        return ProduceResult(topic, partition, body["base_offset"], body["last_offset"], body["log_append_time_ms"],
                             body["log_start_offset"], body["record_count"])

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords where the partition's leader is: here, or over HTTP on the leader; the new log start."""
        part = self.broker.replicas.get_partition(topic, partition)
        info = self.broker.topics.check_partition(topic, partition)
        leader = info.partition_states[partition].leader
        if (part is not None and part.is_leader) or leader == self.broker_id or leader not in self.brokers:
            return await self.broker.replicas.delete_records(topic, partition, offset)
        url = f"{self.brokers[leader].http_url}/cluster/v1/partitions/{topic}/{partition}/delete-records?offset={offset}"
        async with self._http.post(url) as resp:
            body = await resp.json(content_type=None)
            if resp.status >= 300:
                raise error_for(int(body.get("error_code", -1)), body.get("message", f"broker {leader} answered {resp.status}"))
        return int(body["low_watermark"])

    async def replica_progress(self, topic: str, partition: int) -> dict[int, int] | None:
        """Each replica's log end offset as the partition's leader sees it."""
        part = self.broker.replicas.get_partition(topic, partition)
        if part is not None and part.is_leader:
            return part.describe_replicas()
        info = self.broker.topics.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            return None
        ep = self.brokers.get(info.partition_states[partition].leader)
        if ep is None:
            return None
        try:
            async with self._http.get(f"{ep.http_url}/cluster/v1/partitions/{topic}/{partition}/replicas") as resp:
                if resp.status != 200:
                    return None
                return {int(k): int(v) for k, v in (await resp.json(content_type=None)).items()}
        except Exception:
            return None

    def describe(self) -> dict:
        return {
            "cluster": self.cluster,
            "controller": self.controller_id,
            "controller_epoch": self.controller_epoch,
            "brokers": [b.to_json() for b in sorted(self.brokers.values(), key=lambda b: b.id)],
        }


def error_for(code: int, message: str) -> KelpError:
    """The KelpError subclass for a Kafka error code (the one table is kelp.errors)."""
    import kelp.errors as errors

    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, KelpError) and value is not KelpError \
                and getattr(value, "code", None) == code:
            return value(message)
    err = KelpError(message)
    err.code = code
    return err


def _report_takeover(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("taking over as controller failed; the next election round retries", exc_info=task.exception())


def _service_account_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as fh:
            return fh.read().strip() or "default"
    except OSError:
        return "default"
