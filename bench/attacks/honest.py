"""The honest clients of the attack bench (bench/attacks/section.py): an acks=all producer and a consumer group,
each in a process of its own, running through every phase of a broker's attacks.

The producer (idempotent, acks=all, librdkafka's default linger.ms=5) offers `rate` records/s of `size` bytes in
1 ms ticks; each value starts with its sequence number and CLOCK_MONOTONIC in nanoseconds (system-wide on Linux)
taken just before it is handed to the client, and the delivery report records when the broker acknowledged it.
The consumer (a group of one, subscribed before the producer starts) records when `poll()` handed it each record.
Both write what they saw to a file when told to stop; `Run.window` cuts a phase's records out by send time:
produce latency (send to acknowledgement) and end-to-end latency (send to consumer receipt), p50 and p99.

Loss: every acknowledged sequence number must reach the consumer; `Run.lost` lists those that did not.

It must never count a record as acknowledged before its delivery report said so, nor as delivered before the
consumer received it.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

__all__ = ["HonestClients", "Run", "percentiles"]

_STAMP = struct.Struct(">qq")  # sequence number, send time (CLOCK_MONOTONIC ns)
DRAIN_TIMEOUT_S = 60.0


def _produce(config: Mapping[str, Any], topic: str, rate: float, size: int, stop: Any, out: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({**config, "acks": "all", "enable.idempotence": True,
                         "queue.buffering.max.messages": 1_000_000})
    pad = os.urandom(size - _STAMP.size)
    acked: list[tuple[int, int, int]] = []
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        now = time.monotonic_ns()
        seq, sent = _STAMP.unpack_from(msg.value())
        if err is None:
            acked.append((seq, sent, now))
        else:
            errors.append(str(err))

    start = time.monotonic()
    done = 0
    while not stop.is_set():
        due = int((time.monotonic() - start) * rate) - done
        for _ in range(max(0, due)):
            producer.produce(topic, _STAMP.pack(done, time.monotonic_ns()) + pad, partition=0, on_delivery=delivered)
            done += 1
        producer.poll(0)
        time.sleep(0.001)
    left = producer.flush(DRAIN_TIMEOUT_S)
    Path(out).write_text(json.dumps({"sent": done, "acked": acked, "errors": errors[:20], "error_count": len(errors),
                                     "unflushed": left}))


def _consume(config: Mapping[str, Any], topic: str, group: str, ready: Any, stop: Any, distinct: Any,
             out: str) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": True})
    got: dict[int, tuple[int, int]] = {}
    errors: list[str] = []
    assigned: list[Any] = []
    consumer.subscribe([topic], on_assign=lambda _c, parts: assigned.extend(parts))
    try:
        while not stop.is_set():
            msg = consumer.poll(0.1)
            if assigned and not ready.is_set():
                ready.set()
            if msg is None:
                continue
            now = time.monotonic_ns()
            if msg.error() is not None:
                errors.append(str(msg.error()))
                continue
            value = msg.value() or b""
            if len(value) < _STAMP.size:
                continue  # not an honest record (an attacker's, had one been appended)
            seq, sent = _STAMP.unpack_from(value)
            if seq not in got:
                got[seq] = (sent, now)
                distinct.value = len(got)
    finally:
        consumer.close()
    Path(out).write_text(json.dumps({"received": [(s, t, r) for s, (t, r) in got.items()], "errors": errors[:20],
                                     "error_count": len(errors)}))


def percentiles(ns: list[int]) -> dict[str, float]:
    if not ns:
        return {"records": 0, "p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    ns = sorted(ns)

    def pct(p: float) -> float:
        return ns[min(len(ns) - 1, int(p * len(ns)))] / 1e6

    return {"records": len(ns), "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": ns[-1] / 1e6}


@dataclass
class Run:
    """What the honest clients saw over a whole run."""

    sent: int
    acked: list[tuple[int, int, int]]  # (seq, send ns, ack ns)
    received: dict[int, tuple[int, int]]  # seq -> (send ns, receipt ns)
    producer_errors: list[str]
    consumer_errors: list[str]

    def window(self, start_ns: int, end_ns: int) -> dict[str, Any]:
        """Produce and end-to-end latency of the records sent within [start_ns, end_ns)."""
        produce = [ack - sent for _, sent, ack in self.acked if start_ns <= sent < end_ns]
        e2e = [got - sent for sent, got in self.received.values() if start_ns <= sent < end_ns]
        lost = [seq for seq, sent, _ in self.acked if start_ns <= sent < end_ns and seq not in self.received]
        return {"produce": percentiles(produce), "end_to_end": percentiles(e2e), "lost": len(lost)}

    @property
    def lost(self) -> list[int]:
        return sorted(seq for seq, _, _ in self.acked if seq not in self.received)


class HonestClients:
    """Start the consumer group (until it is assigned the partition), then the producer; `stop()` stops the
    producer, waits for the consumer to hold every acknowledged record (bounded), stops it and returns the Run."""

    def __init__(self, config: Mapping[str, Any], topic: str, group: str, work: Path, *, rate: float,
                 size: int = 1024) -> None:
        self.config, self.topic, self.group, self.work = dict(config), topic, group, work
        self.rate, self.size = rate, size
        ctx = mp.get_context("spawn")
        self._ctx = ctx
        self._stop_producer, self._stop_consumer, self._ready = ctx.Event(), ctx.Event(), ctx.Event()
        self._distinct = ctx.Value("q", 0)
        self._procs: list[Any] = []

    def start(self, *, timeout_s: float = 60.0) -> "HonestClients":
        self.work.mkdir(parents=True, exist_ok=True)
        consumer = self._ctx.Process(target=_consume, args=(self.config, self.topic, self.group, self._ready,
                                                            self._stop_consumer, self._distinct,
                                                            str(self.work / "consumer.json")))
        consumer.start()
        self._procs.append(consumer)
        if not self._ready.wait(timeout_s):
            self.kill()
            raise RuntimeError(f"honest consumer group {self.group}: no assignment within {timeout_s:.0f} s")
        producer = self._ctx.Process(target=_produce, args=(self.config, self.topic, self.rate, self.size,
                                                            self._stop_producer, str(self.work / "producer.json")))
        producer.start()
        self._procs.append(producer)
        return self

    def stop(self) -> Run:
        consumer, producer = self._procs
        self._stop_producer.set()
        producer.join(DRAIN_TIMEOUT_S + 30)
        if producer.exitcode != 0:
            self.kill()
            raise RuntimeError(f"honest producer exited with {producer.exitcode}")
        prod = json.loads((self.work / "producer.json").read_text())
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while self._distinct.value < len(prod["acked"]) and time.monotonic() < deadline:
            time.sleep(0.1)  # a bounded wait for the consumer to catch up, polling its counter
        self._stop_consumer.set()
        consumer.join(30)
        if consumer.exitcode != 0:
            self.kill()
            raise RuntimeError(f"honest consumer exited with {consumer.exitcode}")
        cons = json.loads((self.work / "consumer.json").read_text())
        return Run(sent=prod["sent"], acked=[tuple(a) for a in prod["acked"]],
                   received={s: (t, r) for s, t, r in cons["received"]},
                   producer_errors=prod["errors"], consumer_errors=cons["errors"])

    def kill(self) -> None:
        for p in self._procs:
            if p.is_alive():
                p.kill()
                p.join(10)
