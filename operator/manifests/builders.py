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
from typing import Mapping, TypedDict

import yaml

from kelp.json_types import JsonObject, JsonValue

from ..model.objects import (
    ClaimSpec,
    ConfigMap,
    Container,
    ContainerPort,
    EnvVar,
    ObjectMeta,
    OwnerReference,
    PodDisruptionBudget,
    PodSpec,
    Role,
    RoleBinding,
    Service,
    ServiceAccount,
    ServicePort,
    ServiceSpec,
    StatefulSet,
    VolumeMount,
)
from ..model.objects_cluster_spec import TemplateMeta
from ..model.objects_network import NetworkPolicy
from ..security.listener_security import TLS_DIR
from .rack import rack_env, rack_manifests, rack_spread
from .spec import (
    CONFIG_DIR,
    CONFIG_HASH_ANNOTATION,
    DATA_DIR,
    DEFAULTS_ANNOTATION,
    SELECTOR_LABELS,
    TRUST_FLOOR_ANNOTATION,
    ClusterSpec,
    format_defaults,
)

__all__ = ["GROUP", "VERSION", "API_VERSION", "KELP_UID", "cluster_children", "labels_for", "selector_for",
           "owner_reference", "config_hash", "external_service", "external_address", "broker_file",
           "EXTERNAL_LABEL", "BROKER_LABEL", "Address", "Addresses", "child_meta", "TRUST_FLOOR_ANNOTATION",
           "http_service", "HTTP_SERVICE_LABEL"]

GROUP = "kelp.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KELP_UID = 10001
MANAGED_BY = "kelp-operator"
TERMINATION_GRACE_S = 120


# Every child a Cluster has (`cluster_children`), in the order they are applied.
Manifest = (ServiceAccount | Role | RoleBinding | ConfigMap | Service | StatefulSet | PodDisruptionBudget
            | NetworkPolicy)


def selector_for(spec: ClusterSpec) -> dict[str, str]:
    return dict(zip(SELECTOR_LABELS, ("kelp", spec.name, "broker"), strict=True))


def labels_for(spec: ClusterSpec) -> dict[str, str]:
    return {**selector_for(spec), "app.kubernetes.io/managed-by": MANAGED_BY, "kelp.dev/cluster": spec.name}


def owner_reference(spec: ClusterSpec) -> OwnerReference:
    return {"apiVersion": API_VERSION, "kind": "Cluster", "name": spec.name, "uid": spec.uid,
            "controller": True, "blockOwnerDeletion": True}


def child_meta(spec: ClusterSpec, name: str, *, annotations: dict[str, str] | None = None) -> ObjectMeta:
    meta: ObjectMeta = {"name": name, "namespace": spec.namespace, "labels": labels_for(spec),
                        "ownerReferences": [owner_reference(spec)]}
    if annotations is not None:
        meta["annotations"] = annotations
    return meta


def broker_config_yaml(spec: ClusterSpec) -> str:
    return yaml.safe_dump(spec.broker_config(), sort_keys=True, default_flow_style=False)


def config_hash(spec: ClusterSpec) -> str:
    """Changes whenever the broker config changes: a pod-template annotation, so pods roll."""
    return hashlib.sha256(broker_config_yaml(spec).encode()).hexdigest()[:16]


def service_account(spec: ClusterSpec) -> ServiceAccount:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": child_meta(spec, spec.service_account)}


def role(spec: ClusterSpec) -> Role:
    verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": child_meta(spec, spec.service_account),
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        ],
    }


def role_binding(spec: ClusterSpec) -> RoleBinding:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": child_meta(spec, spec.service_account),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": spec.service_account},
        "subjects": [{"kind": "ServiceAccount", "name": spec.service_account, "namespace": spec.namespace}],
    }


class Address(TypedDict):
    """What an external listener gives one broker: a load balancer's host, a node port (None: not yet known)."""

    host: str | None
    port: int | None


# An external listener's address per broker ordinal.
Addresses = Mapping[int, Address]


