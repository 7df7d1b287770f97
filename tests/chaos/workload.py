"""The suite's clients: idempotent keyed acks=all producers and consumer groups that commit what they delivered.

Why: the checker can only prove what the clients saw. Each producer
(confluent-kafka, `enable.idempotence`, `acks=all`) writes records whose
value names it and a sequence number, `kc|<producer>|<seq>|<padding>`, under
16 keys of its own (`p<producer>-k<seq % 16>`); every fourth key goes to the
RF 2 topic the reassignment faults move, the rest to the RF 3 topic. Every
acknowledgement (partition, offset) and every failure goes to the history.
A producer that fails fatally is replaced (a new producer id) and the
failure recorded. A producer also records why librdkafka bumped its
idempotent epoch (`pidem`, from its `debug=eos` lines): a bump renumbers
every unacknowledged batch of every partition, so a batch a broker stored
but did not acknowledge is stored again under the new epoch, and the
checker needs the reason to tell that client-caused duplicate from a
broker's (docs/chaos.md, "Duplicates the client causes"). Consumers in two groups read both topics, record every
delivery, and commit — synchronously, about once a second and when
partitions are revoked — exactly the offsets after what they delivered.

Two more clients aim at the metadata (issue 31). The churn producer (index
`CHURN_PRODUCER`) writes `chaos-churn`, the topic `topic-churn` deletes and
re-creates: it is not idempotent (a re-created topic has no producer state
for it; librdkafka would bump its epoch), sends one request at a time, and
records when it sent each record (`csend`), so the checker knows which
incarnation a record was meant for. The metadata worker creates a small topic
`chaos-m-<n>` every `META_EVERY_S` and deletes the oldest when more than four
live, each answer (and the topic id a creation answered) in the history
(`mop`): a change answered success must be in the final metadata.

Every loop stops on its event and every wait is bounded; threads are
daemons so a wedged client library cannot keep the runner alive.

It must never check anything: the checker does that, from the history.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from .history import History

__all__ = ["TOPICS", "CHURN_TOPICS", "CHURN_PRODUCER", "Workload", "parse_value", "KEYS", "META_PREFIX"]

# name -> (partitions, replication factor, min.insync.replicas)
TOPICS: dict[str, tuple[int, int, int]] = {"chaos": (6, 3, 2), "chaos-moves": (3, 2, 1)}
# Written by the churn producer only, read by no group: `topic-churn` deletes and re-creates it.
CHURN_TOPICS: dict[str, tuple[int, int, int]] = {"chaos-churn": (2, 3, 2)}
CHURN_PRODUCER = 100  # the churn producer's index: its records are told apart by it
META_PREFIX = "chaos-m-"
META_EVERY_S = 1.5
META_LIVE = 4
KEYS = 16
GROUPS = ("chaos-g0", "chaos-g1")
MEMBERS_PER_GROUP = 2

log = logging.getLogger("chaos.clients")


def topic_of(seq: int) -> str:
    return "chaos-moves" if (seq % KEYS) % 4 == 3 else "chaos"


def parse_value(value: bytes | None) -> tuple[int, int]:
    """(producer, seq) of a suite record; (-1, -1) for anything else."""
    if not value or not value.startswith(b"kc|"):
        return -1, -1
    try:
        _, producer, seq, _ = value.split(b"|", 3)
        return int(producer), int(seq)
    except ValueError:
        return -1, -1


def _client_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"chaos.clients.{name}")


# librdkafka's `debug=eos` lines that say why an idempotent producer bumped its epoch or reset its id
# (rdkafka_idempotence.c, rdkafka_request.c): the drain that precedes a bump names its reason, ERRSEQ the
# OUT_OF_ORDER_SEQUENCE_NUMBER answer behind "skipped sequence numbers", UNKPID/ERRPID the others. The
# per-partition "beginning partition drain: ..." DRAIN lines (every retry after a leader change) are not kept.
IDEMPOTENCE_FACILITIES = frozenset({"DRAIN", "ERRSEQ", "UNKPID", "ERRPID"})


class IdempotenceEvents(logging.Filter):
    """On a producer's logger (level DEBUG): keeps the `debug=eos` lines that explain an epoch bump, records
    each in the history (`["pidem", t, producer, facility, text]`) and raises it to INFO for runner.log; drops
    every other debug line, so `debug=eos` costs the log a few lines per bump and nothing else."""

    def __init__(self, idx: int, history: History) -> None:
        super().__init__()
        self.idx = idx
        self.history = history

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.INFO:
            return True
        args = record.args
        if not isinstance(args, tuple) or len(args) != 3:  # confluent-kafka logs ("%s [%s] %s", fac, name, text)
            return False
        fac, text = str(args[0]), str(args[2])
        if fac not in IDEMPOTENCE_FACILITIES or (fac == "DRAIN" and "beginning partition drain:" in text):
            return False
        self.history.add("pidem", time.time(), self.idx, fac, text)
        record.levelno, record.levelname = logging.INFO, "INFO"
        return True


class ProducerWorker(threading.Thread):
    def __init__(self, idx: int, bootstrap: str, history: History, *, rate: float,
                 pad: int, stop: threading.Event, churn: bool = False) -> None:
        super().__init__(daemon=True, name=f"producer-{idx}")
        self.churn = churn  # the churn producer: chaos-churn only, not idempotent, send times recorded
        self.idx = idx
        self.bootstrap = bootstrap
        self.history = history
        self.rate = rate
        self.pad = b"x" * pad
        self.stop_event = stop
        self.acked = 0
        self.failed = 0
        self.sent = 0
        self.outstanding_at_end = 0
        self.fatal: str | None = None
        self.flush_s = 90.0

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer

        def on_error(err: Any) -> None:
            if err.fatal():
                self.fatal = str(err)

        settings = {
            "bootstrap.servers": self.bootstrap, "client.id": f"chaos-p{self.idx}",
            "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 120000, "request.timeout.ms": 10000, "socket.timeout.ms": 10000,
            "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000, "topic.metadata.refresh.interval.ms": 1000,
            "debug": "eos", "error_cb": on_error, "logger": self._logger(),
        }
        if self.churn:
            settings.update({"enable.idempotence": False, "max.in.flight.requests.per.connection": 1,
                             "message.timeout.ms": 30000})
            del settings["debug"]
        return Producer(settings)

    def _logger(self) -> logging.Logger:
        """The producer's logger, at DEBUG with one `IdempotenceEvents` (for this run's history) as the only
        gate for debug lines: loggers are per process, a run in the same process replaces the last one's."""
        logger = _client_logger(f"p{self.idx}")
        logger.setLevel(logging.DEBUG)
        for old in [f for f in logger.filters if isinstance(f, IdempotenceEvents)]:
            logger.removeFilter(old)
        logger.addFilter(IdempotenceEvents(self.idx, self.history))
        return logger

    def _report(self, err: Any, msg: Any) -> None:
        producer, seq = parse_value(msg.value())
        if err is None:
            self.acked += 1
            self.history.add("ack", time.time(), producer, seq, msg.topic(), msg.partition(), msg.offset())
        else:
            self.failed += 1
            self.history.add("nack", time.time(), producer, seq, msg.topic(), msg.partition(), str(err))

    def run(self) -> None:
        from confluent_kafka import KafkaException

        p = self._new_producer()
        seq = 0
        t0 = time.monotonic()
        while not self.stop_event.is_set():
            if self.fatal is not None:
                self.history.add("pfatal", time.time(), self.idx, self.fatal)
                log.warning("producer %d failed fatally (%s); replacing it", self.idx, self.fatal)
                p.flush(10)  # its outstanding records fail now: nacks
                self.fatal = None
                p = self._new_producer()
            due = int((time.monotonic() - t0) * self.rate)
            while seq < due and not self.stop_event.is_set():
                value = b"kc|%d|%d|" % (self.idx, seq) + self.pad
                topic = CHURN_TOPIC if self.churn else topic_of(seq)
                try:
                    p.produce(topic, value, key=b"p%d-k%d" % (self.idx, seq % KEYS), on_delivery=self._report)
                except BufferError:
                    break  # the local queue is full (brokers unreachable): try again after a poll
                except KafkaException as exc:  # refused at once: the churn topic being re-created, or a fatal error
                    err = exc.args[0]
                    if getattr(err, "fatal", lambda: False)():
                        self.fatal = str(err)
                        break
                    self.failed += 1
                    self.history.add("nack", time.time(), self.idx, seq, topic, -1, str(err))
                if self.churn:
                    self.history.add("csend", time.time(), self.idx, seq)
                seq += 1
                self.sent += 1
            try:
                p.poll(0.02)
            except KafkaException as exc:  # a fatal error raised from a delivery callback's poll: replaced above
                err = exc.args[0]
                if not getattr(err, "fatal", lambda: False)():
                    raise
                self.fatal = str(err)
        self.outstanding_at_end = p.flush(self.flush_s)


