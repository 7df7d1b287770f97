"""Real clients in separate processes share a topic's partitions through the coordinator.

For kafka-python, aiokafka and confluent-kafka (librdkafka): three members of
one group on a six-partition topic get two partitions each; a fourth joining
gives everyone at least one; a SIGKILLed member's partitions are taken over
after its session timeout; with commits after processing and no crash every
record is processed exactly once, and after the crash at least once.
"""

from __future__ import annotations

from collections import Counter

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from .procs import wait_all


def produce(bootstrap: str, topic: str, start: int, count: int) -> set[str]:
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    values = set()
    for i in range(start, start + count):
        v = f"v{i}"
        p.send(topic, v.encode(), partition=i % 6)
        values.add(v)
    p.flush(30)
    p.close()
    return values


def create_topic(bootstrap: str, name: str, partitions: int = 6) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent"])
def test_group_members_share_rebalance_and_take_over(group_broker, consumers, client: str) -> None:
    bs = group_broker.bootstrap
    create_topic(bs, "shared")
    members = [consumers(client=client, bootstrap=bs, group="g-" + client, topic="shared", session_ms=2000)
               for _ in range(3)]
    wait_all(members, lambda: sorted(len(m.assignment) for m in members) == [2, 2, 2]
             and sorted(p for m in members for p in m.assignment) == list(range(6)),
             timeout=40, what="three members with two partitions each")

    sent = produce(bs, "shared", 0, 600)
    def seen() -> Counter:
        return Counter(v for m in members for _, _, v in m.records())
    wait_all(members, lambda: set(seen()) >= sent, timeout=30, what="all 600 records processed")
    counts = seen()
    assert max(counts.values()) == 1, "with commits after processing and no crash, each record once"

    fourth = consumers(client=client, bootstrap=bs, group="g-" + client, topic="shared", session_ms=2000)
    members.append(fourth)
    wait_all(members, lambda: all(m.assignment for m in members)
             and sorted(p for m in members for p in m.assignment) == list(range(6)),
             timeout=40, what="four members each with at least one partition")

    victim = members[0]
    victim.kill()
    survivors = members[1:]
    wait_all(survivors, lambda: sorted(p for m in survivors for p in m.assignment) == list(range(6)),
             timeout=40, what="survivors taking over the killed member's partitions")
    sent2 = produce(bs, "shared", 600, 600)
    wait_all(survivors, lambda: set(Counter(v for m in members for _, _, v in m.records())) >= sent | sent2,
             timeout=30, what="every record processed by some member after the crash")
