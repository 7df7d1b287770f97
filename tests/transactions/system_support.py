"""What the multi-broker transaction tests share: the cluster's settings, Kafka's TransactionalMessageCopier as
a process, the broker coordinating a transactional id, and a checker reading a topic to its end.

Why: Kafka's own exactly-once system test (tests/kafkatest/tests/core/transactions_test.py) copies an input
topic to an output topic with `org.apache.kafka.tools.TransactionalMessageCopier` (kafka-tools 4.3.1, the
jars `kelp.kafka_tools` fetches) while brokers are bounced, then reads the output read_committed. The test
here does the same against three Kelp broker processes; this module holds the parts that are not the test's
story: starting and following a copier (its JSON status lines on stdout), finding which broker leads the
`__transaction_state` partition of an id (the id -> partition hash of `txn_config`), and reading every
partition of a topic to its end under either isolation level with confluent-kafka, concurrently or at once.

It must never sleep to synchronise: every wait polls a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kelp import kafka_tools
from kelp.broker.groups.placement import OFFSETS_TOPIC, partition_for_group
from kelp.broker.transactions.txn_config import TXN_TOPIC, partition_for_txn
from tests.support.cluster import Cluster

__all__ = ["CLUSTER_SETTINGS", "TXN_PARTITIONS", "Copier", "TopicReader", "coordinator_of", "create_topics",
           "group_coordinator_of",
           "list_transactions", "pause", "read_topic", "resume", "wait_leaders_moved", "wait_until"]

TXN_PARTITIONS = 5
OFFSETS_PARTITIONS = 3
CLUSTER_SETTINGS: dict[str, object] = {
    "transaction.state.log.num.partitions": TXN_PARTITIONS,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    "offsets.topic.replication.factor": 3,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 500,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
}
COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"


def wait_until(what: str, predicate: Callable[[], object], *, timeout: float, interval: float = 0.1,
               detail: Callable[[], str] = lambda: "") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} {detail()}")


def coordinator_of(cluster: Cluster, transactional_id: str) -> int:
    """The broker leading the `__transaction_state` partition of `transactional_id` (-1: none now)."""
    p = partition_for_txn(transactional_id, TXN_PARTITIONS)
    return int(cluster.topic(TXN_TOPIC)["partitions"][p]["leader"])


def create_topics(cluster: Cluster, partitions: dict[str, int]) -> None:
    """Each topic with its partition count, replication factor 3, min.insync.replicas 2 (the admin API)."""
    for name, count in partitions.items():
        cluster.admin("/admin/v1/topics", "POST", {"name": name, "partitions": count, "replication_factor": 3,
                                                   "configs": {"min.insync.replicas": "2"}})


def wait_leaders_moved(cluster: Cluster, victim: int, topics: tuple[str, ...], *, timeout: float) -> None:
    """Wait until every partition of `topics` is led by a broker other than `victim` (SIGKILLed or stopped)."""
    cluster.wait_for(f"a leader other than {victim} for every partition",
                     lambda: all(p["leader"] not in (-1, victim) for t in topics
                                 for p in cluster.topic(t)["partitions"]), timeout=timeout)


def list_transactions(bootstrap: str) -> list[dict[str, str]]:
    """Kafka's `kafka-transactions.sh list` (TransactionsCommand: ListTransactions on every broker): its rows."""
    done = subprocess.run(kafka_tools.java_command("org.apache.kafka.tools.TransactionsCommand",
                                                   "--bootstrap-server", bootstrap, "list"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"TransactionsCommand list exited {done.returncode}: {done.stderr[-2000:]}"
    lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    return [dict(zip(header, row, strict=True)) for row in rows]


def _holds_flock(pid: int, path: Path) -> bool:
    """Whether process `pid` holds a flock on `path` now (/proc/locks; waiters' lines, marked "->", skipped)."""
    ino = os.stat(path).st_ino
    with open("/proc/locks") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) < 6 or parts[1] == "->" or parts[1] != "FLOCK":
                continue
            if int(parts[4]) == pid and int(parts[5].rsplit(":", 1)[1]) == ino:
                return True
    return False


def pause(cluster: Cluster, broker_id: int, *, timeout: float = 10.0) -> None:
    """SIGSTOP a broker, but never while it holds the file leases' lock (`cluster.dir/leases/.lock`, held for a
    read-compare-rename): a broker stopped inside it would stall every other broker's lease renewal until it
    is continued — the file backend's known limit (`kelp.broker.cluster.file_lock`), not the failure the
    tests mean. Retries (SIGCONT, SIGSTOP again) until the lock is free, within `timeout`."""
    b = cluster[broker_id]
    assert b.proc is not None
    lock = cluster.root / "cluster" / "leases" / ".lock"
    deadline = time.monotonic() + timeout
    while True:
        cluster.stop_process(b)
        if not lock.exists() or not _holds_flock(b.proc.pid, lock):
            return
        cluster.continue_process(b)
        if time.monotonic() > deadline:
            raise AssertionError(f"broker {broker_id} held {lock} at every SIGSTOP for {timeout}s")
        time.sleep(0.01)


def resume(cluster: Cluster, broker_id: int) -> None:
    b = cluster[broker_id]
    if b.proc is not None and b.proc.poll() is None:
        b.proc.send_signal(signal.SIGCONT)
    b.stopped = False  # type: ignore[attr-defined]


def group_coordinator_of(cluster: Cluster, group: str) -> int:
    """The broker leading the `__consumer_offsets` partition of `group` (-1: none now)."""
    p = partition_for_group(group, OFFSETS_PARTITIONS)
    return int(cluster.topic(OFFSETS_TOPIC)["partitions"][p]["leader"])


@dataclass
class Copier:
    """One TransactionalMessageCopier JVM (one input partition, one transactional id)."""

    transactional_id: str
    command: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None
    status: dict = field(default_factory=dict)
    statuses: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(cls, bootstrap: str, *, transactional_id: str, group: str, input_topic: str, input_partition: int,
              output_topic: str, transaction_size: int, transaction_timeout_ms: int, log_dir: Path,
              log_name: str | None = None, random_aborts: bool = False) -> "Copier":
        args = ["--broker-list", bootstrap, "--transactional-id", transactional_id, "--consumer-group", group,
                "--input-topic", input_topic, "--input-partition", str(input_partition),
                "--output-topic", output_topic, "--transaction-size", str(transaction_size),
                "--transaction-timeout", str(transaction_timeout_ms), "--use-group-metadata",
                *(["--enable-random-aborts"] if random_aborts else [])]
        copier = cls(transactional_id, kafka_tools.java_command(COPIER, *args),
                     log_dir / f"{log_name or transactional_id}.log")
        err = open(copier.log_path, "w")  # the process owns it until it exits
        copier.proc = subprocess.Popen(copier.command, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
        err.close()
        threading.Thread(target=copier._pump, daemon=True).start()
        return copier

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                data = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.status = data
                self.statuses += 1

    @property
    def processed(self) -> int:
        with self._lock:
            return int(self.status.get("totalProcessed", 0))

    @property
    def remaining(self) -> int:
        with self._lock:
            return int(self.status.get("remaining", -1))

    @property
    def done(self) -> bool:
        """Exited after copying everything it had to (Kafka's `ShutdownComplete` with nothing remaining)."""
        return self.proc is not None and self.proc.poll() == 0 and self.remaining == 0

    def failed(self) -> bool:
        return self.proc is not None and self.proc.poll() not in (None, 0)

    def describe(self) -> str:
        code = None if self.proc is None else self.proc.poll()
        tail = self.log_path.read_text()[-3000:] if self.log_path.exists() else ""
        return f"{self.transactional_id}: exit {code}, last status {self.status}; stderr tail:\n{tail}"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class TopicReader:
    """A confluent-kafka consumer reading every partition of a topic from offset 0 in a thread of its own, as
    Kafka's system test runs a concurrent read_committed consumer while brokers are bounced. `finish` waits
    until each partition reached its end (the LSO under read_committed) with at least `expect_at_least` values
    read, or the deadline, and returns the values in the order read."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, isolation: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.partitions = partitions
        self.values: list[bytes] = []
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"checker-{time.monotonic_ns()}",
                                   "enable.auto.commit": False, "isolation.level": isolation,
                                   "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._at_end: set[int] = set()
        self._finishing = threading.Event()
        self._expect = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import KafkaError

        try:
            while not self._done.is_set():
                msg = self._consumer.poll(0.2)
                if msg is None:
                    # Every partition may have reported its end before `finish` was called (librdkafka reports
                    # an end once): nothing new arrived within the poll, so the reader is done.
                    if self._finished():
                        break
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        self._at_end.add(msg.partition())
                        if self._finished():
                            break
                    continue
                self._at_end.discard(msg.partition())
                self.values.append(msg.value())
        finally:
            self._consumer.close()
            self._done.set()

    def _finished(self) -> bool:
        return self._finishing.is_set() and len(self._at_end) == self.partitions and len(self.values) >= self._expect

    def finish(self, *, expect_at_least: int = 0, timeout: float = 60.0) -> list[bytes]:
        self._expect = expect_at_least
        self._finishing.set()
        if not self._done.wait(timeout):
            self._done.set()
            self._thread.join(10)
        return list(self.values)


def read_topic(bootstrap: str, topic: str, partitions: int, *, isolation: str, timeout: float = 60.0,
               expect_at_least: int = 0) -> list[bytes]:
    """Every value of `topic` under `isolation` (read_committed / read_uncommitted), from offset 0 to the end
    (the LSO under read_committed): returns once each partition reached its end and at least
    `expect_at_least` values were read, or at the deadline."""
    return TopicReader(bootstrap, topic, partitions, isolation=isolation).finish(expect_at_least=expect_at_least,
                                                                               timeout=timeout)
