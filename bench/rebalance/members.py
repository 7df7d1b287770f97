"""Group members that record what they own and consume, a feeder, and the checks over what they recorded.

Why: a rebalance is correct when no partition is ever owned by two members at once, every record produced is
consumed, and none twice. The clients' own rebalance callbacks are the only place that knows when a member
starts and stops owning a partition, so each member (a confluent-kafka consumer in a thread of this process,
all on one monotonic clock) writes its ownership intervals and every record it receives into a `Ledger`:

- ownership of a partition starts when `on_assign` is entered and ends when `on_revoke` (or `on_lost`) returns,
  after the member has committed the offsets it processed in that partition (`commit(asynchronous=False)`):
  the next owner resumes exactly there, so a record consumed twice is a broker's fault, not the test's;
- records are taken one `poll()` at a time (a rebalance callback is served inside `poll()`, so a record
  returned after a revocation would show as consumed outside its member's interval).

`Feeder` produces at a fixed rate (acks=all, idempotent) while members come and go, keeping the offset of
every record the broker acknowledged. `verdict` compares the ledger with what was produced: overlapping
intervals, records consumed twice, lost, or consumed by a member that did not own the partition then.

It must never end an interval before the member's callback returned, nor count a record before the broker
acknowledged it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["PROTOCOLS", "Span", "Ledger", "Member", "Feeder", "verdict"]

# The client configurations compared: librdkafka's classic protocol with its default assignor (range: eager,
# every member gives up everything at each rebalance), the classic protocol with cooperative-sticky
# (incremental, client-side), and KIP-848 (incremental, the broker assigns; its session, heartbeat and assignor
# are the broker's).
PROTOCOLS: dict[str, dict[str, str]] = {
    "classic": {"group.protocol": "classic", "partition.assignment.strategy": "range"},
    "classic-cooperative": {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}


@dataclass
class Span:
    """One member's ownership of one partition: from `start` to `end` (None while it still owns it)."""

    member: str
    partition: int
    start: float
    end: float | None = None
    how: str = ""  # revoked, lost, or closed (the consumer closed without a revocation callback)


class Ledger:
    """Ownership intervals, records and errors of every member, with a version that moves on every change."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.spans: list[Span] = []
        self._open: dict[tuple[str, int], Span] = {}
        self.records: list[tuple[int, int, str, float]] = []  # (partition, offset, member, when)
        self.errors: list[str] = []
        self.version = 0
        self.last_change = 0.0

    def _changed(self, when: float) -> None:
        self.version += 1
        self.last_change = max(self.last_change, when)
        self._cond.notify_all()

    def assign(self, member: str, partitions: list[int], when: float) -> None:
        with self._cond:
            for p in partitions:
                if (member, p) in self._open:
                    self.errors.append(f"{member}: assigned partition {p} it already owns")
                    continue
                span = Span(member, p, when)
                self.spans.append(span)
                self._open[(member, p)] = span
            self._changed(when)

    def release(self, member: str, partitions: list[int], when: float, how: str) -> None:
        with self._cond:
            for p in partitions:
                span = self._open.pop((member, p), None)
                if span is None:
                    self.errors.append(f"{member}: {how} partition {p} it did not own")
                    continue
                span.end, span.how = when, how
            self._changed(when)

    def closed(self, member: str, when: float) -> int:
        """The member's consumer is closed: whatever it still owned ends now; how many there were."""
        with self._cond:
            left = [p for (m, p) in self._open if m == member]
        if left:
            self.release(member, left, when, "closed")
        return len(left)

    def record(self, member: str, partition: int, offset: int, when: float) -> None:
        """A record received (no notification: waiters wake on ownership changes, or poll for records)."""
        with self._cond:
            self.records.append((partition, offset, member, when))

    def error(self, member: str, what: str) -> None:
        with self._cond:
            self.errors.append(f"{member}: {what}")

    def owned(self) -> tuple[int, float, dict[str, set[int]]]:
        """(version, time of the last ownership change, member -> the partitions it owns now)."""
        with self._cond:
            out: dict[str, set[int]] = {}
            for m, p in self._open:
                out.setdefault(m, set()).add(p)
            return self.version, self.last_change, out

    def consumed(self) -> set[tuple[int, int]]:
        with self._cond:
            return {(p, o) for p, o, _, _ in self.records}

    def wait(self, timeout_s: float) -> None:
        """Until the next ownership change (or `timeout_s`)."""
        with self._cond:
            self._cond.wait(timeout_s)


