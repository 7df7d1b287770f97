"""Status of Cluster, Topic and ConsumerGroup resources, computed from what was observed.

Why: status is what users read (`kubectl get kelp`, `kubectl describe`), so
it must never lie: every value here comes from an observation passed in
(the StatefulSet, the broker admin API), conditions keep their
`lastTransitionTime` unless their status really changes, and every
condition carries the `observedGeneration` it was computed for. Shapes
follow the CRDs' status schemas exactly (structural pruning would silently
drop anything else).

Status is written as a JSON merge patch, which keeps every field it does
not mention: a value observed on an earlier pass would stay (and
`kubectl get` would keep showing it) on a pass that could not observe it.
So each kind's observed fields are always in the patch — `None`, which
deletes them, when this pass did not see them (`cluster_unobserved()` and
the like). The shapes are the CRDs' (`objects_kelp.py`).

Pure: no Kubernetes client, no network; time comes in as an argument.
"""

from __future__ import annotations

import calendar
import time
from typing import Collection, Iterable, Sequence

from .admin_types import ClusterView, GroupDescription, TopicDescription
from .objects_kelp import (
    ClusterStatus,
    Condition,
    ConditionStatus,
    ConsumerGroupStatus,
    MemberStatus,
    OffsetStatus,
    TopicStatus,
)

__all__ = ["condition", "merge_conditions", "rfc3339", "rfc3339_ms", "cluster_status", "topic_status",
           "group_status", "partition_counts", "leader_balance", "Observed", "cluster_unobserved", "topic_unobserved",
           "group_unobserved"]

RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


# What each kind's status reports from the brokers' answers (printer columns among them), as a merge
# patch removes them: always in the patch, so a value this pass did not observe does not linger.
def cluster_unobserved() -> ClusterStatus:
    return {"topics": None, "unmanagedTopics": None, "underReplicatedPartitions": None, "offlinePartitions": None,
            "leaderSkew": None, "preferredLeaderImbalance": None}


def topic_unobserved() -> TopicStatus:
    return {"partitions": None, "replicationFactor": None, "partitionStates": None}


def group_unobserved() -> ConsumerGroupStatus:
    return {"state": None, "members": None, "memberList": None, "offsets": None, "totalLag": None}


