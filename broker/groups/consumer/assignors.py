"""The server-side assignors of KIP-848 consumer groups: `uniform` and `range` (`group.consumer.assignors`).

Why: in the consumer protocol the broker, not a client leader, computes each member's target assignment
whenever the group epoch moves (a member joins, leaves or changes its subscription, a subscribed topic gains
partitions). A member names the assignor it wants (`ServerAssignor`); the group uses the one most members
name, else the first configured. Both assignors are pure functions of the members' subscriptions, the
subscribed topics' partition counts and (uniform) the current target, so tests check them exhaustively.

- `uniform` (Kafka's UniformAssignor): spreads every subscribed partition so that, among members that can
  take a partition, counts differ by at most one, moving as few partitions as possible from the previous
  target (sticky): a member that joins takes partitions from the fullest members only.
- `range` (Kafka's RangeAssignor): per topic, its subscribers sorted by member id get contiguous ranges of
  partitions, the first `partitions % members` of them one more; co-partitioned topics line up.

Assignments are `{topic id: frozenset(partitions)}` per member id. This module must never know about
epochs, reconciliation or records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from kelp.config.keys import CONSUMER_ASSIGNORS

__all__ = ["Assignment", "MemberSubscription", "ASSIGNORS", "assign_uniform", "assign_range"]

Assignment = dict[str, frozenset[int]]
"""A member's partitions: topic id (32 hex digits) -> partition indexes."""


@dataclass(frozen=True)
class MemberSubscription:
    """What an assignor needs of a member: the ids of the (existing) topics it subscribes to."""

    topic_ids: frozenset[str]


AssignorFn = Callable[[Mapping[str, MemberSubscription], Mapping[str, int], Mapping[str, Assignment]],
                      dict[str, Assignment]]


def assign_range(members: Mapping[str, MemberSubscription], partitions: Mapping[str, int],
                 current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Per topic, contiguous ranges to its subscribers in member-id order (`current` is not used)."""
    out: dict[str, dict[str, frozenset[int]]] = {m: {} for m in members}
    for topic_id in sorted(partitions):
        subscribers = sorted(m for m, s in members.items() if topic_id in s.topic_ids)
        if not subscribers:
            continue
        count = partitions[topic_id]
        quota, extra = divmod(count, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            size = quota + (1 if i < extra else 0)
            if size:
                out[member][topic_id] = frozenset(range(start, start + size))
            start += size
    return out


def assign_uniform(members: Mapping[str, MemberSubscription], partitions: Mapping[str, int],
                   current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Balanced and sticky: keep what `current` gave each member while it is still valid and fair, give the rest
    to the least-loaded eligible member, then move partitions from a member to an eligible one holding two or
    more fewer until none can move."""
    owner: dict[tuple[str, int], str] = {}
    load: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    subscribers: dict[str, list[str]] = {
        t: sorted(m for m, s in members.items() if t in s.topic_ids) for t in sorted(partitions)}
    total = sum(partitions[t] for t, subs in subscribers.items() if subs)
    # An upper bound per member (homogeneous case: ceil(total / members)) so stickiness never keeps a member
    # above what the balanced answer gives it.
    ceiling = -(-total // len(members)) if members else 0
    for member in sorted(members):
        subscribed = members[member].topic_ids
        for topic_id, held in sorted(current.get(member, {}).items()):
            if topic_id not in subscribed or topic_id not in partitions:
                continue
            for p in sorted(held):
                tp = (topic_id, p)
                if p < partitions[topic_id] and tp not in owner and len(load[member]) < ceiling:
                    owner[tp] = member
                    load[member].add(tp)
    for topic_id, subs in subscribers.items():
        for p in range(partitions[topic_id]):
            tp = (topic_id, p)
            if tp in owner or not subs:
                continue
            member = min(subs, key=lambda m: (len(load[m]), m))
            owner[tp] = member
            load[member].add(tp)
    _balance(owner, load, subscribers)
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for (topic_id, p), member in owner.items():
        out[member].setdefault(topic_id, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}


def _balance(owner: dict[tuple[str, int], str], load: dict[str, set[tuple[str, int]]],
             subscribers: Mapping[str, list[str]]) -> None:
    """Move one partition at a time from a member to an eligible member holding at least two fewer; each move
    lowers the sum of squared loads, so this ends (after at most a few passes over the partitions)."""
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda tp: (-len(load[owner[tp]]), tp)):
            holder = owner[tp]
            target = min(subscribers[tp[0]], key=lambda m: (len(load[m]), m))
            if len(load[target]) + 1 < len(load[holder]):
                load[holder].discard(tp)
                load[target].add(tp)
                owner[tp] = target
                moved = True


ASSIGNORS: dict[str, AssignorFn] = {"uniform": assign_uniform, "range": assign_range}
assert tuple(ASSIGNORS) == CONSUMER_ASSIGNORS  # the config's parser (kelp.config.keys) knows the same names