def broker_file(spec: ClusterSpec, ordinal: int, address: Address) -> str:
    """With an external listener, broker n's own config file: the shared config plus what it advertises."""
    own = dict(spec.broker_config())
    if spec.security is not None:
        # Secured layout: the external listener joins advertised.listeners; the node's address (NodePort)
        # comes from the environment (NODE_IP, the downward API's status.hostIP) through the env provider.
        if spec.external_type == "LoadBalancer":
            external = f"{address.get('host') or spec.pod_dns(ordinal)}:{spec.external_port}"
        else:
            external = f"${{env:NODE_IP}}:{address.get('port') or spec.external_port}"
        own["advertised.listeners"] = spec.security.advertised_listeners(
            name=spec.name, namespace=spec.namespace, advertise=spec.advertise, external=external)
        return yaml.safe_dump(own, sort_keys=True, default_flow_style=False)
    if spec.external_type == "LoadBalancer":
        own["advertised.host"] = address.get("host") or spec.pod_dns(ordinal)
        own["advertised.port"] = spec.kafka_port
    elif port := address.get("port"):
        own["advertised.port"] = int(port)  # advertised.host: the node's address, from the env
    return yaml.safe_dump(own, sort_keys=True, default_flow_style=False)


def config_map(spec: ClusterSpec, external: Addresses | None = None) -> ConfigMap:
    """The broker config, annotated with the replication defaults chosen at creation (read back each pass).

    With an external listener each broker reads its own file `<pod>.yaml` (the shared config plus the
    address it advertises); the pod template, and so the roll, depends only on the shared part.
    """
    meta = child_meta(spec, spec.config_map,
                      annotations={DEFAULTS_ANNOTATION: format_defaults(spec.replication_defaults())})
    data = {"broker.yaml": broker_config_yaml(spec)}
    if spec.external_type:
        for n, address in sorted((external or {}).items()):
            data[f"{spec.name}-{n}.yaml"] = broker_file(spec, n, address)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


EXTERNAL_LABEL = "kelp.dev/listener"
BROKER_LABEL = "kelp.dev/broker"


def external_service(spec: ClusterSpec, ordinal: int) -> Service:
    """Broker n's own external Service (NodePort or LoadBalancer), selecting only its pod."""
    if spec.external_type is None:
        raise ValueError(f"Cluster {spec.name} has no external listener: no external Service for broker {ordinal}")
    meta = child_meta(spec, f"{spec.name}-external-{ordinal}")
    meta["labels"] = {**meta["labels"], EXTERNAL_LABEL: "external", BROKER_LABEL: str(ordinal)}
    if spec.external_annotations:
        meta["annotations"] = dict(spec.external_annotations)
    port: ServicePort = {"name": spec.external_port_name, "port": spec.external_port,
                         "targetPort": spec.external_port_name, "protocol": "TCP"}
    if spec.external_type == "NodePort" and spec.external_node_ports:
        port["nodePort"] = spec.external_node_ports[ordinal]
    svc: ServiceSpec = {"type": spec.external_type,
                        "selector": {"statefulset.kubernetes.io/pod-name": f"{spec.name}-{ordinal}"},
                        "ports": [port], "publishNotReadyAddresses": False}
    if spec.external_type == "NodePort":
        # Each broker advertises the address of the node it runs on: traffic stays on that node.
        svc["externalTrafficPolicy"] = "Local"
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": svc}


def external_address(spec: ClusterSpec, service: Service | None) -> Address:
    """What broker n advertises, read off its applied Service: node port, or load balancer host."""
    if not service:
        return {"host": None, "port": None}
    if spec.external_type == "NodePort":
        ports = (service.get("spec") or {}).get("ports") or []
        return {"host": None, "port": ports[0].get("nodePort") if ports else None}
    ingress = (((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or [])
    host = (ingress[0].get("ip") or ingress[0].get("hostname")) if ingress else None
    return {"host": host, "port": spec.external_port}


def _ports(spec: ClusterSpec, *, replication: bool) -> list[ServicePort]:
    http: ServicePort = {"name": "http", "port": spec.http_port, "targetPort": "http", "protocol": "TCP"}
    if spec.security is None:
        return [{"name": "kafka", "port": spec.kafka_port, "targetPort": "kafka", "protocol": "TCP"}, http]
    listeners = spec.security.all_listeners if replication else spec.security.listeners
    ports: list[ServicePort] = [{"name": listener.port_name, "port": listener.port, "targetPort": listener.port_name,
                                 "protocol": "TCP"} for listener in listeners]
    return [*ports, http]


def headless_service(spec: ClusterSpec) -> Service:
    """Per-pod DNS (`<pod>.<cluster>-brokers.<ns>.svc`), published before readiness: brokers find each other."""
    meta = child_meta(spec, spec.headless_service)
    meta["labels"] = {**meta["labels"], "kelp.dev/service": "brokers"}  # what a ServiceMonitor selects (chart)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": selector_for(spec),
                     "ports": _ports(spec, replication=True)}}


