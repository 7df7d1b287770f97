"""What the group coordinator is given: its broker settings and its sense of time.

Why: the state machine, the loader of `__consumer_offsets` partitions and the
offset expiry all read the same settings (Kafka's names in the comments) and
start timers through the same injected `Scheduler`, so unit tests drive every
timeout with a manual clock instead of sleeping. Keeping them in one leaf
module lets each part depend on them without depending on the others.

This module must never hold group state, do I/O, or read broker config
anywhere but `CoordinatorConfig.from_broker`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Callable, Protocol

from kelp.config.broker import BrokerConfig

__all__ = ["CoordinatorConfig", "Scheduler", "LoopScheduler", "TimerHandle"]


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle: ...


class LoopScheduler:
    """Timers on the running asyncio loop; handles have `.cancel()`."""

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000.0, callback)


@dataclass
class CoordinatorConfig:
    """Broker settings the coordinator uses (Kafka names in the comments)."""

    num_partitions: int = 50  # offsets.topic.num.partitions
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    max_group_size: int = 2**31 - 1  # group.max.size
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms
    # offsets.commit.timeout.ms: how long a write to __consumer_offsets may wait for the ISR
    commit_timeout_ms: int = 5000
    load_retry_ms: int = 1000  # after a failed replay of a partition this broker still leads
    # KIP-848 consumer groups (group.protocol=consumer): the broker sets members' session and heartbeat interval
    consumer_session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    consumer_max_size: int = 2**31 - 1  # group.consumer.max.size
    # group.consumer.assignors: the server-side assignors members may name; the first is the default
    consumer_assignors: list[str] = field(default_factory=lambda: ["uniform", "range"])
    # group.consumer.migration.policy: disabled, upgrade, downgrade or bidirectional (online group conversions)
    consumer_migration_policy: str = "bidirectional"

    @classmethod
    def from_broker(cls, cfg: BrokerConfig) -> "CoordinatorConfig":
        def get(key: str, default: int) -> int:
            try:
                value = cfg[key]
            except KeyError:
                return default
            return default if value is None else int(value)

        return cls(
            num_partitions=int(get("offsets.topic.num.partitions", 50)),
            initial_rebalance_delay_ms=int(get("group.initial.rebalance.delay.ms", 3000)),
            min_session_timeout_ms=int(get("group.min.session.timeout.ms", 6000)),
            max_session_timeout_ms=int(get("group.max.session.timeout.ms", 1800000)),
            max_group_size=int(get("group.max.size", 2**31 - 1)),
            offsets_retention_ms=int(get("offsets.retention.minutes", 10080)) * 60000,
            commit_timeout_ms=int(get("offsets.commit.timeout.ms", 5000)),
            consumer_session_timeout_ms=get("group.consumer.session.timeout.ms", 45000),
            consumer_heartbeat_interval_ms=get("group.consumer.heartbeat.interval.ms", 5000),
            consumer_max_size=get("group.consumer.max.size", 2**31 - 1),
            consumer_assignors=list(cfg.get("group.consumer.assignors") or ["uniform", "range"]),
            consumer_migration_policy=str(cfg.get("group.consumer.migration.policy") or "bidirectional"),
        )
