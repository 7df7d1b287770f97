"""Topic resources: create, grow and own a Kafka topic; the oldest resource naming a topic owns it.

Why: topics are one-way — the resource is the desired state. Topics a client
created are never touched; a Topic resource naming a topic another, older
resource already declares is refused with a condition instead of fighting
over it. Ownership is decided by `topic_owners`, one pass over the Topic
resources (the resync pass builds it once for all of them; an event builds
it from one list): deciding it per Topic by scanning every other Topic was
quadratic, minutes of CPU with a few thousand Topic resources.

Like every reconciler here it returns `(status fields, conditions)` and never
raises for a condition a user can act on.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping
from urllib.parse import quote

from .brokers import AdminError
from .kube import KubeClient
from .resources import AdminFactory, Result, cluster_of, paused
from .status import condition, topic_status

__all__ = ["reconcile_topic", "delete_topic", "topic_name_of", "topic_owners", "Owners"]

# (namespace, cluster, topic name) -> ((creationTimestamp, resource name), resource name) of the owner.
Owners = dict[tuple[str, str, str], tuple[tuple[str, str], str]]


def topic_name_of(body: Mapping[str, Any]) -> str:
    return (body.get("spec") or {}).get("topicName") or body["metadata"]["name"]


def _age_key(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body["metadata"]
    return (meta.get("creationTimestamp") or "", meta["name"])


def _owner_key(body: Mapping[str, Any]) -> tuple[str, str, str]:
    return (body["metadata"].get("namespace", ""), (body.get("spec") or {}).get("cluster") or "", topic_name_of(body))


def topic_owners(topics: Iterable[Mapping[str, Any]]) -> Owners:
    """The oldest live Topic resource for every (namespace, cluster, topic): one pass, linear in the resources."""
    owners: Owners = {}
    for t in topics:
        if (t.get("metadata") or {}).get("deletionTimestamp"):
            continue
        key, age = _owner_key(t), _age_key(t)
        best = owners.get(key)
        if best is None or age < best[0]:
            owners[key] = (age, t["metadata"]["name"])
    return owners


async def _winner(body: Mapping[str, Any], kube: KubeClient, owners: Owners | None) -> str:
    """Name of the Topic resource that owns this one's topic (itself, unless an older one declares it)."""
    if owners is None:
        owners = topic_owners(await kube.list("Topic", body["metadata"]["namespace"]))
    best = owners.get(_owner_key(body))
    mine = _age_key(body)
    return best[1] if best is not None and best[0] < mine else body["metadata"]["name"]


async def reconcile_topic(body: Mapping[str, Any], kube: KubeClient, admin_for: AdminFactory, *,
                          owners: Owners | None = None, **_: Any) -> Result:
    spec = body.get("spec") or {}
    name = topic_name_of(body)
    status: dict[str, Any] = {"topicName": name, "observedGeneration": int(body["metadata"].get("generation") or 0)}
    cluster, missing = await cluster_of(body, kube)
    if cluster is None:
        return status, [missing]  # type: ignore[list-item]
    winner = await _winner(body, kube, owners)
    if winner != body["metadata"]["name"]:
        return status, [condition("Ready", False, "DuplicateTopic",
                                  f"Topic resource '{winner}' (older) already declares topic "
                                  f"'{name}' in cluster '{cluster.name}'; delete this resource or rename the topic")]
    admin = await admin_for(cluster)
    path = f"/admin/v1/topics/{quote(name, safe='')}"
    if paused(body):
        try:
            status.update(topic_status(await admin.get(path)))
        except AdminError as exc:
            return status, [condition("Ready", None, "ReconciliationPaused", f"not reconciled while paused: "
                                      f"{exc.message}")]
        return status, [condition("Ready", None, "ReconciliationPaused",
                                  f"topic '{name}' is not reconciled while the Topic is annotated "
                                  "kelp.dev/pause-reconciliation=true; status shows what the brokers report")]
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
            # Topic configs are dynamic in Kelp: altered in place, no broker restarts.
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
    cluster, _missing = await cluster_of(body, kube)
    if cluster is None:
        return f"Cluster '{(body.get('spec') or {}).get('cluster')}' is gone; topic '{name}' left as it was"
    winner = await _winner(body, kube, None)
    if winner != body["metadata"]["name"]:
        return f"topic '{name}' belongs to Topic resource '{winner}'; not deleted"
    admin = await admin_for(cluster)
    try:
        await admin.request("DELETE", f"/admin/v1/topics/{quote(name, safe='')}")
    except AdminError as exc:
        if exc.status != 404:
            raise
        return f"topic '{name}' did not exist"
    return f"topic '{name}' deleted"