def client_service(spec: ClusterSpec) -> Service:
    """The bootstrap address for clients and the operator: ready brokers only (not the replication listener)."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": child_meta(spec, spec.name),
            "spec": {"type": "ClusterIP", "selector": selector_for(spec), "ports": _ports(spec, replication=False)}}


HTTP_SERVICE_LABEL = "http"


def http_service(spec: ClusterSpec) -> Service:
    """`<cluster>-http`: the ready broker pods on the HTTP port, for REST Proxy (v2, v3) and Schema Registry
    clients (any broker serves any request: REST consumers are forwarded to the broker holding them, registry
    writes to the registry's leader). `spec.http.service` gives its type, port and annotations; HTTPS in the
    secured layout (the brokers' HTTP port is), which `appProtocol` says."""
    meta = child_meta(spec, spec.http_service)
    meta["labels"] = {**meta["labels"], "kelp.dev/service": HTTP_SERVICE_LABEL}
    if spec.http_service_annotations:
        meta["annotations"] = dict(spec.http_service_annotations)
    scheme = "https" if spec.security is not None else "http"
    port: ServicePort = {"name": scheme, "port": spec.http_service_port_number, "targetPort": "http",
                         "protocol": "TCP", "appProtocol": scheme}
    if spec.http_service_node_port is not None:
        port["nodePort"] = spec.http_service_node_port
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"type": spec.http_service_type, "selector": selector_for(spec), "ports": [port]}}


def pod_disruption_budget(spec: ClusterSpec) -> PodDisruptionBudget:
    """Voluntary disruptions (node drains) take down at most RF - min.insync brokers (spec.disruptions_allowed)."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": child_meta(spec, spec.name),
            "spec": {"maxUnavailable": spec.disruptions_allowed(), "selector": {"matchLabels": selector_for(spec)}}}


def _field_env(name: str, path: str) -> EnvVar:
    """An environment variable the kubelet fills from the pod's own fields (the downward API)."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _secured_env(spec: ClusterSpec) -> list[EnvVar]:
    """The secured layout's per-pod values, read by the brokers' config through `${env:...}` (listener_security)."""
    env = [_field_env("POD_NAME", "metadata.name"), _field_env("POD_IP", "status.podIP")]
    if spec.external_type == "NodePort":
        env.append(_field_env("NODE_IP", "status.hostIP"))
    if spec.external_type:
        env.append({"name": "KELP_HTTP_HOST", "value": "$(POD_IP)"})
    return env + rack_env(spec)


def _env(spec: ClusterSpec) -> list[EnvVar]:
    if spec.security is not None:
        return _secured_env(spec)
    env = [_field_env("POD_NAME", "metadata.name"), _field_env("POD_IP", "status.podIP")]
    if spec.external_type == "NodePort":
        env.append(_field_env("KELP_ADVERTISED_HOST", "status.hostIP"))
    elif spec.external_type == "LoadBalancer":
        pass  # advertised.host is in the broker's own file (builders.broker_file): env would override it
    elif spec.advertise == "podIP":
        env.append(_field_env("KELP_ADVERTISED_HOST", "status.podIP"))
    else:
        env.append({"name": "KELP_ADVERTISED_HOST",
                    "value": f"$(POD_NAME).{spec.headless_service}.{spec.namespace}.svc"})
    if spec.external_type:
        # Brokers reach each other's HTTP API at the address they register; with an external Kafka address
        # that must stay the pod IP, so HTTP binds it (and the preStop hook finds it through KELP_HTTP).
        env.append({"name": "KELP_HTTP_HOST", "value": "$(POD_IP)"})
        env.append({"name": "KELP_HTTP", "value": f"http://$(POD_IP):{spec.http_port}"})
    return env + rack_env(spec)


