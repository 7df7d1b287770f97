"""Transactions (`kelp.broker.transactions`): the transaction coordinator and `__transaction_state`.

`attach(...)` is called by the composition root (`kelp.broker.app`) before the listeners start: it builds
the broker's `TransactionCoordinator` on the parts it needs (config, topics, replicas, logs, the cluster
member for producer ids, partition leaders and the inter-broker connections markers travel on) and
registers it for leadership changes of `__transaction_state` partitions, so the broker coordinates exactly
the transactional ids of the partitions it leads (loading a partition when elected, resuming the markers
of transactions it finds prepared, dropping its ids when not leader any more). The topic is created lazily
by the controller on the first FindCoordinator for a transactional id (`locator`), as in Kafka.

This package must never speak a wire protocol to clients (`kelp.broker.kafka.handlers.transactions` does)
and never writes a partition's markers itself: the partition's leader does, asked through `markers`. A partition
leader's questions to other coordinators before appending a transaction's first batch (KIP-890) go through
`verifier`, built here (asked for v1 clients only when `transaction.partition.verification.enable` is on;
always for v2 clients, whose partitions join their transaction that way).
"""

from __future__ import annotations

import logging
from typing import Callable

from kelp.config.broker import BrokerConfig

from ..cluster.member import ClusterMember
from ..replica.manager import ReplicaManager
from ..storage import LogManager
from ..topic_manager import TopicManager
from .coordinator import TransactionCoordinator
from .markers import KafkaMarkerSender, MarkerSender
from .state_manager import BrokerTxnStore
from .txn_config import TXN_TOPIC, TxnConfig
from .verifier import TxnVerifier

__all__ = ["attach", "TransactionCoordinator", "TxnConfig", "TXN_TOPIC", "leadership_listener"]

log = logging.getLogger("kelp.broker.transactions")


def leadership_listener(topics: TopicManager,
                        coordinator: TransactionCoordinator) -> Callable[[str, int, bool, int], None]:
    """The callback for `replicas.add_leadership_listener`: acts on `__transaction_state` only, never blocks."""

    def on_leadership(topic: str, partition: int, is_leader: bool, leader_epoch: int) -> None:
        if topic != TXN_TOPIC:
            return
        if is_leader:
            info = topics.get(TXN_TOPIC)
            if info is not None:
                coordinator.state.adopt_partition_count(info.partitions)
            coordinator.on_become_leader(partition, leader_epoch)
        else:
            coordinator.on_resign(partition, leader_epoch)

    return on_leadership


def attach(*, config: BrokerConfig, topics: TopicManager, replicas: ReplicaManager, logs: LogManager,
           cluster: ClusterMember, sender: MarkerSender | None = None) -> TransactionCoordinator:
    """The broker's transaction coordinator, listening to leadership changes; its sweeps started."""
    settings = TxnConfig.from_broker(config)
    existing = topics.get(TXN_TOPIC)
    if existing is not None and existing.partitions != settings.num_partitions:
        log.warning("%s has %d partitions but transaction.state.log.num.partitions is %d; using %d", TXN_TOPIC,
                    existing.partitions, settings.num_partitions, existing.partitions)
        settings.num_partitions = existing.partitions

    def leader_of(topic: str, partition: int) -> int | None:
        info = topics.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            return None
        return info.partition_states[partition].leader

    coordinator = TransactionCoordinator(
        settings, store=BrokerTxnStore(replicas, logs, write_timeout_ms=settings.write_timeout_ms),
        sender=sender or KafkaMarkerSender(cluster, broker_id=config.broker_id),
        next_producer_id=cluster.next_producer_id, leader_of=leader_of, topic_exists=topics.exists)
    def coordinator_of(transactional_id: str) -> int | None:
        return leader_of(TXN_TOPIC, coordinator.state.partition_for(transactional_id))

    # Built even with verification off: transactions v2 clients have their partitions added through it.
    coordinator.verifier = TxnVerifier(cluster, broker_id=config.broker_id, coordinator_of=coordinator_of,
                                       local=coordinator)
    replicas.add_leadership_listener(leadership_listener(topics, coordinator))
    coordinator.start()
    log.info("transaction coordinator attached: %s has %d partitions; transactional ids load as this broker "
             "leads them", TXN_TOPIC, settings.num_partitions)
    return coordinator
