"""Consumer groups (`kelp.broker.groups`): the coordinator and `__consumer_offsets`.

`attach(broker)` is called by the composition root (`kelp.broker.app`) before
the listeners start: it creates the compacted `__consumer_offsets` topic,
replays it, and sets `broker.groups`. This package must never speak a wire
protocol; `kelp.broker.kafka.handlers.groups` and `kelp.broker.http` do.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .group_coordinator import CoordinatorConfig, GroupCoordinator

__all__ = ["attach", "GroupCoordinator", "CoordinatorConfig"]

log = logging.getLogger("kelp.broker.groups")


async def attach(broker: Any) -> GroupCoordinator:
    from .offsets_store import BrokerOffsetStore

    config = CoordinatorConfig.from_broker(broker.config)
    store = BrokerOffsetStore(broker, num_partitions=config.num_partitions)
    store.ensure_topic()
    config.num_partitions = store.num_partitions

    def partitions_of(topic: str) -> int | None:
        info = broker.topics.get(topic)
        return None if info is None else info.partitions

    coordinator = GroupCoordinator(config, store=store, topic_partitions=partitions_of)
    broker.groups = coordinator
    started = time.monotonic()
    records = coordinator.load()
    log.info(
        "group coordinator loaded %d group(s) from %d __consumer_offsets record(s) in %.2fs",
        len(coordinator.groups), records, time.monotonic() - started,
    )
    coordinator.start_expiry()
    return coordinator
