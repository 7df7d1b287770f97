"""Many partitions: 1,000 partitions, 10 producer processes, then a consumer group reading them all.

Why: per-partition costs (state, files, small batches, metadata) hide in a
one-partition run. Here ten producers in processes of their own each spread
N 1 KiB records round-robin over every partition (so batches are small, as
with many keys), all starting together, after one untimed record to every
partition (a partition's first append has one-off costs); the aggregate rate
is every record over the time from the first producer's start to the last
one's final acknowledgement. Then three consumers in one group (classic protocol,
confluent-kafka) read everything; their rate is counted from the first
record received, so the group join (and the broker's
`group.initial.rebalance.delay.ms`, 3 s by default in both) is timed apart.
Broker RSS is read after both.

It must never report a rate before every record was acknowledged or received.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any, Callable

from . import clients, probe

__all__ = ["run"]

TOPIC = "bench-partitions"


def _producer(bootstrap: str, count: int, size: int, partitions: int, first: int, gate: Any, out: Any) -> None:
    elapsed = clients.produce(bootstrap, TOPIC, count=count, size=size, partitions=partitions,
                              first_partition=first, start_gate=lambda: gate.wait(120))
    out.put((time.monotonic() - elapsed, time.monotonic()))


def _consumer(bootstrap: str, total: int, got: Any, first_at: Any, stop: Any) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-partitions", "auto.offset.reset": "earliest",
                  "enable.auto.commit": True, "fetch.max.bytes": 52_428_800, "fetch.queue.backoff.ms": 0})
    c.subscribe([TOPIC])
    try:
        while not stop.is_set():
            msgs = c.consume(num_messages=10_000, timeout=0.2)
            n = sum(1 for m in msgs if m.error() is None)
            if n:
                now = time.monotonic()
                with got.get_lock():
                    if got.value == 0 or now < first_at.value:
                        first_at.value = now
                    got.value += n
                    if got.value >= total:
                        stop.set()
    finally:
        c.close()


def run(bootstrap: str, pids: Callable[[], list[int]], *, partitions: int = 1000, producers: int = 10,
        records: int = 20_000, size: int = 1024, consumers: int = 3) -> dict[str, Any]:
    """`producers` x `records` records over `partitions` partitions, then `consumers` in a group read them."""
    ctx = mp.get_context("spawn")
    t0 = time.perf_counter()
    clients.create_topic(bootstrap, TOPIC, partitions=partitions, timeout_s=120)
    create_s = time.perf_counter() - t0
    # One record to every partition first, untimed: a partition's first append has one-off costs
    # (Kafka writes and fsyncs its leader-epoch checkpoint) that are not the steady state measured here.
    prime_s = clients.produce(bootstrap, TOPIC, count=partitions, size=size, partitions=partitions)
    cpu0 = probe.cpu_seconds(pids())
    gate, out = ctx.Barrier(producers), ctx.Queue()
    procs = [ctx.Process(target=_producer, args=(bootstrap, records, size, partitions, i * (partitions // producers),
                                                 gate, out)) for i in range(producers)]
    for p in procs:
        p.start()
    spans = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a producer process failed (exit codes {[p.exitcode for p in procs]})")
    produce_s = max(end for _, end in spans) - min(start for start, _ in spans)
    cpu1 = probe.cpu_seconds(pids())
    total = producers * records + partitions
    got, first_at, stop = ctx.Value("q", 0), ctx.Value("d", 0.0), ctx.Event()
    t_join = time.monotonic()
    cons = [ctx.Process(target=_consumer, args=(bootstrap, total, got, first_at, stop)) for _ in range(consumers)]
    for p in cons:
        p.start()
    stop.wait(300)
    t_end = time.monotonic()
    stop.set()
    for p in cons:
        p.join(30)
        if p.is_alive():
            p.kill()
    if got.value < total:
        raise RuntimeError(f"the consumer group received {got.value} of {total} records within 300 s")
    mb = producers * records * size / 1e6
    return {"partitions": partitions, "producers": producers, "records": producers * records, "record_bytes": size,
            "create_s": create_s, "prime_s": prime_s, "produce_mb_s": mb / produce_s,
            "produce_cpu_s_per_gb": (cpu1 - cpu0) / (mb / 1e3),
            "consumers": consumers, "join_to_first_record_s": first_at.value - t_join,
            "consume_mb_s": total * size / 1e6 / (t_end - first_at.value), "rss_bytes": probe.rss_bytes(pids())}
