"""What a REST v2 consumer instance is subscribed to, and the partitions its group's leader gives each member.

Why: the group's assignment is computed by whichever instance leads the group, from the subscriptions every
member sent (Kafka's consumer protocol); and a `topic_pattern` subscription is resolved to topic names here,
the way a Java consumer's `subscribe(Pattern)` resolves it against Metadata. Both are pure over what they are
given (the broker's topic table, the ACLs), so `consumer_instance` keeps only the membership's state machine.

This module must never talk to the coordinator: it computes, the instance sends.
"""

from __future__ import annotations

from typing import Callable

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from ...acl_manager import Access
from ...client_patterns import full_matches
from ...metadata.model import INTERNAL_TOPICS
from ...parts import BrokerParts
from ..access.route_access import DESCRIBE, TOPIC

__all__ = ["range_assign", "leader_assignments", "topics_matching"]


def range_assign(members: list[tuple[str, list[str]]],
                 partitions_of: Callable[[str], int | None]) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: per topic, sorted subscribers get contiguous ranges, the first ones one extra."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m, _ in members}
    topics = sorted({t for _, ts in members for t in ts})
    for topic in topics:
        n = partitions_of(topic) or 0
        subs = sorted(m for m, ts in members if topic in ts)
        if not subs or n <= 0:
            continue
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = per + (1 if i < extra else 0)
            if count:
                out[m][topic] = list(range(start, start + count))
            start += count
    return out


async def topics_matching(broker: BrokerParts, pattern: str, access: Access) -> list[str]:
    """The topics whose whole name `pattern` matches now (RE2; InvalidPattern if it does not compile), internal
    topics left out, those `access` may DESCRIBE: what a Java consumer's `subscribe(Pattern)` sees in Metadata."""
    names = [t.name for t in broker.topics.list_topics() if t.name not in INTERNAL_TOPICS]
    return sorted(access.allowed(DESCRIBE, TOPIC, await full_matches(pattern, names)))


def leader_assignments(members: list[tuple[str, bytes]], partitions_of: Callable[[str], int | None]
                       ) -> dict[str, bytes]:
    """The leader's SyncGroup assignments: each member's `ConsumerProtocolSubscription` decoded (a member whose
    metadata does not decode subscribes to nothing), ranges computed, each encoded as a `ConsumerProtocolAssignment`."""
    subs = []
    for member_id, meta in members:
        try:
            topics = list(ConsumerProtocolSubscription.decode(meta).topics or [])
        except Exception:
            topics = []
        subs.append((member_id, topics))
    plan = range_assign(subs, partitions_of)
    A = ConsumerProtocolAssignment
    return {
        m: bytes(A(version=0, assigned_partitions=[A.TopicPartition(topic=t, partitions=ps)
                                                   for t, ps in sorted(tp.items())],
                   user_data=b"").encode())
        for m, tp in plan.items()
    }
