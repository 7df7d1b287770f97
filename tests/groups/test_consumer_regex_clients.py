"""KIP-848 regex subscriptions end to end (issue 36): librdkafka (confluent-kafka) with `group.protocol=consumer`
subscribed to `^topic-.*` sends the pattern as SubscribedTopicRegex; the broker assigns the matching topics,
and a matching topic created later is assigned and read without the consumer doing anything (Kelp before
this answered the heartbeat INVALID_REQUEST, fatal to the consumer)."""

from __future__ import annotations

import time
import uuid
from typing import Iterator

import pytest

from tests.support.broker_process import BrokerProcess

from .test_clients_share_partitions import create_topic

SETTINGS = {"offsets.topic.num.partitions": 3, "group.consumer.heartbeat.interval.ms": 300}
WAIT_S = 60.0


@pytest.fixture(scope="module")
def regex_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-kip848-regex"), settings=SETTINGS)
    bp.start()
    yield bp
    bp.kill()


@pytest.mark.timeout(150)
def test_librdkafka_regex_subscription_gets_topics_created_later(regex_broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer, Producer

    bs = regex_broker.bootstrap
    tag = uuid.uuid4().hex[:6]
    create_topic(bs, f"topic-{tag}-a", 2)
    create_topic(bs, f"other-{tag}", 2)
    c = Consumer({"bootstrap.servers": bs, "group.id": f"rx-{tag}", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    c.subscribe([f"^topic-{tag}-.*"])
    try:
        def assigned() -> set[tuple[str, int]]:
            return {(tp.topic, tp.partition) for tp in c.assignment()}

        deadline = time.monotonic() + WAIT_S
        while assigned() != {(f"topic-{tag}-a", 0), (f"topic-{tag}-a", 1)}:
            assert time.monotonic() < deadline, f"assignment {assigned()}"
            msg = c.poll(0.2)
            assert msg is None or not msg.error(), msg.error()
        create_topic(bs, f"topic-{tag}-b", 3)
        p = Producer({"bootstrap.servers": bs})
        p.produce(f"topic-{tag}-b", value=b"late", partition=2)
        assert p.flush(30) == 0
        got: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while not got:
            assert time.monotonic() < deadline, f"assignment {assigned()}"
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
        assert got == [b"late"]
        assert assigned() == {(f"topic-{tag}-a", 0), (f"topic-{tag}-a", 1)} | {(f"topic-{tag}-b", p) for p in range(3)}
    finally:
        c.close()
