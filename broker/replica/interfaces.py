"""The narrow interfaces the replica layer is handed, and the type of a job on a replica's log.

Why it exists: the replica layer stands below the cluster layer and the metrics, yet calls into them:
the follower fetching (`ReplicaFetchers`, the cluster layer's `ReplicaFetcherManager`), the
controller's AlterPartition (`AlterPartition`, `LeaderRouting.alter_partition`) and the traffic
counters (`TopicCounter`). Naming only what it calls keeps the arrows pointing down. This module
must never hold logic or set a value.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Protocol

__all__ = ["ReplicaFetchers", "AlterPartition", "TopicCounter", "Job"]

Job = asyncio.Task[BaseException | None]
"""A worker-thread job on a replica's log: done with None, or with what it failed with."""


class ReplicaFetchers(Protocol):
    """Follower fetching, one fetch state per partition this broker follows (`ReplicaFetcherManager`)."""

    def add(self, topic: str, partition: int, *, leader: int, leader_epoch: int) -> None: ...

    def remove(self, topic: str, partition: int) -> None: ...


class AlterPartition(Protocol):
    """Asks the controller for a partition's new ISR (`LeaderRouting.alter_partition`); raises its refusal."""

    def __call__(self, topic: str, partition: int, *, leader_epoch: int, partition_epoch: int,
                 isr: list[int]) -> Awaitable[object]: ...


class _Incrementable(Protocol):
    def inc(self, amount: float = ...) -> None: ...


class TopicCounter(Protocol):
    """A counter labelled by topic (prometheus_client's `Counter` with `["topic"]`)."""

    def labels(self, *, topic: str) -> _Incrementable: ...
