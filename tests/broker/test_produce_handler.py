"""The produce handler appends every partition, gives the frame back, then waits for all ISRs at once.

Why: Kafka parks one acks=all produce in its purgatory for all its
partitions; waiting partition after partition made a request naming N
partitions take N replication round trips, and held the request's bytes
in the listener's memory pool while it waited (so enough parked produce
requests stopped the broker reading follower fetches — the very thing
they wait for).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kelp.broker.client_quota_manager import ClientQuotaManager
from kelp.broker.kafka.handlers.produce import handle_produce
from kelp.broker.kafka.handlers.registry import RequestContext
from kelp.broker.kafka.produce_decoder import PartitionData, ProduceData, TopicData
from kelp.broker.replica.manager import ProduceResult
from kelp.errors import NotLeaderOrFollowerError
from tests.support.acls import open_acls


class Replicas:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.waiting = 0
        self.most_waiting = 0
        self.go = asyncio.Event()
        self.timeouts: list[int] = []
        self.wait_timeouts: list[int] = []

    async def append_local(self, topic, partition, data, *, acks, timeout_ms=30000, verify_txn=False, txn_guard=None):
        self.events.append(f"append {partition}")
        self.timeouts.append(timeout_ms)  # a replica still loading its producer state is waited for this long
        if partition == 9:
            raise NotLeaderOrFollowerError(f"not the leader of {topic}-{partition}")
        return ProduceResult(topic, partition, 10 * partition, 10 * partition + 1, -1, 0)

    async def wait_all_for_isr(self, results, *, timeout_ms):
        """The manager's purgatory for one request: every appended partition handed over at once."""
        self.events.extend(f"wait {r.partition}" for r in results)
        self.wait_timeouts.append(timeout_ms)
        self.waiting += len(results)
        self.most_waiting = max(self.most_waiting, self.waiting)
        await self.go.wait()
        self.waiting -= len(results)
        return list(results)


async def test_acks_all_appends_everything_releases_the_frame_then_waits_for_all_partitions_together() -> None:
    replicas = Replicas()
    topics = SimpleNamespace(exists=lambda name: True)
    released: list[list[str]] = []
    broker = SimpleNamespace(replicas=replicas, topics=topics, acls=open_acls(), quotas=ClientQuotaManager(dict),
                             transactions=SimpleNamespace(verifier=None))  # no transaction verification here
    ctx = RequestContext(broker=broker, api_key=0, api_version=9, correlation_id=1, client_id="t", peer="p",
                         release_frame=lambda: released.append(list(replicas.events)))
    parts = [PartitionData(p, memoryview(bytearray(b"batch"))) for p in (0, 1, 9, 2)]
    request = ProduceData(None, -1, 5000, [TopicData("t", parts)])
    task = asyncio.ensure_future(handle_produce(ctx, request))
    while replicas.waiting < 3:
        await asyncio.sleep(0)
    # every append before the frame goes back, and before any wait; no view of the frame is kept
    assert released == [["append 0", "append 1", "append 9", "append 2"]]
    assert all(p.records is None for p in parts)
    assert replicas.timeouts == [5000] * 4  # the request's timeout bounds every wait
    replicas.go.set()
    response = await task
    assert replicas.most_waiting == 3  # the three appended partitions waited together, under one deadline
    assert replicas.wait_timeouts == [5000]
    answers = {p.index: (p.error_code, p.base_offset) for p in response.responses[0].partition_responses}
    assert answers == {0: (0, 0), 1: (0, 10), 2: (0, 20), 9: (6, -1)}
