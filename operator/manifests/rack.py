"""Rack awareness (`spec.rack.topologyKey`): the cluster-scoped RBAC, pod wiring and status it needs.

Why: a broker learns its rack from a label on the node it was scheduled to
(kelp.broker.cluster.rack), so its ServiceAccount must be allowed to `get`
nodes — a cluster-scoped permission a namespaced Role cannot give. As
Strimzi does for its init container, the operator applies one shared
ClusterRole (`kelp-broker-rack`: get nodes, nothing else) and, per rack-aware
Cluster, a ClusterRoleBinding for that Cluster's broker ServiceAccount.

Cluster-scoped objects cannot carry an owner reference to a namespaced
Cluster, and Clusters deliberately have no finalizer (deleting a namespace
never waits for the operator), so the bindings carry labels naming their
Cluster and the resync pass deletes those whose Cluster is gone or no
longer asks for racks (`orphaned_bindings`).

Pure: manifests and decisions only; no Kubernetes client and no I/O.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from kelp.json_types import JsonObject

from ..model.objects import EnvVar, Role, RoleBinding
from ..model.objects_kelp import ClusterResource, Condition
from ..model.status import Observed, condition
from .spec import ClusterSpec

__all__ = ["RACK_CLUSTER_ROLE", "rack_manifests", "rack_env", "rack_spread", "rack_condition", "orphaned_bindings",
           "BINDING_LABEL"]

RBAC = "rbac.authorization.k8s.io/v1"
RACK_CLUSTER_ROLE = "kelp-broker-rack"
BINDING_LABEL = "kelp.dev/rack-binding"
NAMESPACE_LABEL = "kelp.dev/namespace"
CLUSTER_LABEL = "kelp.dev/cluster"


def cluster_role() -> Role:
    return {"apiVersion": RBAC, "kind": "ClusterRole",
            "metadata": {"name": RACK_CLUSTER_ROLE, "labels": {"app.kubernetes.io/managed-by": "kelp-operator"}},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}


def cluster_role_binding(spec: ClusterSpec) -> RoleBinding:
    return {"apiVersion": RBAC, "kind": "ClusterRoleBinding",
            "metadata": {"name": spec.rack_binding,
                         "labels": {"app.kubernetes.io/managed-by": "kelp-operator", BINDING_LABEL: "true",
                                    NAMESPACE_LABEL: spec.namespace, CLUSTER_LABEL: spec.name}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RACK_CLUSTER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": spec.service_account, "namespace": spec.namespace}]}


def rack_manifests(spec: ClusterSpec) -> list[Role | RoleBinding]:
    """The cluster-scoped objects a rack-aware Cluster needs, or none."""
    return [cluster_role(), cluster_role_binding(spec)] if spec.rack_topology_key else []


def rack_env(spec: ClusterSpec) -> list[EnvVar]:
    """The pod's node name (downward API) for the broker's `kube.node.name`."""
    if not spec.rack_topology_key:
        return []
    return [{"name": "KELP_KUBE_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]


def rack_spread(spec: ClusterSpec, selector: Mapping[str, str]) -> list[JsonObject]:
    """Spread brokers over racks as well as nodes (soft: a one-zone cluster still schedules)."""
    if not spec.rack_topology_key:
        return []
    return [{"maxSkew": 1, "topologyKey": spec.rack_topology_key, "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": dict(selector)}}]


def rack_condition(spec: ClusterSpec, observed: Observed) -> Condition | None:
    """RackAware: True when every registered broker reports a rack; None when racks are not asked for."""
    if not spec.rack_topology_key:
        return None
    if observed.cluster is None:
        return condition("RackAware", None, "BrokersUnreachable",
                         f"cannot tell which racks brokers run in: {observed.error or 'no broker answered'}")
    brokers = sorted(((int(b["id"]), b.get("rack")) for b in observed.cluster.get("brokers", [])))
    missing = [str(b) for b, rack in brokers if not rack]
    if not brokers or missing:
        return condition("RackAware", False, "BrokersWithoutRack",
                         f"broker(s) {', '.join(missing) or 'none registered'} report no rack: their nodes lack "
                         f"the label {spec.rack_topology_key!r}, or they have not restarted since it was set")
    racks = sorted({str(rack) for _, rack in brokers})
    return condition("RackAware", True, "RacksApplied",
                     f"{len(brokers)} brokers in {len(racks)} rack(s) from {spec.rack_topology_key!r}: "
                     f"{', '.join(racks)}; replicas are placed on distinct racks where there are enough")


def orphaned_bindings(bindings: Iterable[RoleBinding], clusters: Iterable[ClusterResource],
                      namespaces: list[str] | None) -> list[str]:
    """Names of rack bindings whose Cluster is gone or no longer sets rack.topologyKey (in watched namespaces)."""
    wanted = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in clusters
              if ((c.get("spec") or {}).get("rack") or {}).get("topologyKey")
              and not c["metadata"].get("deletionTimestamp")}
    out = []
    for b in bindings:
        labels = (b.get("metadata") or {}).get("labels") or {}
        if labels.get(BINDING_LABEL) != "true":
            continue
        ns, name = labels.get(NAMESPACE_LABEL, ""), labels.get(CLUSTER_LABEL, "")
        if namespaces is not None and ns not in namespaces:
            continue
        if (ns, name) not in wanted:
            out.append(b["metadata"]["name"])
    return sorted(out)
