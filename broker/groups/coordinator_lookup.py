"""Which broker coordinates a group, and the lazy creation of `__consumer_offsets`.

Why: a client asks any broker (FindCoordinator) and must be sent to the leader
of the group's `__consumer_offsets` partition, `abs(javaHashCode(g)) % N`. Like
Kafka, the topic is created on the first such question, by the controller
(`broker.cluster.routing.ensure_internal_topic`), never at broker start: until it
exists, and while a partition has no leader, the answer is
COORDINATOR_NOT_AVAILABLE and clients retry. The HTTP APIs (admin groups,
REST consumers) act on the local coordinator and ask here whether they may,
and if not, which broker to name.

Uses exactly (`LocatorBroker`): `broker.cluster.routing.partition_leader(topic, p) -> (node, host, port) | None`,
`await broker.cluster.routing.ensure_internal_topic(topic, partitions=, configs=)`,
`broker.topics.get(topic)` (None while the topic is unknown here),
`broker.config.broker_id`, and `broker.groups` (where `locator_of` keeps the locator).

This module must never change group state or speak a wire protocol; it
answers with `CoordinatorLocation`s that the handlers translate.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from kelp.config.broker import BrokerConfig
from kelp.errors import ErrorCode

from ..cluster.member import ClusterMember
from ..topic_manager import TopicManager
from .group_coordinator import GroupCoordinator
from .placement import OFFSETS_TOPIC

__all__ = ["CoordinatorLocation", "CoordinatorLocator", "LocatorBroker", "locator_of", "OFFSETS_TOPIC_CONFIGS"]

log = logging.getLogger("kelp.broker.groups")

OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
# How long FindCoordinator waits for the topic creation it triggered (and for this broker's load of the
# group's partition when it turns out to lead it) before answering COORDINATOR_NOT_AVAILABLE.
CREATE_WAIT_S = 2.0


@dataclass(frozen=True)
class CoordinatorLocation:
    """The answer for one group: error NONE with the coordinator's address, or an error and why."""

    error: int
    message: str | None = None
    node_id: int = -1
    host: str = ""
    port: int = -1
    partition: int = -1

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class LocatorBroker(Protocol):
    """What the locator reads on the broker (`kelp.broker.parts.BrokerParts` is one)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def topics(self) -> TopicManager: ...

    @property
    def cluster(self) -> ClusterMember: ...

    @property
    def groups(self) -> GroupCoordinator: ...


class CoordinatorLocator:
    def __init__(self, broker: LocatorBroker, coordinator: GroupCoordinator, *,
                 create_wait_s: float = CREATE_WAIT_S) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.create_wait_s = create_wait_s
        self._creating: asyncio.Task[None] | None = None

    # -- topic ----------------------------------------------------------
    def _sync_partition_count(self) -> bool:
        """True when `__consumer_offsets` is known here (and the coordinator follows its partition count)."""
        info = self.broker.topics.get(OFFSETS_TOPIC)
        if info is None:
            return False
        self.coordinator.group_manager.adopt_partition_count(info.partitions)
        return True

    def _creation(self) -> "asyncio.Task[None]":
        """The one in-flight request to the controller to create the topic (a new one after a failure)."""
        if self._creating is None or self._creating.done():
            n = self.coordinator.config.num_partitions
            log.info("%s does not exist yet; asking the controller to create it with %d partitions", OFFSETS_TOPIC, n)
            task = asyncio.get_running_loop().create_task(
                self.broker.cluster.routing.ensure_internal_topic(OFFSETS_TOPIC, partitions=n,
                                                          configs=dict(OFFSETS_TOPIC_CONFIGS)),
                name=f"create-{OFFSETS_TOPIC}",
            )
            task.add_done_callback(_log_creation_result)
            self._creating = task
        return self._creating

    # -- answers --------------------------------------------------------
    async def locate(self, group_id: str) -> CoordinatorLocation:
        """The coordinator of `group_id`; triggers the topic's creation when it is missing.

        Waits at most `create_wait_s` (for the creation, then for this broker's
        load of the partition when it is the leader) before answering
        COORDINATOR_NOT_AVAILABLE; the creation goes on in the background.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.create_wait_s
        if not self._sync_partition_count():
            task = self._creation()
            done, _ = await asyncio.wait({task}, timeout=self.create_wait_s)
            if not done:
                return CoordinatorLocation(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"{OFFSETS_TOPIC} is being created (group '{group_id}'); retry shortly",
                )
            exc = task.exception()
            if exc is not None:
                return CoordinatorLocation(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"{OFFSETS_TOPIC} cannot be created yet (group '{group_id}'): {exc}",
                )
            self._sync_partition_count()
        p = self.coordinator.partition_for(group_id)
        located = self._leader_of(group_id, p)
        # Just created (or just elected) here: give this broker's load of the partition the rest of the bound.
        while (located.error == ErrorCode.NONE and located.node_id == self.broker.config.broker_id
               and self.coordinator.check_group(group_id) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            remaining = deadline - loop.time()
            if remaining <= 0 or not await self.coordinator.loader.wait_ownership_change(remaining):
                break
            located = self._leader_of(group_id, p)
        return located

    def _leader_of(self, group_id: str, partition: int) -> CoordinatorLocation:
        leader = self.broker.cluster.routing.partition_leader(OFFSETS_TOPIC, partition)
        if leader is None:
            return CoordinatorLocation(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"{OFFSETS_TOPIC} partition {partition} (coordinating group '{group_id}') has no leader "
                "right now; retry",
                partition=partition,
            )
        node, host, port = leader
        return CoordinatorLocation(ErrorCode.NONE, None, node, host, port, partition)

    async def require_local(self, group_id: str, *, timeout_s: float) -> CoordinatorLocation:
        """For the HTTP APIs: wait (bounded) until this broker coordinates `group_id`.

        Returns error NONE when it does; NOT_COORDINATOR with the coordinator's
        node and address when another broker leads the group's partition;
        COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE with the reason
        when `timeout_s` ran out first.
        """
        coord = self.coordinator
        if not group_id:
            return CoordinatorLocation(ErrorCode.INVALID_GROUP_ID, "the group id must not be empty")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            err = coord.check_group(group_id)
            if err == ErrorCode.NONE:
                return CoordinatorLocation(ErrorCode.NONE, None, self.broker.config.broker_id,
                                           partition=coord.partition_for(group_id))
            if err == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                located = CoordinatorLocation(
                    err, f"this broker is still loading group '{group_id}' "
                         f"({OFFSETS_TOPIC} partition {coord.partition_for(group_id)}); retry shortly",
                    partition=coord.partition_for(group_id))
            else:
                located = await self.locate(group_id)
                if located.error == ErrorCode.NONE and located.node_id != self.broker.config.broker_id:
                    return CoordinatorLocation(
                        ErrorCode.NOT_COORDINATOR,
                        f"group '{group_id}' is coordinated by broker {located.node_id} ({located.address}), "
                        f"the leader of {OFFSETS_TOPIC} partition {located.partition}; "
                        "send this request to that broker's HTTP API",
                        located.node_id, located.host, located.port, located.partition,
                    )
                if located.error == ErrorCode.NONE:
                    # This broker leads the partition but has not heard of its election yet.
                    located = CoordinatorLocation(
                        ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        f"this broker leads {OFFSETS_TOPIC} partition {located.partition} but does not "
                        f"coordinate group '{group_id}' yet; retry shortly", partition=located.partition)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return located
            await coord.loader.wait_ownership_change(min(remaining, 0.5))


def _log_creation_result(task: "asyncio.Task[None]") -> None:
    if task.cancelled():
        return
    exc = task.exception()  # retrieved here, so a failure nobody awaited is still reported once
    if exc is not None:
        log.warning("%s could not be created yet: %s (clients retry FindCoordinator)", OFFSETS_TOPIC, exc)


def locator_of(broker: LocatorBroker) -> CoordinatorLocator:
    """The broker's locator, kept with its coordinator (one in-flight topic creation per broker)."""
    coord = broker.groups
    locator = coord.extensions.get("locator")
    if not isinstance(locator, CoordinatorLocator):
        locator = coord.extensions["locator"] = CoordinatorLocator(broker, coord)
    return locator
