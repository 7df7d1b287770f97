"""Replication throttles on the partition moves the operator submits (a drain, a spread after a scale-up).

Why: a drain copies every replica of the leaving brokers to the staying ones. Unthrottled, that copy competes
with producers and in-sync followers for the disks and the network, for as long as the move lasts. Kafka's own
way out is the replication quota (KIP-73), and this module sets it the way `kafka-reassign-partitions --throttle`
and Cruise Control do:
- `spec.reassignment.throttleBytesPerSecond` becomes `leader.replication.throttled.rate` and
  `follower.replication.throttled.rate` on every broker's own dynamic config entity. The cluster-wide default
  entity is left alone: `dynamic_config` keeps that one equal to `spec.config`.
- Each moved partition is listed on its topic: `leader.replication.throttled.replicas` gets its current replicas
  (whichever leads), and `follower.replication.throttled.replicas` gets the replicas being added. Pairs already
  there, set by a user or an earlier move, are kept while moves run; once none is in flight both keys are deleted
  from the topics the operator listed, pairs of others included, as `kafka-reassign-partitions --verify` does.
- Only replicas out of the ISR are throttled, so producers and in-sync followers never wait on the quota.
- The throttles come off once no move is in flight. The annotation `kelp.dev/replication-throttle` records what
  was set (brokers and topics), and it is written before any config, so an operator restarted halfway still
  knows what to remove.

The builders here (`throttle_pairs`, `merged`) are pure; the rest calls the brokers' admin API through
`BrokerAdmin`.
"""

from __future__ import annotations

import json
from typing import Iterable

from ..model.admin_types import PartitionMove
from .brokers import AdminError, BrokerAdmin
from .resources import ClusterPass

__all__ = ["THROTTLE_ANNOTATION", "LEADER_REPLICAS", "FOLLOWER_REPLICAS", "RATE_KEYS", "throttle_pairs", "merged",
           "throttle_moves", "clear_throttles", "THROTTLED_REPLICA_KEYS"]

THROTTLE_ANNOTATION = "kelp.dev/replication-throttle"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
THROTTLED_REPLICA_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def throttle_pairs(plan: Iterable[PartitionMove], current: dict[tuple[str, int], list[int]]
                   ) -> dict[str, tuple[set[str], set[str]]]:
    """topic -> (leader pairs, follower pairs) as `partition:broker`, for the moves of `plan` (Kafka's tool: the
    current replicas on the leader list, the added ones on the follower list)."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for move in plan:
        if move["replicas"] is None:
            continue  # a cancel adds nothing
        topic, p = move["topic"], move["partition"]
        now = current.get((topic, p), [])
        leaders, followers = out.setdefault(topic, (set(), set()))
        leaders.update(f"{p}:{b}" for b in now)
        followers.update(f"{p}:{b}" for b in move["replicas"] if b not in now)
    return out


def merged(value: str | None, pairs: set[str]) -> str:
    """A throttled-replica list with `pairs` added to what it holds (`*` already covers them)."""
    text = (value or "").strip()
    if text == "*":
        return text
    have = [item.strip() for item in text.split(",") if item.strip()]
    return ",".join(have + sorted(pairs - set(have), key=lambda s: tuple(int(x) for x in s.split(":"))))


def _recorded(ctx: ClusterPass) -> tuple[set[int], set[str]]:
    raw = ctx.annotations.get(THROTTLE_ANNOTATION)
    if not raw:
        return set(), set()
    try:
        data = json.loads(raw)
        return {int(b) for b in data.get("brokers", [])}, {str(t) for t in data.get("topics", [])}
    except (ValueError, TypeError, AttributeError):
        return set(), set()  # unreadable: the pass that set it wrote JSON; a hand edit is the user's


async def _record(ctx: ClusterPass, brokers: set[int], topics: set[str]) -> None:
    value = json.dumps({"brokers": sorted(brokers), "topics": sorted(topics)}, separators=(",", ":"))
    await ctx.annotate(THROTTLE_ANNOTATION, value)
    meta = ctx.body["metadata"]
    ctx.body = {**ctx.body, "metadata": {**meta, "annotations": {**ctx.annotations, THROTTLE_ANNOTATION: value}}}


async def throttle_moves(ctx: ClusterPass, admin: BrokerAdmin, plan: list[PartitionMove],
                         current: dict[tuple[str, int], list[int]], brokers: Iterable[int]) -> None:
    """Throttle the moves of `plan` before they are submitted (AdminError propagates: then nothing is moved)."""
    rate = ctx.spec.reassignment_throttle
    pairs = throttle_pairs(plan, current)
    if rate is None or not pairs:
        return
    known_brokers, known_topics = _recorded(ctx)
    wanted = set(brokers)
    await _record(ctx, known_brokers | wanted, known_topics | set(pairs))
    for b in sorted(wanted):
        await admin.alter_broker_entity_configs(b, {key: str(rate) for key in RATE_KEYS})
    for topic, (leaders, followers) in sorted(pairs.items()):
        overrides = await admin.topic_overrides(topic)
        patch: dict[str, str | None] = {LEADER_REPLICAS: merged(overrides.get(LEADER_REPLICAS), leaders),
                                        FOLLOWER_REPLICAS: merged(overrides.get(FOLLOWER_REPLICAS), followers)}
        if any(overrides.get(k) != v for k, v in patch.items()):
            await admin.patch_topic_configs(topic, patch)


async def clear_throttles(ctx: ClusterPass, admin: BrokerAdmin) -> str | None:
    """With no move in flight: take off the throttles this operator set; what was cleared, or None."""
    brokers, topics = _recorded(ctx)
    if THROTTLE_ANNOTATION not in ctx.annotations:
        return None
    for b in sorted(brokers):
        try:
            await admin.alter_broker_entity_configs(b, {key: None for key in RATE_KEYS})
        except AdminError as exc:
            if exc.status != 404:  # a broker a scale-down removed keeps nothing to clear
                raise
    for topic in sorted(topics):
        try:
            await admin.patch_topic_configs(topic, {key: None for key in THROTTLED_REPLICA_KEYS})
        except AdminError as exc:
            if exc.status != 404:  # deleted meanwhile
                raise
    await ctx.annotate(THROTTLE_ANNOTATION, None)
    return (f"replication throttles removed: no partition move is in flight (rates on broker(s) {sorted(brokers)}, "
            f"throttled replicas of {len(topics)} topic(s))")
