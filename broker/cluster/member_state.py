"""What every part of a `ClusterMember` shares: the broker it serves, its view of the cluster, and its HTTP session.

Why it exists: a broker's membership is composed of objects by role — its leases and the controller election
(`member_leases.MemberLeases`), the metadata it applies (`member_metadata.MemberMetadata`), its controlled
shutdown (`member_shutdown.MemberShutdown`), the requests it sends elsewhere (`routing.LeaderRouting`) — around
the lifecycle in `member`. They read and change one view of the cluster (the image, the live brokers, the
controller, this process's registration); `MemberState` is that one object, handed to each part explicitly,
and `ControlSession` the one HTTP session to the other brokers that the parts calling them share.

`MemberHost` says what the member may use of the broker that owns it (the composition root hands it the parts it
has built). Nothing here decides anything: fields, and the session opened on first use.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Awaitable, Callable, Protocol

from kelp.clock import Monotonic, WallClockMs
from kelp.config.broker import BrokerConfig
from kelp.leases import LeaseBackend

from ..metadata.image import MetadataDelta, MetadataImage, Position
from ..metadata.model import BrokerEndpoint
from ..replica.manager import ReplicaManager
from ..topic_manager import TopicManager
from .controller import Controller
from .inter_broker import InterBrokerSecurity
from .metadata_log import MetadataLog

if TYPE_CHECKING:
    import aiohttp

__all__ = ["ControlSession", "MemberHost", "MemberState", "Sleep", "DeltaListener", "bounded_step"]

log = logging.getLogger("kelp.broker.cluster")

Sleep = Callable[[float], Awaitable[None]]
"""Sleeps for the seconds given (asyncio.sleep; tests inject one that moves their clock)."""

DeltaListener = Callable[[MetadataDelta], None]
"""Told each metadata delta the topic manager is given, after it (the broker's ACLs follow the log so)."""


class MemberHost(Protocol):
    """What a `ClusterMember` uses of its broker (`app.Broker`)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def topics(self) -> TopicManager: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    def request_stop(self, reason: str) -> None: ...


class MemberState:
    """This broker's view of the cluster, shared by the member's parts. The backends are None until
    `ClusterMember.start` makes them."""

    def __init__(self, broker: MemberHost, *, clock_ms: WallClockMs, monotonic: Monotonic, sleep: Sleep) -> None:
        self.broker = broker
        cfg = broker.config
        self.config = cfg
        self.broker_id = cfg.broker_id
        self.cluster: str = cfg["cluster.name"]
        self.identity = f"broker-{self.broker_id}/{uuid.uuid4().hex[:12]}"  # this process (a restart is a new one)
        self.duration_ms = int(cfg["lease.duration.ms"])
        self.renew_s = int(cfg["lease.renew.interval.ms"]) / 1000.0
        self.broker_lease_name = f"kelp-{self.cluster}-broker-{self.broker_id}"
        self.controller_lease_name = f"kelp-{self.cluster}-controller"
        # Wall clock for what the leases store; monotonic clock and sleep for freshness, bounds and backoffs.
        self.clock_ms = clock_ms
        self.monotonic = monotonic
        self.sleep = sleep
        self.leases: LeaseBackend | None = None
        self.metadata_log: MetadataLog | None = None
        self.endpoint: BrokerEndpoint | None = None
        # The live brokers, as the controller last told (or the leases say).
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.controller_id = -1
        self.controller: Controller | None = None  # this process's controller, while it holds the controller lease
        self.image = MetadataImage()
        self.seen_epoch = -1  # the newest controller epoch any delivery carried
        self.started = False  # deliveries are accepted (the image is loaded)
        self.registered = False  # the image registers this process: the managers follow it
        self.fenced = ""  # why this process lost its broker id to another one ("" while it holds it)
        # Where every live broker's lease says its metadata is: broker id -> (applied offset, digest, controller run).
        self.positions: dict[int, Position] = {}
        # What is wrong with the metadata as this broker sees it, kind -> count (`kelp_metadata_problems`): "diverged"
        # (deliveries of another history refused), "unreadable_leases", "snapshot_fallback", "history_refused".
        self.problems: dict[str, int] = {}
        # TLS and credentials for the other brokers (the composition root sets them; `start` makes them if unset).
        self.inter_broker: InterBrokerSecurity | None = None

    @property
    def controller_epoch(self) -> int:
        return max(self.seen_epoch, self.image.epoch)


async def bounded_step(step: Awaitable[None], what: str) -> None:
    """One step of stopping (releasing a lease, closing a backend), within 5 s; a failure is only logged: the
    broker goes on stopping."""
    try:
        await asyncio.wait_for(step, 5.0)
    except Exception as exc:
        log.debug("%s failed: %s", what, exc)


class ControlSession:
    """The control plane's HTTP session to the other brokers, opened by the first call to one: a broker alone never
    loads aiohttp's client for it (issue 38). TLS and credentials as `MemberState.inter_broker` sets them."""

    def __init__(self, state: MemberState) -> None:
        self._state = state
        self._http: aiohttp.ClientSession | None = None
        self._closed = False  # `close` ran: none is opened again

    def session(self) -> aiohttp.ClientSession:
        security = self._state.inter_broker
        assert security is not None, "set by ClusterMember.start"
        if self._http is None:
            if self._closed:
                raise RuntimeError(f"broker {self._state.broker_id} stopped: no call to another broker is made")
            import aiohttp

            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=10),
                connector=aiohttp.TCPConnector(ssl=security.http_ssl) if security.http_ssl is not None else None,
                auth=aiohttp.BasicAuth(*security.http_credentials) if security.http_credentials is not None else None)
        security.maybe_reload()  # rotated client certificates reach the next connection
        return self._http

    @property
    def opened(self) -> bool:
        return self._http is not None

    async def close(self) -> None:
        self._closed = True  # no session is opened after this
        if self._http is not None:
            await self._http.close()