class Member(threading.Thread):
    """A confluent-kafka consumer in group `group`, subscribed to `topic`, writing into `ledger` until `stop`."""

    def __init__(self, ledger: Ledger, *, bootstrap: str, topic: str, group: str, name: str,
                 config: Mapping[str, str]) -> None:
        super().__init__(name=f"rebalance-{name}", daemon=True)
        self.ledger, self.bootstrap, self.topic, self.group, self.config = ledger, bootstrap, topic, group, config
        self.member = name
        self.stop = threading.Event()
        self.closed_owning = 0  # partitions still owned when close() returned (no revocation callback)
        self._next: dict[int, int] = {}  # partition -> the offset after the last record processed

    def run(self) -> None:
        from confluent_kafka import Consumer

        try:
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.member,
                                 "auto.offset.reset": "earliest", "enable.auto.commit": False, **self.config})
            consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)
            while not self.stop.is_set():
                m = consumer.poll(0.1)
                if m is None:
                    continue
                if m.error() is not None:
                    self.ledger.error(self.member, f"poll: {m.error()}")
                    continue
                partition, offset = m.partition(), m.offset()
                assert partition is not None and offset is not None
                self.ledger.record(self.member, partition, offset, time.monotonic())
                self._next[partition] = offset + 1
            consumer.close()  # revokes (the callback commits), then leaves the group
        except Exception as exc:  # the consumer's failure is the run's finding, reported with the others
            self.ledger.error(self.member, f"{type(exc).__name__}: {exc}")
        finally:
            self.closed_owning = self.ledger.closed(self.member, time.monotonic())

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        self.ledger.assign(self.member, [tp.partition for tp in partitions], time.monotonic())

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        done = [TopicPartition(self.topic, tp.partition, self._next.pop(tp.partition)) for tp in partitions
                if tp.partition in self._next]
        if done:
            try:  # a request's error raises; a partition's is in the answer
                failed = [tp for tp in consumer.commit(offsets=done, asynchronous=False) or [] if tp.error]
            except KafkaException as exc:
                failed = []
                self.ledger.error(self.member, f"commit on revocation: {exc.args[0]}")
            for tp in failed:
                self.ledger.error(self.member, f"commit on revocation of partition {tp.partition}: {tp.error}")
        self.ledger.release(self.member, [tp.partition for tp in partitions], time.monotonic(), "revoked")

    def _lost(self, consumer: Any, partitions: list[Any]) -> None:
        for tp in partitions:
            self._next.pop(tp.partition, None)
        self.ledger.release(self.member, [tp.partition for tp in partitions], time.monotonic(), "lost")


class Feeder(threading.Thread):
    """Produces `rate` records/s round-robin over `partitions` until `stop`; `produced` holds every
    acknowledged (partition, offset). `fill(count)` produces `count` records at once first (not a thread)."""

    def __init__(self, bootstrap: str, topic: str, *, partitions: int, rate: float) -> None:
        from confluent_kafka import Producer

        super().__init__(name="rebalance-feeder", daemon=True)
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.produced: set[tuple[int, int]] = set()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self._sent = 0
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5})

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.produced.add((msg.partition(), msg.offset()))

    def _send(self) -> None:
        p = self._sent % self.partitions
        self._producer.produce(self.topic, value=str(self._sent).encode(), partition=p, on_delivery=self._delivered)
        self._sent += 1

    def fill(self, count: int) -> None:
        for _ in range(count):
            while True:
                try:
                    self._send()
                    break
                except BufferError:
                    self._producer.poll(0.05)
        self._flush()

    def run(self) -> None:
        start, sent0 = time.monotonic(), self._sent
        while not self.stop.wait(0.01):
            due = sent0 + int((time.monotonic() - start) * self.rate)
            while self._sent < due:
                self._send()
            self._producer.poll(0)
        self._flush()

    def _flush(self) -> None:
        left = self._producer.flush(60)
        if left:
            self.errors.append(f"{left} records not acknowledged 60 s after the last was produced")


def _overlaps(spans: list[Span], now: float) -> list[str]:
    """Every pair of intervals of one partition, of two members, that overlap (end == start does not)."""
    out = []
    by_partition: dict[int, list[Span]] = {}
    for s in spans:
        by_partition.setdefault(s.partition, []).append(s)
    for p, ss in sorted(by_partition.items()):
        ss.sort(key=lambda s: s.start)
        reach: Span | None = None  # the interval that ends last among those started so far
        for s in ss:
            if reach is not None and (reach.end if reach.end is not None else now) > s.start:
                out.append(f"partition {p}: {reach.member} owned it until {_end(reach, now)}, {s.member} from "
                           f"{s.start:.3f}")
            if reach is None or (s.end if s.end is not None else now) > (reach.end if reach.end is not None else now):
                reach = s
    return out


def _end(s: Span, now: float) -> str:
    return f"{s.end:.3f} ({s.how})" if s.end is not None else f"{now:.3f} (still)"


def verdict(ledger: Ledger, produced: set[tuple[int, int]]) -> dict[str, Any]:
    """What the run broke, if anything: overlapping ownership, records consumed twice, lost, or outside their
    member's ownership of the partition; with counts and the first few of each."""
    now = time.monotonic()
    with ledger._cond:
        spans = [Span(s.member, s.partition, s.start, s.end, s.how) for s in ledger.spans]
        records = list(ledger.records)
        errors = list(ledger.errors)
    overlaps = _overlaps(spans, now)
    counts = Counter((p, o) for p, o, _, _ in records)
    twice = sorted(k for k, n in counts.items() if n > 1)
    lost = sorted(produced - set(counts))
    unknown = sorted(set(counts) - produced)
    owner: dict[tuple[str, int], list[Span]] = {}
    for s in spans:
        owner.setdefault((s.member, s.partition), []).append(s)
    outside = [(p, o, m) for p, o, m, t in records
               if not any(s.start <= t <= (s.end if s.end is not None else now) for s in owner.get((m, p), []))]
    return {"records_produced": len(produced), "records_consumed": len(records), "overlaps": len(overlaps),
            "consumed_twice": len(twice), "lost": len(lost), "not_produced": len(unknown),
            "outside_ownership": len(outside), "closed_without_revocation": sum(1 for s in spans if s.how == "closed"),
            "lost_callbacks": sum(1 for s in spans if s.how == "lost"), "client_errors": len(errors),
            "samples": {"overlaps": overlaps[:5], "consumed_twice": twice[:5], "lost": lost[:5],
                        "not_produced": unknown[:5], "outside_ownership": outside[:5], "client_errors": errors[:5]}}
