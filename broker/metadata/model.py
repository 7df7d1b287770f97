"""The cluster-metadata model: brokers, topics, and each partition's replicas, leader, epochs and ISR.

Why: every request path (Metadata, Produce, Fetch, ListOffsets, FindCoordinator,
the HTTP API) and the controller must agree on one shape of the cluster's
state. The controller writes these values to the metadata store and pushes
them to brokers; brokers only apply what they are given. The JSON forms here
(`*Json`, TypedDicts) are the store's and the push's wire format; `from_json`
converts every field it reads, so a malformed document raises KeyError,
TypeError or ValueError, which the metadata layer reports as corrupt.

Values are immutable: a change makes a new `PartitionState`/`TopicState`
(`dataclasses.replace`), so a snapshot handed to a request can never change
under it. Being immutable, equal values decoded from the log are one object
(`PartitionState.from_json` shares equal states and equal id tuples): at RF 1
every new partition of a broker is the same state, and a topic of 10,000
partitions held 10,000 states and 20,000 one-id tuples per image (issue 38).
This module does no I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Hashable, Iterable, Mapping, NotRequired, TypedDict, TypeVar

__all__ = [
    "BrokerEndpoint",
    "BrokerEndpointJson",
    "PartitionState",
    "PartitionStateJson",
    "TopicState",
    "TopicStateJson",
    "NO_LEADER",
    "topic_from_json",
]

NO_LEADER = -1
SHARED_LIMIT = 4096  # distinct states (and id tuples) `from_json` remembers; more start the memo afresh

_shared_ids: dict[tuple[int, ...], tuple[int, ...]] = {}
_shared_states: dict["PartitionState", "PartitionState"] = {}
_V = TypeVar("_V", bound=Hashable)


def _shared(cache: dict[_V, _V], value: _V) -> _V:
    """The object made before equal to `value` (one per value, immutable), `value` itself the first time; the
    cache starts over at SHARED_LIMIT entries."""
    found = cache.get(value)
    if found is None:
        if len(cache) >= SHARED_LIMIT:
            cache.clear()
        found = cache[value] = value
    return found


def _ids(values: Iterable[object]) -> tuple[int, ...]:
    """Broker ids as a tuple, the one made before for equal ids (replica lists and ISRs repeat over partitions)."""
    ids = tuple(int(v) for v in values)  # type: ignore[call-overload]  # why: JSON ints or digit strings
    return _shared(_shared_ids, ids) if ids else ()


class ListenerAddressJson(TypedDict):
    name: str
    host: str
    port: int


class BrokerEndpointJson(TypedDict):
    """`BrokerEndpoint` as the lease annotations and the metadata push carry it (older brokers wrote no
    `http_host`, `rack`, `incarnation`, `listeners` or `http_scheme`)."""

    id: int
    host: str
    port: int
    http_host: NotRequired[str]
    http_port: int
    rack: NotRequired[str | None]
    incarnation: NotRequired[str]
    listeners: NotRequired[list[ListenerAddressJson]]
    http_scheme: NotRequired[str]


class PartitionStateJson(TypedDict):
    """`PartitionState` in the metadata log; the reassignment fields only while one runs."""

    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: NotRequired[int]
    adding: NotRequired[list[int]]
    removing: NotRequired[list[int]]
    original: NotRequired[list[int]]


class TopicStateJson(TypedDict):
    """`TopicState` in the metadata log (`topic_id` and `configs` may be absent from an old document)."""

    name: str
    topic_id: NotRequired[str]
    configs: NotRequired[dict[str, str]]
    partitions: list[PartitionStateJson]


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """Where a live broker listens: Kafka for clients and replicas, HTTP for admin and controller RPCs.

    `host`/`port` are the inter-broker listener's advertised address (replicas fetch there); `listeners`
    every Kafka listener's, `(name, host, port)`, for Metadata answers, which give a client the addresses of
    the listener it came in on (Kafka's rule). An endpoint from a broker before listeners has none: its one
    address serves every listener."""

    id: int
    host: str
    port: int
    http_host: str
    http_port: int
    rack: str | None = None
    incarnation: str = ""  # changes with every process start: a restarted broker is a new registration
    listeners: tuple[tuple[str, str, int], ...] = ()
    http_scheme: str = "http"  # https when the HTTP listener uses TLS (http.ssl.enabled)

    @property
    def http_url(self) -> str:
        return f"{self.http_scheme}://{self.http_host}:{self.http_port}"

    def address(self, listener: str) -> tuple[str, int] | None:
        """The advertised (host, port) of `listener` on this broker; None when it has no such listener."""
        if not self.listeners:
            return self.host, self.port
        return next(((host, port) for name, host, port in self.listeners if name == listener), None)

    def to_json(self) -> BrokerEndpointJson:
        out: BrokerEndpointJson = {
            "id": self.id, "host": self.host, "port": self.port, "http_host": self.http_host,
            "http_port": self.http_port, "rack": self.rack, "incarnation": self.incarnation,
            "listeners": [{"name": n, "host": h, "port": p} for n, h, p in self.listeners]}
        if self.http_scheme != "http":
            out["http_scheme"] = self.http_scheme
        return out

    @classmethod
    def from_json(cls, d: BrokerEndpointJson) -> "BrokerEndpoint":
        listeners = tuple((str(item["name"]), str(item["host"]), int(item["port"])) for item in d.get("listeners", []))
        scheme = str(d.get("http_scheme") or "http")
        if scheme not in ("http", "https"):
            raise ValueError(f"broker {d['id']}: HTTP scheme {scheme!r} is neither http nor https")
        return cls(int(d["id"]), str(d["host"]), int(d["port"]), str(d.get("http_host") or d["host"]),
                   int(d["http_port"]), d.get("rack") or None, str(d.get("incarnation") or ""), listeners, scheme)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as the controller decided it.

    `leader_epoch` changes with every leader change (fences produce/fetch of
    the old leader); `partition_epoch` changes with every change at all
    (ISR, replicas), and fences stale AlterPartition requests. During a
    reassignment `replicas` is the union of old and new (the new ones first,
    as Kafka orders it), `adding`/`removing` say which are which, and
    `original` keeps the replica list as it was, in its order, so a cancel
    restores the preferred leader too.
    """

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    original: tuple[int, ...] = ()

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    def to_json(self) -> PartitionStateJson:
        out: PartitionStateJson = {
            "replicas": list(self.replicas), "leader": self.leader, "leader_epoch": self.leader_epoch,
            "isr": list(self.isr), "partition_epoch": self.partition_epoch,
        }
        if self.adding:
            out["adding"] = list(self.adding)
        if self.removing:
            out["removing"] = list(self.removing)
        if self.original:
            out["original"] = list(self.original)
        return out

    @classmethod
    def from_json(cls, d: PartitionStateJson) -> "PartitionState":
        """The state `d` holds: the very object decoded before for an equal state (values are immutable, so
        sharing is invisible but to `is`; `ReplicaManager.apply_topic` skips a state it applied by identity,
        and an equal one would change nothing)."""
        state = cls(
            _ids(d["replicas"]), int(d["leader"]), int(d["leader_epoch"]), _ids(d["isr"]),
            int(d.get("partition_epoch", 0)), _ids(d.get("adding", ())), _ids(d.get("removing", ())),
            _ids(d.get("original", ())),
        )
        return _shared(_shared_states, state)


INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


@dataclass(frozen=True, slots=True)
class TopicState:
    """A topic: its id, config overrides and the state of every partition."""

    name: str
    partition_states: tuple[PartitionState, ...]
    configs: Mapping[str, str] = field(default_factory=dict)
    topic_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def partitions(self) -> int:
        return len(self.partition_states)

    @property
    def replication_factor(self) -> int:
        return len(self.partition_states[0].target_replicas) if self.partition_states else 0

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def partition(self, p: int) -> PartitionState:
        return self.partition_states[p]

    def with_partition(self, p: int, state: PartitionState) -> "TopicState":
        states = list(self.partition_states)
        states[p] = state
        return replace(self, partition_states=tuple(states))

    def replicas_on(self, broker_id: int) -> list[int]:
        return [i for i, s in enumerate(self.partition_states) if broker_id in s.replicas]

    def to_json(self) -> TopicStateJson:
        return {
            "name": self.name, "topic_id": self.topic_id, "configs": dict(self.configs),
            "partitions": [s.to_json() for s in self.partition_states],
        }


def topic_from_json(d: TopicStateJson) -> TopicState:
    return TopicState(
        name=str(d["name"]),
        partition_states=tuple(PartitionState.from_json(p) for p in d["partitions"]),
        configs={str(k): str(v) for k, v in (d.get("configs") or {}).items()},
        topic_id=str(d.get("topic_id") or uuid.uuid4().hex),
    )


def live_isr(state: PartitionState, alive: Iterable[int]) -> tuple[int, ...]:
    alive_set = set(alive)
    return tuple(r for r in state.isr if r in alive_set)
