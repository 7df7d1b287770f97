"""The operator's pure builders: a Cluster resource in, manifests a real API server accepts out.

No cluster needed: the manifests are checked against Kubernetes 1.34's
OpenAPI schemas (kubernetes-validate, strict) and against what the broker
pods rely on — the broker config they load, their identity, their probes.
"""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
import yaml

from kelp.config.broker import BrokerConfig
from kelp.operator.manifests.builders import cluster_children, config_hash, stateful_set
from kelp.operator.manifests.spec import ClusterSpec, SpecError

K8S_VERSION = "1.34"


def cluster(spec: dict | None = None, *, name: str = "demo") -> dict:
    return {"apiVersion": "kelp.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": "team-a", "uid": "0f3c-uid", "generation": 4},
            "spec": spec if spec is not None else {}}


def by_kind(children: list[dict]) -> dict[tuple[str, str], dict]:
    return {(m["kind"], m["metadata"]["name"]): m for m in children}


def test_every_child_is_valid_for_kubernetes_and_owned_by_its_cluster() -> None:
    children = cluster_children(ClusterSpec.from_resource(cluster()))
    assert [(m["kind"], m["metadata"]["name"]) for m in children] == [
        ("ServiceAccount", "demo-broker"), ("Role", "demo-broker"), ("RoleBinding", "demo-broker"),
        ("ConfigMap", "demo-config"), ("Service", "demo-brokers"), ("Service", "demo"),
        ("Service", "demo-http"), ("StatefulSet", "demo"), ("PodDisruptionBudget", "demo")]
    for m in children:
        kubernetes_validate.validate(m, K8S_VERSION, strict=True)
        assert m["metadata"]["namespace"] == "team-a"
        assert m["metadata"]["ownerReferences"] == [{
            "apiVersion": "kelp.dev/v1alpha1", "kind": "Cluster", "name": "demo", "uid": "0f3c-uid",
            "controller": True, "blockOwnerDeletion": True}]
        assert m["metadata"]["labels"]["kelp.dev/cluster"] == "demo"


def test_empty_spec_is_three_brokers_with_the_crd_defaults() -> None:
    sts = stateful_set(ClusterSpec.from_resource(cluster({})))
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == "demo-brokers"
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "storageClassName" not in claim["spec"]  # the cluster's default class
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "kelp:0.1.0"
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}


