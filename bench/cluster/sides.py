"""Kelp and Apache Kafka side by side: one or three brokers of each, running together for alternating runs.

Why: the transactions (bench/transactions/section.py) and Kafka-tools (bench/kafka_perf.py) sections measure
the same workload against Kelp and Kafka in turn, alternating which goes first, so that the load of a
shared machine drifts over both alike. Both clusters run for the whole section: one Kelp broker or three
sharing a cluster directory (bench/cluster/replication.py's `start_kelp_cluster`), and one Kafka KRaft node or
three (bench/kafka_ref.py), Kafka's defaults but for the listeners.

`kill_and_restart` SIGKILLs one broker of a side and starts it again on its storage and ports (the
transactions section's rebalancing case with broker kills).

It must never leave a broker running: everything started is stopped by the ExitStack given.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Protocol, Sequence

from .. import probe
from ..probe import poll_until

__all__ = ["Side", "start_sides", "alternating", "settle", "SETTLED_PER_BROKER", "load_average", "kill_and_restart"]


@dataclass
class Side:
    """One running cluster: `kelp` or `kafka`."""

    name: str
    bootstrap: str
    pids: Callable[[], list[int]]
    http_urls: list[str] = field(default_factory=list)  # Kelp's brokers' HTTP addresses (/metrics, REST)
    broker_ids: list[int] = field(default_factory=list)  # the brokers' (nodes') ids, in `kill`'s order
    kill: Callable[[int], None] | None = None  # SIGKILL the i-th broker (from 0)
    restart: Callable[[int], None] | None = None  # start the i-th broker again: same storage, same ports

    def cpu_seconds(self) -> float:
        return probe.cpu_seconds(self.pids())


def start_sides(stack: ExitStack, work: Path, *, brokers: int, kafka_version: str | None,
                label: str) -> list[Side]:
    """Kelp (`brokers` of them) and, unless `kafka_version` is None, Kafka (`brokers` nodes), both started."""
    from ..broker import BenchBroker
    from .replication import start_kelp_cluster

    if brokers == 1:
        one = BenchBroker(work / f"{label}-kelp")
        stack.callback(one.stop)
        one.start()
        kelp_brokers = [one]
    else:
        kelp_brokers = start_kelp_cluster(work, brokers=brokers, name=f"{label}-kelp")
        for b in kelp_brokers:
            stack.callback(b.stop)

    def kelp_restart(i: int) -> None:
        kelp_brokers[i].restart()

    sides = [Side("kelp", ",".join(b.bootstrap for b in kelp_brokers),
                  lambda: [b.proc.pid for b in kelp_brokers if b.proc is not None and b.proc.poll() is None],
                  [b.http_url for b in kelp_brokers], [b.broker_id for b in kelp_brokers],
                  lambda i: kelp_brokers[i].kill(), kelp_restart)]
    if kafka_version is not None:
        from ..kafka_ref import KafkaCluster

        kafka = KafkaCluster(work / f"{label}-kafka", nodes=brokers, version=kafka_version)
        stack.callback(kafka.stop)
        try:
            kafka.start()
        except (FileNotFoundError, RuntimeError) as exc:
            raise RuntimeError(f"{exc}\n(`--no-kafka` runs without Apache Kafka)") from None

        def kafka_restart(i: int) -> None:
            kafka.restart(i)

        sides.append(Side("kafka", kafka.bootstrap, lambda: kafka.pids, broker_ids=list(range(1, brokers + 1)),
                          kill=kafka.kill, restart=kafka_restart))
    return sides


def alternating(sides: list[Side], runs: int) -> Iterator[tuple[int, list[Side]]]:
    """(run, the sides in this run's order): Kelp first in even runs, Kafka first in odd ones."""
    for run in range(runs):
        yield run, (sides if run % 2 == 0 else sides[::-1])


SETTLED_PER_BROKER = 0.05  # of a CPU: above what an idle broker of either kind uses (Kafka's 2-4%, Kelp's 2-3%)


class _Running(Protocol):
    def pids(self) -> list[int]: ...


def settle(sides: Sequence[_Running], *, below: float | None = None, window_s: float = 1.0,
           timeout_s: float = 30.0) -> float:
    """Wait until both clusters together use less than `below` of a CPU (default `SETTLED_PER_BROKER` for
    each broker process) over a `window_s` window — a run's followers and log flushes caught up, the JIT
    and collector done — for `timeout_s` at most; returns the share of a CPU they used in the last window
    (at or above `below` when the wait ran out).

    Why: the two clusters share the machine; a run that starts while the other side still replicates or
    collects what its own run left behind measures both. Any object with `pids()` will do (a Side, `make
    bench`'s Target)."""
    if below is None:
        below = SETTLED_PER_BROKER * max(1, sum(len(s.pids()) for s in sides))
    deadline = time.monotonic() + timeout_s
    while True:
        t0, cpu0 = time.monotonic(), sum(probe.cpu_seconds(s.pids()) for s in sides)
        time.sleep(window_s)
        share = (sum(probe.cpu_seconds(s.pids()) for s in sides) - cpu0) / (time.monotonic() - t0)
        if share < below or time.monotonic() >= deadline:
            return share


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def _partitions_led(bootstrap: str, topics: tuple[str, ...], *, avoid: int | None, whole: bool) -> str | None:
    """None once every partition of `topics` has a leader other than `avoid` (and, `whole`, every replica in its
    ISR); else what is not there yet (confluent-kafka's Metadata, so Kelp and Kafka alike)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5)
    except KafkaException as exc:  # no broker answered in time: not there yet
        return f"Metadata: {exc.args[0]}"
    for name in topics:
        topic = meta.topics.get(name)
        if topic is None or topic.error is not None:
            return f"{name}: {topic and topic.error}"
        for p in topic.partitions.values():
            if p.leader in (-1, avoid) or (whole and set(p.isrs) != set(p.replicas)):
                return f"{name}[{p.id}]: leader {p.leader}, replicas {p.replicas}, isr {p.isrs}"
    return None


def kill_and_restart(side: Side, k: int, topics: tuple[str, ...]) -> None:
    """SIGKILL the side's broker `k` (modulo their number), wait for new leaders of `topics`, start it again on
    its storage and ports, wait for `topics` to be fully replicated again (bounded: RuntimeError)."""
    assert side.kill is not None and side.restart is not None
    i = k % len(side.broker_ids)
    side.kill(i)
    poll_until(lambda: _partitions_led(side.bootstrap, topics, avoid=side.broker_ids[i], whole=False),
               what=f"{side.name}: leaders after broker {side.broker_ids[i]} was killed", timeout_s=60,
               interval_s=0.2)
    side.restart(i)
    poll_until(lambda: _partitions_led(side.bootstrap, topics, avoid=None, whole=True),
               what=f"{side.name}: {topics} fully replicated after broker {side.broker_ids[i]} came back",
               timeout_s=120, interval_s=0.5)
