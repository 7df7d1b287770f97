"""Consume-transform-produce sessions bound to group members, as a Java (transactions v2) or librdkafka
(transactions v1) client runs them, with members leaving and joining: the runners and the checks (issue 34).

Why: a "group transact session" — consume a batch, produce its records in a transaction, commit the consumed
offsets in the same transaction with the member's group metadata (KIP-447), commit, go on; on every rebalance
the member's transaction ends and another begins — is how exactly-once applications use Kafka. Transactions
follow each other back to back (a TV2 client starts the next one at the bumped epoch as soon as EndTxn answers,
while the markers of the previous one are still being written) and sessions start and end all the time
(InitProducerId fences a member's predecessor and aborts what it left open). `JavaRun` drives the Java client
4.3.1 (`GroupTransact.java`, run as a single-file source program on the kafka-tools jars); `RdkafkaRun` does
the same with confluent-kafka in threads. Both report the same status: records in committed transactions,
commits, aborts, errors by class, `fatal` (the producer could not go on and was replaced) and
`invalid_txn_state` (an INVALID_TXN_STATE anywhere in an error's cause chain). `Feeder` writes the input at a
steady rate so the run's length, and the number of member changes in it, do not depend on the machine's speed.
`committed_values` reads what a read_committed consumer sees of the output; `exactly_once` says what is wrong
with it.

`tests/transactions/test_group_transact.py` runs these against three Kelp brokers (the regression test of
issue 34 and its long form with broker SIGKILLs); the transactions section of `make bench`
(`bench/transactions/section.py`, its "rebalancing" case) runs the Java one against Kelp and Apache Kafka alike.

It must never sleep to synchronise: waits poll a condition with a deadline.
"""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kelp import kafka_tools

__all__ = ["Status", "JavaRun", "RdkafkaRun", "Feeder", "committed_offsets", "end_offsets", "committed_values",
           "exactly_once"]

JAVA_SOURCE = Path(__file__).with_name("GroupTransact.java")


@dataclass
class Status:
    committed_records: int = 0
    commits: int = 0
    aborts: int = 0
    fatal: int = 0
    invalid_txn_state: int = 0
    leaves: int = 0
    crashes: int = 0
    joins: int = 0
    rebalances: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    samples: list[str] = field(default_factory=list)
    final: bool = False

    @classmethod
    def from_java(cls, data: dict[str, Any]) -> "Status":
        return cls(data["committedRecords"], data["commits"], data["aborts"], data["fatal"], data["invalidTxnState"],
                   data["leaves"], data["crashes"], data["joins"], data["rebalances"], dict(data["errors"]),
                   list(data["samples"]), bool(data["final"]))

    @property
    def broken(self) -> bool:
        """A client saw what Kafka never answers in this run: a fatal error, or INVALID_TXN_STATE."""
        return self.fatal > 0 or self.invalid_txn_state > 0


