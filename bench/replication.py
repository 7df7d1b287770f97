"""Replication figures: acks=all on three replicas beside acks=1 on one, and failover time.

Why: a user running replication.factor=3, min.insync.replicas=2, acks=all
wants to know what durability costs in throughput, and how long producers
stall when a leader dies. Both are measured on a three-broker cluster on
this machine (file leases, default lease duration unless given), in the
same run: produce N 1 KiB records to a one-partition RF=1 topic with
acks=1 and to a one-partition RF=3 topic with acks=all; then SIGKILL the
RF=3 partition's leader and time from the kill to the first acks=all
record acknowledged by its successor.

It must never report a failover time without the lease duration in force.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kelp.cli.http_client import AdminClient

from . import clients
from .broker import BenchBroker

__all__ = ["run", "print_report"]


def _leader(admin: AdminClient, topic: str) -> int:
    return int(admin.get(f"/admin/v1/topics/{topic}")["partitions"][0]["leader"])


def _first_ack_after_kill(bootstrap: str, topic: str, *, timeout_s: float = 60.0) -> float:
    """Produce one acks=all record at a time until one is acknowledged; seconds from now."""
    from confluent_kafka import Producer

    start = time.perf_counter()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 5000, "retry.backoff.ms": 50, "retry.backoff.max.ms": 200,
                         "topic.metadata.refresh.interval.ms": 250, "linger.ms": 0})
    done: list[float] = []
    while not done and time.perf_counter() - start < timeout_s:
        producer.produce(topic, b"x" * 1024, partition=0,
                         on_delivery=lambda err, msg: done.append(time.perf_counter()) if err is None else None)
        producer.flush(6)
    if not done:
        raise RuntimeError(f"no acks=all produce to {topic} succeeded within {timeout_s:.0f}s of the leader's death")
    return done[0] - start


def run(*, records: int, work: Path, lease_ms: int = 3000, extra: dict | None = None) -> dict[str, Any]:
    cluster_dir = work / "replication-cluster"
    settings = {"cluster.dir": str(cluster_dir), "lease.duration.ms": lease_ms, **(extra or {})}
    brokers = [BenchBroker(work / f"replication-{i}", settings=settings, broker_id=i) for i in range(3)]
    try:
        for b in brokers:
            b.start()
        admin = AdminClient(brokers[0].http_url)
        bootstrap = ",".join(b.bootstrap for b in brokers)
        deadline = time.monotonic() + 30
        while len(admin.get("/admin/v1/brokers")["brokers"]) < 3:
            if time.monotonic() > deadline:
                raise RuntimeError("the three brokers did not join one cluster within 30 s")
            time.sleep(0.2)
        admin.post("/admin/v1/topics", {"name": "rf1", "partitions": 1, "replication_factor": 1})
        admin.post("/admin/v1/topics", {"name": "rf3", "partitions": 1, "replication_factor": 3,
                                        "configs": {"min.insync.replicas": "2"}})
        clients.produce(bootstrap, "rf1", count=min(records, 20_000), size=1024)  # warm-up
        cpu = lambda: sum(b.cpu_seconds() for b in brokers)  # noqa: E731 - every broker's CPU so far
        c0 = cpu()
        t1 = clients.produce(bootstrap, "rf1", count=records, size=1024, acks=1)
        c1 = cpu()
        t3 = clients.produce(bootstrap, "rf3", count=records, size=1024, acks=-1)
        c3 = cpu()
        leader = _leader(admin, "rf3")
        survivor = next(b for i, b in enumerate(brokers) if i != leader)
        brokers[leader].kill()
        failover = _first_ack_after_kill(",".join(b.bootstrap for i, b in enumerate(brokers) if i != leader), "rf3")
        new_leader = _leader(AdminClient(survivor.http_url), "rf3")
        mb = records * 1024 / 1e6
        return {"records": records, "acks1_rf1_mb_s": mb / t1, "acksall_rf3_mb_s": mb / t3, "ratio": t1 / t3,
                "acks1_rf1_broker_cpu_s": c1 - c0, "acksall_rf3_broker_cpu_s": c3 - c1,
                "failover_s": failover, "lease_ms": lease_ms, "old_leader": leader, "new_leader": new_leader}
    finally:
        for b in brokers:
            b.stop()


def print_report(r: dict[str, Any]) -> None:
    from kelp.cli.output import print_table

    print_table([
        ["produce 1 KiB, acks=1, RF=1", f"{r['records']:,}", f"{r['acks1_rf1_mb_s']:,.1f}", "-",
         f"{r['acks1_rf1_broker_cpu_s']:.2f}"],
        ["produce 1 KiB, acks=all, RF=3", f"{r['records']:,}", f"{r['acksall_rf3_mb_s']:,.1f}",
         f"{r['ratio']:.2f}x (goal >= 0.5x)", f"{r['acksall_rf3_broker_cpu_s']:.2f}"],
    ], ["CASE", "RECORDS", "MB/s", "VS acks=1 RF=1", "BROKERS CPU s"])
    import os

    print(f"machine: {os.cpu_count()} CPUs shared by the client and the three brokers; RF=3 makes three brokers "
          "store every byte, so on a CPU-bound machine the ratio is bounded by the CPU they can share")
    verdict = "meets" if r["failover_s"] <= 5.0 else "misses"
    print(f"failover: SIGKILL of leader {r['old_leader']} -> first acks=all produce acknowledged by {r['new_leader']} "
          f"in {r['failover_s']:.2f} s (lease duration {r['lease_ms']} ms) — {verdict} the 5 s goal")
