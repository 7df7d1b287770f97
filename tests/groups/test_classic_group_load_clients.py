"""Real clients keep their classic group through a restart of the coordinator broker, with no rebalance (issue 36).

The broker is stopped (SIGTERM, or SIGKILL) and started again on the same port while two consumers of a Stable
group keep running; the restarted broker loads `__consumer_offsets` and restores the group with its members
(`partition_loader.restore_group`), so the consumers' heartbeats and commits at their generation are accepted and
no new generation is formed; the records produced after the restart are consumed by the partitions' same owners.
"""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest
from kafka.admin import KafkaAdminClient

from .procs import wait_all
from .test_clients_share_partitions import create_topic, produce
from .test_static_membership import generations


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
    wait_all(members, lambda: {v for m in members for _, _, v in m.records()} >= after, timeout=60,
             what="the 60 records produced after the restart consumed")
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
