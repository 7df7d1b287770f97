"""Leader- and coordinator-following with bounded retries, both clients, against scripted brokers on 127.0.0.1.

Two fake brokers share one picture of the cluster (who leads t-0, at which
epoch; who coordinates group g) and answer Metadata and FindCoordinator from
it; a test moves leadership or the coordinator and checks that the client
refreshes, follows and stops after the bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchRequest, FetchResponse, HeartbeatRequest, HeartbeatResponse
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from kelp.errors import ErrorCode
from kelp.kafka_client import (
    AsyncClient,
    AsyncConnection,
    BlockingClient,
    BrokerUnavailable,
    ErrorResponse,
    RetriesExhausted,
    RetryPolicy,
)
from kelp.spark.wire import KafkaWire, OffsetOutOfRange, WireError
from tests.support.fake_kafka_broker import DROP, FakeBroker, Received, coordinator_response, metadata_response

pytestmark = pytest.mark.timeout(30)

FAST = RetryPolicy(retries=3, backoff_s=0.01)


def fetch_response(code: int, records: bytes = b"", high_watermark: int = 0) -> FetchResponse:
    FT = FetchResponse.FetchableTopicResponse
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[FT(topic="t", partitions=[
        FT.PartitionData(partition_index=0, error_code=code, high_watermark=high_watermark, last_stable_offset=-1,
                         log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                         records=records)])])


@dataclass
class Cluster:
    """Brokers 0 and 1; `leader`/`epoch` of t-0 and `coordinator` of g as the metadata says them;
    `fetch`/`heartbeat` answer per broker id."""

    leader: int = 0
    epoch: int = 3
    coordinator: int = 0
    fetch: Callable[[int, Received], object] = lambda broker, seen: fetch_response(0)
    heartbeat: Callable[[int, Received], object] = lambda broker, seen: HeartbeatResponse(throttle_time_ms=0,
                                                                                         error_code=0)
    brokers: list[FakeBroker] = field(default_factory=list)

    def ports(self) -> dict[int, int]:
        return {i: b.port for i, b in enumerate(self.brokers)}

    def handler(self, broker: int) -> Callable[[Received], object]:
        def answer(seen: Received) -> object:
            if seen.api_key == MetadataRequest.API_KEY:
                return metadata_response(self.ports(), {("t", 0): (self.leader, self.epoch)})
            if seen.api_key == FindCoordinatorRequest.API_KEY:
                return coordinator_response(self.coordinator, self.ports()[self.coordinator])
            if seen.api_key == FetchRequest.API_KEY:
                return self.fetch(broker, seen)
            return self.heartbeat(broker, seen)
        return answer

    def move(self, leader: int) -> None:
        self.leader, self.epoch = leader, self.epoch + 1

    def requests(self, api: type[ApiMessage], broker: int | None = None) -> list[Received]:
        chosen = self.brokers if broker is None else [self.brokers[broker]]
        return [r for b in chosen for r in b.apis(api.API_KEY)]

    @property
    def bootstrap(self) -> str:
        return self.brokers[0].address


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    c = Cluster()
    for broker in (0, 1):
        c.brokers.append(await FakeBroker(c.handler(broker)).start())
    yield c
    for b in c.brokers:
        await b.stop()


def wire(cluster: Cluster, retries: int = 3) -> KafkaWire:
    return KafkaWire(cluster.bootstrap, timeout=5.0, client_id="kelp-test", retries=retries, retry_backoff=0.01)


async def fetch_async(client: AsyncClient) -> bytes:
    """A fetch of t-0 from its leader, retried as the Spark source's is (what issue 22's reads will do)."""

    async def attempt() -> bytes:
        info = await client.leader("t", 0)
        P = FetchRequest.FetchTopic.FetchPartition
        request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                               session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                               topics=[FetchRequest.FetchTopic(topic="t", partitions=[P(
                                   partition=0, current_leader_epoch=info.leader_epoch, fetch_offset=0,
                                   last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)])])
        p = (await client.send(info.leader, request, 11)).responses[0].partitions[0]
        if p.error_code != ErrorCode.NONE:
            raise ErrorResponse(f"fetch t-0: error {p.error_code}", p.error_code)
        return bytes(p.records)

    return await client.retrying("fetching t-0", attempt)


# -- leader-following ------------------------------------------------------------------------------------------

def moved_on_first_fetch(cluster: Cluster) -> None:
    """Broker 0 answers NOT_LEADER_OR_FOLLOWER once and hands leadership to broker 1, which has the records."""

    def fetch(broker: int, seen: Received) -> object:
        if broker == 0:
            cluster.move(1)
            return fetch_response(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return fetch_response(0, b"records", 5)

    cluster.fetch = fetch


async def test_the_blocking_client_follows_a_leader_change(cluster: Cluster) -> None:
    moved_on_first_fetch(cluster)
    with wire(cluster) as w:
        result = await asyncio.to_thread(w.fetch, "t", 0, 0)
    assert (result.records, result.high_watermark) == (b"records", 5)
    [on_new_leader] = cluster.requests(FetchRequest, 1)
    assert on_new_leader.request.topics[0].partitions[0].current_leader_epoch == 4  # the refreshed epoch


async def test_the_asyncio_client_follows_a_leader_change(cluster: Cluster) -> None:
    moved_on_first_fetch(cluster)
    async with AsyncClient(cluster.bootstrap, client_id="kelp-test", retry=FAST) as client:
        assert await fetch_async(client) == b"records"
        assert client.partitions["t"][0].leader == 1 and client.partitions["t"][0].leader_epoch == 4


async def test_a_leader_that_drops_the_connection_is_asked_again(cluster: Cluster) -> None:
    drops = [DROP]

    def fetch(broker: int, seen: Received) -> object:
        return drops.pop() if drops else fetch_response(0, b"ok", 1)

    cluster.fetch = fetch
    with wire(cluster) as w:
        assert (await asyncio.to_thread(w.fetch, "t", 0, 0)).records == b"ok"
    assert len(cluster.requests(FetchRequest, 0)) == 2 and cluster.brokers[0].connections == 2


async def test_retries_stop_at_the_bound_blocking(cluster: Cluster) -> None:
    cluster.fetch = lambda broker, seen: fetch_response(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    with wire(cluster, retries=2) as w, pytest.raises(RetriesExhausted, match=(
            r"fetching t-0 at 0 failed after 3 attempts: Fetch t-0 at 0: NotLeaderForPartitionError")) as out:
        await asyncio.to_thread(w.fetch, "t", 0, 0)
    assert out.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and isinstance(out.value, WireError)
    assert len(cluster.requests(FetchRequest)) == 3
    assert len(cluster.requests(MetadataRequest)) == 3  # the first lookup, then one refresh between attempts


async def test_retries_stop_at_the_bound_asyncio(cluster: Cluster) -> None:
    cluster.fetch = lambda broker, seen: fetch_response(ErrorCode.FENCED_LEADER_EPOCH)
    async with AsyncClient(cluster.bootstrap, client_id="kelp-test",
                           retry=RetryPolicy(retries=2, backoff_s=0.01)) as client:
        with pytest.raises(RetriesExhausted, match="fetching t-0 failed after 3 attempts") as out:
            await fetch_async(client)
    assert out.value.code == ErrorCode.FENCED_LEADER_EPOCH and len(cluster.requests(FetchRequest)) == 3


async def test_an_error_a_refresh_cannot_cure_is_raised_at_once(cluster: Cluster) -> None:
    cluster.fetch = lambda broker, seen: fetch_response(ErrorCode.OFFSET_OUT_OF_RANGE)
    with wire(cluster) as w, pytest.raises(OffsetOutOfRange, match="offset 7 of t-0 is out of range"):
        await asyncio.to_thread(w.fetch, "t", 0, 7)
    assert len(cluster.requests(FetchRequest)) == 1


@pytest.mark.parametrize("kind", ["blocking", "asyncio"])
async def test_no_bootstrap_server_answering_is_one_error_naming_them(kind: str) -> None:
    fake = await FakeBroker(lambda seen: DROP).start()
    address = fake.address
    await fake.stop()
    with pytest.raises(BrokerUnavailable, match=rf"no broker of {address} answered a metadata request: cannot "
                                                rf"connect to broker at {address}"):
        if kind == "blocking":
            with BlockingClient(address, client_id="kelp-test", timeout_s=2.0) as client:
                await asyncio.to_thread(client.refresh)
        else:
            async with AsyncClient(address, client_id="kelp-test", timeout_s=2.0) as aclient:
                await aclient.refresh()


# -- coordinator-following (what issue 22's REST consumers will use) -------------------------------------------

async def heartbeat_on(conn: AsyncConnection) -> int:
    response = await conn.request(HeartbeatRequest(group_id="g", generation_id=1, member_id="m",
                                                   group_instance_id=None), 4)
    if response.error_code != ErrorCode.NONE:
        raise ErrorResponse(f"Heartbeat: error {response.error_code}", response.error_code, address=conn.address)
    return conn.port


async def test_the_asyncio_client_follows_a_moved_coordinator(cluster: Cluster) -> None:
    def heartbeat(broker: int, seen: Received) -> object:
        if broker == 0:
            cluster.coordinator = 1
            return HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR)
        return HeartbeatResponse(throttle_time_ms=0, error_code=0)

    cluster.heartbeat = heartbeat
    async with AsyncClient(cluster.bootstrap, client_id="kelp-test", coordinator_retry=RetryPolicy(
            retries=3, backoff_s=0.01, retriable_codes=frozenset({ErrorCode.NOT_COORDINATOR}))) as client:
        assert await client.with_coordinator("g", "heartbeat of g", heartbeat_on) == cluster.brokers[1].port
        assert client.metadata.coordinators["g"].node_id == 1
    assert len(cluster.requests(FindCoordinatorRequest)) == 2  # found, forgotten on NOT_COORDINATOR, found again


async def test_coordinator_retries_stop_at_the_bound(cluster: Cluster) -> None:
    cluster.heartbeat = lambda broker, seen: HeartbeatResponse(throttle_time_ms=0,
                                                               error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    async with AsyncClient(cluster.bootstrap, client_id="kelp-test") as client:
        client.coordinator_retry = RetryPolicy(retries=2, backoff_s=0.01, retriable_codes=client.coordinator_retry
                                               .retriable_codes)
        with pytest.raises(RetriesExhausted, match="heartbeat of g failed after 3 attempts") as out:
            await client.with_coordinator("g", "heartbeat of g", heartbeat_on)
    assert out.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert len(cluster.requests(FindCoordinatorRequest)) == 3 and len(cluster.requests(HeartbeatRequest)) == 3


async def test_a_group_error_that_is_not_the_coordinators_is_the_callers(cluster: Cluster) -> None:
    cluster.heartbeat = lambda broker, seen: HeartbeatResponse(throttle_time_ms=0,
                                                               error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    async with AsyncClient(cluster.bootstrap, client_id="kelp-test") as client:
        with pytest.raises(ErrorResponse) as out:
            await client.with_coordinator("g", "heartbeat of g", heartbeat_on)
    assert out.value.code == ErrorCode.REBALANCE_IN_PROGRESS and len(cluster.requests(HeartbeatRequest)) == 1
