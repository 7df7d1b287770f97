"""A consumer process for the group tests: prints JSON lines of what it owns and processes.

Usage: python consumer_proc.py --client kafka-python|aiokafka|confluent --bootstrap H:P
       --group G --topic T [--session-ms 3000] [--instance-id I] [--reset earliest]
       [--commit] [--idle-exit S] [--group-protocol classic|consumer]

Lines: {"event": "ready"}, {"event": "assigned", "partitions": [..]} whenever the
assignment changes, {"event": "records", "items": [[partition, offset, value], ...]}
per poll (printed after processing, before the commit), {"event": "error", ...}.
With --commit it commits synchronously after each non-empty poll. SIGTERM closes
the consumer cleanly (LeaveGroup); SIGKILL is the crash case.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time

stop = False


def emit(**obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def on_term(*_: object) -> None:
    global stop
    stop = True


def run_kafka_python(a: argparse.Namespace) -> None:
    from kafka import KafkaConsumer

    kw = dict(bootstrap_servers=a.bootstrap, group_id=a.group, auto_offset_reset=a.reset,
              enable_auto_commit=False, session_timeout_ms=a.session_ms,
              heartbeat_interval_ms=max(a.session_ms // 6, 100),
              max_poll_interval_ms=max(a.session_ms * 2, 10000), client_id=f"kp-{a.instance_id or 'dyn'}")
    if a.instance_id:
        kw["group_instance_id"] = a.instance_id
    c = KafkaConsumer(**kw)
    c.subscribe([a.topic])
    loop_common(a, poll=lambda: [(tp.partition, r.offset, r.value.decode()) for tp, rs in c.poll(timeout_ms=200).items()
                                 for r in rs],
                assignment=lambda: sorted(tp.partition for tp in c.assignment()),
                commit=c.commit, close=c.close)


def run_confluent(a: argparse.Namespace) -> None:
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": a.bootstrap, "group.id": a.group, "auto.offset.reset": a.reset,
            "enable.auto.commit": False, "session.timeout.ms": a.session_ms,
            "heartbeat.interval.ms": max(a.session_ms // 6, 100), "client.id": f"ck-{a.instance_id or 'dyn'}",
            "partition.assignment.strategy": "range"}
    if a.group_protocol == "consumer":  # KIP-848: the broker sets the session, heartbeat and assignor
        for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
            del conf[key]
        conf["group.protocol"] = "consumer"
    if a.instance_id:
        conf["group.instance.id"] = a.instance_id
    c = Consumer(conf)
    c.subscribe([a.topic])

    def poll() -> list:
        out = []
        for m in c.consume(num_messages=500, timeout=0.2):
            if m.error():
                emit(event="error", error=str(m.error()))
                continue
            out.append((m.partition(), m.offset(), m.value().decode()))
        return out

    loop_common(a, poll=poll, assignment=lambda: sorted(tp.partition for tp in c.assignment()),
                commit=lambda: c.commit(asynchronous=False), close=c.close)


def run_aiokafka(a: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer

    async def main() -> None:
        kw = dict(bootstrap_servers=a.bootstrap, group_id=a.group, auto_offset_reset=a.reset,
                  enable_auto_commit=False, session_timeout_ms=a.session_ms,
                  heartbeat_interval_ms=max(a.session_ms // 6, 100), max_poll_interval_ms=max(a.session_ms * 2, 10000))
        if a.instance_id:
            kw["group_instance_id"] = a.instance_id
        c = AIOKafkaConsumer(a.topic, **kw)
        await c.start()
        emit(event="ready")
        last = None
        idle_since = time.monotonic()
        try:
            while not stop:
                batch = await c.getmany(timeout_ms=200)
                items = [(tp.partition, r.offset, r.value.decode()) for tp, rs in batch.items() for r in rs]
                cur = sorted(tp.partition for tp in c.assignment())
                if cur != last:
                    last = cur
                    emit(event="assigned", partitions=cur)
                if items:
                    idle_since = time.monotonic()
                    emit(event="records", items=items)
                    if a.commit:
                        await c.commit()
                elif a.idle_exit and time.monotonic() - idle_since > a.idle_exit:
                    break
        finally:
            await c.stop()
            emit(event="closed")

    asyncio.run(main())


def loop_common(a: argparse.Namespace, *, poll, assignment, commit, close) -> None:
    emit(event="ready")
    last = None
    idle_since = time.monotonic()
    try:
        while not stop:
            try:
                items = poll()
            except Exception as exc:  # surfaced to the test, e.g. NoOffsetForPartitionError
                emit(event="error", error=f"{type(exc).__name__}: {exc}")
                time.sleep(0.2)
                continue
            cur = assignment()
            if cur != last:
                last = cur
                emit(event="assigned", partitions=cur)
            if items:
                idle_since = time.monotonic()
                emit(event="records", items=items)
                if a.commit:
                    commit()
            elif a.idle_exit and time.monotonic() - idle_since > a.idle_exit:
                break
    finally:
        close()
        emit(event="closed")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--client", required=True, choices=["kafka-python", "aiokafka", "confluent"])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--session-ms", type=int, default=3000)
    p.add_argument("--instance-id", default=None)
    p.add_argument("--reset", default="earliest")
    p.add_argument("--commit", action="store_true")
    p.add_argument("--idle-exit", type=float, default=0.0)
    p.add_argument("--group-protocol", default="classic", choices=["classic", "consumer"])
    a = p.parse_args()
    signal.signal(signal.SIGTERM, on_term)
    {"kafka-python": run_kafka_python, "aiokafka": run_aiokafka, "confluent": run_confluent}[a.client](a)


if __name__ == "__main__":
    main()
