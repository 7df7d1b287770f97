"""Produce and consume with confluent-kafka (librdkafka), timing the whole transfer.

Why librdkafka: its client side costs far less per record than a Python
client, so the figures measure the broker, not the client.

It must never count a record as done before the broker acknowledged or delivered it.
"""

from __future__ import annotations

import os
import time

__all__ = ["produce", "consume"]


def produce(bootstrap: str, topic: str, *, count: int, size: int) -> float:
    """Seconds from the first `produce()` to every record acknowledged (acks=1)."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "acks": 1,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "compression.type": "none",
        "enable.idempotence": False,
        "error_cb": lambda err: errors.append(str(err)),
    })
    payload = os.urandom(size)
    produce_one = producer.produce
    start = time.perf_counter()
    sent = 0
    while sent < count:
        try:
            produce_one(topic, payload)
            sent += 1
        except BufferError:
            producer.poll(0.005)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    if left:
        raise RuntimeError(f"{left} records not acknowledged after 120 s; client errors: {errors[-3:]}")
    return elapsed


def consume(bootstrap: str, topic: str, *, count: int) -> float:
    """Seconds from `assign` at offset 0 until `count` records have been received."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "kelp-bench",  # required by librdkafka; assign() does not join the group
        "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        "fetch.wait.max.ms": 100,
        "queued.max.messages.kbytes": 1_048_576,
    })
    try:
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = start + 300
        while got < count:
            msgs = consumer.consume(num_messages=100_000, timeout=1.0)
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"consume error: {m.error()}")
            got += len(msgs)
            if time.perf_counter() > deadline:
                raise RuntimeError(f"consumed {got} of {count} records in 300 s")
        return time.perf_counter() - start
    finally:
        consumer.close()
