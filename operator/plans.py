"""Partition moves for pod churn: drain brokers before scale-down, spread replicas after scale-up.

Why: a StatefulSet scale-down deletes the highest-numbered pods, and a pod
deleted with replicas on it leaves partitions under-replicated for good (its
volume is kept, but no broker with that id comes back). So the operator first
moves every replica off the brokers that will go, and shrinks the StatefulSet
only once they hold none. After a scale-up the new brokers hold nothing until
replicas move to them. Both plans move as few replicas as possible, keep a
partition's replicas on distinct brokers (and distinct racks where the
brokers allow), and fill the least-loaded broker first, like Kafka's
reassignment tooling and Cruise Control's replica distribution goal.

Rolling restarts (`next_restart`) follow Strimzi's KafkaRoller rule: one
broker pod at a time, the controller last, and only when every partition
that has the broker in its ISR keeps at least `min.insync.replicas` in-sync
replicas without it — so acks=all producers never see NOT_ENOUGH_REPLICAS
because of a restart.

Pure: partitions in (`{"topic", "partition", "replicas"}` as the admin API
describes them), target replica lists out; the caller submits them through
`/admin/v1/partitions/reassign`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["drain_plan", "rebalance_plan", "DrainBlocked", "next_restart", "RestartDecision"]


class DrainBlocked(ValueError):
    """Some partition has more replicas than the brokers that stay."""


def _loads(partitions: Iterable[Mapping[str, Any]], brokers: Iterable[int]) -> Counter:
    load: Counter = Counter({b: 0 for b in brokers})
    for p in partitions:
        for r in p["replicas"]:
            if r in load:
                load[r] += 1
    return load


def _pick(candidates: Iterable[int], taken: Sequence[int], load: Counter, racks: Mapping[int, str | None]) -> int | None:
    used_racks = {racks.get(r) for r in taken if racks.get(r)}
    options = [b for b in candidates if b not in taken]
    if not options:
        return None
    return min(options, key=lambda b: (bool(racks.get(b)) and racks.get(b) in used_racks, load[b], b))


def drain_plan(partitions: Sequence[Mapping[str, Any]], keep: Sequence[int],
               racks: Mapping[int, str | None] | None = None) -> list[dict[str, Any]]:
    """Targets for every partition with a replica outside `keep`; each leaving replica is replaced in place."""
    racks = racks or {}
    keep_set = set(keep)
    load = _loads(partitions, keep)
    plan = []
    for p in sorted(partitions, key=lambda p: (p["topic"], p["partition"])):
        replicas = list(p["replicas"])
        if all(r in keep_set for r in replicas):
            continue
        if len(replicas) > len(keep_set):
            raise DrainBlocked(f"{p['topic']}-{p['partition']} has {len(replicas)} replicas but only "
                               f"{len(keep_set)} broker(s) would remain")
        target: list[int] = []
        for r in replicas:
            if r in keep_set and r not in target:
                target.append(r)
                continue
            rest = [x for x in replicas if x in keep_set and x not in target]
            choice = _pick(keep, target + rest, load, racks)
            assert choice is not None  # len(replicas) <= len(keep)
            target.append(choice)
            load[choice] += 1
        plan.append({"topic": p["topic"], "partition": p["partition"], "replicas": target})
    return plan


def rebalance_plan(partitions: Sequence[Mapping[str, Any]], brokers: Sequence[int],
                   racks: Mapping[int, str | None] | None = None) -> list[dict[str, Any]]:
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


class RestartDecision:
    """`pod` to delete now (None = nothing now), with the reason and message for the Progressing condition."""

    def __init__(self, pod: str | None, reason: str, message: str) -> None:
        self.pod, self.reason, self.message = pod, reason, message


def _ordinal(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def next_restart(pods: Sequence[Mapping[str, Any]], update_revision: str, topics: Sequence[Mapping[str, Any]],
                 controller: int) -> RestartDecision | None:
    """Which outdated broker pod may restart now; None when every pod runs `update_revision`."""
    outdated = [p for p in pods if (p["metadata"].get("labels") or {}).get("controller-revision-hash") != update_revision]
    if not update_revision or not outdated:
        return None
    for p in pods:
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (p.get("status") or {}).get("conditions") or [])
        if p["metadata"].get("deletionTimestamp") or not ready:
            return RestartDecision(None, "RestartWaiting", f"{len(outdated)} broker pod(s) to restart; waiting for "
                                   f"{p['metadata']['name']} to be Ready before the next")
    order = sorted(outdated, key=lambda p: (_ordinal(p["metadata"]["name"]) == controller,
                                            -_ordinal(p["metadata"]["name"])))
    for pod in order:
        broker = _ordinal(pod["metadata"]["name"])
        at_risk = []
        for t in topics:
            raw = ((t.get("configs") or {}).get("min.insync.replicas") or {}).get("value", "1")
            min_isr = int(raw) if str(raw).isdigit() else 1
            for part in t.get("partitions", []):
                isr = part.get("isr", [])
                if broker in isr and len(isr) - 1 < min_isr:
                    at_risk.append(f"{t['name']}-{part['partition']}")
        if not at_risk:
            return RestartDecision(pod["metadata"]["name"], "RollingRestart",
                                   f"restarting {pod['metadata']['name']} ({len(outdated)} pod(s) to go, one at a time)")
    return RestartDecision(None, "RestartWaiting",
                           f"{len(outdated)} broker pod(s) to restart, but restarting any now would drop a partition "
                           f"below min.insync.replicas (e.g. {', '.join(at_risk[:5])}); waiting for the ISR to fill")
