"""Replica placement for new partitions: even, rack-aware, deterministic.

Why: a topic's partitions must spread leaders and replicas evenly over the
brokers, put the replicas of one partition on distinct brokers, and on
distinct racks whenever there are at least as many racks as replicas, so a
broker or a rack can fail without taking a partition's whole ISR. This is
Kafka's `AdminUtils.assignReplicasToBrokers` idea (a rack-alternating broker
list, each partition's leader one step further, followers shifted so that
pairs vary), with the start chosen from existing load so that topics created
one after another do not all lead on broker 0.

Pure functions only: the controller passes in the live brokers and the
current assignment, and stores what comes out.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping, Sequence

from kelp.errors import InvalidReplicationFactorError

__all__ = ["assign_replicas", "rack_alternated"]


def rack_alternated(brokers: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered so consecutive entries sit on different racks (r1b1, r2b1, r3b1, r1b2, ...)."""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(brokers):
        by_rack.setdefault(brokers[broker_id] or "", []).append(broker_id)
    racks = sorted(by_rack)
    out: list[int] = []
    depth = max((len(v) for v in by_rack.values()), default=0)
    for i in range(depth):
        for rack in racks:
            if i < len(by_rack[rack]):
                out.append(by_rack[rack][i])
    return out


def assign_replicas(
    *,
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    first_partition: int = 0,
    existing: Iterable[Sequence[int]] = (),
    topic: str = "",
) -> list[list[int]]:
    """Replica lists (leader first) for `partitions` new partitions.

    `brokers` maps each live broker id to its rack (None = no rack).
    `existing` are the replica lists already in the cluster (any topic): new
    leaders start on the broker that leads least, and ties go to the lower id.
    """
    n = len(brokers)
    if replication_factor > n:
        where = f"topic '{topic}': " if topic else ""
        raise InvalidReplicationFactorError(
            f"{where}replication factor {replication_factor} is larger than the {n} live broker(s) "
            f"({', '.join(str(b) for b in sorted(brokers)) or 'none'})"
        )
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(f"replication factor must be > 0, got {replication_factor}")
    order = rack_alternated(brokers)
    rack_count = len({brokers[b] or "" for b in brokers})
    use_racks = rack_count >= replication_factor and any(brokers.values())
    leaders = Counter(r[0] for r in existing if r)
    replicas_load = Counter(b for r in existing for b in r)
    start = min(range(n), key=lambda i: (leaders[order[i]], replicas_load[order[i]], i)) if n else 0
    out: list[list[int]] = []
    for k in range(partitions):
        p = first_partition + k
        lead_index = (start + k) % n
        chosen = [order[lead_index]]
        racks_used = {brokers[order[lead_index]] or ""}
        # Kafka's shift: followers of successive rounds start further away, so the pairs (leader, follower) vary.
        shift = 1 + (p // n) % max(n - 1, 1) if n > 1 else 0
        j = 0
        while len(chosen) < replication_factor and j < 2 * n:
            candidate = order[(lead_index + shift + j) % n]
            j += 1
            if candidate in chosen:
                continue
            if use_racks and (brokers[candidate] or "") in racks_used:
                continue
            chosen.append(candidate)
            racks_used.add(brokers[candidate] or "")
        j = 0
        while len(chosen) < replication_factor and j < n:  # racks exhausted: any broker not yet chosen
            candidate = order[(lead_index + 1 + j) % n]
            j += 1
            if candidate not in chosen:
                chosen.append(candidate)
        out.append(chosen)
    return out
