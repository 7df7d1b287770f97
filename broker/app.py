"""Composition root: builds every part of one broker and owns its lifecycle.

Why: one place decides the start order (storage -> topics -> replicas ->
groups, transactions -> listeners) and the reverse stop order (listeners first, so no
request reaches a closed log; then flush and close every segment). Each part
is an attribute that stays None until `start` has built it (so `stop` closes
exactly what was opened); once every one is built they are handed to the
listeners together as one `BrokerParts` (`kelp.broker.parts`): the Kafka
listener serves only from then on, and the HTTP routes behind the starting
gate read it. The HTTP listener itself comes first: its port listens before
the logs recover (`/healthz` answers while they do); its app
(`build_http_app(broker)`, seeing this object as `kelp.broker.http.keys.HttpBroker`)
is built with aiohttp at its first connection (`http_listener.py`, issue 38:
a broker nobody asks over HTTP does not hold them), and a failure to build it
stops the broker with its traceback. Every other part is imported plainly: a
part that fails to import fails the start with its traceback instead of
passing for a feature left out. The one optional part is chosen
explicitly: `metrics`, the broker's registry (None: one of its own is made); it is
handed to every part that counts (the listeners, the replica manager, the HTTP app).

Stopping is bounded by construction (`stop`, `stop_bound_s`): each step gets
a time limit, a step past it is cancelled and given `cancel_grace_s` to end,
and one that swallows its cancellation is abandoned with an ERROR naming it;
the final flush and close of every log always runs. A SIGTERM/SIGINT while
already stopping skips the steps left and goes straight to the flush, and
`run` (the process's event loop) does not wait without limit for tasks that
outlive the stop either.

This module must never implement protocol or storage logic itself.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import logging
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, TypeVar

from kelp.clock import monotonic
from kelp.config.broker import BrokerConfig
from kelp.config.keys import per_ip_limits
from kelp.config.log_config import LogConfig
from kelp.security.plain import plain_users
from kelp.security.principal import KafkaPrincipal, SslPrincipalMapper, principal_from_certificate
from kelp.security.tls import TlsReloader

from . import allocator
from .acl_manager import AclManager
from .client_quota_manager import ClientQuotaManager
from .cluster.inter_broker import InterBrokerSecurity, kafka_identities
from .cluster.member import ClusterMember
from .cluster.replica_fetcher import ReplicaFetcherManager
from .event_loop import loop_name, new_event_loop
from .groups import GroupCoordinator
from .groups import attach as attach_groups
from .http_listener import HttpListener
from .kafka.limits import ConnectionQuota, MemoryPool
from .kafka.listener_security import ListenerSecurity
from .kafka.server import KafkaServer
from .loop_monitor import LoopLagMonitor
from .metadata.client_quotas import ip_connection_rate
from .metadata.model import BrokerEndpoint
from .metrics import BrokerMetrics
from .parts import BrokerParts
from .replica.manager import ReplicaManager
from .storage import LogManager
from .topic_manager import TopicManager
from .transactions import TransactionCoordinator
from .transactions import attach as attach_transactions

if TYPE_CHECKING:
    from aiohttp import web

    from .http.access.authentication import HttpAuthenticator

__all__ = ["Broker", "PHASE_TIMEOUT_S", "CANCEL_GRACE_S"]

log = logging.getLogger("kelp.broker")

PHASE_TIMEOUT_S = 5.0  # each stop step after the controlled shutdown (listeners, fetchers, groups)
# Of a step's bound, the last part: a step still running then is cancelled and has this long to end. Inside
# the bound, so the documented total holds even for a step that ignores its cancellation.
CANCEL_GRACE_S = 1.0
# The steps bounded by the step timeout after leaving the cluster: fetchers, Kafka and HTTP listeners, groups.
_LATER_STEPS = 4

_T = TypeVar("_T")


class Broker:
    def __init__(self, config: BrokerConfig, *, step_timeout_s: float = PHASE_TIMEOUT_S,
                 cancel_grace_s: float = CANCEL_GRACE_S, metrics: BrokerMetrics | None = None) -> None:
        self.config = config
        self.step_timeout_s = step_timeout_s
        self.cancel_grace_s = min(cancel_grace_s, step_timeout_s)
        # The broker's metrics, handed to every part that counts; a registry of its own (never prometheus's global one).
        self.metrics = metrics or BrokerMetrics()
        # The parts, in the order `start` builds them; each None until it is built.
        self.topics: TopicManager | None = None
        self.logs: LogManager | None = None
        self.replicas: ReplicaManager | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.kafka_server: KafkaServer | None = None  # the first listener's (`listeners`)
        self.kafka_servers: list[KafkaServer] = []  # one per listener, in `listeners` order
        self.http_tls: TlsReloader | None = None  # the HTTP listener's TLS (http.ssl.enabled)
        self.cluster: ClusterMember | None = None
        self.groups: GroupCoordinator | None = None
        self.transactions: TransactionCoordinator | None = None
        self.acls: AclManager | None = None
        # The HTTP port, listening from the start; aiohttp and the routes loaded by its first connection.
        self.http_listener: HttpListener | None = None
        # All of them, once all are built: what the listeners serve from.
        self.parts: BrokerParts | None = None
        self.http_port: int | None = None
        self.started_at: float | None = None  # monotonic seconds (kelp.clock) when the start completed
        self._stopped = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._force = asyncio.Event()  # a second SIGTERM/SIGINT: skip what is left of the graceful phases
        self.stop_reason = ""
        self._retention_task: asyncio.Task[None] | None = None
        self._http_tls_task: asyncio.Task[None] | None = None
        self._stopping = False
        self.loop_monitor: LoopLagMonitor | None = None  # from `start` to the end of `stop`
        # The broker owns its process (`run`): start-up's objects are frozen out of the collector's reach.
        self.freeze_gc = False

    @property
    def stopping(self) -> bool:
        """`stop` has begun (`/readyz` says so)."""
        return self._stopping

    # -- lifecycle ------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        # Every listener's TLS material and SASL settings first: a missing certificate fails the start at once.
        setup = cfg.listener_setup
        securities = [ListenerSecurity(listener, setup, max_request_bytes=cfg["socket.request.max.bytes"])
                      for listener in setup.listeners]
        if setup.http_tls is not None:
            self.http_tls = TlsReloader.server(setup.http_tls, check_interval_s=setup.reload_interval_ms / 1000.0)
        for d in cfg.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        # The loop's lag is measured from the start: recovery and registration stalls show too (loop_monitor.py).
        m = self.metrics
        self.loop_monitor = LoopLagMonitor(m.loop_lag, m.loop_lag_max, m.gc_pauses,
                                           warn_s=cfg["kelp.loop.lag.warn.ms"] / 1000.0, name=f"broker {cfg.broker_id}")
        self.loop_monitor.start()
        # HTTP first: /healthz answers while recovery runs, so a liveness probe never kills a recovering broker.
        await self._start_http()
        default = LogConfig.from_kafka(cfg.default_topic_config())
        topics = self.topics = TopicManager(cfg, None)
        # Opening the logs runs recovery on every partition directory: file work, off the event loop.
        logs = self.logs = await asyncio.to_thread(
            LogManager, [str(d) for d in cfg.log_dirs], default, config_for=topics.log_config_or_none,
            cleaner_dedupe_buffer_bytes=cfg["log.cleaner.dedupe.buffer.size"],
        )
        topics.logs = logs
        replicas = self.replicas = ReplicaManager(cfg, logs, topics, metrics=self.metrics)
        topics.log_deleter = replicas.delete_log_later
        # One server per listener; the memory pools and the connection quota are the broker's, shared by all: the
        # clients' pool (queued.max.request.bytes), one as large for brokers' connections, a small one for
        # connections not yet authenticated (issue 33).
        pool = MemoryPool(_bound(cfg["queued.max.request.bytes"]))
        broker_pool = MemoryPool(_bound(cfg["queued.max.request.bytes"]))
        unauthenticated_pool = MemoryPool(cfg["kelp.unauthenticated.queued.max.request.bytes"])
        quota = ConnectionQuota(
            cfg["max.connections"], cfg["max.connections.per.ip"],
            per_ip_overrides=per_ip_limits(cfg["max.connections.per.ip.overrides"]),
            listener_max=cfg.per_listener("max.connections"), creation_rate=cfg["max.connection.creation.rate"],
            listener_rates=cfg.per_listener("max.connection.creation.rate"),
            protected=setup.inter_broker.listener.name if len(setup.listeners) > 1 else None,  # from max.connections
            ip_rates=lambda ip: (ip_connection_rate(self.cluster.state.image.client_quotas, ip) if self.cluster
                                 else None))
        identities = kafka_identities(setup)

        def is_broker(principal: KafkaPrincipal) -> bool:
            return principal in identities or (self.acls is not None and self.acls.is_listed_super_user(principal))

        for listener, security in zip(setup.listeners, securities, strict=True):
            ks = KafkaServer(
                metrics=self.metrics, host=listener.host, port=listener.port,
                advertised_host=listener.advertised_host, max_request_bytes=cfg["socket.request.max.bytes"],
                connections_max_idle_ms=_bound(cfg["connections.max.idle.ms"]), security=security, pool=pool,
                quota=quota, send_buffer_bytes=cfg["socket.send.buffer.bytes"],
                receive_buffer_bytes=cfg["socket.receive.buffer.bytes"], unauthenticated_pool=unauthenticated_pool,
                broker_pool=broker_pool, broker_principals=is_broker,
                authentication_timeout_ms=_bound(cfg["kelp.authentication.timeout.ms"]),
            )
            self.kafka_servers.append(ks)
            self.kafka_server = self.kafka_server or ks
            await ks.start(serve=False)  # bound now, serving once the metadata is read (below)
            if listener.advertised_port:
                ks.advertised_port = listener.advertised_port
        inter = next(s for s in self.kafka_servers if s.listener == setup.inter_broker.listener.name)
        endpoint = BrokerEndpoint(
            id=cfg.broker_id, host=inter.advertised_host, port=inter.advertised_port or inter.port,
            http_host=self.advertised_http_host, http_port=self.http_port or 0, rack=await self._rack(),
            listeners=tuple((s.listener, s.advertised_host, s.advertised_port or s.port) for s in self.kafka_servers),
            http_scheme="https" if self.http_tls is not None else "http",
        )
        cluster = self.cluster = ClusterMember(_MemberHost(cfg, topics, replicas, self.request_stop))
        # How this broker reaches the others (inter.broker.listener.name, http.ssl.*): one for both paths.
        cluster.state.inter_broker = inter_broker = InterBrokerSecurity(setup)
        topics.cluster = cluster
        acls = self.acls = AclManager(cfg)
        acls.cluster = cluster
        cluster.metadata.delta_listeners.append(acls.apply_delta)
        replicas.alter_partition = cluster.routing.alter_partition
        replicas.fetchers = self.fetchers = ReplicaFetcherManager(
            replicas=replicas, broker_id=cfg.broker_id, endpoint_of=lambda b: cluster.state.brokers.get(b), config=cfg,
            inter_broker=inter_broker)
        await cluster.start(endpoint)
        groups = self.groups = attach_groups(config=cfg, topics=topics, replicas=replicas, logs=logs)
        transactions = self.transactions = attach_transactions(config=cfg, topics=topics, replicas=replicas,
                                                               logs=logs, cluster=cluster)
        parts = self.parts = BrokerParts(config=cfg, logs=logs, topics=topics, replicas=replicas, cluster=cluster,
                                         groups=groups, transactions=transactions, acls=acls,
                                         quotas=ClientQuotaManager(lambda: cluster.state.image.client_quotas,
                                                                   windows=cfg["quota.window.num"],
                                                                   window_s=float(cfg["quota.window.size.seconds"])))
        if self.freeze_gc:
            _freeze_start_up_objects()
            allocator.trim()  # start-up's freed C heap back to the kernel (allocator.py)
        for ks in self.kafka_servers:
            await ks.serve(parts)
        if len(cluster.state.brokers) > 1 and self.http_listener is not None:
            # Other brokers call this one over HTTP from now on: load its app now, not in their first call (1-5 s).
            self.http_listener.prepare()
        self._retention_task = asyncio.create_task(self._maintenance_loop(parts))
        self.started_at = monotonic()
        log.info(
            "broker %d listening: kafka %s, http %s%s, data in %s",
            cfg.broker_id, ", ".join(f"{s.listener} ({s.security.protocol}) {s.advertised_host}:{s.port}"
                                     for s in self.kafka_servers),
            f"{self.http_host}:{self.http_port}", " (TLS)" if self.http_tls is not None else "",
            ", ".join(str(d) for d in cfg.log_dirs),
        )

    async def _rack(self) -> str | None:
        """`broker.rack`, else the value of the `broker.rack.node.label` label on this pod's node (rack.py)."""
        cfg = self.config
        if cfg["broker.rack"] or not cfg["broker.rack.node.label"]:
            return cfg["broker.rack"] or None
        from kelp.kube.api import api_client_from

        from .cluster.rack import rack_from_node

        rack = await asyncio.to_thread(
            rack_from_node, lambda: api_client_from(kubeconfig=cfg["kube.config"] or None),
            cfg["kube.node.name"], cfg["broker.rack.node.label"])
        log.info("broker %d: rack %s (node %s, label %s)", cfg.broker_id, rack or "unset",
                 cfg["kube.node.name"], cfg["broker.rack.node.label"])
        return rack

    @property
    def advertised_http_host(self) -> str:
        host = self.http_host
        if host in ("0.0.0.0", "::", ""):
            return self.config["advertised.host"] or "127.0.0.1"
        return host

    @property
    def http_host(self) -> str:
        host: str = self.config["http.host"] or self.config["host"]
        return host

    def _http_authenticator(self) -> HttpAuthenticator:
        """How HTTP clients prove who they are (http.authentication.methods): HTTP Basic against the SASL users
        (the listeners' PLAIN users, the SCRAM credentials of the metadata log), a TLS client certificate by
        ssl.principal.mapping.rules, a bearer token by a listener's OAUTHBEARER validator
        (http/access/bearer_tokens.py)."""
        from .http.access.authentication import HttpAuthenticator, resolve_methods
        from .http.access.basic_credentials import SaslUsersCheck
        from .http.access.bearer_tokens import bearer_check

        cfg = self.config
        plain = [plain_users([m.jaas]) for listener in cfg.listener_setup.listeners
                 for name, m in listener.mechanisms.items() if name == "PLAIN" and m.jaas is not None]
        mapper = SslPrincipalMapper(cfg.get("ssl.principal.mapping.rules") or "DEFAULT")
        bearer = bearer_check(cfg) if "bearer" in resolve_methods(cfg) else None
        return HttpAuthenticator.from_config(
            cfg, bearer=bearer, certificate=lambda der: principal_from_certificate(der, mapper),
            basic=SaslUsersCheck.of(plain, lambda: self.cluster.state.image.scram_credentials if self.cluster else {}))

    async def _start_http(self) -> None:
        listener = self.http_listener = HttpListener(
            self._build_http, on_failure=lambda: self.request_stop("the HTTP listener could not be built"))
        tls = self.http_tls
        self.http_port = await listener.start(self.http_host, self.config["http.port"],
                                              tls.context if tls is not None else None)
        if tls is not None:
            self._http_tls_task = asyncio.create_task(self._watch_http_certificates(tls))

    async def _build_http(self) -> web.AppRunner:
        """The HTTP listener's application, at its first connection (http_listener.py): aiohttp and the routes
        imported in a worker thread (0.1-0.3 s of imports the loop need not wait for), the app built on the loop."""
        await asyncio.to_thread(_import_http_modules)
        from aiohttp import web

        from .http.app import build_http_app

        app = build_http_app(self, authenticator=self._http_authenticator())
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=PHASE_TIMEOUT_S / 2)
        await runner.setup()
        return runner

    async def _watch_http_certificates(self, tls: TlsReloader) -> None:
        """A rotated HTTP certificate serves every new connection (ssl.reload.interval.ms)."""
        interval = min(self.config["ssl.reload.interval.ms"] / 4000.0, 5.0)
        while True:
            await asyncio.sleep(interval)
            try:
                tls.maybe_reload()
            except Exception:
                log.exception("checking the HTTP listener's certificate files failed")

    async def _maintenance_loop(self, parts: BrokerParts) -> None:
        """Time-driven log work: roll/flush by time (1 s), checkpoints of changed partitions (5 s), retention and
        cleaning, and forgetting idle idempotent producers (producer.id.expiration.check.interval.ms, at 1 s
        granularity).

        Everything that touches files (fsync on roll/flush, checkpoint files,
        segment deletion, compaction) runs in a worker thread: a `Log` guards
        itself with its lock, and the cleaner holds it only for its final swap,
        so the event loop keeps serving requests meanwhile.
        """
        loop = asyncio.get_running_loop()
        replicas, logs = parts.replicas, parts.logs
        retention_every = self.config["log.retention.check.interval.ms"] / 1000.0
        next_retention = loop.time() + min(retention_every, 30.0)
        next_checkpoint = loop.time() + 5.0
        expire_every = self.config["producer.id.expiration.check.interval.ms"] / 1000.0
        next_expiry = loop.time() + expire_every
        while True:
            await asyncio.sleep(1.0)
            now = loop.time()
            try:
                replicas.check_isr()
                if now >= next_expiry:
                    next_expiry = now + expire_every
                    replicas.expire_producers()  # memory only, on the loop: the state is the loop's
                await asyncio.to_thread(_roll_and_flush_by_time, logs)
                if now >= next_checkpoint:
                    next_checkpoint = now + 5.0
                    await asyncio.to_thread(replicas.write_checkpoints, replicas.take_dirty())
                if now >= next_retention:
                    next_retention = now + retention_every
                    await self.run_retention_and_cleaner()
            except Exception:
                log.exception("log maintenance failed")

    async def run_retention_and_cleaner(self) -> tuple[int, int]:
        """Retention then compaction, off the event loop; returns (segments deleted, logs cleaned): (0, 0)
        before the logs are open."""
        logs = self.logs
        if logs is None:
            return 0, 0
        deleted = await asyncio.to_thread(logs.run_retention)
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)
        cleaned = await asyncio.to_thread(logs.run_cleaner)
        return deleted, cleaned

    def request_stop(self, reason: str) -> None:
        """Ask `serve_forever` to stop the broker (the cluster member does when this process lost its broker id)."""
        self.stop_reason = self.stop_reason or reason
        self._stop_requested.set()

    def stop_bound_s(self) -> float:
        """How long `stop` may take before the final flush, whatever its steps do (the documented bound):
        leaving the cluster (controlled.shutdown.timeout.ms + the step timeout), the four later steps (the
        step timeout each) and the log maintenance task's cancellation (the cancel grace)."""
        return (int(self.config["controlled.shutdown.timeout.ms"]) / 1000.0 + self.step_timeout_s
                + _LATER_STEPS * self.step_timeout_s + self.cancel_grace_s)

    async def _phase(self, what: str, step: Callable[[], Awaitable[object]], timeout_s: float) -> None:
        """One step of stopping, at most `timeout_s` all told: past `timeout_s - cancel_grace_s` it is
        cancelled and given the rest to end; a step that swallows its cancellation (Python 3.11's `wait_for`
        racing a refused connect did, in the replica fetcher: issue 17 item 16) is abandoned with an ERROR
        naming it — awaiting it would hang the stop and the flush after it forever. A second stop signal
        (`_force`) cancels the step in progress without waiting for it, and skips any step not begun."""
        if self._force.is_set():
            log.warning("stopping broker %d: %s skipped (a second stop signal)", self.config.broker_id, what)
            return
        try:
            task = asyncio.ensure_future(step())
        except Exception:  # a part whose stop fails before it is even a coroutine: the flush still comes
            log.exception("stopping broker %d: %s failed; going on", self.config.broker_id, what)
            return
        force = asyncio.ensure_future(self._force.wait())
        try:
            run_s = max(0.0, timeout_s - self.cancel_grace_s)
            done, _ = await asyncio.wait({task, force}, timeout=run_s, return_when=asyncio.FIRST_COMPLETED)
            if task not in done:
                task.cancel()
                if force not in done:
                    log.error("stopping broker %d: %s cancelled (it did not finish within %gs)",
                              self.config.broker_id, what, run_s)
                    done, _ = await asyncio.wait({task, force}, timeout=timeout_s - run_s,
                                                 return_when=asyncio.FIRST_COMPLETED)
                if task not in done:
                    task.add_done_callback(_retrieve)
                    if self._force.is_set():  # asked for: a warning, not an error
                        log.warning("stopping broker %d: %s abandoned: cut short by a second stop signal; going on",
                                    self.config.broker_id, what)
                    else:
                        log.error("stopping broker %d: %s abandoned: it did not end within %gs of its cancellation;"
                                  " going on", self.config.broker_id, what, timeout_s - run_s)
                    return
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                log.error("stopping broker %d: %s failed; going on", self.config.broker_id, what, exc_info=exc)
        finally:
            force.cancel()

    async def stop(self) -> None:
        """Stop within `stop_bound_s()`: controlled shutdown (at most controlled.shutdown.timeout.ms), then each
        listener and part (at most `step_timeout_s` each), then every log flushed, checkpointed and closed —
        always, however the steps before it ended."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        log.info("broker %d stopping%s", self.config.broker_id, f" ({self.stop_reason})" if self.stop_reason else "")
        step_s = self.step_timeout_s
        if self.cluster is not None:
            # Controlled shutdown: leadership moves away while the listeners still serve, then the leases go.
            bound = int(self.config["controlled.shutdown.timeout.ms"]) / 1000.0 + step_s
            await self._phase("leaving the cluster", self.cluster.stop, bound)
        if self.fetchers is not None:
            await self._phase("stopping the replica fetchers", self.fetchers.stop, step_s)
        if self._retention_task is not None:
            task = self._retention_task
            task.cancel()  # nothing graceful to wait for: its file work is in worker threads
            done, _ = await asyncio.wait({task}, timeout=0 if self._force.is_set() else self.cancel_grace_s)
            if not done:
                task.add_done_callback(_retrieve)
                log.error("stopping broker %d: the log maintenance task abandoned: it did not end within %gs of "
                          "its cancellation; going on", self.config.broker_id, self.cancel_grace_s)
        servers = self.kafka_servers or ([self.kafka_server] if self.kafka_server is not None else [])
        if servers:
            await self._phase("stopping the Kafka listener", lambda: _stop_all(servers), step_s)
        if self._http_tls_task is not None:
            self._http_tls_task.cancel()
        if self.http_listener is not None:
            await self._phase("stopping the HTTP listener", self.http_listener.cleanup, step_s)
        if self.transactions is not None:
            await self._phase("stopping the transaction coordinator", self.transactions.stop, step_s)
        if self.groups is not None:
            await self._phase("stopping the group coordinator", self.groups.stop, step_s)
        try:
            if self.replicas is not None:
                self.replicas.close()
        except Exception:
            log.exception("stopping broker %d: closing the replica manager failed; flushing the logs anyway",
                          self.config.broker_id)
        if self.logs is not None:
            # Each log flushes, checkpoints and closes its segments; unchanged ones skip the fsync.
            await asyncio.to_thread(self.logs.close_all)
        if self.loop_monitor is not None:
            self.loop_monitor.stop()
        log.info("broker %d stopped; all segments flushed and closed", self.config.broker_id)
        self._stopped.set()

    def run(self) -> None:
        """The process's event loop: `serve_forever` as `asyncio.run` would, except that the tasks still alive
        after `stop` (an abandoned step) are cancelled and waited for at most `cancel_grace_s`, not forever —
        the logs are flushed by then, and `asyncio.run`'s teardown would hang on a task that swallows its
        cancellation exactly as an unbounded stop did."""
        allocator.tune()  # this process is the broker's: large buffers reused from the heap (allocator.py)
        loop = new_event_loop(str(self.config["event.loop"]))  # asyncio's or uvloop's (event_loop.py)
        self.freeze_gc = True
        try:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.serve_forever())
        finally:
            try:
                leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for t in leftovers:
                    t.cancel()
                if leftovers:
                    _, pending = loop.run_until_complete(asyncio.wait(leftovers, timeout=self.cancel_grace_s))
                    for t in pending:
                        t.add_done_callback(_retrieve)
                        log.error("broker %d: task %s did not end within %gs of its cancellation; exiting without "
                                  "it", self.config.broker_id, t.get_name(), self.cancel_grace_s)
                loop.run_until_complete(asyncio.wait([loop.create_task(loop.shutdown_asyncgens())],
                                                     timeout=self.cancel_grace_s))
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def on_stop_signal(self) -> None:
        """SIGTERM/SIGINT: the first stops the broker gracefully; one while it is already stopping skips the steps
        left (and any in progress) and goes straight to flushing the logs, then the process exits."""
        if self._stop_requested.is_set():
            log.warning("broker %d: stop signal while stopping: skipping what is left of the graceful shutdown; "
                        "flushing the logs and exiting", self.config.broker_id)
            self._force.set()
        self._stop_requested.set()

    async def serve_forever(self, *, ready_line: bool = True) -> None:
        """Start, print the readiness line, run until SIGTERM/SIGINT, stop."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.on_stop_signal)
            except (NotImplementedError, RuntimeError):
                pass
        # A stop signal while starting (log recovery, waiting to be registered by the controller) stops the
        # start: Kubernetes' SIGTERM to a pod that never got Ready must not wait out the registration bound.
        starting = asyncio.ensure_future(self.start())
        signalled = asyncio.ensure_future(self._stop_requested.wait())
        try:
            await asyncio.wait({starting, signalled}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                log.warning("broker %d: stop requested while starting (%s); the start is abandoned",
                            self.config.broker_id, self.stop_reason or "signal")
                starting.cancel()
                await asyncio.wait({starting}, timeout=PHASE_TIMEOUT_S)
                await self.stop()
                return
            starting.result()
        except BaseException:
            if not starting.done():
                starting.cancel()
            await self.stop()  # close whatever was opened (logs) before reporting the failure
            raise
        finally:
            signalled.cancel()
        ks = self.kafka_server
        if ready_line and ks is not None:
            info = {
                "event": "listening",
                "kafka": f"{ks.advertised_host}:{ks.port}",
                "listeners": {s.listener: f"{s.advertised_host}:{s.port}" for s in self.kafka_servers},
                "http": f"{self.http_host}:{self.http_port}",
                "log_dirs": [str(d) for d in self.config.log_dirs],
                "broker_id": self.config.broker_id,
                "event_loop": loop_name(asyncio.get_running_loop()),
            }
            sys.stdout.write(json.dumps(info) + "\n")
            sys.stdout.flush()
        try:
            await self._stop_requested.wait()
        finally:
            await self.stop()


async def _stop_all(servers: list[KafkaServer]) -> None:
    await asyncio.gather(*(s.stop() for s in servers))


def _import_http_modules() -> None:
    """aiohttp and the HTTP listener's modules, imported by a worker thread (`Broker._build_http`)."""
    for module in ("aiohttp.web", "kelp.broker.http.app", "kelp.broker.http.access.basic_credentials",
                   "kelp.broker.http.access.bearer_tokens"):
        importlib.import_module(module)


def _freeze_start_up_objects() -> None:
    """Move what start-up built (modules, classes, the parts: ~90,000 objects) out of the collector's reach.

    They live as long as the process, yet every full collection walked them all: 25 ms at best on a 2-core
    machine, 170 ms when it was busy, on the event loop (issue 23). One collection first (once, before
    serving), so start-up's garbage is not frozen with them; later full collections walk only what came after.
    Only a broker that owns its process (`run`) does this: in a test process it would freeze the tests' objects.
    """
    gc.collect()
    gc.freeze()


def _roll_and_flush_by_time(logs: LogManager) -> None:
    logs.roll_and_flush_by_time()


def _retrieve(task: asyncio.Future[_T]) -> None:
    """Done callback of an abandoned step: its late outcome was already reported as abandoned, not unretrieved."""
    if not task.cancelled():
        task.exception()


@dataclass(frozen=True)
class _MemberHost:
    """What the cluster member uses of this broker (`member_state.MemberHost`), every part built."""

    config: BrokerConfig
    topics: TopicManager
    replicas: ReplicaManager
    request_stop: Callable[[str], None]


def _bound(value: int) -> int | None:
    """A config bound where -1 means none (queued.max.request.bytes, connections.max.idle.ms)."""
    return None if value == -1 else value
