"""The order a follower names its partitions in a full fetch: those that got records go to the end of the next.

Why it matters: a leader fills a fetch response in request order, up to `replica.fetch.response.max.bytes`,
and each partition may take `replica.fetch.max.bytes` of it; without the rotation Kafka's fetcher does
(`PartitionStates.updateAndMoveToEnd`), the busy partitions named first would take every response and the
ones named last would never be replicated while they stay busy. (In a fetch session the leader rotates its
session's partitions the same way: tests/broker/test_fetch_sessions.py.)
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kelp.broker.cluster.replica_fetcher import ReplicaFetcherManager
from kelp.broker.replica.replication_quota import ReplicationQuotas
from kelp.config.broker import BrokerConfig


class _Log:
    def __init__(self) -> None:
        self.log_end_offset = 0
        self.log_start_offset = 0


class _Replicas:
    """The follower's replica manager, as far as a fetch uses it: appends move the log end."""

    def __init__(self, keys: list[tuple[str, int]]) -> None:
        self.parts = {k: SimpleNamespace(log=_Log(), isr=(1,)) for k in keys}
        self.replication_quotas = ReplicationQuotas(BrokerConfig.load(env={}), lambda topic: None)

    async def flush_followers(self) -> None:
        return None

    def get_partition(self, topic: str, partition: int) -> Any:
        return self.parts.get((topic, partition))

    def follower_ready(self, topic: str, partition: int, leader_epoch: int) -> bool:
        return True

    def append_as_follower(self, topic: str, partition: int, records: bytes, *, leader_epoch: int,
                           leader_high_watermark: int) -> None:
        if records:
            self.parts[(topic, partition)].log.log_end_offset += 1


class _Leader:
    """Answers each fetch with records for the partitions in `busy`, nothing for the others."""

    def __init__(self) -> None:
        self.busy: set[tuple[str, int]] = set()
        self.orders: list[list[tuple[str, int]]] = []

    async def request(self, req: Any, version: int, *, timeout_s: float | None = None, decoder: Any = None) -> Any:
        order = [(topic, p.partition) for topic, ps in req.topics for p in ps]
        self.orders.append(order)
        topics: dict[str, list[Any]] = {}
        for topic, partition in order:
            topics.setdefault(topic, []).append(SimpleNamespace(
                partition_index=partition, error_code=0, high_watermark=0, log_start_offset=0,
                records=b"batch" if (topic, partition) in self.busy else b""))
        return SimpleNamespace(error_code=0, session_id=0,  # sessionless: every fetch is full
                               responses=[SimpleNamespace(topic=t, partitions=ps) for t, ps in topics.items()])


async def test_partitions_that_got_records_are_named_last_in_the_next_fetch() -> None:
    keys = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    replicas = _Replicas(keys)
    manager = ReplicaFetcherManager(replicas=replicas, broker_id=1, endpoint_of=lambda b: None,  # type: ignore[arg-type]
                                    config=BrokerConfig.load(env={}))
    for topic, partition in keys:
        manager.add(topic, partition, leader=0, leader_epoch=0)
    fetcher = manager._fetchers[0]
    fetcher._task.cancel()  # the test drives each fetch
    for st in fetcher.state.values():
        st.truncating = False
    leader = _Leader()
    leader.busy = {("a", 0), ("b", 0)}
    await fetcher._fetch(leader)  # type: ignore[arg-type]
    await fetcher._fetch(leader)  # type: ignore[arg-type]
    leader.busy = set()
    await fetcher._fetch(leader)  # type: ignore[arg-type]
    assert leader.orders[0] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    # the two that got records go behind the two that did not, keeping their own order
    assert leader.orders[1] == [("a", 1), ("b", 1), ("a", 0), ("b", 0)]
    assert leader.orders[2] == [("a", 1), ("b", 1), ("a", 0), ("b", 0)]  # an empty answer moves nothing
    assert [replicas.parts[k].log.log_end_offset for k in keys] == [2, 0, 2, 0]
    await manager.stop()