def rfc3339(ms: int) -> str:
    """Wall-clock milliseconds as the API server writes times (whole seconds, UTC)."""
    return time.strftime(RFC3339, time.gmtime(ms // 1000))


def rfc3339_ms(text: str) -> int:
    """An API server time (`2026-11-01T00:00:00Z`) in wall-clock milliseconds."""
    return calendar.timegm(time.strptime(text, RFC3339)) * 1000


def condition(type_: str, ok: bool | None, reason: str, message: str) -> Condition:
    status: ConditionStatus = "Unknown" if ok is None else ("True" if ok else "False")
    return {"type": type_, "status": status, "reason": reason, "message": message}


def merge_conditions(old: Sequence[Condition] | None, new: Iterable[Condition], *,
                     generation: int, now: str) -> list[Condition]:
    """New conditions replace old ones of the same type; lastTransitionTime moves only when status does."""
    previous = {c.get("type"): c for c in old or []}
    out = {t: c.copy() for t, c in previous.items() if t}
    for c in new:
        before = previous.get(c["type"])
        changed = before is None or before.get("status") != c["status"]
        out[c["type"]] = {**c, "observedGeneration": generation,
                          "lastTransitionTime": (now if changed or before is None
                                                 else before.get("lastTransitionTime", now))}
    return [out[t] for t in sorted(out)]


class Observed:
    """What one look at a cluster saw: brokers' admin answers, or why they could not be asked."""

    def __init__(self, *, cluster: ClusterView | None = None, topics: Sequence[TopicDescription] = (),
                 error: str | None = None) -> None:
        self.cluster = cluster
        self.topics = list(topics)
        self.error = error


def partition_counts(topics: Sequence[TopicDescription], live: set[int]) -> tuple[int, int]:
    """(under-replicated, offline) partitions over described topics."""
    under = offline = 0
    for t in topics:
        for p in t.get("partitions", []):
            if p.get("leader", -1) < 0 or p["leader"] not in live:
                offline += 1
            elif len(p.get("isr", [])) < len(p.get("replicas", [])):
                under += 1
    return under, offline


def leader_balance(topics: Sequence[TopicDescription], live: Collection[int]) -> tuple[int, int]:
    """(leader skew, preferred-leader imbalance) over described topics.

    Skew: most partitions led by one live broker minus fewest (0 when
    leadership is even). Imbalance: partitions led by a broker other than
    their preferred (first) replica — Kafka's PreferredReplicaImbalanceCount;
    a preferred-leader election brings it back to 0 where the preferred
    replicas are in sync.
    """
    leaders = {b: 0 for b in live}
    imbalance = 0
    for t in topics:
        for p in t.get("partitions", []):
            leader, replicas = p.get("leader", -1), p.get("replicas") or []
            if leader in leaders:
                leaders[leader] += 1
            if leader >= 0 and replicas and leader != replicas[0]:
                imbalance += 1
    skew = max(leaders.values()) - min(leaders.values()) if leaders else 0
    return skew, imbalance


def cluster_status(*, desired: int, ready_brokers: Collection[int], observed: Observed, managed_topics: set[str],
                   bootstrap: str, generation: int, sts_generation_current: bool,
                   spec_error: str | None = None) -> tuple[ClusterStatus, list[Condition]]:
    """(status fields, conditions) of a Cluster.

    `ready_brokers` are the ordinals of the broker pods that are Ready; only
    those below `desired` count (a broker being drained away is not part of
    the cluster the user asked for). Ready is True only when every one of
    brokers 0..desired-1 has a Ready pod *and* is registered with the
    controller the brokers report — a count that happens to match is not
    enough (a dead broker 1 and a leaving broker 2 make "2 of 2").
    """
    wanted = set(range(desired))
    ready_pods = len(wanted & set(ready_brokers))
    status: ClusterStatus = {"brokers": ready_pods, "readyBrokers": f"{ready_pods}/{desired}",
                             "bootstrap": bootstrap, "observedGeneration": generation, "controller": -1,
                             **cluster_unobserved()}
    conds: list[Condition] = []
    if spec_error:
        conds.append(condition("Ready", False, "InvalidSpec", spec_error))
        conds.append(condition("Progressing", False, "InvalidSpec", "fix the spec; nothing was changed"))
        # Not observed while the spec is invalid: an old Degraded=False must not stay claiming health.
        conds.append(condition("Degraded", None, "InvalidSpec", "partition health is not observed while the spec "
                               "is invalid"))
        return status, conds
    live: set[int] = set()
    controller = -1
    offline = under = 0
    if observed.cluster is not None:
        live = {int(b["id"]) for b in observed.cluster.get("brokers", [])}
        controller = status["controller"] = int(observed.cluster.get("controller", -1))
        user_topics = [t for t in observed.topics if not t.get("internal")]
        status["topics"] = len(user_topics)
        status["unmanagedTopics"] = sorted(t["name"] for t in user_topics if t["name"] not in managed_topics)
        under, offline = partition_counts(observed.topics, live)
        status["underReplicatedPartitions"], status["offlinePartitions"] = under, offline
        status["leaderSkew"], status["preferredLeaderImbalance"] = leader_balance(observed.topics, live)
    progressing = ready_pods < desired or not sts_generation_current
    conds.append(condition("Progressing", progressing, "RollingOut" if progressing else "Reconciled",
                           f"{ready_pods} of {desired} broker pods ready" if progressing
                           else f"all {desired} broker pods ready and up to date"))
    if observed.cluster is None:
        ready, reason = False, "BrokersUnreachable"
        message = f"no broker answered the admin API: {observed.error or 'no ready broker pod'}"
    elif controller < 0:
        ready, reason, message = False, "NoController", "the brokers have not elected a controller yet"
    elif wanted - live:
        ready, reason = False, "BrokersMissing"
        message = (f"{len(wanted & live)} of {desired} brokers are registered with the controller; missing "
                   f"broker(s) {sorted(wanted - live)} (registered: {sorted(live)})")
    elif ready_pods < desired:
        ready, reason = False, "PodsNotReady"
        message = (f"{ready_pods} of {desired} broker pods ready; not ready: broker(s) "
                   f"{sorted(wanted - set(ready_brokers))}")
    else:
        ready, reason = True, "ClusterReady"
        message = f"{desired} brokers, controller broker {controller}, bootstrap {bootstrap}"
    conds.append(condition("Ready", ready, reason, message))
    if observed.cluster is None:
        # Partition health was not observed this pass: say so, never "AllInSync" from nothing.
        conds.append(condition("Degraded", None, "BrokersUnreachable",
                               f"partition health unknown: no broker answered the admin API: "
                               f"{observed.error or 'no ready broker pod'}"))
        return status, conds
    degraded = bool(offline or under)
    conds.append(condition(
        "Degraded", degraded, "PartitionsAtRisk" if degraded else "AllInSync",
        f"{offline} offline and {under} under-replicated partition(s)" if degraded
        else "every partition has its full ISR"))
    return status, conds


def topic_status(described: TopicDescription) -> TopicStatus:
    return {
        "topicName": described["name"],
        "partitions": described["partitions_count"],
        "replicationFactor": described["replication_factor"],
        "partitionStates": [{"partition": p["partition"], "leader": p["leader"], "replicas": list(p["replicas"]),
                             "isr": list(p["isr"])} for p in described["partitions"]],
    }


def group_status(described: GroupDescription | None) -> ConsumerGroupStatus:
    """A ConsumerGroup's status from the coordinator's describe; None = the group does not exist (yet)."""
    if described is None:
        return {"state": "Dead", "members": 0, "memberList": [], "offsets": [], "totalLag": 0}
    offsets: list[OffsetStatus] = []
    for o in described.get("offsets", []):
        committed, log_end, lag = o.get("committed_offset"), o.get("log_end_offset"), o.get("lag")
        entry: OffsetStatus = {"topic": o["topic"], "partition": o["partition"],
                               "committedOffset": -1 if committed is None else committed,
                               "logEndOffset": -1 if log_end is None else log_end}
        if lag is not None:
            entry["lag"] = lag
        offsets.append(entry)
    members: list[MemberStatus] = [
        {"memberId": m["member_id"], "clientId": m.get("client_id") or "", "host": m.get("client_host") or "",
         "assignments": [{"topic": a["topic"], "partitions": list(a["partitions"])} for a in m.get("assignment", [])]}
        for m in described.get("members", [])]
    return {"state": described.get("state") or "Unknown", "members": len(members), "memberList": members,
            "offsets": offsets, "totalLag": int(described.get("total_lag") or 0)}
