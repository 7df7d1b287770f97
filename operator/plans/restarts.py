"""Rolling restarts: which broker pod restarts next, which waits, and why (Strimzi's KafkaRoller rule).

Why: the StatefulSet uses `updateStrategy: OnDelete`, so the operator
decides when each outdated broker pod restarts. The rule, in order:

1. never while a pod is terminating, or missing (deleted, not created again
   yet): one broker down at a time;
2. wait while a pod already on the new revision is not Ready yet (one that
   stays so past the deadline stalls the roll: `RestartStalled`, a Warning);
3. an outdated pod that is not Ready is waited for while it may still become
   Ready (a readiness blip must not become a second broker down); once it is
   *stuck* — its container in CrashLoopBackOff or unable to get its image,
   the pod unschedulable, or not Ready for longer than the deadline
   (`spec.restart.podReadyTimeoutSeconds`) — it restarts without the
   availability check: a broker that does not serve cannot lose
   availability, and the new revision may be its fix;
4. then Ready pods, highest ordinal first and the controller last, each
   only if no partition whose ISR holds the broker would lose availability:
   a partition whose last in-sync replica it is (restarting it takes the
   partition offline), one already below `min.insync.replicas`, and one
   that would drop from at least `min.insync.replicas` to below it all
   block. Partitions that cannot stay available through any restart do not
   block (Kafka's and Strimzi's rule): replication factor 1, replication
   factor <= min.insync.replicas with another replica in sync ("under-
   replicated by design"), and offline ones — the restart goes ahead and
   the condition says which lose acks=all writes while it runs.

The annotation `kelp.dev/restart-ignore-min-insync: "true"` on the Cluster
skips step 4's check for one roll (still one pod at a time, still waiting for
Ready); the operator removes it once that roll is done (`rolling.py`).
A pod annotated `kelp.dev/manual-rolling-update: "true"` counts as
outdated whatever its revision (the Cluster annotation of that name marks
every pod; see reconcile).

Pure: pods, described topics (the admin API's shapes) and the time in, a decision out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..model.admin_types import TopicDescription
from ..model.objects import Pod
from ..model.status import rfc3339_ms

__all__ = ["RestartDecision", "next_restart", "restart_blockers", "pod_ready", "ordinal", "is_outdated",
           "min_insync_of", "stuck", "IGNORE_MIN_INSYNC", "MANUAL_ROLL", "STUCK_WAITING"]

IGNORE_MIN_INSYNC = "kelp.dev/restart-ignore-min-insync"
MANUAL_ROLL = "kelp.dev/manual-rolling-update"
MAX_LISTED = 8
# Container waiting reasons that do not end by waiting (Strimzi's "stuck" pod): a restart from the new revision may.
STUCK_WAITING = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                           "CreateContainerConfigError", "CreateContainerError", "RunContainerError"})


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


def unready_for_s(pod: Pod, now_ms: int | None) -> int | None:
    """Whole seconds since the pod's Ready condition became False (or since it was created, before it has one);
    None when the time is unknown."""
    if now_ms is None:
        return None
    status = pod.get("status") or {}
    since = next((c.get("lastTransitionTime") for c in status.get("conditions") or [] if c.get("type") == "Ready"),
                 None) or pod["metadata"].get("creationTimestamp")
    if not since:
        return None
    try:
        return max(0, (now_ms - rfc3339_ms(since)) // 1000)
    except ValueError:
        return None


def stuck(pod: Pod, now_ms: int | None, deadline_s: int) -> str | None:
    """Why a pod that is not Ready will not become Ready by waiting (None: it may still): its container waits for
    something that does not come by itself, it cannot be scheduled, or it has not been Ready for `deadline_s`."""
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_WAITING:
            return f"its container {c.get('name', '?')} is in {waiting['reason']}"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return f"it cannot be scheduled ({cond.get('message', 'Unschedulable')})"
    waited = unready_for_s(pod, now_ms)
    if waited is not None and waited >= deadline_s:
        return f"it has not been Ready for {waited}s (spec.restart.podReadyTimeoutSeconds is {deadline_s})"
    return None


def _unready_note(pod: Pod, now_ms: int | None) -> str:
    waited = unready_for_s(pod, now_ms)
    return pod["metadata"]["name"] + (f" (not Ready for {waited}s)" if waited is not None else "")


def min_insync_of(topic: TopicDescription) -> int:
    config = (topic.get("configs") or {}).get("min.insync.replicas")
    raw = str(config.get("value", "1") if config else "1")
    return int(raw) if raw.isdigit() else 1


@dataclass
class _Impact:
    blocking: list[str] = field(default_factory=list)
    by_design: list[str] = field(default_factory=list)
    offline: list[str] = field(default_factory=list)


def restart_blockers(broker: int, topics: Sequence[TopicDescription]) -> _Impact:
    """What restarting `broker` does to each partition whose ISR holds it (KafkaRoller's availability check)."""
    out = _Impact()
    for t in topics:
        min_isr = min_insync_of(t)
        for part in t.get("partitions", []):
            isr = list(part.get("isr", []))
            if broker not in isr:
                continue
            replicas = list(part.get("replicas", []))
            key = f"{t['name']}-{part['partition']}"
            where = f"{key} (in sync {isr} of {replicas}, min.insync.replicas {min_isr})"
            if part.get("leader", -1) < 0:
                out.offline.append(key)
            elif len(replicas) == 1:
                out.by_design.append(f"{key} (replication factor 1)")
            elif isr == [broker]:
                out.blocking.append(f"{where}: broker {broker} is its last in-sync replica; restarting it would "
                                    "take the partition offline")
            elif len(replicas) <= min_isr:
                out.by_design.append(f"{key} (replication factor {len(replicas)} <= min.insync.replicas {min_isr})")
            elif len(isr) < min_isr:
                out.blocking.append(f"{where}: already below min.insync.replicas; restarting broker {broker} would "
                                    f"leave {len(isr) - 1} in sync")
            elif len(isr) - 1 < min_isr:
                out.blocking.append(f"{where}: restarting broker {broker} would leave {len(isr) - 1} in sync")
    return out


def _listed(items: Sequence[str]) -> str:
    more = f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return ", ".join(items[:MAX_LISTED]) + more


def _by_ordinal_down(pod: Pod) -> int:
    return -ordinal(pod["metadata"]["name"])


def next_restart(pods: Sequence[Pod], update_revision: str,
                 topics: Sequence[TopicDescription] | None, controller: int, *,
                 ignore_min_insync: bool = False, unobserved: str = "", now_ms: int | None = None,
                 stuck_after_s: int = 300, replicas: int | None = None) -> RestartDecision | None:
    """Which outdated broker pod may restart now; None when none is outdated.

    `topics` is the brokers' description of every topic, or None when no
    broker answered (`unobserved` says why): then only stuck pods restart.
    `now_ms` (wall-clock milliseconds; None: unknown) and `stuck_after_s` tell
    a pod that is not Ready yet from one that is stuck; `replicas` is the
    StatefulSet's size (pods 0..replicas-1 are expected; None: do not check).
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
    present = {ordinal(p["metadata"]["name"]) for p in pods}
    prefix = outdated[0]["metadata"]["name"].rsplit("-", 1)[0]
    missing = [f"{prefix}-{n}" for n in range(replicas or 0) if n not in present]
    if missing:
        return RestartDecision(None, "RestartWaiting", f"{todo}; waiting for {', '.join(missing)} to be created "
                               "again by the StatefulSet before the next", names)
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    starting = sorted((p for p in live if not is_outdated(p, update_revision) and not pod_ready(p)),
                      key=lambda p: ordinal(p["metadata"]["name"]))
    if starting:
        stalled = [(p, why) for p in starting if (why := stuck(p, now_ms, stuck_after_s))]
        if stalled:
            listed = "; ".join(f"{_unready_note(p, now_ms)} on the new revision: {why}" for p, why in stalled)
            return RestartDecision(None, "RestartStalled",
                                   f"{todo}, but the roll stopped: {listed}. Look at its events and logs "
                                   "(kubectl describe pod, kubectl logs --previous); fix the Cluster spec to roll "
                                   "again — the other brokers keep their revision meanwhile", names)
        return RestartDecision(None, "RestartWaiting", f"{todo}; waiting for "
                               f"{', '.join(_unready_note(p, now_ms) for p in starting)} (on the new revision) to be "
                               "Ready before the next", names)
    unready = sorted((p for p in outdated if not pod_ready(p)), key=_by_ordinal_down)
    for p in unready:
        why = stuck(p, now_ms, stuck_after_s)
        if why is not None:
            name = p["metadata"]["name"]
            return RestartDecision(name, "RestartingUnready",
                                   f"restarting {name} first: {why}, so restarting it cannot reduce availability "
                                   f"and the new revision may be its fix ({todo})", names)
    if unready:
        return RestartDecision(None, "RestartWaiting", f"{todo}; waiting for "
                               f"{', '.join(_unready_note(p, now_ms) for p in unready)} to be Ready again before any "
                               f"restart: a pod not Ready for {stuck_after_s}s counts as stuck and is restarted "
                               "then", names)
    if topics is None:
        return RestartDecision(None, "RestartWaiting", f"{todo} once the brokers answer, so that no partition loses "
                               f"availability: {unobserved or 'no broker answered'}", names)
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
            message += (f"; min.insync.replicas not checked ({IGNORE_MIN_INSYNC}): {_listed(impact.blocking)} "
                        "until it is back")
        if impact.by_design:
            message += (f"; acks=all writes to {_listed(impact.by_design)} fail until it is back, "
                        "as with any restart")
        if impact.offline:
            message += f"; {_listed(impact.offline)} offline (no leader) already"
        return RestartDecision(name, "RollingRestart", message, names)
    return RestartDecision(None, "RestartBlocked",
                           f"{todo}, but restarting any now would take a partition offline or below "
                           f"min.insync.replicas: {_listed(blocked)}; waiting for their replicas to catch up "
                           f"(annotate the Cluster {IGNORE_MIN_INSYNC}=true to restart anyway, for this roll)", names)
