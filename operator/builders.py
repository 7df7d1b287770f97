"""Cluster resource in, plain Kubernetes manifests out: everything a broker StatefulSet needs.

Why: what the operator creates must be reviewable and testable without a
cluster — the same input always gives the same dicts, which the handlers
hand to the API with server-side apply. Each child carries a controller
owner reference to its Cluster, so deleting the Cluster lets Kubernetes'
garbage collector remove them (PersistentVolumeClaims from the
`volumeClaimTemplate` stay, as with every StatefulSet: data is never
deleted by accident).

What the broker pods rely on (see docs/operator.md): pod `<cluster>-<n>` is
broker n (`broker.id.from.hostname`); it advertises its per-pod DNS name on
the headless Service, or its pod IP; it elects the controller through Lease
objects and keeps cluster metadata in ConfigMaps (its Role allows exactly
that, plus reading pods; with `rack.topologyKey`, rack.py adds a ClusterRole
to read their node's labels); SIGTERM, after the preStop hook asks for a
controlled shutdown, moves leadership away before the process exits.

Pure: imports no Kubernetes client and does no I/O.
"""

from __future__ import annotations

import hashlib
from typing import Any

import yaml

from .rack import rack_env, rack_manifests, rack_spread
from .spec import CONFIG_DIR, DATA_DIR, DEFAULTS_ANNOTATION, ClusterSpec, format_defaults

__all__ = ["GROUP", "VERSION", "API_VERSION", "KELP_UID", "cluster_children", "labels_for", "selector_for",
           "owner_reference", "config_hash"]

GROUP = "kelp.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KELP_UID = 10001
MANAGED_BY = "kelp-operator"
TERMINATION_GRACE_S = 120


def selector_for(spec: ClusterSpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": "kelp", "app.kubernetes.io/instance": spec.name,
            "app.kubernetes.io/component": "broker"}


def labels_for(spec: ClusterSpec) -> dict[str, str]:
    return {**selector_for(spec), "app.kubernetes.io/managed-by": MANAGED_BY, "kelp.dev/cluster": spec.name}


def owner_reference(spec: ClusterSpec) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "Cluster", "name": spec.name, "uid": spec.uid,
            "controller": True, "blockOwnerDeletion": True}


def _meta(spec: ClusterSpec, name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": spec.namespace, "labels": labels_for(spec),
            "ownerReferences": [owner_reference(spec)], **extra}


def broker_config_yaml(spec: ClusterSpec) -> str:
    return yaml.safe_dump(spec.broker_config(), sort_keys=True, default_flow_style=False)


def config_hash(spec: ClusterSpec) -> str:
    """Changes whenever the broker config changes: a pod-template annotation, so pods roll."""
    return hashlib.sha256(broker_config_yaml(spec).encode()).hexdigest()[:16]


def service_account(spec: ClusterSpec) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(spec, spec.service_account)}


def role(spec: ClusterSpec) -> dict[str, Any]:
    verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(spec, spec.service_account),
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        ],
    }


def role_binding(spec: ClusterSpec) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": _meta(spec, spec.service_account),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": spec.service_account},
        "subjects": [{"kind": "ServiceAccount", "name": spec.service_account, "namespace": spec.namespace}],
    }


def config_map(spec: ClusterSpec) -> dict[str, Any]:
    """The broker config, annotated with the replication defaults chosen at creation (read back each pass)."""
    meta = _meta(spec, spec.config_map, annotations={DEFAULTS_ANNOTATION: format_defaults(spec.replication_defaults())})
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"broker.yaml": broker_config_yaml(spec)}}


def _ports(spec: ClusterSpec) -> list[dict[str, Any]]:
    return [{"name": "kafka", "port": spec.kafka_port, "targetPort": "kafka", "protocol": "TCP"},
            {"name": "http", "port": spec.http_port, "targetPort": "http", "protocol": "TCP"}]


def headless_service(spec: ClusterSpec) -> dict[str, Any]:
    """Per-pod DNS (`<pod>.<cluster>-brokers.<ns>.svc`), published before readiness: brokers find each other."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(spec, spec.headless_service),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": selector_for(spec),
                     "ports": _ports(spec)}}


def client_service(spec: ClusterSpec) -> dict[str, Any]:
    """The bootstrap address for clients and the operator: ready brokers only."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(spec, spec.name),
            "spec": {"type": "ClusterIP", "selector": selector_for(spec), "ports": _ports(spec)}}