def test_claims_are_kept_unless_delete_claim_says_otherwise() -> None:
    # Issue 32, item 8: the claims (the brokers' data) were always kept, with no way to say otherwise.
    kept = stateful_set(ClusterSpec.from_resource(cluster({})))
    assert kept["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    gone = stateful_set(ClusterSpec.from_resource(cluster({"storage": {"size": "10Gi", "deleteClaim": True}})))
    assert gone["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete", "whenScaled": "Delete"}
    kubernetes_validate.validate(gone, K8S_VERSION, strict=True)
    assert gone["spec"]["template"] == kept["spec"]["template"], "switching it restarts no pod"


def test_broker_pod_runs_as_the_image_user_with_probes_and_controlled_shutdown() -> None:
    spec = ClusterSpec.from_resource(cluster({"listeners": {"kafkaPort": 19092, "httpPort": 18080},
                                              "storage": {"size": "2Gi", "storageClassName": "fast"}}))
    sts = stateful_set(spec)
    pod = sts["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == 10001
    assert pod["serviceAccountName"] == "demo-broker"
    c = pod["containers"][0]
    assert c["args"] == ["broker", "--config", "/etc/kelp/broker.yaml"]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"kafka": 19092, "http": 18080}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["lifecycle"]["preStop"]["exec"]["command"] == [
        "kelp", "broker-ctl", "controlled-shutdown", "--http", "http://127.0.0.1:18080"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts == {"/var/lib/kelp": "data", "/etc/kelp": "config", "/tmp": "tmp"}
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "fast"
    # The operator restarts pods itself (one at a time, never below min.insync.replicas).
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    # Leadership must have time to move before the kubelet kills the broker.
    assert pod["terminationGracePeriodSeconds"] >= 60


def test_advertised_address_is_the_pod_dns_name_or_the_pod_ip() -> None:
    def env(advertise: str) -> dict:
        c = stateful_set(ClusterSpec.from_resource(cluster({"listeners": {"advertise": advertise}})))
        return {e["name"]: e for e in c["spec"]["template"]["spec"]["containers"][0]["env"]}

    dns = env("dns")
    assert dns["KELP_ADVERTISED_HOST"]["value"] == "$(POD_NAME).demo-brokers.team-a.svc"
    names = list(dns)
    assert names.index("POD_NAME") < names.index("KELP_ADVERTISED_HOST")  # $(VAR) needs it defined first
    assert env("podIP")["KELP_ADVERTISED_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_the_config_map_is_a_broker_config_that_names_the_pod_its_broker_id(tmp_path) -> None:
    spec = ClusterSpec.from_resource(cluster({"brokers": 5, "config": {"num.partitions": "12"}}))
    cm = by_kind(cluster_children(spec))[("ConfigMap", "demo-config")]
    path = tmp_path / "broker.yaml"
    path.write_text(cm["data"]["broker.yaml"])
    image_env = {"KELP_LOG_DIRS": "/var/lib/kelp"}  # the Dockerfile's, as the pod runs it
    cfg = BrokerConfig.load(file=str(path), env={"HOSTNAME": "demo-4", "KELP_ADVERTISED_HOST": "10.1.0.7", **image_env})
    assert cfg.broker_id == 4
    assert cfg["cluster.backend"] == "kube" and cfg["cluster.name"] == "demo" and cfg["kube.namespace"] == "team-a"
    assert cfg["advertised.host"] == "10.1.0.7"
    assert cfg["num.partitions"] == 12
    assert str(cfg.log_dirs[0]) == "/var/lib/kelp"  # the volume's root, where every existing broker keeps its data
    assert "log.dirs" not in yaml.safe_load(cm["data"]["broker.yaml"])
    # Replicated by default, as far as the cluster's size allows.
    assert cfg["default.replication.factor"] == 3 and cfg["min.insync.replicas"] == 2
    one = yaml.safe_load(by_kind(cluster_children(ClusterSpec.from_resource(cluster({"brokers": 1}))))[
        ("ConfigMap", "demo-config")]["data"]["broker.yaml"])
    assert one["default.replication.factor"] == "1" and one["offsets.topic.replication.factor"] == "1"


def test_a_static_config_change_rolls_the_pods_and_nothing_else_does() -> None:
    base = cluster({"config": {"num.partitions": "12", "log.retention.hours": "48"}})
    same = copy.deepcopy(base)
    same["spec"]["brokers"] = 5  # scaling changes replicas, not the pod template
    dynamic = copy.deepcopy(base)
    dynamic["spec"]["config"].update({"log.retention.hours": "72", "min.insync.replicas": "1"})
    changed = copy.deepcopy(base)
    changed["spec"]["config"]["num.partitions"] = "24"
    h = lambda body: config_hash(ClusterSpec.from_resource(body))  # noqa: E731
    assert h(base) == h(same) == h(dynamic) != h(changed), "only a static key's change may roll the pods"
    annotation = stateful_set(ClusterSpec.from_resource(changed))["spec"]["template"]["metadata"]["annotations"]
    assert annotation["kelp.dev/config-hash"] == h(changed)


def test_dynamic_keys_stay_out_of_the_config_file_and_are_applied_by_the_admin_api() -> None:
    spec = ClusterSpec.from_resource(cluster({"config": {"log.retention.hours": "72", "num.partitions": "12",
                                                         "min.insync.replicas": "1"}}))
    written = yaml.safe_load(by_kind(cluster_children(spec))[("ConfigMap", "demo-config")]["data"]["broker.yaml"])
    assert written["num.partitions"] == "12" and "log.retention.hours" not in written
    assert written["min.insync.replicas"] == "2", "the file keeps the pinned default; the dynamic value wins"
    assert spec.dynamic_config() == {"log.retention.hours": "72", "min.insync.replicas": "1"}
    assert spec.effective_config()["min.insync.replicas"] == "1"
    assert spec.disruptions_allowed() == 2, "the PodDisruptionBudget follows the value the brokers run with"


def test_the_broker_role_allows_leases_and_configmaps_and_only_reads_pods() -> None:
    role = by_kind(cluster_children(ClusterSpec.from_resource(cluster())))[("Role", "demo-broker")]
    granted = {(g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"]}
    assert {"get", "create", "update"} <= granted[("coordination.k8s.io", "leases")]
    assert {"get", "create", "update"} <= granted[("", "configmaps")]
    assert granted[("", "pods")] == {"get", "list", "watch"}
    assert set(granted) == {("coordination.k8s.io", "leases"), ("", "configmaps"), ("", "pods")}


def test_services_give_per_pod_dns_before_readiness_and_clients_only_ready_brokers() -> None:
    children = by_kind(cluster_children(ClusterSpec.from_resource(cluster())))
    headless = children[("Service", "demo-brokers")]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    client = children[("Service", "demo")]["spec"]
    assert "publishNotReadyAddresses" not in client
    assert {p["name"]: p["port"] for p in client["ports"]} == {"kafka": 9092, "http": 8080}
    assert children[("PodDisruptionBudget", "demo")]["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize(("spec", "message"), [
    ({"config": {"log.dirs": "/elsewhere"}}, "spec.config sets log.dirs, which the operator manages"),
    ({"config": {"port": "1", "broker.id": "3"}}, "spec.config sets broker.id, port, which the operator manages"),
    ({"config": {"min.insync.replicas": "two"}}, "min.insync.replicas"),
    ({"config": {"no.such.key": "1"}}, "no.such.key"),
    ({"listeners": {"kafkaPort": 9000, "httpPort": 9000}}, "listeners.kafkaPort and listeners.httpPort must differ"),
    ({"brokers": 0}, "spec.brokers must be at least 1"),
])
def test_a_spec_the_brokers_would_refuse_is_refused_naming_the_field(spec: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace(".", r"\.")):
        ClusterSpec.from_resource(cluster(spec))
