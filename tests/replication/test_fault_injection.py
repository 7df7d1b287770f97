"""Jepsen-style: a replicated topic under a running producer and consumer group while brokers die, pause and restart.

Three brokers, a topic of 6 partitions with replication factor 3 and
min.insync.replicas=2, an idempotent confluent-kafka producer with
acks=all and a consumer group reading. While they run: SIGKILL the leader
of a partition (and bring it back), SIGKILL the controller (and bring it
back), SIGSTOP a broker for longer than its lease and SIGCONT it, then
restart every broker in turn (SIGTERM, controlled shutdown). Afterwards a
checker reads every partition from the start: no acknowledged record lost,
none at two offsets, per-partition order of acknowledged records intact,
and the consumers kept consuming through every fault.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

pytestmark = pytest.mark.clients

TOPIC = "jepsen"
PARTITIONS = 6


class Workload:
    """A producer and a consumer group in background threads, both bounded and stoppable."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self.consumed = 0
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> "Workload":
        for t in self.threads:
            t.start()
        return self

    def _produce(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 2, "message.timeout.ms": 120000, "retry.backoff.ms": 50,
                      # a paused (SIGSTOPped) leader keeps its connections open: in-flight requests to it
                      # end only by timing out, as against Kafka; 10 s instead of the 30/60 s defaults
                      "request.timeout.ms": 10000, "socket.timeout.ms": 10000,
                      "topic.metadata.refresh.interval.ms": 500})

        def report(err, msg) -> None:
            if err is None:
                with self._lock:
                    self.acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                self.errors.append(str(err))

        seq = 0
        while not self.stop.is_set() and seq < 2_000_000:
            for _ in range(50):
                p.produce(TOPIC, f"v{seq}".encode(), key=f"k{seq % 97}".encode(), on_delivery=report)
                seq += 1
            p.poll(0.01)
        p.flush(150)

    def _consume(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "jepsen-readers",
                      "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "socket.timeout.ms": 10000,
                      "topic.metadata.refresh.interval.ms": 500})
        c.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                for m in c.consume(num_messages=500, timeout=0.5):
                    if m.error() is None:
                        self.consumed += 1
        finally:
            c.close()

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(180)


def _read_all(bootstrap: str) -> dict[int, list[tuple[int, bytes]]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "jepsen-checker", "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    out: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    quiet_since = time.monotonic()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 5:
            msgs = c.consume(num_messages=1000, timeout=0.5)
            for m in msgs:
                if m.error() is None:
                    out[m.partition()].append((m.offset(), m.value()))
            if msgs:
                quiet_since = time.monotonic()
    finally:
        c.close()
    return out


@pytest.mark.timeout(300)
def test_no_acknowledged_record_is_lost_through_kills_pauses_and_restarts(cluster_factory) -> None:
    cluster = cluster_factory(3)
    cluster.admin("/admin/v1/topics", "POST", {"name": TOPIC, "partitions": PARTITIONS, "replication_factor": 3,
                                               "configs": {"min.insync.replicas": "2"}})
    work = Workload(cluster.bootstrap).start()

    def progress(what: str, more: int = 2000) -> None:
        acked, consumed = work.acked_count(), work.consumed
        cluster.wait_for(f"producer and consumers to go on after {what}",
                         lambda: work.acked_count() >= acked + more and work.consumed > consumed, timeout=60)

    try:
        progress("the start")
        leader = cluster.topic(TOPIC)["partitions"][0]["leader"]
        cluster[leader].kill()
        progress(f"SIGKILL of broker {leader}, leader of partition 0")
        cluster[leader].start()
        progress(f"broker {leader} restarted")

        controller = cluster.controller()
        cluster[controller].kill()
        progress(f"SIGKILL of the controller, broker {controller}")
        cluster[controller].start()
        progress(f"broker {controller} restarted")

        victim = (controller + 1) % 3
        cluster.stop_process(cluster[victim])
        cluster.wait_for(f"broker {victim} to leave every ISR", lambda: all(
            victim not in p["isr"] for p in cluster.topic(TOPIC)["partitions"]), timeout=30)
        progress(f"SIGSTOP of broker {victim}")
        cluster.continue_process(cluster[victim])
        progress(f"SIGCONT of broker {victim}")

        for b in cluster.brokers:
            b.terminate()
            b.start()
            progress(f"rolling restart of broker {b.broker_id}", more=500)
    finally:
        work.finish()

    assert not work.errors, work.errors[:5]
    cluster.wait_fully_replicated(TOPIC, timeout=60)
    stored = _read_all(cluster.bootstrap)
    by_value: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for p, records in stored.items():
        for offset, value in records:
            by_value[value].append((p, offset))
    lost = [(p, o, v) for p, o, v in work.acked if (p, o) not in by_value.get(v, [])]
    assert not lost, f"{len(lost)} acknowledged record(s) lost or moved, e.g. {lost[:5]}"
    twice = {v: where for v, where in by_value.items() if len(where) > 1}
    assert not twice, f"records stored twice: {list(twice.items())[:5]}"
    for p in range(PARTITIONS):
        acked_order = [v for _, v in sorted((o, v) for pp, o, v in work.acked if pp == p)]
        acked_set = set(acked_order)
        stored_acked = [v for _, v in stored[p] if v in acked_set]
        assert stored_acked == acked_order, f"partition {p}: acknowledged records out of order"
    assert len(work.acked) > 10_000 and work.consumed > 10_000
