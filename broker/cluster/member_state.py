"""What every part of a `ClusterMember` shares, declared once: the broker it serves, its state, its helpers.

Why it exists: a broker's membership is split by role into mixins — its leases and the controller
election (`member_leases`), the metadata it applies (`member_metadata`), its controlled shutdown
(`member_shutdown`), the requests it sends elsewhere (`routing`) — around the lifecycle in `member`.
Each part works on the same fields, which `ClusterMember.__init__` sets, and calls helpers another
part defines. Declaring them here once gives every part, and a type checker, one picture of them: a
call to a helper is checked against its real signature (mypy checks each definition against this one).

`MemberHost` says what the member may use of the broker that owns it (the composition root hands
it the parts it has built). This module must never hold logic or set a value: it is a list of names and types.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Awaitable, Callable, Protocol

from kelp.clock import Monotonic, WallClockMs
from kelp.config.broker import BrokerConfig
from kelp.json_types import JsonObject
from kelp.leases import LeaseBackend, LeaseElector, LivenessView

from ..metadata.image import MetadataDelta, MetadataImage, Position
from ..metadata.model import BrokerEndpoint
from ..metadata.records import MetadataPush
from ..replica.manager import ReplicaManager
from ..topic_manager import TopicManager
from .controller import Controller
from .inter_broker import InterBrokerSecurity
from .metadata_log import MetadataLog

if TYPE_CHECKING:
    import aiohttp

__all__ = ["MemberHost", "MemberState", "Sleep", "DeltaListener"]

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
    """The fields and helpers of `ClusterMember` its parts use (set by `ClusterMember.__init__`, defined by the
    parts). The backends and electors are None until `start` makes them (`_make_backends`)."""

    broker: MemberHost
    config: BrokerConfig
    broker_id: int
    cluster: str
    identity: str  # `broker-<id>/<uuid>`: this process (a restart is a new one)
    duration_ms: int
    renew_s: float
    broker_lease_name: str
    controller_lease_name: str
    clock_ms: WallClockMs
    monotonic: Monotonic
    sleep: Sleep
    leases: LeaseBackend | None
    metadata_log: MetadataLog | None
    endpoint: BrokerEndpoint | None
    brokers: dict[int, BrokerEndpoint]  # the live brokers, as the controller last told (or the leases say)
    controller_id: int
    controller: Controller | None  # this process's controller, while it holds the controller lease
    image: MetadataImage
    delta_listeners: list[DeltaListener]
    started: bool
    registered: bool
    fenced: str
    # Where every live broker's lease says its metadata is: broker id -> (applied offset, digest, controller run).
    positions: dict[int, Position]
    # What is wrong with the metadata as this broker sees it, kind -> count (`kelp_metadata_problems`): "diverged"
    # (deliveries of another history refused), "unreadable_leases", "snapshot_fallback", "history_refused".
    problems: dict[str, int]
    _seen_epoch: int
    _applied_waiters: list[tuple[int, asyncio.Future[None]]]
    _registration: asyncio.Event
    _liveness: LivenessView | None
    _broker_elector: LeaseElector | None
    _controller_elector: LeaseElector | None
    _controller_renewed: float
    _broker_renewed: float
    _controller_start: asyncio.Task[None] | None
    _http: aiohttp.ClientSession | None  # opened by the first call to another broker (routing.py's `_session`)
    _http_closed: bool  # `stop` closed it: none is opened again
    inter_broker: InterBrokerSecurity | None  # TLS and credentials for the other brokers (made by `start` if unset)

    if TYPE_CHECKING:  # defined by `ClusterMember` and its parts; declared for the type checker alone, never here
        @property
        def controller_epoch(self) -> int: ...

        # -- routing.py --
        async def call(self, op: str, *, timeout_s: float = ..., **kwargs: object) -> JsonObject: ...

        def _session(self) -> aiohttp.ClientSession: ...

        # -- member_leases.py --
        async def _refresh_brokers(self) -> dict[int, BrokerEndpoint]: ...

        def _lease_fresh(self) -> bool: ...

        # -- member.py --
        async def _become_controller(self) -> None: ...

        async def _resign_controller(self, why: str) -> None: ...

        # -- member_metadata.py --
        async def _push(self, broker: BrokerEndpoint, payload: MetadataPush) -> int: ...

        def apply(self, payload: MetadataPush) -> int: ...

        async def wait_applied(self, offset: int, timeout_s: float) -> bool: ...

        def _fail_waiters(self) -> None: ...

        def tell_listeners(self, delta: MetadataDelta) -> None: ...
