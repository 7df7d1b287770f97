"""Topic resources: create, grow and own a Kafka topic; the oldest resource naming a topic owns it.

Why: topics are one-way — the resource is the desired state. Topics a client
created are never touched; a Topic resource naming a topic another, older
resource already declares is refused with a condition instead of fighting
over it. Ownership comes from `TopicOwners`, an index built in one pass over
the Topic resources: the resync pass builds one per pass, kopf's handlers
share one that is rebuilt only when it may be stale (a Topic it has not
seen, or an owner that has gone). Deciding it per Topic by scanning every
other Topic was quadratic — minutes of CPU with a few thousand Topic
resources, at every resync and at every operator start (one resume event
per Topic).

Every write to the brokers (create, grow, alter configs, delete) follows a
fence (`KubeClient.fence`, a Lease write on the last resourceVersion), as the
Cluster pass's moves do: a replica that lost the Lease changes no topic.

Like every reconciler here it returns `(status fields, conditions)` and never
raises for a condition a user can act on.
"""

from __future__ import annotations

from typing import Iterable

from ..kube.client import TOPIC, KubeClient
from ..kube.events import Recorder
from ..manifests.spec import ClusterSpec
from ..model.admin_types import NewTopic, TopicDescription
from ..model.objects_kelp import Condition, TopicResource, TopicSpec, TopicStatus
from ..model.status import condition, topic_status, topic_unobserved
from .brokers import AdminError
from .resources import AdminFactory, Result, cluster_of, paused
from .throttles import THROTTLED_REPLICA_KEYS

__all__ = ["reconcile_topic", "delete_topic", "topic_name_of", "topic_owners", "Owners", "TopicOwners"]

# (namespace, cluster, topic name) -> ((creationTimestamp, resource name), resource name) of the owner.
Owners = dict[tuple[str, str, str], tuple[tuple[str, str], str]]


def _spec(body: TopicResource) -> TopicSpec:
    spec: TopicSpec = body.get("spec") or {}
    return spec


def topic_name_of(body: TopicResource) -> str:
    return _spec(body).get("topicName") or body["metadata"]["name"]


def _age_key(body: TopicResource) -> tuple[str, str]:
    meta = body["metadata"]
    return (meta.get("creationTimestamp") or "", meta["name"])


def _owner_key(body: TopicResource) -> tuple[str, str, str]:
    return (body["metadata"].get("namespace", ""), _spec(body).get("cluster") or "", topic_name_of(body))


def topic_owners(topics: Iterable[TopicResource]) -> Owners:
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


