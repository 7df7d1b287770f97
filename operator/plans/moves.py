"""Partition moves for pod churn: drain brokers before scale-down, spread replicas after scale-up.

Why: a StatefulSet scale-down deletes the highest-numbered pods, and a pod
deleted with replicas on it leaves partitions under-replicated for good (its
volume is kept, but no broker with that id comes back). So the operator first
moves every replica off the brokers that will go, and shrinks the StatefulSet
only once they hold none. After a scale-up the new brokers hold nothing until
replicas move to them. Both plans move as few replicas as possible, keep a
partition's replicas on distinct brokers (and distinct racks where the
brokers allow), and fill the least-loaded broker first, like Kafka's
reassignment tooling and Cruise Control's replica distribution goal. A drain
also keeps to the staying brokers' disks (Cruise Control's disk capacity
goal): a replica goes only where its partition's size fits below
`DISK_FILL` of the broker's volume, counting what the broker holds already,
and is refused (DrainBlocked, naming sizes and room) when it fits nowhere —
before anything moves. Brokers to `avoid` (a cancelled move stalled on
them) are taken only when no other broker fits.

Rolling restarts are decided in `restarts.py`.

Pure: partitions in (`{"topic", "partition", "replicas"}` as the admin API
describes them), target replica lists out; the caller submits them through
`/admin/v1/partitions/reassign`.
"""

from __future__ import annotations

from collections import Counter
from typing import Collection, Iterable, Mapping, NotRequired, Sequence, TypedDict

from ..model.admin_types import PartitionMove

__all__ = ["drain_plan", "rebalance_plan", "DrainBlocked", "Placement", "DISK_FILL"]

DISK_FILL = 0.85  # a drain fills a staying broker's volume to this fraction at most (Cruise Control: 0.8)


class Placement(TypedDict):
    """Where a partition's replicas are (preferred leader first), as the admin API describes it."""

    topic: str
    partition: int
    replicas: list[int]
    size_bytes: NotRequired[int | None]  # the leader's log size; None or absent: unknown (counted as 0)


class DrainBlocked(ValueError):
    """Some partition has more replicas than the brokers that stay."""


def _loads(partitions: Iterable[Placement], brokers: Iterable[int]) -> Counter[int]:
    load: Counter[int] = Counter({b: 0 for b in brokers})
    for p in partitions:
        for r in p["replicas"]:
            if r in load:
                load[r] += 1
    return load


def _pick(candidates: Iterable[int], taken: Sequence[int], load: Counter[int],
          racks: Mapping[int, str | None], avoid: Collection[int] = ()) -> int | None:
    used_racks = {racks.get(r) for r in taken if racks.get(r)}
    options = [b for b in candidates if b not in taken]
    if not options:
        return None
    return min(options, key=lambda b: (b in avoid, bool(racks.get(b)) and racks.get(b) in used_racks, load[b], b))


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def drain_plan(partitions: Sequence[Placement], keep: Sequence[int],
               racks: Mapping[int, str | None] | None = None, *, capacity: Mapping[int, int] | None = None,
               avoid: Collection[int] = (), placed: Sequence[Placement] | None = None) -> list[PartitionMove]:
    """Targets for every partition with a replica outside `keep`; each leaving replica is replaced in place.

    `capacity` is each staying broker's volume in bytes (a broker without one is not checked); `placed` is every
    partition of the cluster (default: `partitions`), whose sizes count against the brokers holding them."""
    racks = racks or {}
    capacity = capacity or {}
    keep_set = set(keep)
    load = _loads(partitions, keep)
    used: Counter[int] = Counter()
    for p in placed if placed is not None else partitions:
        for r in p["replicas"]:
            used[r] += int(p.get("size_bytes") or 0)
    plan: list[PartitionMove] = []
    for p in sorted(partitions, key=lambda p: (p["topic"], p["partition"])):
        replicas = list(p["replicas"])
        if all(r in keep_set for r in replicas):
            continue
        if len(replicas) > len(keep_set):
            raise DrainBlocked(f"{p['topic']}-{p['partition']} has {len(replicas)} replicas but only "
                               f"{len(keep_set)} broker(s) would remain")
        size = int(p.get("size_bytes") or 0)
        fits = [b for b in keep if b not in capacity or used[b] + size <= capacity[b] * DISK_FILL]
        target: list[int] = []
        for r in replicas:
            if r in keep_set and r not in target:
                target.append(r)
                continue
            rest = [x for x in replicas if x in keep_set and x not in target]
            choice = _pick(fits, target + rest, load, racks, avoid)
            if choice is None:
                room = "; ".join(f"broker {b}: {_gib(max(0, capacity[b] - used[b]))} free of {_gib(capacity[b])}"
                                 for b in keep if b in capacity and b not in target + rest)
                raise DrainBlocked(f"{p['topic']}-{p['partition']} ({_gib(size)}) fits on no staying broker's volume "
                                   f"below {DISK_FILL:.0%} ({room}); grow the volumes (spec.storage.size), delete "
                                   "data, or keep more brokers")
            target.append(choice)
            load[choice] += 1
            used[choice] += size
        plan.append({"topic": p["topic"], "partition": p["partition"], "replicas": target})
    return plan


def rebalance_plan(partitions: Sequence[Placement], brokers: Sequence[int],
                   racks: Mapping[int, str | None] | None = None) -> list[PartitionMove]:
    """Fewest single-replica moves that bring every broker within one replica of the others."""
    racks = racks or {}
    load = _loads(partitions, brokers)
    current = {(p["topic"], p["partition"]): list(p["replicas"]) for p in partitions}
    moved: set[tuple[str, int]] = set()
    for _ in range(sum(load.values()) + 1):
        hi = max(brokers, key=lambda b: (load[b], -b))
        lo = min(brokers, key=lambda b: (load[b], b))
        if load[hi] - load[lo] <= 1:
            break
        best = None
        for key in sorted(current):
            replicas = current[key]
            if hi not in replicas or lo in replicas:
                continue
            others = [r for r in replicas if r != hi]
            clash = bool(racks.get(lo)) and racks.get(lo) in {racks.get(r) for r in others}
            rank = (clash, replicas.index(hi) == 0, key not in moved)  # prefer followers, partitions already moving
            if best is None or rank < best[0]:
                best = (rank, key)
        if best is None:
            break
        key = best[1]
        current[key] = [lo if r == hi else r for r in current[key]]
        moved.add(key)
        load[hi] -= 1
        load[lo] += 1
    return [{"topic": t, "partition": p, "replicas": current[(t, p)]} for t, p in sorted(moved)]
