"""Client quotas enforced on a real listener (issue 33 acceptance): a producer throttled to 1 MB/s gets 1 MB/s
± 10% while an unthrottled one beside it is never throttled; a consumer's fetches keep to its
consumer_byte_rate, throttled fetches carrying no records. Nothing is refused or dropped: every produce is
acknowledged.

The broker runs as its own process with Kafka's quota keys set short (`quota.window.num` 3 of 1 s, so the
sawtooth of a rate over sliding samples settles within the run; Kafka's 11 windows need minutes to average
out). Clients are raw wire clients that send as fast as they are answered and never wait on their own: what
holds the throttled one back is the broker muting its connection for the throttle time its answers carry.
"""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest
from kafka.protocol.admin import AlterClientQuotasRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from tests.broker.helpers import create_topic_wire, list_offset, produce, raw_fetch_on
from tests.support.kafka_wire import WireClient, make_batch

pytestmark = pytest.mark.timeout(180)

QUOTA = 1_000_000  # bytes per second
RUN_S = 12.0
RECORDS = 64  # per batch
A = AlterClientQuotasRequest.EntryData
T = ProduceRequest.TopicProduceData


def set_quota(bootstrap: str, client_id: str, key: str, value: float) -> None:
    with WireClient(bootstrap) as c:
        answer = c.request(AlterClientQuotasRequest(validate_only=False, entries=[A(
            entity=[A.EntityData(entity_type="client-id", entity_name=client_id)],
            ops=[A.OpData(key=key, value=value, remove=False)])]), 1)
        assert answer.entries[0].error_code == 0, answer


class Producer(threading.Thread):
    def __init__(self, bootstrap: str, client_id: str, topic: str, batch: bytes, stop_at: float) -> None:
        super().__init__(daemon=True)
        self.client = WireClient(bootstrap, client_id=client_id, timeout=30)
        self.topic, self.batch, self.stop_at = topic, batch, stop_at
        self.acked = 0  # batches
        self.throttled = 0  # answers carrying a throttle time
        self.errors: list[object] = []

    def run(self) -> None:
        try:
            with self.client as c:
                while time.monotonic() < self.stop_at:
                    answer = c.request(ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
                        T(name=self.topic, partition_data=[T.PartitionProduceData(index=0, records=self.batch)])]),
                        7)
                    part = answer.responses[0].partition_responses[0]
                    if part.error_code:
                        self.errors.append(part)
                        return
                    self.acked += 1
                    self.throttled += answer.throttle_time_ms > 0
        except Exception as exc:  # reported by the test
            self.errors.append(exc)


def test_a_throttled_producer_gets_its_quota_and_an_unthrottled_one_is_untouched(broker_factory) -> None:
    broker = broker_factory(settings={"quota.window.num": 3, "quota.window.size.seconds": 1})
    bootstrap = broker.bootstrap
    for topic in ("slow", "fast"):
        assert create_topic_wire(bootstrap, topic) == 0
    set_quota(bootstrap, "throttled", "producer_byte_rate", QUOTA)
    batch = make_batch([(None, b"x" * 1000)] * RECORDS)  # ~64 KiB
    start = time.monotonic()
    slow = Producer(bootstrap, "throttled", "slow", batch, start + RUN_S)
    fast = Producer(bootstrap, "free", "fast", batch, start + RUN_S)
    slow.start()
    fast.start()
    slow.join(RUN_S + 60)
    fast.join(RUN_S + 60)
    elapsed = time.monotonic() - start
    assert not slow.errors and not fast.errors, (slow.errors, fast.errors)
    rate, free = slow.acked * len(batch) / elapsed, fast.acked * len(batch) / elapsed
    print(f"throttled producer: {rate / 1e6:.3f} MB/s ({slow.throttled} of {slow.acked} answers throttled); "
          f"unthrottled: {free / 1e6:.1f} MB/s")
    assert QUOTA * 0.9 <= rate <= QUOTA * 1.1, rate
    assert slow.throttled > 0
    assert fast.throttled == 0 and free > 3 * QUOTA
    for topic, p in (("slow", slow), ("fast", fast)):  # throttled, never dropped: every acknowledged batch is stored
        assert list_offset(bootstrap, topic, 0, -1)[1] == p.acked * RECORDS, topic
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as page:
        metrics = page.read().decode()
    assert f'kelp_client_quota_throttled_responses_total{{quota="producer_byte_rate"}} {float(slow.throttled)}' \
        in metrics