class TopicOwners:
    """Which Topic resource owns which topic, per namespace; rebuilt (one list) only when it may be stale.

    A Topic the index has not seen may have been created together with an
    older duplicate, so it triggers a rebuild; a Topic it has seen cannot be
    beaten by one created later (ownership goes to the oldest). An owner
    that has since gone (deleted, or now naming another topic) triggers a
    rebuild too. So a burst of N events costs O(N) objects read, not O(N^2).
    """

    def __init__(self) -> None:
        self._owners: dict[str, Owners] = {}
        self._seen: dict[str, set[str]] = {}

    def load(self, topics: Iterable[TopicResource]) -> "TopicOwners":
        by_ns: dict[str, list[TopicResource]] = {}
        for t in topics:
            by_ns.setdefault(t["metadata"].get("namespace", ""), []).append(t)
        for ns, items in by_ns.items():
            self._owners[ns] = topic_owners(items)
            self._seen[ns] = {t["metadata"]["name"] for t in items}
        return self

    async def _rebuild(self, kube: KubeClient, namespace: str) -> Owners:
        items = await kube.list(TOPIC, namespace)
        self._owners[namespace] = topic_owners(items)
        self._seen[namespace] = {t["metadata"]["name"] for t in items}
        return self._owners[namespace]

    async def winner(self, body: TopicResource, kube: KubeClient) -> str:
        """Name of the Topic resource that owns this one's topic (itself, unless an older one declares it)."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        owners = self._owners.get(ns)
        if owners is None or name not in self._seen.get(ns, ()):
            owners = await self._rebuild(kube, ns)
        key, mine = _owner_key(body), _age_key(body)
        best = owners.get(key)
        if best is not None and best[0] < mine:
            other = await kube.get(TOPIC, ns, best[1])
            if other is None or (other.get("metadata") or {}).get("deletionTimestamp") or _owner_key(other) != key:
                best = (await self._rebuild(kube, ns)).get(key)
        return best[1] if best is not None and best[0] < mine else name


async def reconcile_topic(body: TopicResource, kube: KubeClient, admin_for: AdminFactory, *,
                          owners: TopicOwners | None = None, events: Recorder | None = None) -> Result[TopicStatus]:
    spec = _spec(body)
    name = topic_name_of(body)
    status: TopicStatus = {"topicName": name, "observedGeneration": int(body["metadata"].get("generation") or 0),
                           **topic_unobserved()}
    cluster = await cluster_of(body, kube)
    if not isinstance(cluster, ClusterSpec):
        return status, [cluster]

    async def emit(reason: str, message: str, *, warning: bool = False) -> None:
        if events is not None:
            await events.emit(body, reason, message, warning=warning)

    winner = await (owners or TopicOwners()).winner(body, kube)
    if winner != body["metadata"]["name"]:
        message = (f"Topic resource '{winner}' (older) already declares topic '{name}' in cluster "
                   f"'{cluster.name}'; delete this resource or rename the topic")
        await emit("DuplicateTopic", message, warning=True)
        return status, [condition("Ready", False, "DuplicateTopic", message)]
    admin = await admin_for(cluster)
    if paused(body):
        try:
            status.update(topic_status(await admin.describe_topic(name)))
        except AdminError as exc:
            return status, [condition("Ready", None, "ReconciliationPaused", f"not reconciled while paused: "
                                      f"{exc.message}")]
        return status, [condition("Ready", None, "ReconciliationPaused",
                                  f"topic '{name}' is not reconciled while the Topic is annotated "
                                  "kelp.dev/pause-reconciliation=true; status shows what the brokers report")]
    partitions = int(spec.get("partitions", 1))
    desired_configs = {str(k): str(v) for k, v in (spec.get("config") or {}).items()}
    notes: list[Condition] = []
    described: TopicDescription
    try:
        try:
            described = await admin.describe_topic(name)
        except AdminError as exc:
            if exc.status != 404:
                raise
            create: NewTopic = {"name": name, "partitions": partitions, "configs": desired_configs}
            if spec.get("replicationFactor") is not None:
                create["replication_factor"] = int(spec["replicationFactor"])
            await kube.fence()
            described = await admin.create_topic(create)
            await emit("TopicCreated", f"topic '{name}': {described['partitions_count']} partition(s), replication "
                       f"factor {described['replication_factor']}")
        if described["partitions_count"] < partitions:
            before = described["partitions_count"]
            await kube.fence()
            described = await admin.add_partitions(name, partitions)
            await emit("PartitionsAdded", f"topic '{name}': {before} -> {partitions} partitions")
        elif described["partitions_count"] > partitions:
            message = (f"topic '{name}' has {described['partitions_count']} partitions and Kafka cannot remove "
                       f"partitions; set spec.partitions to at least {described['partitions_count']}")
            await emit("PartitionsCannotShrink", message, warning=True)
            notes.append(condition("Ready", False, "PartitionsCannotShrink", message))
        overrides = {k: v["value"] for k, v in described.get("configs", {}).items() if v.get("source") == "topic"}
        for key in THROTTLED_REPLICA_KEYS:  # a move's throttle (throttles.py, Kafka's tool) unless the Topic names it
            if key in overrides and key not in desired_configs:
                desired_configs[key] = overrides[key]
        if overrides != desired_configs:
            # Topic configs are dynamic in Kelp: altered in place, no broker restarts.
            await kube.fence()
            await admin.alter_topic_configs(name, desired_configs)
            described = await admin.describe_topic(name)
            await emit("TopicConfigsAltered", f"topic '{name}': overrides set to {desired_configs or '{}'} (applied "
                       "at once, no broker restart)")
        rf = spec.get("replicationFactor")
        if rf is not None and int(rf) != described["replication_factor"] and not notes:
            message = (f"topic '{name}' has replication factor {described['replication_factor']}; changing it to "
                       f"{rf} needs a partition reassignment (`kelp partitions reassign`), which the operator does "
                       "not start by itself")
            await emit("ReplicationFactorDiffers", message, warning=True)
            notes.append(condition("Ready", False, "ReplicationFactorDiffers", message))
    except AdminError as exc:
        reason = "BrokersUnreachable" if exc.status == 0 else "BrokerRefused"
        return status, [condition("Ready", False, reason, exc.message)]
    status.update(topic_status(described))
    if notes:
        return status, notes
    return status, [condition("Ready", True, "TopicReady",
                              f"topic '{name}' in cluster '{cluster.name}': {described['partitions_count']} "
                              f"partition(s), replication factor {described['replication_factor']}")]


async def delete_topic(body: TopicResource, kube: KubeClient, admin_for: AdminFactory, *,
                       events: Recorder | None = None) -> str:
    """Delete the Kafka topic of a Topic resource with deletePolicy delete; returns what happened.

    Lets go (returns) when the Cluster is gone or another resource owns the
    topic; raises AdminError while the brokers cannot be reached (kopf retries).
    A deleted topic is an Event (`TopicDeleted`) on the resource: its records are gone.
    """
    name = topic_name_of(body)
    cluster = await cluster_of(body, kube)
    if not isinstance(cluster, ClusterSpec):
        return f"Cluster '{(body.get('spec') or {}).get('cluster')}' is gone; topic '{name}' left as it was"
    winner = await TopicOwners().winner(body, kube)
    if winner != body["metadata"]["name"]:
        return f"topic '{name}' belongs to Topic resource '{winner}'; not deleted"
    admin = await admin_for(cluster)
    await kube.fence()  # deleting a topic loses its records: only a replica that proves it holds the Lease
    try:
        await admin.delete_topic(name)
    except AdminError as exc:
        if exc.status != 404:
            raise
        return f"topic '{name}' did not exist"
    message = f"topic '{name}' deleted from cluster '{cluster.name}' (deletePolicy delete)"
    if events is not None:
        await events.emit(body, "TopicDeleted", message)
    return message
