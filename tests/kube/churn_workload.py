"""The traffic a churn case runs throughout: idempotent acks=all producers and a consumer group.

Why this exists: the churn suite asks what a user's applications see while
the operator rolls, scales and recovers brokers. Two confluent-kafka
producers (enable.idempotence, acks=all) send paced, numbered records to
one topic and note every acknowledgement (partition, offset, time); two
members of one consumer group read the topic and note everything they are
served. The acknowledgement times give the longest produce stall; the
notes feed `churn_check`.

Clients run on the host and reach brokers at their pod IPs on the node's
bridge (brokers advertise `podIP`); librdkafka follows brokers to their
new addresses through metadata when pods are replaced.

What it must never do: run unbounded — every thread stops on `stop()`,
producer flushes and consumer closes are bounded, and `stop()` is safe to
call twice (the case's `finally` always calls it).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from tests.kube.churn_check import Acked, Consumed, value_for

__all__ = ["Workload", "WorkloadSettings"]


@dataclass(frozen=True)
class WorkloadSettings:
    producers: int = 2
    consumers: int = 2
    rate_per_producer: int = 100  # records per second, sent in ten steps a second
    flush_timeout_s: float = 120.0
    catch_up_timeout_s: float = 120.0
    # Added to every client's config: a secured listener's security.protocol, SASL and CA settings.
    client_config: tuple[tuple[str, str], ...] = ()


@dataclass
class _ProducerState:
    name: str
    sent: int = 0
    acks: list[float] = field(default_factory=list)  # monotonic time of every acknowledgement
    errors: list[str] = field(default_factory=list)
    unflushed: int = 0
    died: bool = False  # the client stopped before `stop()` (fatal error, exception): a failure


class Workload:
    """Producers and a consumer group on one topic, in daemon threads, from `start()` to `stop()`."""

    def __init__(self, *, bootstrap: str, topic: str, group: str, settings: WorkloadSettings = WorkloadSettings()):
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.settings = settings
        self._lock = threading.Lock()
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self.acked: list[Acked] = []
        self.consumed: list[Consumed] = []
        self.consumer_errors: list[str] = []  # transient ones (a broker away); librdkafka recovers
        self.consumer_failures: list[str] = []  # a member that died or hit a fatal error: a failure
        self.producers = [_ProducerState(name=f"{topic}/p{i}") for i in range(settings.producers)]
        self._producer_threads: list[threading.Thread] = []
        self._consumer_threads: list[threading.Thread] = []
        self.stuck: list[str] = []  # threads that outlived their bounds in stop()
        self.started_at = 0.0
        self.stopped_at = 0.0

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> "Workload":
        self.started_at = time.monotonic()
        self._producer_threads = [threading.Thread(target=self._produce, args=(state,), daemon=True,
                                                   name=f"churn-{state.name}") for state in self.producers]
        self._consumer_threads = [threading.Thread(target=self._consume, args=(i,), daemon=True,
                                                   name=f"churn-{self.group}-c{i}")
                                  for i in range(self.settings.consumers)]
        for t in self._producer_threads + self._consumer_threads:
            t.start()
        return self

    def wait_acked(self, more: int, *, timeout: float, what: str) -> None:
        """Block until `more` further records are acknowledged; fail with what was awaited."""
        target = self.acked_count() + more
        deadline = time.monotonic() + timeout
        while self.acked_count() < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"producers made no progress {what}: {self.acked_count()} acked, "
                                     f"{target} awaited within {timeout:.0f}s; errors {self.errors()[:3]}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop producing (flushing what is in flight), let the group catch up, then stop consuming."""
        if self.stopped_at:
            return
        self._stop_producing.set()
        for t in self._producer_threads:
            t.join(self.settings.flush_timeout_s + 30)
        self.stopped_at = time.monotonic()
        with self._lock:
            wanted = {a.value for a in self.acked}
        deadline = time.monotonic() + self.settings.catch_up_timeout_s
        while time.monotonic() < deadline and any(t.is_alive() for t in self._consumer_threads):
            with self._lock:
                served = {c.value for c in self.consumed}
            if wanted <= served:
                break
            time.sleep(0.5)
        self._stop_consuming.set()
        for t in self._consumer_threads:
            t.join(60)
        self.stuck = [t.name for t in self._producer_threads + self._consumer_threads if t.is_alive()]

    # -- results --------------------------------------------------------------------
    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def errors(self) -> list[str]:
        """Every failure of a client: failed deliveries, fatal errors, dead threads, unflushed records."""
        return [e for p in self.producers for e in p.errors] + [
            f"{p.name}: {p.unflushed} record(s) still unacknowledged after the flush" for p in self.producers
            if p.unflushed] + self.consumer_failures

    def longest_stall(self) -> float:
        """Longest time any producer went without an acknowledgement while it was producing."""
        worst = 0.0
        end = self.stopped_at or time.monotonic()
        for p in self.producers:
            times = [self.started_at, *sorted(p.acks)]
            if p.unflushed or p.died or not p.acks:
                times.append(end)
            worst = max([worst, *(b - a for a, b in zip(times, times[1:], strict=False))])
        return worst

    # -- threads --------------------------------------------------------------------
    def _produce(self, state: _ProducerState) -> None:
        try:
            self._produce_until_stopped(state)
        except BaseException as exc:  # a fatal idempotence error surfaces as an exception from poll()
            state.died = True
            state.errors.append(f"{state.name} died: {exc}")

    def _produce_until_stopped(self, state: _ProducerState) -> None:
        from confluent_kafka import Producer

        def on_error(err) -> None:
            if err.fatal():
                state.errors.append(f"{state.name}: fatal: {err}")

        p = Producer({"bootstrap.servers": self.bootstrap, "client.id": state.name,
                      "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                      # Long enough that no churn case makes a record give up, short per request so a
                      # broker that went away is noticed quickly; metadata refreshes follow moved leaders.
                      "message.timeout.ms": 300000, "request.timeout.ms": 10000, "socket.timeout.ms": 10000,
                      "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 2000,
                      "reconnect.backoff.max.ms": 1000, "log_level": 3, "error_cb": on_error,
                      **dict(self.settings.client_config)})

        def delivered(err, msg) -> None:
            if err is not None:
                state.errors.append(f"{state.name}: {err}")
                return
            now = time.monotonic()
            with self._lock:
                self.acked.append(Acked(msg.partition(), msg.offset(), msg.value()))
                state.acks.append(now)

        step = max(1, self.settings.rate_per_producer // 10)
        next_at = time.monotonic()
        while not self._stop_producing.is_set():
            for _ in range(step):
                seq = state.sent
                try:
                    p.produce(self.topic, value_for(state.name, seq), key=f"k{seq % 97}".encode(),
                              on_delivery=delivered)
                except BufferError:  # librdkafka's queue is full while brokers are away: wait, resend
                    p.poll(0.5)
                    break
                state.sent += 1
            # poll() returns as soon as it served a callback: keep polling until the step's time is up,
            # and after a stall go on at the set rate instead of bursting to catch up.
            next_at = max(next_at + 0.1, time.monotonic() - 0.1)
            while (left := next_at - time.monotonic()) > 0:
                p.poll(left)
        state.unflushed = p.flush(self.settings.flush_timeout_s)

    def _consume(self, index: int) -> None:
        try:
            self._consume_until_stopped(index)
        except BaseException as exc:
            self.consumer_failures.append(f"{self.group}-c{index} died: {exc}")

    def _consume_until_stopped(self, index: int) -> None:
        from confluent_kafka import Consumer, KafkaError

        def on_error(err) -> None:
            (self.consumer_failures if err.fatal() else self.consumer_errors).append(
                f"{self.group}-c{index}: {err}")

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "client.id": f"{self.group}-c{index}", "auto.offset.reset": "earliest",
                      "enable.auto.commit": True, "auto.commit.interval.ms": 1000,
                      "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                      "socket.timeout.ms": 10000, "topic.metadata.refresh.interval.ms": 2000,
                      "reconnect.backoff.max.ms": 1000, "log_level": 3, "error_cb": on_error,
                      **dict(self.settings.client_config)})
        try:
            c.subscribe([self.topic])
            while not self._stop_consuming.is_set():
                batch = []
                for m in c.consume(num_messages=500, timeout=0.5):
                    err = m.error()
                    if err is None:
                        batch.append(Consumed(m.partition(), m.offset(), m.value()))
                    elif err.fatal():
                        self.consumer_failures.append(f"{self.group}-c{index}: {err}")
                    elif err.code() != KafkaError._PARTITION_EOF:
                        self.consumer_errors.append(str(err))
                with self._lock:
                    self.consumed.extend(batch)
        finally:
            c.close()
