"""Consumer-group figures: JoinGroup->Stable latency of a four-member group, and
group consumption throughput with three confluent-kafka consumers vs one, same run.

Latency: four members (raw Kafka protocol over asyncio sockets, so no client
library's backoff is measured) send JoinGroup v5 (with the MEMBER_ID_REQUIRED
round trip), the leader sends the assignment in SyncGroup; the figure is from
the first JoinGroup sent to the last SyncGroup answered, with
`group.initial.rebalance.delay.ms=0` (Kafka's default adds 3000 ms on purpose).

Throughput: one topic of six partitions filled with N records by
confluent-kafka; then one consumer process in group A, then three consumer
processes in group B, each counting records until all N are consumed. Records/s
= N / (processes started .. N records counted), so it includes the group join.

Run alone: `python -m bench.groups [--records N]`; `bench/__main__.py` can call `run()`.
It must never report a figure without the configuration it was measured under.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kelp.errors import ErrorCode

from .broker import BenchBroker

__all__ = ["run", "main"]

SETTINGS = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
            "offsets.topic.num.partitions": 10}


# -- latency --------------------------------------------------------------------------

class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.corr = reader, writer, 0

    async def request(self, req: Any, version: int) -> Any:
        import sys as _sys

        self.corr += 1
        req.with_header(correlation_id=self.corr, client_id="bench-groups")
        self.writer.write(bytes(req.encode(version=version, header=True, framed=True)))
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        frame = await self.reader.readexactly(size)
        mod = _sys.modules[type(req).__module__]
        resp_cls = getattr(mod, type(req).__name__.replace("Request", "Response"))
        return resp_cls.decode(frame, version=version, header=True)


async def _member(bootstrap: str, group: str, start: asyncio.Event, done: list[float]) -> None:
    from kafka.protocol.consumer import JoinGroupRequest, SyncGroupRequest
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    host, _, port = bootstrap.rpartition(":")
    conn = _Conn(*await asyncio.open_connection(host, int(port)))
    meta = bytes(ConsumerProtocolSubscription(version=0, topics=["bench-groups"], user_data=b"").encode())
    P = JoinGroupRequest.JoinGroupRequestProtocol
    await start.wait()
    member = ""
    while True:
        r = await conn.request(JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                                member_id=member, group_instance_id=None, protocol_type="consumer",
                                                protocols=[P(name="range", metadata=meta)]), 5)
        if r.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            member = r.member_id
            continue
        break
    assert r.error_code == ErrorCode.NONE, f"JoinGroup error {r.error_code}"
    A = SyncGroupRequest.SyncGroupRequestAssignment
    assignments = [A(member_id=m.member_id, assignment=b"") for m in r.members] if r.members else []
    s = await conn.request(SyncGroupRequest(group_id=group, generation_id=r.generation_id, member_id=r.member_id,
                                            group_instance_id=None, assignments=assignments), 3)
    assert s.error_code == ErrorCode.NONE, f"SyncGroup error {s.error_code}"
    done.append(time.perf_counter())
    conn.writer.close()


async def _wait_coordinator(bootstrap: str, groups: list[str], timeout_s: float = 30.0) -> None:
    """As a client does before joining: FindCoordinator until the broker coordinates each group.

    A fresh broker answers NOT_COORDINATOR until its `__consumer_offsets`
    partitions are elected and loaded; that start-up time is not join latency.
    """
    from kafka.protocol.metadata import FindCoordinatorRequest

    host, _, port = bootstrap.rpartition(":")
    conn = _Conn(*await asyncio.open_connection(host, int(port)))
    deadline = time.monotonic() + timeout_s
    try:
        for group in groups:
            while True:
                r = await conn.request(FindCoordinatorRequest[1](key=group, key_type=0), 1)
                if r.error_code == ErrorCode.NONE:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no coordinator for group {group} within {timeout_s:.0f}s (error "
                                       f"{r.error_code})")
                await asyncio.sleep(0.1)
    finally:
        conn.writer.close()


async def _join_latency(bootstrap: str, rounds: int) -> list[float]:
    await _wait_coordinator(bootstrap, [f"bench-join-{i}" for i in range(rounds)])
    out = []
    for i in range(rounds):
        start = asyncio.Event()
        done: list[float] = []
        tasks = [asyncio.create_task(_member(bootstrap, f"bench-join-{i}", start, done)) for _ in range(4)]
        await asyncio.sleep(0.05)  # let the four connections open before the clock starts
        t0 = time.perf_counter()
        start.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        out.append((max(done) - t0) * 1000)
    return out


# -- throughput -----------------------------------------------------------------------

def _consume(bootstrap: str, group: str, total: int, share: Any, stop: Any) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": True, "session.timeout.ms": 6000, "fetch.max.bytes": 8 << 20})
    c.subscribe(["bench-groups"])
    n = 0
    while not stop.is_set():
        msgs = c.consume(num_messages=10000, timeout=0.2)
        got = sum(1 for m in msgs if not m.error())
        if got:
            n += got
            with share.get_lock():
                share.value += got
            if share.value >= total:
                stop.set()
    c.close()


def _group_rate(bootstrap: str, group: str, members: int, total: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    share = ctx.Value("q", 0)
    stop = ctx.Event()
    t0 = time.perf_counter()
    procs = [ctx.Process(target=_consume, args=(bootstrap, group, total, share, stop)) for _ in range(members)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 300
    while share.value < total and time.monotonic() < deadline:
        time.sleep(0.05)
    elapsed = time.perf_counter() - t0
    stop.set()
    for p in procs:
        p.join(20)
        if p.is_alive():
            p.kill()
    consumed = share.value
    return {"members": members, "records": consumed, "seconds_incl_join": round(elapsed, 3),
            "records_s_incl_join": round(consumed / elapsed) if elapsed else None}


def _fill(bootstrap: str, count: int, size: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("bench-groups", 6, 1)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 2_000_000, "enable.idempotence": False})
    payload = os.urandom(size)
    for i in range(count):
        while True:
            try:
                p.produce("bench-groups", payload, partition=i % 6)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)


def run(*, records: int = 200_000, size: int = 100, rounds: int = 20, work: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        broker = BenchBroker(Path(tmp) / "data", settings=SETTINGS).start()
        try:
            lat = asyncio.run(_join_latency(broker.bootstrap, rounds))
            _fill(broker.bootstrap, records, size)
            one = _group_rate(broker.bootstrap, "bench-one", 1, records)
            three = _group_rate(broker.bootstrap, "bench-three", 3, records)
        finally:
            broker.stop()
    lat_sorted = sorted(lat)
    return {
        "config": {**SETTINGS, "records": records, "record_bytes": size, "partitions": 6, "rounds": rounds},
        "join_to_stable_ms": {"median": round(statistics.median(lat), 2),
                              "p90": round(lat_sorted[int(0.9 * (len(lat) - 1))], 2), "max": round(max(lat), 2)},
        "one_consumer": one,
        "three_consumers": three,
        "three_vs_one": round(three["records_s_incl_join"] / one["records_s_incl_join"], 2)
        if one["records_s_incl_join"] else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.groups", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = run(records=a.records, size=a.size, rounds=a.rounds)
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    print_report(res)
    return 0


def print_report(res: dict[str, Any]) -> None:
    """Print `run()`'s result: join latency, then one vs three consumers from the same run."""
    size = res["config"]["record_bytes"]
    j = res["join_to_stable_ms"]
    print(f"JoinGroup->Stable, 4 members (initial delay 0): median {j['median']} ms, p90 {j['p90']} ms, "
          f"max {j['max']} ms")
    for key in ("one_consumer", "three_consumers"):
        r = res[key]
        print(f"{r['members']} confluent-kafka consumer(s): {r['records']} records of {size} B in "
              f"{r['seconds_incl_join']} s (incl. join) = {r['records_s_incl_join']} records/s")
    print(f"three vs one: x{res['three_vs_one']}")


if __name__ == "__main__":
    sys.exit(main())
