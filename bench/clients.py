"""Produce and consume with confluent-kafka (librdkafka), timing the whole transfer.

Why librdkafka: its client side costs far less per record than a Python
client, so the figures measure the broker, not the client.

It must never count a record as done before the broker acknowledged or delivered it.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping

__all__ = ["create_topic", "delete_topic", "end_offset", "produce", "consume", "consume_with_cpu"]

Config = Mapping[str, str | int | float] | None
"""librdkafka properties added to every client (security: `security.protocol`, `sasl.*`, `ssl.*`)."""


def create_topic(bootstrap: str, topic: str, *, partitions: int = 1, replication_factor: int = 1,
                 configs: dict[str, str] | None = None, timeout_s: float = 30.0, config: Config = None) -> None:
    """CreateTopics through the Kafka protocol (any broker), then wait until every partition has a leader.

    Waiting here keeps a fresh topic's leader election out of the timed
    produce (librdkafka would otherwise back off and retry inside it).
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
    new = NewTopic(topic, partitions, replication_factor, config=dict(configs or {}))
    for future in admin.create_topics([new], request_timeout=timeout_s).values():
        future.result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions \
                and all(p.leader >= 0 for p in meta.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic}: not every partition has a leader {timeout_s:.0f} s after CreateTopics")
        time.sleep(0.05)


def delete_topic(bootstrap: str, topic: str, *, timeout_s: float = 30.0, config: Config = None) -> None:
    """DeleteTopics (the bench's own topics, once measured, so page cache and disk hold only what is measured)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
    for future in admin.delete_topics([topic], request_timeout=timeout_s).values():
        future.result(timeout_s)


def end_offset(bootstrap: str, topic: str, partition: int = 0, *, config: Config = None) -> int:
    """The partition's high watermark (its log end offset once every replica has the records)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kelp-bench", **(config or {})})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1]
    finally:
        consumer.close()


def produce(bootstrap: str, topic: str, *, count: int, size: int, acks: int = 1, partitions: int = 1,
            first_partition: int = 0, start_gate: Callable[[], None] | None = None, config: Config = None) -> float:
    """Seconds from the first `produce_batch()` to every record acknowledged (acks=1, or -1 = all).

    The records go round-robin over partitions `first_partition`,
    `first_partition + 1`, ... (mod `partitions`; partition 0 alone by
    default, the bench topics have one) in chunks of pre-made message dicts
    through `produce_batch` (one C call per chunk instead of one `produce()`
    per record); the queue holds the whole run, so the loop never waits on
    it. `flush()` returns only once the broker acknowledged every record.
    The producer is connected and knows the topic before the clock starts
    (`_know_topic`). `start_gate`, if given, is called just before the clock
    starts (to line up producers in several processes).
    """
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "batch.num.messages": 1_000_000,
        "queue.buffering.max.messages": max(1_000_000, count),
        "queue.buffering.max.kbytes": 2_097_151,
        "compression.type": "none",
        "enable.idempotence": False,
        "error_cb": lambda err: errors.append(str(err)),
        **(config or {}),
    })
    payload = os.urandom(size)
    chunk = 10_000
    messages = [{"value": payload, "partition": (first_partition + i) % partitions} for i in range(chunk)]
    produce_batch = producer.produce_batch
    _know_topic(producer, topic)
    if start_gate is not None:
        start_gate()
    start = time.perf_counter()
    sent = 0
    while sent < count:
        batch = messages if count - sent >= chunk else messages[: count - sent]
        queued = produce_batch(topic, batch)
        if queued != len(batch):
            # Some did not fit (or failed to queue): retry exactly those, after serving callbacks.
            retry = [m for m in batch if m.pop("_error", None) is not None]
            if len(retry) != len(batch) - queued:
                raise RuntimeError(f"produce_batch queued {queued} of {len(batch)} but flagged {len(retry)}")
            while retry:
                producer.poll(0.005)
                produce_batch(topic, retry)
                retry = [m for m in retry if m.pop("_error", None) is not None]
        sent += len(batch)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    if left:
        raise RuntimeError(f"{left} records not acknowledged after 120 s; client errors: {errors[-3:]}")
    return elapsed


def _know_topic(client: Any, topic: str, timeout_s: float = 30.0) -> None:
    """Before the clock starts: the client connected to the broker and holds the topic's metadata.

    A fresh librdkafka client that is handed its first record (or `assign`)
    after its bootstrap connection was answered, but before it connected to
    the broker that connection named, finds "no usable brokers" for its
    topic query and retries after a fixed backoff: measured here, half of
    cold producers took 103 ms for one record (warm: 1-4 ms) and a third of
    cold consumers 53-56 ms. In a 0.27 s run that moved a figure by up to a
    third, either way (a client that waited sends what queued meanwhile in
    full batches), decided by which thread wins a race, not by the broker
    alone (issue 35; docs/performance.md).
    """
    meta = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is None or meta.error is not None:
        raise RuntimeError(f"topic {topic}: not in the metadata before the timed run ({meta and meta.error})")


def consume(bootstrap: str, topic: str, *, count: int, config: Config = None) -> float:
    """Seconds from `assign` at offset 0 until `count` records have been received."""
    return consume_with_cpu(bootstrap, topic, count=count, config=config)[0]


def consume_with_cpu(bootstrap: str, topic: str, *, count: int, config: Config = None) -> tuple[float, float]:
    """(seconds, client CPU-seconds) of `consume`: this process's user+system time (librdkafka's threads too).

    The client's CPU per record shows whether a slower run waited on the broker or on the client.
    """
    import resource

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    cpu0 = cpu()
    seconds = _consume(bootstrap, topic, count=count, config=config)
    return seconds, cpu() - cpu0


def _consume(bootstrap: str, topic: str, *, count: int, config: Config = None) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "kelp-bench",  # required by librdkafka; assign() does not join the group
        "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        "fetch.wait.max.ms": 100,
        "queued.max.messages.kbytes": 2_097_151,
        "queued.min.messages": 10_000_000,  # keep fetching ahead of the Python loop
        "fetch.queue.backoff.ms": 0,  # librdkafka >= 2.4 backs off 1 s when its queue is "full"
        "fetch.error.backoff.ms": 0,
        **(config or {}),
    })
    try:
        _know_topic(consumer, topic)
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = start + 300
        while got < count:
            # consume() returns when num_messages are queued (or at the timeout): small batches
            # let this loop drain while librdkafka keeps fetching (100 000 waited ~0.4 s for the first).
            msgs = consumer.consume(num_messages=1_000, timeout=1.0)
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"consume error: {m.error()}")
            got += len(msgs)
            if time.perf_counter() > deadline:
                raise RuntimeError(f"consumed {got} of {count} records in 300 s")
        return time.perf_counter() - start
    finally:
        consumer.close()