class JavaRun:
    """`GroupTransact.java` in one JVM: `members` slots, one leaving (a crash every other time) every
    `churn_ms` and coming back half that later."""

    def __init__(self, bootstrap: str, *, input_topic: str, output_topic: str, group: str, members: int,
                 churn_ms: int, assignor: str, static: bool, prefix: str, log_dir: Path,
                 max_poll_records: int = 20, group_protocol: str = "classic") -> None:
        args = [f"group.protocol={group_protocol}", f"bootstrap={bootstrap}", f"input={input_topic}",
                f"output={output_topic}", f"group={group}",
                f"members={members}", f"churn.ms={churn_ms}", f"assignor={assignor}", f"static={str(static).lower()}",
                f"prefix={prefix}", f"max.poll.records={max_poll_records}"]
        self.log_path = log_dir / f"{prefix}-java.log"
        command = kafka_tools.java_command(str(JAVA_SOURCE), *args)
        command[command.index("-Xmx256m")] = "-Xmx512m"  # ten consumers and producers in one JVM
        with open(self.log_path, "w") as err:  # the process has its own descriptor
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         text=True, bufsize=1)
        self._status = Status()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                status = Status.from_java(json.loads(line))
            except (ValueError, KeyError):
                continue
            with self._lock:
                self._status = status

    def status(self) -> Status:
        with self._lock:
            return self._status

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def describe(self) -> str:
        tail = self.log_path.read_text()[-3000:] if self.log_path.exists() else ""
        return f"java run: exit {self.proc.poll()}, status {self.status()}; stderr tail:\n{tail}"

    def retried(self, error: str) -> int:
        """Produce answers of `error` the Java producers logged and retried (WARN lines in the JVM's log)."""
        if not self.log_path.exists():
            return 0
        return self.log_path.read_text(errors="replace").count(f"Error: {error}.")

    def stop(self, timeout: float = 120.0) -> Status:
        """Members leave cleanly; the last status (final) once the JVM exited."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout)
        finally:
            self.kill()
        self._thread.join(10)
        return self.status()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class _RdkafkaMember(threading.Thread):
    """One confluent-kafka consumer and its transactional producer (one slot's member)."""

    def __init__(self, run: "RdkafkaRun", slot: int) -> None:
        super().__init__(name=f"member-{slot}", daemon=True)
        self.run_ = run
        self.slot = slot
        self.stop = threading.Event()
        self.crash = False  # set (with `crash_by`, a time.monotonic()) by the churner instead of `stop`
        self.crash_by = 0.0

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.run_.bootstrap, "transactional.id": f"{self.run_.prefix}-{self.slot}",
                      "linger.ms": 2, "transaction.timeout.ms": 20000})
        p.init_transactions(60)
        return p

    def _consumer(self) -> Any:
        from confluent_kafka import Consumer

        conf = {"bootstrap.servers": self.run_.bootstrap, "group.id": self.run_.group,
                "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
                "partition.assignment.strategy": self.run_.assignor}
        if self.run_.static:
            conf["group.instance.id"] = f"{self.run_.prefix}-member-{self.slot}"
        return Consumer(conf)

    def _rewind(self, consumer: Any) -> None:
        assigned = consumer.assignment()
        if not assigned:
            return
        for tp in consumer.committed(assigned, timeout=30):
            if tp.offset >= 0:
                consumer.seek(tp)
            else:
                tp.offset = -2  # OFFSET_BEGINNING
                consumer.seek(tp)

    def run(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        run = self.run_
        producer: Any = None
        consumer: Any = None

        def revoked(_consumer: Any, partitions: list[Any]) -> None:
            if partitions:
                run.add("rebalances")

        try:
            producer = self._producer()
            consumer = self._consumer()
            consumer.subscribe([run.input_topic], on_revoke=revoked)
            run.add("joins")
            while not self.stop.is_set():
                msgs = [m for m in consumer.consume(run.max_poll_records, 0.1) if m.error() is None]
                if not msgs:
                    if self.crash and time.monotonic() > self.crash_by:
                        break  # nothing came to crash in: it leaves cleanly
                    continue
                try:
                    producer.begin_transaction()
                    nxt: dict[tuple[str, int], int] = {}
                    for m in msgs:
                        producer.produce(run.output_topic, m.value(), m.key())
                        nxt[(m.topic(), m.partition())] = m.offset() + 1
                    if self.crash:  # the process "dies" with its transaction open: the producer is left as is
                        producer.flush(30)
                        run.add("crashes")
                        run.zombies.append(producer)
                        producer = None
                        consumer.close()
                        consumer = None
                        return
                    producer.send_offsets_to_transaction([TopicPartition(t, p, o) for (t, p), o in nxt.items()],
                                                         consumer.consumer_group_metadata(), 30)
                    producer.commit_transaction(60)
                    run.add("commits")
                    run.add("committed_records", len(msgs))
                except KafkaException as exc:
                    error = exc.args[0]
                    run.error(error)
                    if error.fatal():
                        run.add("fatal")
                        producer = self._producer()
                    else:
                        try:
                            producer.abort_transaction(60)
                            run.add("aborts")
                        except KafkaException as abort_failed:
                            run.error(abort_failed.args[0])
                            run.add("fatal")
                            producer = self._producer()
                    self._rewind(consumer)
            run.add("leaves")
        except KafkaException as exc:
            run.error(exc.args[0])
            run.add("fatal")
        finally:
            if consumer is not None:
                consumer.close()
            if producer is not None:
                producer.flush(10)


class RdkafkaRun:
    """The same sessions with confluent-kafka (librdkafka: transactions v1) in threads, churned the same way."""

    def __init__(self, bootstrap: str, *, input_topic: str, output_topic: str, group: str, members: int,
                 churn_ms: int, assignor: str, static: bool, prefix: str, max_poll_records: int = 20) -> None:
        self.bootstrap, self.input_topic, self.output_topic, self.group = bootstrap, input_topic, output_topic, group
        self.assignor, self.static, self.prefix, self.max_poll_records = assignor, static, prefix, max_poll_records
        self.zombies: list[Any] = []  # producers of "crashed" members: fenced by their slot's next member
        self._counts: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._samples: list[str] = []
        self._lock = threading.Lock()
        self._members = [_RdkafkaMember(self, slot) for slot in range(members)]
        for m in self._members:
            m.start()
        self._done = threading.Event()
        self._churn_ms = churn_ms
        self._churner = threading.Thread(target=self._churn, daemon=True)
        self._churner.start()

    def add(self, what: str, n: int = 1) -> None:
        with self._lock:
            self._counts[what] += n

    def error(self, error: Any) -> None:
        name = error.name()
        with self._lock:
            self._errors[name] += 1
            if "INVALID_TXN_STATE" in name or error.code() == 48:
                self._counts["invalid_txn_state"] += 1
            if len(self._samples) < 8:
                self._samples.append(f"{name}: {error.str()} (fatal {error.fatal()}, abortable "
                                     f"{error.txn_requires_abort()}, retriable {error.retriable()})")

    def _churn(self) -> None:
        rng = random.Random(34)
        churns = 0
        while self._churn_ms > 0 and not self._done.wait(self._churn_ms / 1000.0):
            slot = rng.randrange(len(self._members))
            old = self._members[slot]
            if churns % 2 == 0:
                old.crash_by = time.monotonic() + 2.0
                old.crash = True
            else:
                old.stop.set()
            churns += 1
            old.join(90)
            if self._done.wait(self._churn_ms / 2000.0):
                return
            self._members[slot] = _RdkafkaMember(self, slot)
            self._members[slot].start()

    def status(self) -> Status:
        with self._lock:
            c = self._counts
            return Status(c["committed_records"], c["commits"], c["aborts"], c["fatal"], c["invalid_txn_state"],
                          c["leaves"], c["crashes"], c["joins"], c["rebalances"], dict(self._errors),
                          list(self._samples), self._done.is_set())

    def exited(self) -> bool:
        return False

    def describe(self) -> str:
        return f"librdkafka run: status {self.status()}"

    def stop(self, timeout: float = 120.0) -> Status:
        self._done.set()
        self._churner.join(timeout)
        for m in self._members:
            m.stop.set()
        deadline = time.monotonic() + timeout
        for m in self._members:
            m.join(max(0.0, deadline - time.monotonic()))
        self.zombies.clear()
        return self.status()

    def kill(self) -> None:
        self.stop(30)


class Feeder:
    """Writes the values 0..records-1 to the input topic at `rate` per second (idempotent, round robin over
    the partitions), in a thread of its own."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, records: int, rate: int) -> None:
        from confluent_kafka import Producer

        self.records, self.rate, self.topic, self.partitions = records, rate, topic, partitions
        self.errors: list[str] = []
        self.sent = 0
        self.finished_at: float | None = None  # time.monotonic() once every record was acknowledged
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        for i in range(self.records):
            due = started + i / self.rate
            while (ahead := due - time.monotonic()) > 0:
                self._producer.poll(min(ahead, 0.05))
            if self._stop.is_set():
                return
            value = str(i).encode()
            self._producer.produce(self.topic, value, value, partition=i % self.partitions,
                                   on_delivery=self._delivered)
            self.sent = i + 1
        if self._producer.flush(60) != 0:
            self.errors.append("records left unsent after 60 s")
        self.finished_at = time.monotonic()

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))

    def done(self) -> bool:
        return not self._thread.is_alive()

    def stop(self) -> None:
        """Stop feeding (what was produced is flushed no longer) and wait for the thread."""
        self._stop.set()
        self._thread.join(70)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"offsets-{time.monotonic_ns()}"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (stable ones: pending transactional commits are not counted); {} while
    they are not stable yet. A read_committed lookup (OffsetFetch with require_stable) is answered
    UNSTABLE_OFFSET_COMMIT while a member's transaction holds an offset, and librdkafka retries that until its
    timeout: while members still commit in back-to-back transactions that is an answer ("not yet"), not a
    failure — the caller's own deadline decides."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError._TIMED_OUT:
            return {}
        raise
    finally:
        c.close()


def committed_values(bootstrap: str, topic: str, partitions: int, *, expect: int, timeout: float = 90.0) -> list[bytes]:
    """Every value a read_committed consumer reads from `topic` (offset 0 to each partition's last stable
    offset), once at least `expect` arrived and every partition reported its end, or at the deadline."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"values-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": "read_committed", "enable.partition.eof": True})
    values: list[bytes] = []
    ended: set[int] = set()
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                if len(ended) == partitions and len(values) >= expect:
                    break
                continue
            error, partition, value = msg.error(), msg.partition() or 0, msg.value()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    ended.add(partition)
                continue
            ended.discard(partition)
            if value is not None:
                values.append(value)
    finally:
        c.close()
    return values


def exactly_once(values: list[bytes], records: int) -> list[str]:
    """What is wrong with `values` (read_committed output) for inputs 0..records-1: lost, duplicated, unknown."""
    seen = Counter(values)
    expected = {str(i).encode() for i in range(records)}
    problems = []
    missing = expected - seen.keys()
    if missing:
        problems.append(f"{len(missing)} input values lost, e.g. {sorted(missing)[:10]}")
    duplicates = {v: n for v, n in seen.items() if n > 1}
    if duplicates:
        problems.append(f"{len(duplicates)} values seen more than once, e.g. {list(duplicates.items())[:10]}")
    unknown = seen.keys() - expected
    if unknown:
        problems.append(f"values never produced: {sorted(unknown)[:10]}")
    return problems