def test_a_consumer_keeps_to_its_fetch_quota_and_throttled_fetches_carry_no_records(broker_factory) -> None:
    broker = broker_factory(settings={"quota.window.num": 3, "quota.window.size.seconds": 1})
    bootstrap = broker.bootstrap
    assert create_topic_wire(bootstrap, "data") == 0
    batch = make_batch([(None, b"y" * 1000)] * RECORDS)
    with WireClient(bootstrap) as c:
        for _ in range(200):  # ~13 MB to read
            assert produce(c, "data", batch)[0] == 0
    set_quota(bootstrap, "reader", "consumer_byte_rate", QUOTA)
    got, throttled, empty_when_throttled = 0, 0, True
    offset = 0
    start = time.monotonic()
    with WireClient(bootstrap, client_id="reader", timeout=30) as c:
        while time.monotonic() - start < 8.0:
            answer = raw_fetch_on(c, "data", 0, offset, max_bytes=256 << 10)
            assert answer.throttle_time_ms >= 0
            records = answer.responses[0].partitions[0].records or b""
            if answer.throttle_time_ms > 0:
                throttled += 1
                empty_when_throttled &= not records
                continue
            got += len(records)
            offset += RECORDS * (len(records) // len(batch))
    rate = got / (time.monotonic() - start)
    print(f"throttled consumer: {rate / 1e6:.3f} MB/s, {throttled} fetches throttled")
    assert throttled > 0 and empty_when_throttled
    assert rate <= QUOTA * 1.25, rate  # 8 s: the first span's allowance is a larger share than over 12


class Asker(threading.Thread):
    """Sends Metadata of one wide topic as fast as it is answered: small requests that cost the broker time."""

    def __init__(self, bootstrap: str, client_id: str, topic: str, stop_at: float) -> None:
        super().__init__(daemon=True)
        self.client = WireClient(bootstrap, client_id=client_id, timeout=30)
        self.topic, self.stop_at = topic, stop_at
        self.answered = 0
        self.throttled = 0
        self.errors: list[object] = []

    def run(self) -> None:
        try:
            with self.client as c:
                while time.monotonic() < self.stop_at:
                    answer = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=self.topic)],
                                                       allow_auto_topic_creation=False), 8)
                    if answer.topics[0].error_code:
                        self.errors.append(answer.topics[0])
                        return
                    self.answered += 1
                    self.throttled += answer.throttle_time_ms > 0
        except Exception as exc:  # reported by the test
            self.errors.append(exc)


def test_request_percentage_throttles_a_client_that_takes_the_brokers_time_and_no_other(broker_factory) -> None:
    """KIP-124: a client whose requests cost the broker more than its request_percentage of the event loop is
    answered with a throttle time and muted, every request still answered; a client beside it without the quota
    is never throttled and gets far more of the broker's time."""
    broker = broker_factory(settings={"quota.window.num": 3, "quota.window.size.seconds": 1})
    bootstrap = broker.bootstrap
    assert create_topic_wire(bootstrap, "wide", partitions=200) == 0
    set_quota(bootstrap, "greedy", "request_percentage", 1.0)  # 10 ms of the loop a second
    stop_at = time.monotonic() + 6.0
    greedy = Asker(bootstrap, "greedy", "wide", stop_at)
    free = Asker(bootstrap, "free", "wide", stop_at)
    greedy.start()
    free.start()
    greedy.join(60)
    free.join(60)
    assert not greedy.errors and not free.errors, (greedy.errors, free.errors)
    print(f"greedy: {greedy.answered} answered, {greedy.throttled} throttled; free: {free.answered} answered")
    assert greedy.throttled > 0
    assert free.throttled == 0
    assert greedy.answered * 3 < free.answered, (greedy.answered, free.answered)
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as page:
        metrics = page.read().decode()
    throttled = [line for line in metrics.splitlines()
                 if line.startswith('kelp_client_quota_throttled_responses_total{quota="request_percentage"}')]
    assert throttled and float(throttled[0].split()[-1]) >= greedy.throttled, throttled


def test_followers_fetches_are_exempt_from_request_quotas(cluster_factory) -> None:
    """A default request_percentage far below what replication costs (every client id: 0.01% of the loop) must not
    throttle a follower's fetches (Kafka exempts them): acks=all keeps completing, and the leader gives no
    request-quota throttle to anyone but clients, here none (the producer's own client id has a generous quota)."""
    cluster = cluster_factory(2)
    cluster.admin("/admin/v1/topics", "POST", {"name": "kept", "partitions": 1, "replication_factor": 2})
    cluster.wait_fully_replicated("kept")
    with WireClient(cluster.brokers[0].bootstrap) as c:
        answer = c.request(AlterClientQuotasRequest(validate_only=False, entries=[
            A(entity=[A.EntityData(entity_type="client-id", entity_name=None)],
              ops=[A.OpData(key="request_percentage", value=0.01, remove=False)]),
            A(entity=[A.EntityData(entity_type="client-id", entity_name="producer")],
              ops=[A.OpData(key="request_percentage", value=10_000.0, remove=False)])]), 1)
        assert [e.error_code for e in answer.entries] == [0, 0], answer
    leader_id = cluster.topic("kept")["partitions"][0]["leader"]
    leader = next(b for b in cluster.brokers if b.broker_id == leader_id)
    batch = make_batch([(None, b"z" * 100)] * 10)
    with WireClient(leader.bootstrap, client_id="producer", timeout=30) as c:
        for _ in range(50):
            assert produce(c, "kept", batch, acks=-1)[0] == 0
    with urllib.request.urlopen(f"{leader.http_url}/metrics", timeout=10) as page:
        metrics = {line.split()[0]: float(line.split()[-1]) for line in page.read().decode().splitlines()
                   if line.startswith("kelp_client_quota_")}
    assert metrics["kelp_client_quota_exempt_request_seconds_total"] > 0, metrics
    assert metrics['kelp_client_quota_throttled_responses_total{quota="request_percentage"}'] == 0, metrics
