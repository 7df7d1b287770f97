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
