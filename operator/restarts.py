"""Rolling restarts: which broker pod restarts next, which waits, and why (Strimzi's KafkaRoller rule).

Why: the StatefulSet uses `updateStrategy: OnDelete`, so the operator
decides when each outdated broker pod restarts. The rule, in order:

1. never while a pod is terminating (one restart at a time);
2. pods that are not Ready restart first, without any availability check:
   a broker that does not serve cannot lose availability by restarting,
   and waiting for it to become Ready on its old revision may never end
   (a crash-looping pod whose fix is the new config);
3. wait while a pod already on the new revision is not Ready yet;
4. then Ready pods, highest ordinal first and the controller last, each
   only if no partition whose ISR holds the broker would drop from at
   least `min.insync.replicas` to below it. Partitions that cannot stay
   available through any restart do not block (Kafka's and Strimzi's
   rule): replication factor <= min.insync.replicas ("under-replicated by
   design"), partitions already below min.insync.replicas, and offline
   ones — the restart goes ahead and the condition says which lose acks=all
   writes while it runs.

The annotation `kelp.dev/restart-ignore-min-insync: "true"` on the Cluster
skips step 4's check (still one pod at a time, still waiting for Ready).
A pod annotated `kelp.dev/manual-rolling-update: "true"` counts as
outdated whatever its revision (the Cluster annotation of that name marks
every pod; see reconcile).

Pure: pods and described topics in (the admin API's shapes), a decision out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .admin_types import TopicDescription
from .objects import Pod

__all__ = ["RestartDecision", "next_restart", "restart_blockers", "pod_ready", "ordinal", "is_outdated",
           "min_insync_of", "IGNORE_MIN_INSYNC", "MANUAL_ROLL"]

IGNORE_MIN_INSYNC = "kelp.dev/restart-ignore-min-insync"
MANUAL_ROLL = "kelp.dev/manual-rolling-update"
MAX_LISTED = 8


@dataclass(frozen=True)
class RestartDecision:
    """`pod` to delete now (None = nothing now), with the reason and message for the Progressing condition."""

    pod: str | None
    reason: str
    message: str
    outdated: tuple[str, ...] = field(default=())


def pod_ready(pod: Pod) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def ordinal(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def is_outdated(pod: Pod, update_revision: str) -> bool:
    meta = pod.get("metadata") or {}
    if (meta.get("annotations") or {}).get(MANUAL_ROLL) == "true":
        return True
    return bool(update_revision) and (meta.get("labels") or {}).get("controller-revision-hash") != update_revision


def min_insync_of(topic: TopicDescription) -> int:
    config = (topic.get("configs") or {}).get("min.insync.replicas")
    raw = str(config.get("value", "1") if config else "1")
    return int(raw) if raw.isdigit() else 1


@dataclass
class _Impact:
    blocking: list[str] = field(default_factory=list)
    by_design: list[str] = field(default_factory=list)
    already_under: list[str] = field(default_factory=list)


def restart_blockers(broker: int, topics: Sequence[TopicDescription]) -> _Impact:
    """What restarting `broker` does to each partition whose ISR holds it."""
    out = _Impact()
    for t in topics:
        min_isr = min_insync_of(t)
        for part in t.get("partitions", []):
            isr = list(part.get("isr", []))
            if broker not in isr:
                continue
            replicas = list(part.get("replicas", []))
            key = f"{t['name']}-{part['partition']}"
            if len(replicas) <= min_isr:
                out.by_design.append(f"{key} (replication factor {len(replicas)} <= min.insync.replicas {min_isr})")
            elif len(isr) < min_isr or part.get("leader", -1) < 0:
                out.already_under.append(key)
            elif len(isr) - 1 < min_isr:
                out.blocking.append(f"{key} (in sync {isr} of {replicas}, min.insync.replicas {min_isr}): "
                                    f"restarting broker {broker} would leave {len(isr) - 1} in sync")
    return out


def _listed(items: Sequence[str]) -> str:
    more = f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return ", ".join(items[:MAX_LISTED]) + more


def _by_ordinal_down(pod: Pod) -> int:
    return -ordinal(pod["metadata"]["name"])


def next_restart(pods: Sequence[Pod], update_revision: str,
                 topics: Sequence[TopicDescription] | None, controller: int, *,
                 ignore_min_insync: bool = False, unobserved: str = "") -> RestartDecision | None:
    """Which outdated broker pod may restart now; None when none is outdated.

    `topics` is the brokers' description of every topic, or None when no
    broker answered (`unobserved` says why): then only unready pods restart.
    """
    outdated = [p for p in pods if is_outdated(p, update_revision)]
    if not outdated:
        return None
    names = tuple(sorted(p["metadata"]["name"] for p in outdated))
    todo = f"{len(outdated)} broker pod(s) to restart"
    terminating = sorted(p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp"))
    if terminating:
        return RestartDecision(None, "RestartWaiting", f"{todo}; waiting for {', '.join(terminating)} to finish "
                               "terminating before the next", names)
    unready = sorted((p for p in outdated if not pod_ready(p)), key=_by_ordinal_down)
    if unready:
        name = unready[0]["metadata"]["name"]
        return RestartDecision(name, "RestartingUnready",
                               f"restarting {name} first: it is not Ready, so restarting it cannot reduce "
                               f"availability ({todo})", names)
    starting = sorted(p["metadata"]["name"] for p in pods if not is_outdated(p, update_revision) and not pod_ready(p))
    if starting:
        return RestartDecision(None, "RestartWaiting", f"{todo}; waiting for {', '.join(starting)} (on the new "
                               "revision) to be Ready before the next", names)
    if topics is None:
        return RestartDecision(None, "RestartWaiting", f"{todo} once the brokers answer, so that no partition drops "
                               f"below min.insync.replicas: {unobserved or 'no broker answered'}", names)
    order = sorted(outdated, key=lambda p: (ordinal(p["metadata"]["name"]) == controller,
                                            -ordinal(p["metadata"]["name"])))
    blocked: list[str] = []
    for pod in order:
        name = pod["metadata"]["name"]
        impact = restart_blockers(ordinal(name), topics)
        if impact.blocking and not ignore_min_insync:
            blocked.extend(impact.blocking)
            continue
        message = f"restarting {name} ({todo}, one at a time)"
        if impact.blocking:
            message += (f"; min.insync.replicas not checked ({IGNORE_MIN_INSYNC}): acks=all writes to "
                        f"{_listed(impact.blocking)} fail until it is back")
        if impact.by_design:
            message += (f"; acks=all writes to {_listed(impact.by_design)} fail until it is back, "
                        "as with any restart")
        if impact.already_under:
            message += f"; {_listed(impact.already_under)} already below min.insync.replicas or offline"
        return RestartDecision(name, "RollingRestart", message, names)
    return RestartDecision(None, "RestartBlocked",
                           f"{todo}, but restarting any now would take a partition below min.insync.replicas: "
                           f"{_listed(blocked)}; waiting for their replicas to catch up (annotate the Cluster "
                           f"{IGNORE_MIN_INSYNC}=true to restart anyway)", names)
