"""A static member (group.instance.id) restarted within its session timeout keeps
its partitions, and the group does not rebalance (generation unchanged)."""

from __future__ import annotations

import re

import pytest

from .procs import wait_all
from .test_clients_share_partitions import create_topic


def generations(log_text: str, group: str) -> list[int]:
    return [int(g) for g in re.findall(rf"group '{re.escape(group)}': generation (\d+),", log_text)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent"])
def test_static_member_restart_keeps_partitions_without_rebalance(group_broker, consumers, client: str) -> None:
    bs = group_broker.bootstrap
    topic = f"static-{client}"
    group = f"static-{client}"
    create_topic(bs, topic, 6)
    a = consumers(client=client, bootstrap=bs, group=group, topic=topic, session_ms=8000, instance_id="inst-a")
    b = consumers(client=client, bootstrap=bs, group=group, topic=topic, session_ms=8000, instance_id="inst-b")
    wait_all([a, b], lambda: sorted(a.assignment + b.assignment) == list(range(6)) and len(a.assignment) == 3,
             timeout=30, what="two static members with three partitions each")
    before = generations(group_broker.log_text(), group)
    b_parts = b.assignment
    b.kill()
    b2 = consumers(client=client, bootstrap=bs, group=group, topic=topic, session_ms=8000, instance_id="inst-b")
    b2.wait(lambda: b2.assignment == b_parts, timeout=20, what=f"restarted static member to get {b_parts} back")
    group_broker.wait_for_log("static member inst-b rejoined", timeout=5)
    assert generations(group_broker.log_text(), group) == before, "no new generation: no rebalance"
    assert a.assignment == [p for p in range(6) if p not in b_parts]
