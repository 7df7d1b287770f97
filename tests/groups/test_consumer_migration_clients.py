"""KIP-848 online migration with real clients (issue 36): a group of classic Java consumers (kafka-clients 4.3.1,
Kafka's VerifiableConsumer, `group.protocol=classic`) is rolled one member at a time to `group.protocol=consumer`
while a producer writes keyed records, and a consumer-protocol group is rolled back the same way. The first
consumer-protocol member upgrades the classic group, and the last one leaving downgrades it; in between the
classic members go on inside the consumer group. Every acknowledged record is consumed (no partition gap), no
partition is owned by two members at once (the consumers' own assigned/revoked intervals), commits never fail,
the committed offsets reach the log end, while mixed Kafka's kafka-consumer-groups (ConsumerGroupDescribe) shows
one group with members of both kinds, and at the end the group's type is the new protocol's. The Java tier skips
only without `java`.
"""

from __future__ import annotations

import re
import threading
import time

import pytest

from kelp import kafka_tools
from tests.support.broker_process import BrokerProcess

from .test_clients_share_partitions import create_topic
from .test_consumer_protocol_clients import (  # noqa: F401  (the module's fixtures)
    PARTITIONS,
    JavaConsumer,
    groups_command,
    java,
    kip848_broker,
    split,
    wait_for,
)

pytestmark = pytest.mark.usefixtures("java")


class KeyedProducer:
    """Writes keyed records until stopped; remembers the (partition, offset) of every acknowledged one."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.acked: set[tuple[int, int]] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _done(self, err: object, msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.add((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self._producer.produce(self._topic, key=f"k{i % 97}".encode(), value=str(i).encode(),
                                   on_delivery=self._done)
            self._producer.poll(0)
            i += 1
            self._stop.wait(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self._producer.flush(30) == 0


def member_kinds(bootstrap: str, group: str) -> str:
    """kafka-consumer-groups --describe --members --verbose (ConsumerGroupDescribe): its output."""
    return groups_command(bootstrap, "--describe", "--group", group, "--members", "--verbose")


def roll(bs: str, topic: str, group: str, from_: str, to: str) -> tuple[list[str], list[JavaConsumer], KeyedProducer]:
    """Three `from_` members, each replaced in turn by a `to` member, while a keyed producer writes; then every
    acknowledged record consumed and the committed offsets at the log end. (the describe outputs seen while
    mixed, every consumer, the producer)"""
    create_topic(bs, topic, PARTITIONS)
    kafka_tools.ensure_archive(bs)
    producer = KeyedProducer(bs, topic)
    everyone: list[JavaConsumer] = []

    def start(name: str, protocol: str) -> JavaConsumer:
        c = JavaConsumer(bs, topic, group, name, protocol=protocol)
        everyone.append(c)
        return c

    mixed_seen: list[str] = []
    try:
        first = [start(f"{from_}{i}", from_) for i in (1, 2, 3)]
        wait_for(everyone, lambda: split(first) and all(c.records() for c in first),
                 f"three {from_} members splitting the partitions and consuming")
        members = list(first)
        for i, old in enumerate(first, 1):
            old.stop()  # it leaves (LeaveGroup, or a heartbeat at epoch -1)
            members.remove(old)
            new = start(f"{to}{i}", to)
            members.append(new)
            seen = len(new.records())
            wait_for(everyone, lambda m=members, n=new, s=seen: split(m) and len(n.records()) > s,  # type: ignore[misc]
                     f"{[c.name for c in members]} splitting the partitions, the new member consuming")
            if i < len(first):
                mixed_seen.append(groups_command(bs, "--describe", "--group", group, "--members", "--verbose"))
        producer.stop()
        wait_for(everyone, lambda: producer.acked <= {r for c in everyone for r in c.records()},
                 "every acknowledged record consumed")
        deadline = time.monotonic() + 60  # the last members commit after each batch
        while True:
            described = groups_command(bs, "--describe", "--group", group)
            lags = re.findall(rf"^{group}\s+{topic}\s+\d+\s+(\d+)\s+(\d+)\s+(\d+)", described, re.M)
            if len(lags) == PARTITIONS and all(lag == "0" for _, _, lag in lags):
                break
            assert time.monotonic() < deadline, described
            time.sleep(0.5)
        mixed_seen.append(groups_command(bs, "--list", "--type"))
        for c in members:
            c.stop()
    finally:
        for c in everyone:
            if c.proc.poll() is None:
                c.proc.kill()
    assert not producer.errors, producer.errors[:5]
    consumed = [r for c in everyone for r in c.records()]
    assert producer.acked <= set(consumed), "a record was lost"
    per_partition: dict[int, set[int]] = {}
    for p, o in consumed:
        per_partition.setdefault(p, set()).add(o)
    assert all(os == set(range(max(os) + 1)) for os in per_partition.values()), "a gap in some partition"
    assert not [c.failed_commits() for c in everyone if c.failed_commits()]
    for p in range(PARTITIONS):
        spans = sorted(span for c in everyone for span in c.intervals().get(p, []))
        for (_, end), (start_, _) in zip(spans, spans[1:], strict=False):
            assert end <= start_, f"partition {p} owned by two members at once: {spans}"
    print(f"{from_} -> {to}: produced {len(producer.acked)}, consumed {len(consumed)} "
          f"({len(consumed) - len(set(consumed))} consumed again after a rebalance)")
    return mixed_seen, everyone, producer


def both_kinds(described: str, group: str) -> None:
    """One consumer group, three members, of both kinds (Kafka 4's UPGRADED column: true for the consumer
    protocol, from ConsumerGroupDescribe's MemberType)."""
    rows = [line.split() for line in described.splitlines() if line.startswith(group)]
    assert len(rows) == 3 and {r[-1] for r in rows} == {"true", "false"}, described


@pytest.mark.timeout(600)
def test_a_classic_group_rolled_to_the_consumer_protocol_loses_nothing(kip848_broker: BrokerProcess) -> None:  # noqa: F811
    group = "kip848-up-g"
    seen, _, _ = roll(kip848_broker.bootstrap, "kip848-up", group, "classic", "consumer")
    for described in seen[:-1]:
        both_kinds(described, group)
    assert re.search(rf"^{group}\s+Consumer\s*$", seen[-1], re.M), seen[-1]


@pytest.mark.timeout(600)
def test_a_consumer_group_rolled_back_to_classic_is_downgraded_and_loses_nothing(
        kip848_broker: BrokerProcess) -> None:  # noqa: F811
    group = "kip848-down-g"
    seen, _, _ = roll(kip848_broker.bootstrap, "kip848-down", group, "consumer", "classic")
    for described in seen[:-1]:
        both_kinds(described, group)
    # The last consumer-protocol member left: the group is a classic group again.
    assert re.search(rf"^{group}\s+Classic\s*$", seen[-1], re.M), seen[-1]
