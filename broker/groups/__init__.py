"""Consumer groups (`kelp.broker.groups`): the coordinator and `__consumer_offsets`.

`attach(...)` is called by the composition root (`kelp.broker.app`) before
the listeners start: it builds the broker's `GroupCoordinator` on the parts it
needs (config, topics, replicas, logs) and registers it for leadership
changes of `__consumer_offsets` partitions and for deleted topics, so
the broker coordinates exactly the groups of the partitions it leads (loading
a partition when elected, dropping its groups when not leader any more). The
topic is created lazily by the controller on the first FindCoordinator
(`coordinator_lookup`), as in Kafka. This package must never speak a wire
protocol; `kelp.broker.kafka.handlers.groups` and `kelp.broker.http` do.
"""

from __future__ import annotations

import logging
from typing import Callable

from kelp.config.broker import BrokerConfig

from ..metadata.group_configs import effective
from ..replica.manager import ReplicaManager
from ..storage import LogManager
from ..topic_manager import TopicManager
from .coordinator_config import CoordinatorConfig
from .deleted_topics import topic_listener
from .group_coordinator import GroupCoordinator
from .offsets_store import BrokerOffsetStore
from .placement import OFFSETS_TOPIC

__all__ = ["attach", "leadership_listener", "GroupCoordinator", "CoordinatorConfig"]

log = logging.getLogger("kelp.broker.groups")


def leadership_listener(topics: TopicManager, coordinator: GroupCoordinator) -> Callable[[str, int, bool, int], None]:
    """The callback for `broker.replicas.add_leadership_listener`: acts on `__consumer_offsets` only.

    Runs on the event loop and never blocks: an election only marks the
    partition loading and starts the load task.
    """

    def on_leadership(topic: str, partition: int, is_leader: bool, leader_epoch: int) -> None:
        if topic != OFFSETS_TOPIC:
            return
        if is_leader:
            info = topics.get(OFFSETS_TOPIC)
            if info is not None:
                coordinator.group_manager.adopt_partition_count(info.partitions)
            coordinator.on_become_leader(partition, leader_epoch)
        else:
            coordinator.on_resign(partition, leader_epoch)

    return on_leadership


def attach(*, config: BrokerConfig, topics: TopicManager, replicas: ReplicaManager,
           logs: LogManager) -> GroupCoordinator:
    """The broker's group coordinator, listening to leadership and topic changes; its offset expiry started."""
    settings = CoordinatorConfig.from_broker(config)
    existing = topics.get(OFFSETS_TOPIC)
    if existing is not None and existing.partitions != settings.num_partitions:
        log.warning("%s has %d partitions but offsets.topic.num.partitions is %d; using %d",
                    OFFSETS_TOPIC, existing.partitions, settings.num_partitions, existing.partitions)
        settings.num_partitions = existing.partitions
    store = BrokerOffsetStore(replicas, logs, commit_timeout_ms=settings.commit_timeout_ms)

    def partitions_of(topic: str) -> int | None:
        info = topics.get(topic)
        return None if info is None else info.partitions

    coordinator = GroupCoordinator(settings, store=store, topic_partitions=partitions_of, topics=topics)

    def group_setting(group: str, key: str) -> int | None:  # a consumer group's own config (GROUP resource)
        own = topics.group_configs(group)
        return effective(own, key, config) if key in own else None

    coordinator.consumer.group_setting = group_setting
    replicas.add_leadership_listener(leadership_listener(topics, coordinator))
    topics.add_listener(topic_listener(coordinator))  # a deleted topic's offsets go from every group
    topics.add_listener(lambda event, _topic: coordinator.consumer.topics_changed()
                        if event in ("created", "deleted") and not coordinator.stopped else None)  # regexes
    coordinator.expiry.start()
    log.info("group coordinator attached: %s has %d partitions; groups load as this broker leads them",
             OFFSETS_TOPIC, settings.num_partitions)
    return coordinator
