"""What one reconciliation of a Cluster, Topic or ConsumerGroup does, apart from kopf.

Why: the handlers module only wires kopf events to these functions and
writes what they return into status; the decisions live here, where a test
can drive them with a fake API client and a fake broker admin. Each
function returns `(status fields, conditions)`; it never raises for a
condition a user can act on (a missing Cluster, a duplicate Topic,
unreachable brokers) — that becomes a condition with a reason. Only
unexpected errors propagate, and kopf retries those with backoff.

Topics are one-way: the resource is the desired state. Topics a client
created are never touched; a Topic resource naming a topic another, older
resource already declares is refused with a condition instead of fighting
over it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Mapping
from urllib.parse import quote

from .brokers import AdminError, BrokerAdmin
from .builders import cluster_children, selector_for
from .kube import KubeClient
from .plans import DrainBlocked, drain_plan, next_restart, rebalance_plan
from .rack import rack_condition
from .spec import ClusterSpec, SpecError
from .status import Observed, cluster_status, condition, group_status, topic_status

__all__ = ["reconcile_cluster", "reconcile_topic", "reconcile_group", "delete_topic", "topic_name_of",
           "AdminFactory", "NON_EMPTY_GROUP", "GROUP_ID_NOT_FOUND"]

AdminFactory = Callable[[ClusterSpec], Awaitable[BrokerAdmin]]
Result = tuple[dict[str, Any], list[dict[str, Any]]]

UNKNOWN_TOPIC = 3
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
DESCRIBE_CONCURRENCY = 8


def topic_name_of(body: Mapping[str, Any]) -> str:
    return (body.get("spec") or {}).get("topicName") or body["metadata"]["name"]


def _age_key(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body["metadata"]
    return (meta.get("creationTimestamp") or "", meta["name"])


async def _observe(admin: BrokerAdmin) -> Observed:
    try:
        view = await admin.get("/admin/v1/cluster")
        listed = (await admin.get("/admin/v1/topics"))["topics"]
        sem = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

        async def describe(name: str) -> dict | None:
            async with sem:
                try:
                    return await admin.get(f"/admin/v1/topics/{quote(name, safe='')}")
                except AdminError as exc:
                    if exc.status == 404:
                        return None  # deleted between the list and the describe
                    raise

        described = await asyncio.gather(*(describe(t["name"]) for t in listed))
        topics = [{**d, "internal": t.get("internal", False)} for t, d in zip(listed, described) if d]
        return Observed(cluster=view, topics=topics)
    except AdminError as exc:
        return Observed(error=exc.message)


REBALANCE_ANNOTATION = "kelp.dev/rebalance"


def _partitions(observed: Observed) -> list[dict[str, Any]]:
    return [{"topic": t["name"], "partition": p["partition"], "replicas": list(p["replicas"]),
             "moving": bool(p.get("adding") or p.get("removing"))}
            for t in observed.topics for p in t.get("partitions", [])]


def _racks(observed: Observed) -> dict[int, str | None]:
    return {int(b["id"]): b.get("rack") for b in (observed.cluster or {}).get("brokers", [])}


async def _submit(admin: BrokerAdmin, plan: list[dict[str, Any]]) -> None:
    if plan:
        await admin.request("POST", "/admin/v1/partitions/reassign", {"partitions": plan})


async def _drain(spec: ClusterSpec, current: int, observed: Observed,
                 admin: BrokerAdmin | None) -> tuple[int, dict[str, Any] | None]:
    """(replicas to apply, Progressing condition) while scaling down from `current` brokers."""
    leaving = list(range(spec.brokers, current))
    if admin is None or observed.cluster is None:
        return current, condition("Progressing", True, "DrainWaiting",
                                  f"scale-down to {spec.brokers} waits for the brokers to answer, so that broker(s) "
                                  f"{leaving} can be drained first: {observed.error or 'no ready broker'}")
    parts = _partitions(observed)
    holding = [p for p in parts if set(p["replicas"]) & set(leaving)]
    if not holding:
        return spec.brokers, None
    try:
        plan = drain_plan([p for p in holding if not p["moving"]], keep=list(range(spec.brokers)),
                          racks=_racks(observed))
    except DrainBlocked as exc:
        return current, condition("Progressing", False, "ScaleDownBlocked",
                                  f"cannot scale down to {spec.brokers} broker(s): {exc}; lower the topic's "
                                  "replication factor or keep more brokers")
    await _submit(admin, plan)
    return current, condition("Progressing", True, "Draining",
                              f"moving replicas of {len(holding)} partition(s) off broker(s) {leaving} before their "
                              f"pods are removed ({len(plan)} reassignment(s) submitted now)")


async def _rebalance(body: Mapping[str, Any], spec: ClusterSpec, observed: Observed, admin: BrokerAdmin,
                     kube: KubeClient) -> dict[str, Any] | None:
    """After a scale-up, once every broker is registered: spread replicas onto the new brokers, once."""
    live = set(_racks(observed))
    if not set(range(spec.brokers)) <= live:
        return condition("Progressing", True, "RebalanceWaiting",
                         f"replicas move to the new brokers once all {spec.brokers} are registered ({sorted(live)})")
    parts = _partitions(observed)
    if any(p["moving"] for p in parts):
        return condition("Progressing", True, "Rebalancing", "partition reassignments are in progress")
    plan = rebalance_plan(parts, list(range(spec.brokers)), racks=_racks(observed))
    await _submit(admin, plan)
    meta = body["metadata"]
    await kube.merge_patch("Cluster", meta["namespace"], meta["name"],
                           {"metadata": {"annotations": {REBALANCE_ANNOTATION: None}}})
    if plan:
        return condition("Progressing", True, "Rebalancing",
                         f"moving {len(plan)} partition replica(s) onto the new brokers")
    return None


async def _roll(spec: ClusterSpec, update_revision: str, observed: Observed, kube: KubeClient) -> dict[str, Any] | None:
    """Restart the next outdated broker pod if no partition would drop below min.insync.replicas."""
    pods = await kube.list("Pod", spec.namespace, labels=selector_for(spec))
    if observed.cluster is None:
        outdated = [p for p in pods
                    if (p["metadata"].get("labels") or {}).get("controller-revision-hash") != update_revision]
        if not outdated:
            return None
        return condition("Progressing", True, "RestartWaiting",
                         f"{len(outdated)} broker pod(s) to restart once the brokers answer: {observed.error}")
    decision = next_restart(pods, update_revision, observed.topics, int(observed.cluster.get("controller", -1)))
    if decision is None:
        return None
    if decision.pod is not None:
        await kube.delete("Pod", spec.namespace, decision.pod)
    return condition("Progressing", True, decision.reason, decision.message)


async def reconcile_cluster(body: Mapping[str, Any], kube: KubeClient, admin_for: AdminFactory) -> Result:
    """Apply every child (server-side apply: unchanged ones are no-ops), then observe the brokers.

    Scaling: a scale-down keeps the StatefulSet at its size until no replica
    is left on the brokers that will go (the operator reassigns them first);
    a scale-up marks the Cluster, and once the new brokers have registered
    the operator moves replicas onto them (once: later imbalance, or moves a
    user made by hand, are left alone).
    """
    meta = body["metadata"]
    generation = int(meta.get("generation") or 0)
    desired = int((body.get("spec") or {}).get("brokers", 3))
    try:
        spec = ClusterSpec.from_resource(body)
    except SpecError as exc:
        return cluster_status(desired=desired, ready_pods=0, observed=Observed(), managed_topics=set(),
                              bootstrap="", generation=generation, sts_generation_current=False,
                              spec_error=str(exc))
    before = await kube.get("StatefulSet", spec.namespace, spec.name)
    current = int((before or {}).get("spec", {}).get("replicas") or 0)

    async def observe(sts: Mapping[str, Any] | None) -> tuple[Observed, BrokerAdmin | None]:
        if not int(((sts or {}).get("status") or {}).get("readyReplicas") or 0):
            return Observed(error="no broker pod is Ready yet"), None
        admin = await admin_for(spec)
        if not admin.urls:
            return Observed(error="no ready broker pod has an IP yet"), None
        return await _observe(admin), admin

    note = None
    replicas = spec.brokers
    if before is not None and spec.brokers < current:
        observed, admin = await observe(before)
        replicas, note = await _drain(spec, current, observed, admin)
    elif before is not None and spec.brokers > current and not (meta.get("annotations") or {}).get(REBALANCE_ANNOTATION):
        await kube.merge_patch("Cluster", spec.namespace, spec.name,
                               {"metadata": {"annotations": {REBALANCE_ANNOTATION: f"{current}->{spec.brokers}"}}})
        meta = {**meta, "annotations": {**(meta.get("annotations") or {}), REBALANCE_ANNOTATION: "pending"}}
    for manifest in cluster_children(spec, replicas=replicas):
        await kube.apply(manifest)
    sts = await kube.get("StatefulSet", spec.namespace, spec.name) or {}
    sts_status = sts.get("status") or {}
    ready = int(sts_status.get("readyReplicas") or 0)
    current_gen = (int(sts_status.get("observedGeneration") or 0) >= int(sts.get("metadata", {}).get("generation") or 0)
                   and int(sts_status.get("updatedReplicas") or 0) >= spec.brokers)
    observed, admin = await observe(sts)
    if note is None and admin is not None and observed.cluster is not None \
            and (meta.get("annotations") or {}).get(REBALANCE_ANNOTATION):
        note = await _rebalance({**body, "metadata": meta}, spec, observed, admin, kube)
    update_revision = sts_status.get("updateRevision") or ""
    if note is None and update_revision:
        note = await _roll(spec, update_revision, observed, kube)
    managed = {topic_name_of(t) for t in await kube.list("Topic", spec.namespace)
               if (t.get("spec") or {}).get("cluster") == spec.name}
    status, conds = cluster_status(desired=spec.brokers, ready_pods=min(ready, spec.brokers), observed=observed,
                                   managed_topics=managed, bootstrap=spec.bootstrap, generation=generation,
                                   sts_generation_current=current_gen and replicas == spec.brokers)
    if note is not None:
        conds = [c for c in conds if c["type"] != "Progressing"] + [note]
    rack = rack_condition(spec, observed)
    if rack is not None:
        conds.append(rack)
    return status, conds


async def _cluster_of(body: Mapping[str, Any], kube: KubeClient) -> tuple[ClusterSpec | None, dict | None]:
    """(cluster spec, None) or (None, a Ready=False condition saying why there is none)."""
    ns = body["metadata"]["namespace"]
    ref = (body.get("spec") or {}).get("cluster", "")
    cluster = await kube.get("Cluster", ns, ref)
    if cluster is None or (cluster.get("metadata") or {}).get("deletionTimestamp"):
        return None, condition("Ready", False, "ClusterNotFound",
                               f"no Cluster '{ref}' in namespace {ns}; create it or fix spec.cluster")
    try:
        return ClusterSpec.from_resource(cluster), None
    except SpecError as exc:
        return None, condition("Ready", False, "ClusterInvalid", f"Cluster '{ref}' has an invalid spec: {exc}")


async def _winner(body: Mapping[str, Any], kube: KubeClient) -> Mapping[str, Any]:
    """The oldest Topic resource in the namespace declaring the same topic in the same cluster."""
    meta = body["metadata"]
    name, cluster = topic_name_of(body), (body.get("spec") or {}).get("cluster")
    same = [t for t in await kube.list("Topic", meta["namespace"])
            if (t.get("spec") or {}).get("cluster") == cluster and topic_name_of(t) == name
            and not (t.get("metadata") or {}).get("deletionTimestamp")]
    if not any(t["metadata"]["name"] == meta["name"] for t in same):
        same.append(dict(body))
    return min(same, key=_age_key)


async def reconcile_topic(body: Mapping[str, Any], kube: KubeClient, admin_for: AdminFactory) -> Result:
    spec = body.get("spec") or {}
    name = topic_name_of(body)
    status: dict[str, Any] = {"topicName": name, "observedGeneration": int(body["metadata"].get("generation") or 0)}
    cluster, missing = await _cluster_of(body, kube)
    if cluster is None:
        return status, [missing]  # type: ignore[list-item]
    winner = await _winner(body, kube)
    if winner["metadata"]["name"] != body["metadata"]["name"]:
        return status, [condition("Ready", False, "DuplicateTopic",
                                  f"Topic resource '{winner['metadata']['name']}' (older) already declares topic "
                                  f"'{name}' in cluster '{cluster.name}'; delete this resource or rename the topic")]
    admin = await admin_for(cluster)
    path = f"/admin/v1/topics/{quote(name, safe='')}"
    partitions = int(spec.get("partitions", 1))
    desired_configs = {str(k): str(v) for k, v in (spec.get("config") or {}).items()}
    notes: list[dict[str, Any]] = []
    try:
        try:
            described = await admin.get(path)
        except AdminError as exc:
            if exc.status != 404:
                raise
            create: dict[str, Any] = {"name": name, "partitions": partitions, "configs": desired_configs}
            if spec.get("replicationFactor") is not None:
                create["replication_factor"] = int(spec["replicationFactor"])
            described = await admin.request("POST", "/admin/v1/topics", create)
        if described["partitions_count"] < partitions:
            described = await admin.request("POST", path + "/partitions", {"partitions": partitions})
        elif described["partitions_count"] > partitions:
            notes.append(condition("Ready", False, "PartitionsCannotShrink",
                                   f"topic '{name}' has {described['partitions_count']} partitions and Kafka cannot "
                                   f"remove partitions; set spec.partitions to at least {described['partitions_count']}"))
        overrides = {k: v["value"] for k, v in described.get("configs", {}).items() if v.get("source") == "topic"}
        if overrides != desired_configs:
            await admin.request("PUT", path + "/configs", {"configs": desired_configs})
            described = await admin.get(path)
        rf = spec.get("replicationFactor")
        if rf is not None and int(rf) != described["replication_factor"] and not notes:
            notes.append(condition("Ready", False, "ReplicationFactorDiffers",
                                   f"topic '{name}' has replication factor {described['replication_factor']}; "
                                   f"changing it to {rf} needs a partition reassignment "
                                   "(`kelp partitions reassign`), which the operator does not start by itself"))
    except AdminError as exc:
        reason = "BrokersUnreachable" if exc.status == 0 else "BrokerRefused"
        return status, [condition("Ready", False, reason, exc.message)]
    status.update(topic_status(described))
    if notes:
        return status, notes
    return status, [condition("Ready", True, "TopicReady",
                              f"topic '{name}' in cluster '{cluster.name}': {described['partitions_count']} "
                              f"partition(s), replication factor {described['replication_factor']}")]


async def delete_topic(body: Mapping[str, Any], kube: KubeClient, admin_for: AdminFactory) -> str:
    """Delete the Kafka topic of a Topic resource with deletePolicy delete; returns what happened.

    Lets go (returns) when the Cluster is gone or another resource owns the
    topic; raises AdminError while the brokers cannot be reached (kopf retries).
    """
    name = topic_name_of(body)
    cluster, _missing = await _cluster_of(body, kube)
    if cluster is None:
        return f"Cluster '{(body.get('spec') or {}).get('cluster')}' is gone; topic '{name}' left as it was"
    winner = await _winner(body, kube)
    if winner["metadata"]["name"] != body["metadata"]["name"]:
        return f"topic '{name}' belongs to Topic resource '{winner['metadata']['name']}'; not deleted"
    admin = await admin_for(cluster)
    try:
        await admin.request("DELETE", f"/admin/v1/topics/{quote(name, safe='')}")
    except AdminError as exc:
        if exc.status != 404:
            raise
        return f"topic '{name}' did not exist"
    return f"topic '{name}' deleted"


_RESET_TO = {"earliest": "earliest", "latest": "latest", "timestamp": "datetime", "offset": "offset"}


async def reconcile_group(body: Mapping[str, Any], kube: KubeClient, admin_for: AdminFactory) -> Result:
    spec = body.get("spec") or {}
    meta = body["metadata"]
    group = spec.get("groupId") or meta["name"]
    old = body.get("status") or {}
    status: dict[str, Any] = {"observedGeneration": int(meta.get("generation") or 0)}
    cluster, missing = await _cluster_of(body, kube)
    if cluster is None:
        return status, [missing]  # type: ignore[list-item]
    admin = await admin_for(cluster)
    path = f"/admin/v1/groups/{quote(group, safe='')}"
    conds: list[dict[str, Any]] = []

    async def describe() -> dict | None:
        try:
            return await admin.group_request("GET", path)
        except AdminError as exc:
            if exc.status == 404 or exc.error_code == GROUP_ID_NOT_FOUND:
                return None
            raise

    try:
        described = await describe()
        reset = spec.get("resetOffsets")
        if reset and reset.get("requestId") != old.get("lastAppliedRequestId"):
            request_id = reset["requestId"]
            members = len(described["members"]) if described else 0
            if members:
                conds.append(condition("OffsetsReset", False, "Waiting",
                                       f"reset {request_id} waits: group '{group}' has {members} member(s) (state "
                                       f"{described['state']}); it is applied once the group is Empty"))  # type: ignore[index]
            else:
                req: dict[str, Any] = {"topic": reset["topic"], "to": _RESET_TO[reset["to"]], "execute": True}
                if reset.get("partitions"):
                    req["partitions"] = list(reset["partitions"])
                if reset["to"] == "timestamp":
                    req["value"] = reset["timestamp"]
                elif reset["to"] == "offset":
                    req["value"] = int(reset["offset"])
                try:
                    await admin.group_request("POST", path + "/reset-offsets", req)
                except AdminError as exc:
                    if exc.status == 0:
                        raise
                    reason = "Waiting" if exc.error_code == NON_EMPTY_GROUP else "Refused"
                    conds.append(condition("OffsetsReset", False, reason, f"reset {request_id}: {exc.message}"))
                else:
                    status["lastAppliedRequestId"] = request_id
                    conds.append(condition("OffsetsReset", True, "Applied",
                                           f"reset {request_id} moved '{reset['topic']}' to {reset['to']}"))
                    described = await describe()
    except AdminError as exc:
        reason = "BrokersUnreachable" if exc.status == 0 else "BrokerRefused"
        return status, [condition("Ready", False, reason, exc.message), *conds]
    status.update(group_status(described))
    message = (f"group '{group}': {status['state']}, {status['members']} member(s), total lag {status['totalLag']}"
               if described else f"group '{group}' has no members and no committed offsets yet")
    return status, [condition("Ready", True, "GroupObserved", message), *conds]
