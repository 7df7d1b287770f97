"""FindCoordinator answers the leader of the group's `__consumer_offsets` partition.

The handler runs against a fake broker: a fake cluster (partition leaders, the
controller's `ensure_internal_topic`) and a real coordinator from the harness.
The topic is created lazily on the first question; until then, and while a
partition has no leader, the answer is COORDINATOR_NOT_AVAILABLE (15).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from kafka.protocol.metadata import FindCoordinatorRequest

from kelp.broker.groups.coordinator_lookup import CoordinatorLocator
from kelp.broker.groups.placement import OFFSETS_TOPIC, partition_for_group
from kelp.broker.kafka.handlers.groups import handle_find_coordinator
from kelp.broker.kafka.handlers.registry import RequestContext
from kelp.errors import CoordinatorNotAvailableError, ErrorCode
from tests.support.acls import open_acls

from .harness import make_coordinator

N = 4
THIS_BROKER = 1


@dataclass
class FakeCluster:
    """Leaders by partition; `ensure_internal_topic` records calls and does what the test says."""

    topics: dict[str, Any]
    leaders: dict[int, tuple[int, str, int]] = field(default_factory=dict)
    created: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)
    on_create: Any = None  # async callable run by ensure_internal_topic
    # The members' endpoints by listener (FindCoordinator answers the request's listener): none known here, so
    # the coordinator's address is the one `partition_leader` gave.
    brokers: dict[int, Any] = field(default_factory=dict)
    endpoint: Any = None

    @property
    def state(self) -> FakeCluster:  # the member's view (`brokers`, `endpoint`) and its routing are this one fake
        return self

    @property
    def routing(self) -> FakeCluster:
        return self

    def partition_leader(self, topic: str, partition: int) -> tuple[int, str, int] | None:
        if topic != OFFSETS_TOPIC or topic not in self.topics:
            return None
        return self.leaders.get(partition)

    async def ensure_internal_topic(self, topic: str, *, partitions: int, configs: dict[str, str]) -> None:
        self.created.append((topic, partitions, configs))
        if self.on_create is not None:
            await self.on_create()


def make_broker(*, topic_exists: bool, create_wait_s: float = 0.2) -> Any:
    coord, _, _ = make_coordinator(owned=False, num_partitions=N)
    topics: dict[str, Any] = {}
    if topic_exists:
        topics[OFFSETS_TOPIC] = SimpleNamespace(partitions=N)
    broker = SimpleNamespace(config=SimpleNamespace(broker_id=THIS_BROKER), groups=coord, topics=topics,
                             cluster=FakeCluster(topics), acls=open_acls())
    coord.extensions["locator"] = CoordinatorLocator(broker, coord, create_wait_s=create_wait_s)
    return broker


def ctx(broker: Any, version: int) -> RequestContext:
    return RequestContext(broker=broker, api_key=10, api_version=version, correlation_id=7,
                          client_id="test", peer="127.0.0.1:5555")


def find(broker: Any, version: int, *keys: str) -> Any:
    if version >= 4:
        req = FindCoordinatorRequest[version](key_type=0, coordinator_keys=list(keys))
    elif version >= 1:
        req = FindCoordinatorRequest[version](key=keys[0], key_type=0)
    else:
        req = FindCoordinatorRequest[version](keys[0])
    return handle_find_coordinator(ctx(broker, version), req)


def keys_on_partitions(parts: list[int]) -> list[str]:
    out: dict[int, str] = {}
    i = 0
    while len(out) < len(parts):
        p = partition_for_group(f"app-{i}", N)
        if p in parts:
            out.setdefault(p, f"app-{i}")
        i += 1
    return [out[p] for p in parts]


async def test_batched_v4_answers_each_groups_partition_leader() -> None:
    broker = make_broker(topic_exists=True)
    broker.cluster.leaders = {p: (10 + p, f"10.0.0.{p}", 9090 + p) for p in range(N)}
    g0, g3 = keys_on_partitions([0, 3])
    resp = await find(broker, 4, g0, g3)
    got = [(c.key, c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators]
    assert got == [(g0, 0, 10, "10.0.0.0", 9090), (g3, 0, 13, "10.0.0.3", 9093)]
    assert broker.cluster.created == [], "an existing topic is not created again"


async def test_v0_to_v3_single_key() -> None:
    broker = make_broker(topic_exists=True)
    (g,) = keys_on_partitions([2])
    broker.cluster.leaders = {2: (5, "broker-5.kelp", 9092)}
    for v in (0, 1, 2, 3):
        resp = await find(broker, v, g)
        assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, 5, "broker-5.kelp", 9092), v


async def test_partition_without_leader_is_not_available() -> None:
    broker = make_broker(topic_exists=True)
    (g,) = keys_on_partitions([1])
    resp = await find(broker, 4, g)
    c = resp.coordinators[0]
    assert (c.error_code, c.node_id, c.host, c.port) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1)
    assert "partition 1" in c.error_message and "no leader" in c.error_message


async def test_missing_topic_is_created_once_and_answered_not_available_meanwhile() -> None:
    broker = make_broker(topic_exists=False, create_wait_s=0.05)
    never = asyncio.Event()
    broker.cluster.on_create = never.wait  # the controller is slow: creation outlasts the bound
    g0, g1 = keys_on_partitions([0, 1])
    resp = await asyncio.wait_for(find(broker, 4, g0, g1), 2)
    assert [c.error_code for c in resp.coordinators] == [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 2
    assert "being created" in resp.coordinators[0].error_message
    again = await asyncio.wait_for(find(broker, 3, g0), 2)
    assert again.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert broker.cluster.created == [(OFFSETS_TOPIC, N, {"cleanup.policy": "compact"})], \
        "one creation request, with offsets.topic.num.partitions and compaction"
    never.set()


async def test_creation_refused_by_controller_names_the_reason() -> None:
    broker = make_broker(topic_exists=False)

    async def refuse() -> None:
        raise CoordinatorNotAvailableError("1 live broker, offsets.topic.replication.factor needs 3")

    broker.cluster.on_create = refuse
    resp = await find(broker, 4, "g")
    c = resp.coordinators[0]
    assert c.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "1 live broker" in c.error_message
    # The next question asks the controller again.
    await find(broker, 4, "g")
    assert len(broker.cluster.created) == 2


async def test_created_here_answers_this_broker_once_loaded() -> None:
    """The single-broker case: the controller creates the topic, this broker leads and loads every partition."""
    broker = make_broker(topic_exists=False, create_wait_s=2.0)

    async def create() -> None:
        broker.topics[OFFSETS_TOPIC] = SimpleNamespace(partitions=N)
        for p in range(N):
            broker.cluster.leaders[p] = (THIS_BROKER, "127.0.0.1", 19092)
            broker.groups.on_become_leader(p, 0)

    broker.cluster.on_create = create
    resp = await asyncio.wait_for(find(broker, 4, "orders"), 3)
    c = resp.coordinators[0]
    assert (c.error_code, c.node_id, c.host, c.port) == (0, THIS_BROKER, "127.0.0.1", 19092)
    assert broker.groups.check_group("orders") == ErrorCode.NONE, "answered once the group can be served"


async def test_empty_group_id_is_invalid_before_v4() -> None:
    broker = make_broker(topic_exists=True)
    assert (await find(broker, 1, "")).error_code == ErrorCode.INVALID_GROUP_ID
