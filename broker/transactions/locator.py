"""Which broker coordinates a transactional id (FindCoordinator key type 1), and the lazy creation of
`__transaction_state`.

Why: a transactional producer asks any broker and must be sent to the leader of its id's
`__transaction_state` partition. Like Kafka (and like `__consumer_offsets`, `groups.coordinator_lookup`),
the topic is created by the controller on the first such question, with
transaction.state.log.num.partitions partitions, transaction.state.log.replication.factor replicas and
Kafka's topic configs; until it exists, and while the partition has no leader, the answer is
COORDINATOR_NOT_AVAILABLE and the client retries.

This module must never change transaction state or speak a wire protocol: it answers with the groups'
`CoordinatorLocation`, which the FindCoordinator handler translates.
"""

from __future__ import annotations

import asyncio
import logging

from kelp.config.broker import BrokerConfig
from kelp.errors import ErrorCode

from ..cluster.member import ClusterMember
from ..groups.coordinator_lookup import CREATE_WAIT_S, CoordinatorLocation
from ..topic_manager import TopicManager
from .coordinator import TransactionCoordinator
from .txn_config import TXN_TOPIC

__all__ = ["TxnCoordinatorLocator", "txn_locator_of"]

log = logging.getLogger("kelp.broker.transactions")


class TxnCoordinatorLocator:
    def __init__(self, *, config: BrokerConfig, topics: TopicManager, cluster: ClusterMember,
                 coordinator: TransactionCoordinator, create_wait_s: float = CREATE_WAIT_S) -> None:
        self.config = config
        self.topics = topics
        self.cluster = cluster
        self.coordinator = coordinator
        self.create_wait_s = create_wait_s
        self._creating: asyncio.Task[None] | None = None

    def _known(self) -> bool:
        info = self.topics.get(TXN_TOPIC)
        if info is None:
            return False
        self.coordinator.state.adopt_partition_count(info.partitions)
        return True

    def _creation(self) -> "asyncio.Task[None]":
        if self._creating is None or self._creating.done():
            cfg = self.coordinator.config
            log.info("%s does not exist yet; asking the controller to create it with %d partitions", TXN_TOPIC,
                     cfg.num_partitions)
            self._creating = asyncio.get_running_loop().create_task(
                self.cluster.routing.ensure_internal_topic(TXN_TOPIC, partitions=cfg.num_partitions,
                                                   configs=cfg.topic_configs(),
                                                   replication_factor=cfg.replication_factor),
                name=f"create-{TXN_TOPIC}")
            self._creating.add_done_callback(_log_creation)
        return self._creating

    async def locate(self, transactional_id: str) -> CoordinatorLocation:
        """The coordinator of `transactional_id`, waiting at most `create_wait_s` (creation, then this broker's
        load of the partition when it leads it) before answering COORDINATOR_NOT_AVAILABLE."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.create_wait_s
        if not self._known():
            task = self._creation()
            done, _ = await asyncio.wait({task}, timeout=self.create_wait_s)
            if not done or task.exception() is not None:
                reason = "is being created" if not done else f"cannot be created yet: {task.exception()}"
                return CoordinatorLocation(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                           f"{TXN_TOPIC} {reason} (transactional id '{transactional_id}'); retry")
            self._known()
        p = self.coordinator.state.partition_for(transactional_id)
        located = self._leader_of(p)
        while (located.error == ErrorCode.NONE and located.node_id == self.config.broker_id
               and self.coordinator.check(transactional_id) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            remaining = deadline - loop.time()
            if remaining <= 0 or not await self.coordinator.state.wait_ownership_change(remaining):
                break
            located = self._leader_of(p)
        return located

    def _leader_of(self, partition: int) -> CoordinatorLocation:
        leader = self.cluster.routing.partition_leader(TXN_TOPIC, partition)
        if leader is None:
            return CoordinatorLocation(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       f"{TXN_TOPIC} partition {partition} has no leader right now; retry",
                                       partition=partition)
        node, host, port = leader
        return CoordinatorLocation(ErrorCode.NONE, None, node, host, port, partition)


def _log_creation(task: "asyncio.Task[None]") -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("%s could not be created yet: %s (clients retry FindCoordinator)", TXN_TOPIC, task.exception())


def txn_locator_of(*, config: BrokerConfig, topics: TopicManager, cluster: ClusterMember,
                   coordinator: TransactionCoordinator) -> TxnCoordinatorLocator:
    """The broker's locator, kept with its coordinator (one in-flight topic creation per broker)."""
    locator = coordinator.extensions.get("locator")
    if not isinstance(locator, TxnCoordinatorLocator):
        locator = coordinator.extensions["locator"] = TxnCoordinatorLocator(
            config=config, topics=topics, cluster=cluster, coordinator=coordinator)
    return locator
