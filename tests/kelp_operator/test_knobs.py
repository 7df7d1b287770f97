"""Production knobs of a Cluster: pod template overrides, the external listener, the PodDisruptionBudget.

What a user relies on: scheduling and security overrides reach the broker
pods (and a real API server would accept them: kubernetes-validate against
Kubernetes 1.34's schemas) without ever taking over the operator's own
selector labels or config hash; with an external listener every broker has
its own Service and advertises its own address (and the config files the
brokers read say so); load-balanced brokers start only once their address
is known and restart when it moves; an external Service the API server
refuses (a node port already taken) is a condition naming it, and no broker
starts without its address; the PodDisruptionBudget lets a node
drain take down only as many brokers as the min.insync rule allows.
"""

from __future__ import annotations

import asyncio

import kubernetes_validate
import pytest
import yaml

from kelp.config.broker import BrokerConfig
from kelp.kube.api import KubeApiError
from kelp.operator.manifests.builders import cluster_children, stateful_set
from kelp.operator.manifests.spec import ClusterSpec, SpecError
from kelp.operator.reconcile.cluster import reconcile_cluster
from kelp.operator.reconcile.runner import Runner
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, resource, statefulset

K8S_VERSION = "1.34"


def spec_of(spec: dict) -> ClusterSpec:
    return ClusterSpec.from_resource({"metadata": {"name": "demo", "namespace": "team-a", "uid": "u", "generation": 1},
                                      "spec": spec})


POD_TEMPLATE = {
    "metadata": {"labels": {"team": "payments"}, "annotations": {"prometheus.io/scrape": "true"}},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "kafka", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                   "whenUnsatisfiable": "DoNotSchedule"}],
    "priorityClassName": "streaming-critical",
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "securityContext": {"fsGroup": 20000, "supplementalGroups": [5]},
}


def test_pod_template_overrides_reach_the_broker_pods() -> None:
    sts = stateful_set(spec_of({"podTemplate": POD_TEMPLATE}))
    kubernetes_validate.validate(sts, K8S_VERSION, strict=True)
    meta, pod = sts["spec"]["template"]["metadata"], sts["spec"]["template"]["spec"]
    assert meta["labels"]["team"] == "payments" and meta["labels"]["app.kubernetes.io/instance"] == "demo"
    assert meta["annotations"]["prometheus.io/scrape"] == "true" and "kelp.dev/config-hash" in meta["annotations"]
    assert pod["affinity"] == POD_TEMPLATE["affinity"] and pod["tolerations"] == POD_TEMPLATE["tolerations"]
    assert pod["priorityClassName"] == "streaming-critical" and pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    # The user's spread replaces the default one; without a labelSelector it selects this cluster's brokers.
    assert pod["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "kelp", "app.kubernetes.io/instance": "demo",
                                          "app.kubernetes.io/component": "broker"}}}]
    # Security context: merged over the defaults, the given keys win.
    assert pod["securityContext"]["fsGroup"] == 20000 and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["supplementalGroups"] == [5]