def pod_disruption_budget(spec: ClusterSpec) -> dict[str, Any]:
    """One broker down at a time for drains: with RF 3 and min ISR 2 acks=all writes keep going."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(spec, spec.name),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_for(spec)}}}


def _env(spec: ClusterSpec) -> list[dict[str, Any]]:
    field = lambda path: {"valueFrom": {"fieldRef": {"fieldPath": path}}}  # noqa: E731
    env = [{"name": "POD_NAME", **field("metadata.name")}, {"name": "POD_IP", **field("status.podIP")}]
    if spec.advertise == "podIP":
        env.append({"name": "KELP_ADVERTISED_HOST", **field("status.podIP")})
    else:
        env.append({"name": "KELP_ADVERTISED_HOST",
                    "value": f"$(POD_NAME).{spec.headless_service}.{spec.namespace}.svc"})
    return env + rack_env(spec)


def broker_container(spec: ClusterSpec) -> dict[str, Any]:
    http = f"http://127.0.0.1:{spec.http_port}"
    return {
        "name": "broker",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "args": ["broker", "--config", f"{CONFIG_DIR}/broker.yaml"],
        "env": _env(spec),
        "ports": [{"name": "kafka", "containerPort": spec.kafka_port, "protocol": "TCP"},
                  {"name": "http", "containerPort": spec.http_port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"},
                           "periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "initialDelaySeconds": 10,
                          "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6},
        "startupProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                         "periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 300},
        "lifecycle": {"preStop": {"exec": {"command": [
            "kelp", "broker-ctl", "controlled-shutdown", "--http", http]}}},
        "resources": dict(spec.resources),
        "volumeMounts": [{"name": "data", "mountPath": DATA_DIR},
                         {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }


def stateful_set(spec: ClusterSpec, *, replicas: int | None = None,
                 claim: tuple[str | None, str | None] = (None, None)) -> dict[str, Any]:
    """`replicas` overrides spec.brokers while brokers that will go are still being drained.

    `claim` is the (size, storageClassName) of the claim template the StatefulSet already has: the
    template is immutable, so a running cluster keeps it and storage.py grows the claims instead.
    """
    size, klass = claim
    if size is None:
        size, klass = spec.storage_size, spec.storage_class
    claim_spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if klass:
        claim_spec["storageClassName"] = klass
    pod_spec: dict[str, Any] = {
        "serviceAccountName": spec.service_account,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "securityContext": {"runAsNonRoot": True, "runAsUser": KELP_UID, "runAsGroup": KELP_UID,
                            "fsGroup": KELP_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [broker_container(spec)],
        "volumes": [{"name": "config", "configMap": {"name": spec.config_map}},
                    {"name": "tmp", "emptyDir": {}}],
        # Spread brokers over nodes when there are several; a one-node cluster still schedules.
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": selector_for(spec)}}]
                                     + rack_spread(spec, selector_for(spec)),
    }
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(spec, spec.name),
        "spec": {
            "replicas": spec.brokers if replicas is None else replicas,
            "serviceName": spec.headless_service,
            # Brokers form the cluster together: start them all at once, not one Ready pod after another.
            "podManagementPolicy": "Parallel",
            # The operator restarts pods itself, one at a time and only while no partition would
            # drop below min.insync.replicas (restarts.next_restart); the StatefulSet controller would not wait.
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            "selector": {"matchLabels": selector_for(spec)},
            "template": {
                "metadata": {"labels": labels_for(spec),
                             "annotations": {"kelp.dev/config-hash": config_hash(spec)}},
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": selector_for(spec)},
                                      "spec": claim_spec}],
        },
    }


def cluster_children(spec: ClusterSpec, *, replicas: int | None = None,
                     claim: tuple[str | None, str | None] = (None, None)) -> list[dict[str, Any]]:
    """Every child of a Cluster, in the order they should be applied."""
    return [service_account(spec), role(spec), role_binding(spec), *rack_manifests(spec), config_map(spec),
            headless_service(spec),
            client_service(spec), stateful_set(spec, replicas=replicas, claim=claim), pod_disruption_budget(spec)]