def _probe(spec: ClusterSpec, path: str, **timing: int) -> JsonObject:
    get: JsonObject = {"path": path, "port": "http"}
    if spec.security is not None:
        get["scheme"] = "HTTPS"  # the kubelet does not check the certificate and presents none
    return {"httpGet": get, **timing}


def _container_ports(spec: ClusterSpec) -> list[ContainerPort]:
    http: ContainerPort = {"name": "http", "containerPort": spec.http_port, "protocol": "TCP"}
    if spec.security is None:
        return [{"name": "kafka", "containerPort": spec.kafka_port, "protocol": "TCP"}, http]
    ports: list[ContainerPort] = [{"name": listener.port_name, "containerPort": listener.port, "protocol": "TCP"}
                                  for listener in spec.security.all_listeners]
    return [*ports, http]


def broker_container(spec: ClusterSpec) -> Container:
    """The broker container. In the secured layout: a port per listener, HTTPS probes, the certificates at
    TLS_DIR, and no preStop hook — `kelp broker-ctl controlled-shutdown` would need a client certificate for
    the HTTPS admin API; SIGTERM moves leadership away itself (the broker's controlled shutdown) within the
    same grace period."""
    config = f"{CONFIG_DIR}/$(POD_NAME).yaml" if spec.external_type else f"{CONFIG_DIR}/broker.yaml"
    mounts: list[VolumeMount] = [{"name": "data", "mountPath": DATA_DIR},
                                 {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                                 {"name": "tmp", "mountPath": "/tmp"}]
    if spec.security is not None:
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    container: Container = {
        "name": "broker",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "args": ["broker", "--config", config],
        "env": _env(spec),
        "ports": _container_ports(spec),
        "readinessProbe": _probe(spec, "/readyz", periodSeconds=2, timeoutSeconds=2, failureThreshold=3),
        "livenessProbe": _probe(spec, "/healthz", initialDelaySeconds=10, periodSeconds=10, timeoutSeconds=5,
                                failureThreshold=6),
        "startupProbe": _probe(spec, "/healthz", periodSeconds=2, timeoutSeconds=2, failureThreshold=300),
        "resources": dict(spec.resources),
        "volumeMounts": mounts,
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    if spec.security is None:
        shutdown: list[JsonValue] = ["kelp", "broker-ctl", "controlled-shutdown"]
        if not spec.external_type:
            shutdown += ["--http", f"http://127.0.0.1:{spec.http_port}"]
        container["lifecycle"] = {"preStop": {"exec": {"command": shutdown}}}
    return container


def _with_selector(constraint: JsonObject, selector: JsonObject) -> JsonObject:
    return {**constraint, "labelSelector": constraint.get("labelSelector") or selector}


def _pod_overrides(spec: ClusterSpec, pod_spec: PodSpec, trust_floor: str | None = None) -> TemplateMeta:
    """Apply spec.podTemplate to the pod spec in place; returns the pod template's metadata.

    Scheduling fields (affinity, tolerations, nodeSelector, priorityClassName) are taken as given;
    topologySpreadConstraints replace the default spread over nodes (a constraint without
    labelSelector gets the broker pods' selector; rack spreading is kept); securityContext is merged
    over the default (a key given wins). Labels and annotations are added; the operator's own (the
    selector labels, the config hash) cannot be overridden (spec validation refuses them).
    """
    tmpl = spec.pod_template
    if tmpl.get("affinity"):
        pod_spec["affinity"] = tmpl["affinity"]
    if tmpl.get("tolerations"):
        pod_spec["tolerations"] = tmpl["tolerations"]
    if tmpl.get("nodeSelector"):
        pod_spec["nodeSelector"] = tmpl["nodeSelector"]
    if tmpl.get("priorityClassName"):
        pod_spec["priorityClassName"] = tmpl["priorityClassName"]
    if tmpl.get("topologySpreadConstraints"):
        pod_spec["topologySpreadConstraints"] = [
            _with_selector(c, {"matchLabels": dict(selector_for(spec))})
            for c in tmpl["topologySpreadConstraints"]] + rack_spread(spec, selector_for(spec))
    if tmpl.get("securityContext"):
        pod_spec["securityContext"] = {**pod_spec["securityContext"], **tmpl["securityContext"]}
    meta: TemplateMeta = tmpl.get("metadata") or {}
    annotations = {**(meta.get("annotations") or {}), CONFIG_HASH_ANNOTATION: config_hash(spec)}
    if trust_floor:
        # The oldest CA generations the brokers trust: rises when an old CA leaves the bundles (pki.py), and only
        # then, so the pods restart to forget it; a new CA or a renewed certificate is reloaded live.
        annotations[TRUST_FLOOR_ANNOTATION] = trust_floor
    return {"labels": {**(meta.get("labels") or {}), **labels_for(spec)}, "annotations": annotations}


def stateful_set(spec: ClusterSpec, *, replicas: int | None = None,
                 claim: tuple[str | None, str | None] = (None, None), trust_floor: str | None = None) -> StatefulSet:
    """`replicas` overrides spec.brokers while brokers that will go are still being drained.

    `claim` is the (size, storageClassName) of the claim template the StatefulSet already has: the
    template is immutable, so a running cluster keeps it and storage.py grows the claims instead.
    `trust_floor` (secured layout, own CAs): the lowest CA generations still trusted (cluster_tls.py).
    """
    size, klass = claim
    if size is None:
        size, klass = spec.storage_size, spec.storage_class
    claim_spec: ClaimSpec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if klass:
        claim_spec["storageClassName"] = klass
    # Spread brokers over nodes when there are several; a one-node cluster still schedules.
    node_spread: JsonObject = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                               "whenUnsatisfiable": "ScheduleAnyway",
                               "labelSelector": {"matchLabels": dict(selector_for(spec))}}
    pod_spec: PodSpec = {
        "serviceAccountName": spec.service_account,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "securityContext": {"runAsNonRoot": True, "runAsUser": KELP_UID, "runAsGroup": KELP_UID,
                            "fsGroup": KELP_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [broker_container(spec)],
        "volumes": [{"name": "config", "configMap": {"name": spec.config_map}},
                    {"name": "tmp", "emptyDir": {}}],
        "topologySpreadConstraints": [node_spread, *rack_spread(spec, selector_for(spec))],
    }
    if spec.security is not None:
        # Keys readable by the broker's group only (fsGroup); a Secret volume follows the Secret's changes, so a
        # renewed certificate reaches the running broker, which reloads it (no restart).
        pod_spec["volumes"].append({"name": "tls", "secret": {"secretName": spec.broker_tls_secret,
                                                              "defaultMode": 0o440}})
    pod_meta = _pod_overrides(spec, pod_spec, trust_floor)
    retention = "Delete" if spec.storage_delete_claim else "Retain"
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": child_meta(spec, spec.name),
        "spec": {
            "replicas": spec.brokers if replicas is None else replicas,
            "serviceName": spec.headless_service,
            # Brokers form the cluster together: start them all at once, not one Ready pod after another.
            "podManagementPolicy": "Parallel",
            # The operator restarts pods itself, one at a time and only while no partition would
            # drop below min.insync.replicas (restarts.next_restart); the StatefulSet controller would not wait.
            "updateStrategy": {"type": "OnDelete"},
            # spec.storage.deleteClaim: the claims (the brokers' data) go with the Cluster and with scaled-away
            # brokers; by default they stay until deleted by hand.
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": retention, "whenScaled": retention},
            "selector": {"matchLabels": selector_for(spec)},
            "template": {"metadata": pod_meta, "spec": pod_spec},
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": selector_for(spec)},
                                      "spec": claim_spec}],
        },
    }


def cluster_children(spec: ClusterSpec, *, replicas: int | None = None,
                     claim: tuple[str | None, str | None] = (None, None),
                     external: Addresses | None = None, trust_floor: str | None = None) -> list[Manifest]:
    """Every child of a Cluster, in the order they should be applied.

    The external Services (`external_service`) are not among them: they are applied first, since what
    they are given (node ports, load balancer addresses) goes into the brokers' files (`external`).
    `<cluster>-http` is, while the brokers serve the REST Proxy or the Schema Registry (`spec.http`).
    """
    http = [http_service(spec)] if spec.http_service_wanted else []
    return [service_account(spec), role(spec), role_binding(spec), *rack_manifests(spec),
            config_map(spec, external), headless_service(spec),
            client_service(spec), *http,
            stateful_set(spec, replicas=replicas, claim=claim, trust_floor=trust_floor),
            pod_disruption_budget(spec)]
