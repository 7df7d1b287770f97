"""Real clients keep their classic group through a restart of the coordinator broker, with no rebalance (issue 36).

One broker is stopped (SIGTERM, or SIGKILL) and started again on the same port while two consumers of a Stable
group keep running; the restarted broker loads `__consumer_offsets` and restores the group with its members
(`partition_loader.restore_group`), so the consumers' heartbeats and commits at their generation are accepted and
no new generation is formed; the records produced after the restart are consumed by the partitions' same owners.
In a cluster of three, the coordinator is SIGKILLed and the broker that takes the group's replicated
`__consumer_offsets` partition over serves the group the same way.
"""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from kelp.broker.groups.placement import OFFSETS_TOPIC, partition_for_group

from .procs import wait_all
from .test_clients_share_partitions import create_topic, produce
from .test_static_membership import generations


def wait_consumed(members: list, values: set[str], *, timeout: float, what: str) -> None:
    """`wait_all` for these values to be consumed; a timeout names what each consumer wrote to stderr (a client
    exception ends its process)."""
    try:
        wait_all(members, lambda: {v for m in members for _, _, v in m.records()} >= values, timeout=timeout,
                 what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; stderr: {[''.join(m.stderr)[-1500:] for m in members]}") from None


def wait_committed(bootstrap: str, group: str, topic: str, want: dict[int, int], *, timeout: float) -> None:
    """Wait (bounded) until the group's committed offsets of `topic` are `want` (partition -> offset)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        deadline = time.monotonic() + timeout
        while True:
            got = {tp.partition: om.offset for tp, om in admin.list_group_offsets(group)[group].items()
                   if tp.topic == topic}
            if got == want:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"committed offsets of {group} are {got} after {timeout}s, not {want}")
            time.sleep(0.2)
    finally:
        admin.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_a_group_survives_its_coordinators_restart_without_a_rebalance(group_broker, consumers, client: str,
                                                                       kill: bool) -> None:
    bs = group_broker.bootstrap
    topic = group = f"survive-{client}-{'kill' if kill else 'term'}"
    create_topic(bs, topic, 6)
    # A session longer than the broker's restart: the clients must not give up on their own meanwhile (librdkafka
    # rejoins when no heartbeat succeeded for a session timeout).
    members = [consumers(client=client, bootstrap=bs, group=group, topic=topic, session_ms=30000) for _ in range(2)]
    wait_all(members, lambda: sorted(p for m in members for p in m.assignment) == list(range(6))
             and all(len(m.assignment) == 3 for m in members), timeout=40, what="two members with three partitions")
    sent = produce(bs, topic, 0, 60)
    wait_all(members, lambda: {v for m in members for _, _, v in m.records()} >= sent, timeout=30,
             what="the first 60 records consumed")
    # Their commits are done before the broker goes: kafka-python's commit() raises (KafkaConnectionError) when the
    # broker is down, and the consumer process ends on it.
    wait_committed(bs, group, topic, {p: 10 for p in range(6)}, timeout=30)
    before = generations(group_broker.log_text(), group)
    owned = {p: i for i, m in enumerate(members) for p in m.assignment}
    port = group_broker.kafka_port
    base = list(group_broker.extra_args)
    group_broker.extra_args = [*base, "--port", str(port)]  # the last --port wins: the clients' bootstrap stays
    try:
        group_broker.restart(kill=kill)
    finally:
        group_broker.extra_args = base
    after = produce(bs, topic, 60, 60)
    wait_consumed(members, after, timeout=60, what="the 60 records produced after the restart consumed")
    # Each record's offset is committed (partition p holds 20 of the 120 records): on a coordinator that lost the
    # members those commits are refused (UNKNOWN_MEMBER_ID) until they rejoin, a new generation.
    wait_committed(bs, group, topic, {p: 20 for p in range(6)}, timeout=60)
    assert generations(group_broker.log_text(), group) == before, "no new generation: no rebalance"
    assert not [e for m in members for e in m.errors()], [m.errors() for m in members]
    line = group_broker.wait_for_log(f"group '{group}' loaded:", timeout=5)
    assert re.search(rf"Stable at generation {before[-1]} with 2 member\(s\)", line), line
    assert {p: i for i, m in enumerate(members) for p in m.assignment} == owned
    by_owner = Counter(owned[p] for m in members for p, _, v in m.records() if v in after)
    assert set(by_owner) == {0, 1}, by_owner


@pytest.mark.timeout(180)
def test_a_group_survives_a_coordinator_failover_in_a_cluster_without_a_rebalance(cluster_factory, consumers) -> None:
    """Three brokers: the coordinator is SIGKILLed, another broker becomes the leader of the group's replicated
    `__consumer_offsets` partition, loads it and serves the group at its generation."""
    settings = {"offsets.topic.num.partitions": 3, "offsets.topic.replication.factor": 3,
                "group.initial.rebalance.delay.ms": 200, "group.min.session.timeout.ms": 500}
    cluster = cluster_factory(3, settings=settings)
    topic = group = "failover"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 6, 3)])
    finally:
        admin.close()
    cluster.wait_fully_replicated(topic, timeout=60)
    members = [consumers(client="kafka-python", bootstrap=cluster.bootstrap, group=group, topic=topic,
                         session_ms=30000) for _ in range(2)]
    wait_all(members, lambda: sorted(p for m in members for p in m.assignment) == list(range(6))
             and all(len(m.assignment) == 3 for m in members), timeout=60, what="two members with three partitions")
    cluster.wait_fully_replicated(OFFSETS_TOPIC, timeout=60)
    sent = produce(cluster.bootstrap, topic, 0, 60)
    wait_all(members, lambda: {v for m in members for _, _, v in m.records()} >= sent, timeout=30,
             what="the first 60 records consumed")
    wait_committed(cluster.bootstrap, group, topic, {p: 10 for p in range(6)}, timeout=30)  # see above
    p = partition_for_group(group, 3)
    victim = int(cluster.topic(OFFSETS_TOPIC)["partitions"][p]["leader"])
    before = generations(cluster[victim].log_text(), group)
    owned = {q: i for i, m in enumerate(members) for q in m.assignment}
    cluster[victim].kill()
    cluster.wait_for("another coordinator", lambda: cluster.topic(OFFSETS_TOPIC)["partitions"][p]["leader"]
                     not in (-1, victim), timeout=60)
    coordinator = cluster[int(cluster.topic(OFFSETS_TOPIC)["partitions"][p]["leader"])]
    after = produce(cluster.bootstrap, topic, 60, 60)
    wait_consumed(members, after, timeout=60, what="the 60 records produced after the failover consumed")
    wait_committed(cluster.bootstrap, group, topic, {q: 20 for q in range(6)}, timeout=60)
    assert generations(coordinator.log_text(), group) == [], "no new generation on the new coordinator"
    line = coordinator.wait_for_log(f"group '{group}' loaded:", timeout=5)
    assert f"Stable at generation {before[-1]} with 2 member(s)" in line, line
    assert {q: i for i, m in enumerate(members) for q in m.assignment} == owned
    assert not [e for m in members for e in m.errors()], [m.errors() for m in members]
