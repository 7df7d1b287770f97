"""Committed offsets: durable across a broker SIGKILL, resumed by a new consumer,
auto.offset.reset earliest/latest/none as in Kafka, independent groups."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import NoOffsetForPartitionError

from .test_clients_share_partitions import create_topic


def produce(bootstrap: str, topic: str, values: list[str], partitions: int = 3) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i, v in enumerate(values):
        p.send(topic, v.encode(), partition=i % partitions)
    p.flush(30)
    p.close()


def consumer(bootstrap: str, group: str, topic: str, reset: str = "earliest") -> KafkaConsumer:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset=reset, enable_auto_commit=False,
                      session_timeout_ms=2000, heartbeat_interval_ms=300, max_poll_records=7)
    c.subscribe([topic])
    return c


def take(c: KafkaConsumer, n: int, *, timeout: float = 20.0) -> list[str]:
    out: list[str] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for rs in c.poll(timeout_ms=200, max_records=n - len(out)).values():
            out.extend(r.value.decode() for r in rs)
    return out


def drain(c: KafkaConsumer, *, quiet: float = 1.5, timeout: float = 20.0) -> list[str]:
    """Everything until nothing arrives for `quiet` seconds (after the group is joined)."""
    out: list[str] = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    while time.monotonic() < deadline:
        got = [r.value.decode() for rs in c.poll(timeout_ms=200).values() for r in rs]
        out.extend(got)
        if got:
            last = time.monotonic()
        elif c.assignment() and time.monotonic() - last > quiet:
            break
    return out


@pytest.mark.timeout(60)
def test_committed_offsets_survive_broker_sigkill_and_new_consumer_resumes(group_broker) -> None:
    create_topic(group_broker.bootstrap, "durable", 3)
    values = [f"r{i}" for i in range(60)]
    produce(group_broker.bootstrap, "durable", values)
    c = consumer(group_broker.bootstrap, "dur", "durable")
    first = take(c, 30)
    assert len(first) == 30
    c.commit()
    committed = {tp.partition: c.committed(tp) for tp in c.assignment()}
    c.close(autocommit=False)

    group_broker.restart(kill=True)

    c2 = consumer(group_broker.bootstrap, "dur", "durable")
    rest = drain(c2)
    assert {c2.committed(TopicPartition("durable", p)) for p in range(3)} >= set(committed.values()) - {None}
    assert sorted(first + rest, key=lambda v: int(v[1:])) == values, "resumed exactly where the commit left off"
    assert not set(first) & set(rest)
    c2.close()


@pytest.mark.timeout(60)
def test_auto_offset_reset_earliest_latest_none_and_two_groups(group_broker) -> None:
    bs = group_broker.bootstrap
    create_topic(bs, "resets", 3)
    old = [f"old{i}" for i in range(9)]
    produce(bs, "resets", old)

    latest = consumer(bs, "g-latest", "resets", reset="latest")
    assert drain(latest, quiet=1.0) == []
    earliest_a = consumer(bs, "g-a", "resets", reset="earliest")
    earliest_b = consumer(bs, "g-b", "resets", reset="earliest")
    new = [f"new{i}" for i in range(9)]
    produce(bs, "resets", new)
    assert sorted(drain(latest)) == sorted(new), "latest: only records produced after the reset"
    assert sorted(drain(earliest_a)) == sorted(old + new), "earliest: every record"
    assert sorted(drain(earliest_b)) == sorted(old + new), "a second group sees every record too"
    for c in (latest, earliest_a, earliest_b):
        c.close()

    none = consumer(bs, "g-none", "resets", reset="none")
    with pytest.raises(NoOffsetForPartitionError):
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            none.poll(timeout_ms=200)
    none.close()