CHURN_TOPIC = next(iter(CHURN_TOPICS))


class MetaWorker(threading.Thread):
    """Creates `chaos-m-<n>` every META_EVERY_S and deletes the oldest beyond META_LIVE, through the admin API of a
    broker that is up (`urls()`), one attempt each: `["mop", t_sent, t_done, op, name, status, topic_id, error]`
    (status: the HTTP status, -1 when no answer came)."""

    def __init__(self, urls: Any, history: History, stop: threading.Event) -> None:
        super().__init__(daemon=True, name="metadata-worker")
        self.urls = urls
        self.history = history
        self.stop_event = stop
        self.ops = 0

    def _call(self, op: str, name: str) -> None:
        import json
        import random
        import urllib.error
        import urllib.request

        urls = self.urls()
        if not urls:
            return
        base = random.choice(urls)
        if op == "create":
            body = json.dumps({"name": name, "partitions": 1, "replication_factor": 1}).encode()
            req = urllib.request.Request(f"{base}/admin/v1/topics", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        else:
            req = urllib.request.Request(f"{base}/admin/v1/topics/{name}", method="DELETE")
        t_sent = time.time()
        status, topic_id, error = -1, None, None
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status = resp.status
                raw = resp.read()
                if op == "create" and raw:
                    topic_id = json.loads(raw).get("topic_id")
        except urllib.error.HTTPError as exc:
            status, error = exc.code, exc.read().decode("utf-8", "replace")[:200]
        except (OSError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:200]
        self.history.add("mop", t_sent, time.time(), op, name, status, topic_id, error)
        self.ops += 1

    def run(self) -> None:
        n = 0
        live: list[str] = []
        while not self.stop_event.wait(META_EVERY_S):
            name = f"{META_PREFIX}{n}"
            n += 1
            self._call("create", name)
            live.append(name)
            if len(live) > META_LIVE:
                self._call("delete", live.pop(0))


class ConsumerWorker(threading.Thread):
    def __init__(self, group: str, member: str, bootstrap: str, history: History, stop: threading.Event,
                 committed: dict, lock: threading.Lock) -> None:
        super().__init__(daemon=True, name=f"consumer-{member}")
        self.group, self.member = group, member
        self.bootstrap = bootstrap
        self.history = history
        self.stop_event = stop
        self.committed = committed  # (group, topic, partition) -> last committed offset, shared
        self.lock = lock
        self.pending: dict[tuple[str, int], int] = {}
        self.delivered = 0
        self.last_delivery = 0.0

    def _commit(self, c: Any, keys: list[tuple[str, int]]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        todo = [(t, p, self.pending[(t, p)]) for t, p in keys if (t, p) in self.pending]
        if not todo:
            return
        t_sent = time.time()
        try:
            result = c.commit(offsets=[TopicPartition(t, p, o) for t, p, o in todo], asynchronous=False)
            errors = {(tp.topic, tp.partition): (str(tp.error) if tp.error else None) for tp in result or []}
        except KafkaException as exc:
            errors = {(t, p): str(exc.args[0]) for t, p, _ in todo}
        t_done = time.time()
        for t, p, o in todo:
            err = errors.get((t, p))
            self.history.add("commit", t_sent, t_done, self.group, self.member, t, p, o, err)
            if err is None:
                with self.lock:
                    self.committed[(self.group, t, p)] = o
                if self.pending.get((t, p)) == o:
                    del self.pending[(t, p)]

    def run(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.member,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 300000, "socket.timeout.ms": 10000,
            "topic.metadata.refresh.interval.ms": 1000, "logger": _client_logger(self.member),
        })

        def on_revoke(consumer: Any, partitions: list) -> None:
            self._commit(consumer, [(tp.topic, tp.partition) for tp in partitions])
            for tp in partitions:
                self.pending.pop((tp.topic, tp.partition), None)

        c.subscribe(list(TOPICS), on_revoke=on_revoke)
        last_commit = time.monotonic()
        try:
            while not self.stop_event.is_set():
                for m in c.consume(num_messages=500, timeout=0.5):
                    if m.error() is not None:
                        continue
                    producer, seq = parse_value(m.value())
                    self.history.add("dlv", time.time(), self.group, self.member, m.topic(), m.partition(), m.offset(),
                                     producer, seq)
                    self.pending[(m.topic(), m.partition())] = m.offset() + 1
                    self.delivered += 1
                    self.last_delivery = time.monotonic()
                if self.pending and time.monotonic() - last_commit >= 1.0:
                    self._commit(c, list(self.pending))
                    last_commit = time.monotonic()
            self._commit(c, list(self.pending))
        finally:
            try:
                c.close()
            except Exception:  # a close against dead brokers may fail; nothing to keep
                pass


class Workload:
    def __init__(self, bootstrap: str, history: History, *, producers: int = 3,
                 rate: float = 150.0, pad: int = 80, admin_urls: Any = None) -> None:
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.committed: dict[tuple[str, str, int], int] = {}
        self.lock = threading.Lock()
        self.producers = [ProducerWorker(i, bootstrap, history, rate=rate, pad=pad, stop=self.stop_producing)
                          for i in range(producers)]
        self.producers.append(ProducerWorker(CHURN_PRODUCER, bootstrap, history, rate=min(rate, 20.0), pad=pad,
                                             stop=self.stop_producing, churn=True))
        self.meta = MetaWorker(admin_urls, history, self.stop_producing) if admin_urls is not None else None
        self.consumers = [ConsumerWorker(g, f"{g}-m{m}", bootstrap, history, self.stop_consuming, self.committed,
                                         self.lock)
                          for g in GROUPS for m in range(MEMBERS_PER_GROUP)]

    def start(self) -> None:
        for t in [*self.producers, *self.consumers, *([self.meta] if self.meta is not None else [])]:
            t.start()

    def acked(self) -> int:
        return sum(p.acked for p in self.producers if not p.churn)

    def delivered(self) -> int:
        return sum(c.delivered for c in self.consumers)

    def stop_producers(self, *, flush_s: float) -> int:
        """Stop producing; wait (bounded) for outstanding records to be acknowledged or fail. Returns those left."""
        for p in self.producers:
            p.flush_s = flush_s
        self.stop_producing.set()
        deadline = time.monotonic() + flush_s + 15
        for p in self.producers:
            p.join(max(0.1, deadline - time.monotonic()))
        if self.meta is not None:
            self.meta.join(max(0.1, deadline - time.monotonic()))
        return sum(p.outstanding_at_end for p in self.producers) + sum(1 for p in self.producers if p.is_alive())

    def group_positions(self) -> dict[tuple[str, str, int], int]:
        with self.lock:
            return dict(self.committed)

    def stop_consumers(self, *, bound_s: float = 30.0) -> None:
        self.stop_consuming.set()
        deadline = time.monotonic() + bound_s
        for c in self.consumers:
            c.join(max(0.1, deadline - time.monotonic()))

    def stop(self) -> None:
        """Everything, bounded (cleanup on failure)."""
        self.stop_producing.set()
        self.stop_consuming.set()
        for p in self.producers:
            p.flush_s = 1.0
        deadline = time.monotonic() + 20
        for t in [*self.producers, *self.consumers]:
            if t.is_alive():
                t.join(max(0.1, deadline - time.monotonic()))
