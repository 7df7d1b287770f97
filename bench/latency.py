"""End-to-end latency at a fixed offered rate: producer timestamp to consumer receipt.

Why: throughput runs flat out and hides stalls; a user with a steady stream
cares how long a record takes to reach a consumer, and how bad the tail is.
A producer process offers 1 KiB records at a fixed rate (20 MB/s by
default) with confluent-kafka's default batching (linger.ms=5, acks=1); each
record's value starts with CLOCK_MONOTONIC in nanoseconds (system-wide on
Linux, so comparable across processes) taken just before it is handed to
the client. A consumer in this process, assigned to the partition before
the producer starts, takes the clock when `poll()` hands it the first queued
record (and then the rest already queued). The first `warmup_s` seconds are
dropped; p50, p99, p99.9 and max are over the rest.

It must never report percentiles without the offered and achieved rates, nor
count a record the consumer did not receive.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import struct
import time
from typing import Any

from . import clients

__all__ = ["run"]

_STAMP = struct.Struct(">q")


def _offer(bootstrap: str, topic: str, rate: float, size: int, seconds: float, sent: Any) -> None:
    """Produce `rate` records/s for `seconds`, in 1 ms ticks: each tick hands over the records now due."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False,
                         "queue.buffering.max.messages": 1_000_000})
    pad = os.urandom(size - _STAMP.size)
    start = time.monotonic()
    done = 0
    while True:
        now = time.monotonic()
        if now - start >= seconds:
            break
        due = int((now - start) * rate) - done
        if due > 0:
            value = _STAMP.pack(time.monotonic_ns()) + pad
            producer.produce_batch(topic, [{"value": value} for _ in range(due)], partition=0)
            done += due
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(30)
    sent.value = done


def run(bootstrap: str, *, topic: str = "bench-latency", mb_s: float = 20.0, size: int = 1024,
        seconds: float = 10.0, warmup_s: float = 2.0) -> dict[str, Any]:
    """Latency figures (ms) of one broker at `mb_s` MB/s of `size`-byte records."""
    from confluent_kafka import Consumer, TopicPartition

    rate = mb_s * 1e6 / size
    clients.create_topic(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kelp-bench-latency",
                         "enable.auto.commit": False})
    ctx = mp.get_context("spawn")
    sent = ctx.Value("q", 0)
    latencies: list[int] = []
    received = 0
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumer.consume(num_messages=1, timeout=0.5)  # connected and fetching before the first record
        producer = ctx.Process(target=_offer, args=(bootstrap, topic, rate, size, seconds + warmup_s, sent))
        producer.start()
        measure_from = time.monotonic_ns() + int(warmup_s * 1e9)
        deadline = time.monotonic() + seconds + warmup_s + 60
        while time.monotonic() < deadline:
            # poll() returns as soon as one record is there; consume(timeout=0) then takes what else is
            # queued without waiting (consume() with a timeout waits for num_messages: a batching delay).
            first = consumer.poll(0.1)
            now = time.monotonic_ns()
            if first is None:
                msgs = []
            else:
                msgs = [first, *consumer.consume(num_messages=10_000, timeout=0)]
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"latency consumer: {m.error()}")
                value = m.value()
                if value is None:
                    raise RuntimeError("latency consumer: a record without a value (the producer stamps every one)")
                stamp = _STAMP.unpack_from(value)[0]
                if stamp >= measure_from:
                    latencies.append(now - stamp)
            received += len(msgs)
            if not producer.is_alive() and sent.value and received >= sent.value:
                break
        producer.join(30)
        if producer.exitcode != 0:
            raise RuntimeError(f"latency producer exited with {producer.exitcode}")
    finally:
        consumer.close()
    if received < sent.value:
        raise RuntimeError(f"latency run: received {received} of {sent.value} records within 60 s of the end")
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] / 1e6

    return {"offered_mb_s": mb_s, "record_bytes": size, "seconds": seconds, "warmup_s": warmup_s,
            "achieved_mb_s": sent.value * size / 1e6 / (seconds + warmup_s),
            "measured_records": len(latencies), "p50_ms": pct(0.50), "p99_ms": pct(0.99), "p999_ms": pct(0.999),
            "max_ms": latencies[-1] / 1e6 if latencies else float("nan")}