@pytest.mark.parametrize("template, message", [
    ({"metadata": {"labels": {"app.kubernetes.io/instance": "other"}}}, "select the broker pods"),
    ({"metadata": {"annotations": {"kelp.dev/config-hash": "x"}}}, "which the operator owns"),
])
def test_pod_template_cannot_take_over_what_the_operator_owns(template: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_of({"podTemplate": template})


def test_external_node_ports_one_service_and_one_file_per_broker(tmp_path) -> None:
    spec = spec_of({"brokers": 3, "listeners": {"external": {"type": "NodePort", "nodePorts": [31090, 31091, 31092]}}})
    addresses = {n: {"host": None, "port": 31090 + n} for n in range(3)}
    children = {(m["kind"], m["metadata"]["name"]): m for m in cluster_children(spec, external=addresses)}
    container = children[("StatefulSet", "demo")]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["broker", "--config", "/etc/kelp/$(POD_NAME).yaml"]
    env = {e["name"]: e for e in container["env"]}
    assert env["KELP_ADVERTISED_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert env["KELP_HTTP_HOST"]["value"] == "$(POD_IP)" and env["KELP_HTTP"]["value"] == "http://$(POD_IP):8080"
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["kelp", "broker-ctl", "controlled-shutdown"]
    data = children[("ConfigMap", "demo-config")]["data"]
    assert sorted(data) == ["broker.yaml", "demo-0.yaml", "demo-1.yaml", "demo-2.yaml"]
    (tmp_path / "demo-1.yaml").write_text(data["demo-1.yaml"])
    cfg = BrokerConfig.load(file=str(tmp_path / "demo-1.yaml"),
                            env={"HOSTNAME": "demo-1", "KELP_ADVERTISED_HOST": "192.168.7.4",
                                 "KELP_HTTP_HOST": "10.1.0.2"})
    assert (cfg.broker_id, cfg["advertised.host"], cfg["advertised.port"], cfg["http.host"]) == (
        1, "192.168.7.4", 31091, "10.1.0.2")
    from kelp.operator.manifests.builders import external_service
    svc = external_service(spec, 2)
    kubernetes_validate.validate(svc, K8S_VERSION, strict=True)
    assert svc["metadata"]["name"] == "demo-external-2" and svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["selector"] == {"statefulset.kubernetes.io/pod-name": "demo-2"}
    assert svc["spec"]["ports"][0]["nodePort"] == 31092 and svc["spec"]["externalTrafficPolicy"] == "Local"


@pytest.mark.parametrize("external, message", [
    ({"type": "NodePort", "nodePorts": [31090, 31091]}, "lists 2 port"),
    ({"type": "LoadBalancer", "nodePorts": [1, 2, 3]}, "only used with type NodePort"),
    ({"type": "NodePort", "nodePorts": [31090, 31090, 31091]}, "must not repeat"),
    ({"type": "Ingress"}, "NodePort or LoadBalancer"),
])
def test_external_listener_mistakes_are_named(external: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_of({"brokers": 3, "listeners": {"external": external}})


@pytest.mark.parametrize("config, pdb, expected", [
    ({}, {}, 1),  # RF 3, min.insync 2
    ({"default.replication.factor": "5", "min.insync.replicas": "2"}, {}, 3),
    ({"default.replication.factor": "2", "min.insync.replicas": "2"}, {}, 1),  # no room: one at a time
    ({}, {"maxUnavailable": 0}, 0),
])
def test_pod_disruption_budget_follows_the_min_insync_rule(config: dict, pdb: dict, expected: int) -> None:
    spec = spec_of({"brokers": 5, "config": config, "podDisruptionBudget": pdb})
    budget = {m["kind"]: m for m in cluster_children(spec)}["PodDisruptionBudget"]
    assert budget["spec"]["maxUnavailable"] == expected


def run(body: dict, kube: FakeKube, admin: FakeAdmin):
    return asyncio.run(reconcile_cluster(body, kube, admin_of(admin)))


def test_load_balanced_brokers_start_once_their_address_is_known_and_restart_when_it_moves() -> None:
    body = resource("Cluster", "demo", {"brokers": 2, "listeners": {"external": {
        "type": "LoadBalancer", "annotations": {"example.com/lb-type": "nlb"}}}})
    kube = FakeKube(body)
    admin = FakeAdmin(brokers=[])
    admin.unreachable = True
    _, conds = run(body, kube, admin)
    progressing = next(c for c in conds if c["type"] == "Progressing")
    assert progressing["reason"] == "ExternalAddressWaiting" and "demo-external-0" in progressing["message"]
    assert kube.events("ExternalAddressWaiting"), "a wait the operator starts is an Event too"
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 0
    svc = kube.objects[("Service", "ns", "demo-external-1")]
    assert svc["spec"]["type"] == "LoadBalancer" and svc["metadata"]["annotations"] == {"example.com/lb-type": "nlb"}

    # The cloud assigns addresses: the brokers' files advertise them, and the brokers may start.
    for n, ip in ((0, "203.0.113.10"), (1, "203.0.113.11")):
        kube.objects[("Service", "ns", f"demo-external-{n}")]["status"] = {"loadBalancer": {"ingress": [{"ip": ip}]}}
    status, conds = run(body, kube, admin)
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 2
    files = kube.objects[("ConfigMap", "ns", "demo-config")]["data"]
    assert yaml.safe_load(files["demo-1.yaml"])["advertised.host"] == "203.0.113.11"
    assert yaml.safe_load(files["demo-1.yaml"])["advertised.port"] == 9092

    # Broker 1 registered its old address (its load balancer moved since): it is marked and restarted.
    kube.put(statefulset("demo", 2))
    for n in range(2):
        kube.put(broker_pod("demo", n))
    admin = FakeAdmin(brokers=[0, 1], topics={"orders": [{"replicas": [0, 1], "isr": [0, 1]}]}, min_insync=1)
    registered = {0: ("203.0.113.10", 9092), 1: ("198.51.100.7", 9092)}
    real = admin.request

    async def view(method, path, body=None, **kw):
        answer = await real(method, path, body, **kw)
        if path == "/admin/v1/cluster":
            answer["brokers"] = [{"id": b, "host": h, "port": p, "rack": None} for b, (h, p) in registered.items()]
        return answer
    admin.request = view
    status, conds = run(body, kube, admin)
    assert status["externalAddresses"] == ["203.0.113.10:9092", "203.0.113.11:9092"]
    assert kube.events("AdvertisedAddressChanged") and kube.deleted == [("Pod", "demo-1")]


def test_external_services_of_removed_brokers_go_away() -> None:
    body = resource("Cluster", "demo", {"brokers": 2, "listeners": {"external": {"type": "NodePort"}}})
    kube = FakeKube(body)
    admin = FakeAdmin(brokers=[])
    admin.unreachable = True
    run(body, kube, admin)
    assert {k[2] for k in kube.objects if k[0] == "Service"} == {"demo", "demo-brokers", "demo-http",
                                                                   "demo-external-0", "demo-external-1"}
    body["spec"]["listeners"] = {}
    kube.put(body)
    run(body, kube, admin)
    assert {k[2] for k in kube.objects if k[0] == "Service"} == {"demo", "demo-brokers", "demo-http"}
    # Removing a Service cuts external clients off that broker: leadership is proven first, an Event says so.
    assert kube.fences >= 2 and len(kube.events("ExternalServiceRemoved")) == 2


def _refuse(name: str, status: int, message: str):
    async def hook(manifest) -> None:
        if manifest["metadata"]["name"] == name:
            raise KubeApiError(status, message)
    return hook


TAKEN = 'Service "demo-external-1" is invalid: spec.ports[0].nodePort: Invalid value: 31091: provided port is ' \
        'already allocated'


def test_a_refused_external_service_is_a_condition_naming_it_not_a_failed_pass() -> None:
    # Broker 1's pinned node port is taken by another Service: the API server answers 422.
    body = resource("Cluster", "demo", {"brokers": 3, "listeners": {"external": {
        "type": "NodePort", "nodePorts": [31090, 31091, 31092]}}})
    kube = FakeKube(body)
    kube.hooks[("apply", "Service")] = _refuse("demo-external-1", 422, TAKEN)
    admin = FakeAdmin(brokers=[])
    admin.unreachable = True
    assert asyncio.run(Runner(kube, admin_of(admin)).reconcile("Cluster", "ns", "demo"))
    conds = {c["type"]: c for c in kube.objects[("Cluster", "ns", "demo")]["status"]["conditions"]}
    assert conds["Ready"]["reason"] != "ReconcileFailed", conds["Ready"]
    progressing = conds["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("False", "ApplyRefused"), progressing
    assert "Service demo-external-1" in progressing["message"] and "provided port is already allocated" in \
        progressing["message"] and "spec.listeners.external" in progressing["message"]
    (event,) = kube.events("ApplyRefused")
    assert event["type"] == "Warning" and "demo-external-1" in event["message"]
    # Broker 1 would advertise an address nobody reaches (and brokers replicate through it): it waits, and so does
    # broker 2 above it; broker 0 and every other child are applied.
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 1
    assert ("Service", "ns", "demo-external-2") in kube.objects and ("ConfigMap", "ns", "demo-config") in kube.objects

    # The user picks a free port: the next pass applies it and every broker starts.
    body["spec"]["listeners"]["external"]["nodePorts"] = [31090, 31095, 31092]
    body["metadata"]["generation"] = 2
    kube.put(body)
    del kube.hooks[("apply", "Service")]
    asyncio.run(Runner(kube, admin_of(admin)).reconcile("Cluster", "ns", "demo"))
    progressing = next(c for c in kube.objects[("Cluster", "ns", "demo")]["status"]["conditions"]
                       if c["type"] == "Progressing")
    assert progressing["reason"] != "ApplyRefused" and kube.objects[("StatefulSet", "ns", "demo")]["spec"][
        "replicas"] == 3
    assert yaml.safe_load(kube.objects[("ConfigMap", "ns", "demo-config")]["data"]["demo-1.yaml"])[
        "advertised.port"] == 31095


def test_a_refused_node_port_change_keeps_the_brokers_address() -> None:
    body = resource("Cluster", "demo", {"brokers": 2, "listeners": {"external": {
        "type": "NodePort", "nodePorts": [31090, 31091]}}})
    kube = FakeKube(body)
    admin = FakeAdmin(brokers=[])
    admin.unreachable = True
    run(body, kube, admin)
    kube.put(statefulset("demo", 2))
    body["spec"]["listeners"]["external"]["nodePorts"] = [31090, 31099]  # taken
    kube.hooks[("apply", "Service")] = _refuse("demo-external-1", 422, TAKEN.replace("31091", "31099"))
    _, conds = run(body, kube, admin)
    assert next(c for c in conds if c["type"] == "Progressing")["reason"] == "ApplyRefused"
    # The Service keeps its port, and broker 1 keeps advertising it; nothing shrinks.
    assert kube.objects[("Service", "ns", "demo-external-1")]["spec"]["ports"][0]["nodePort"] == 31091
    assert yaml.safe_load(kube.objects[("ConfigMap", "ns", "demo-config")]["data"]["demo-1.yaml"])[
        "advertised.port"] == 31091
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 2
