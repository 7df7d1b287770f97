"""The operator against the real API server: children, conditions, election, and deletion that never sticks.

Why: kopf, server-side apply, owner references, the status subresource and
namespace deletion only behave for real on a real API server. This module
needs no node: broker pods stay Pending, so the operator must say so in
conditions a user can act on (the node test runs them for real).
"""

from __future__ import annotations

import uuid

import pytest

from tests.chart.crd_schema import load_crds, load_examples, openapi_schema
from tests.kube.kube_waits import wait_for
from tests.kube.operator_process import OperatorProcess
from tests.kube.test_kube_crd import GROUP, PLURALS, VERSION, install_crds

pytestmark = [pytest.mark.kube, pytest.mark.timeout(600)]


@pytest.fixture
def custom(kube_api):
    from kubernetes import client

    install_crds(kube_api)
    return client.CustomObjectsApi(kube_api)


@pytest.fixture
def operators(kube_control_plane, kube_namespace, tmp_path):
    started: list[OperatorProcess] = []

    def start() -> OperatorProcess:
        op = OperatorProcess(kubeconfig=kube_control_plane.kubeconfig, namespace=kube_namespace,
                             log=tmp_path / f"operator-{len(started)}.log")
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()
        print(f"----- {op.log}\n{op.tail(40)}")


def get(custom, ns: str, kind: str, name: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[kind], name)


def cond(obj: dict, type_: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), None)


def test_cluster_reconciles_into_owned_children_with_conditions_users_can_act_on(
        custom, kube_api, kube_namespace, operators) -> None:
    from kubernetes import client

    ns = kube_namespace
    op = operators()
    op.wait_active()
    for _path, doc in load_examples():
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[doc["kind"]], doc)
    cluster = get(custom, ns, "Cluster", "demo")
    uid = cluster["metadata"]["uid"]

    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    sts = wait_for(lambda: _maybe(lambda: apps.read_namespaced_stateful_set("demo", ns)), timeout=60,
                   what="StatefulSet demo")
    assert sts.spec.replicas == 3 and sts.spec.service_name == "demo-brokers"
    assert sts.spec.volume_claim_templates[0].spec.resources.requests["storage"] == "10Gi"
    children = {
        "StatefulSet": sts,
        "Service": core.read_namespaced_service("demo-brokers", ns),
        "Service/client": core.read_namespaced_service("demo", ns),
        "ConfigMap": core.read_namespaced_config_map("demo-config", ns),
        "ServiceAccount": core.read_namespaced_service_account("demo-broker", ns),
        "Role": client.RbacAuthorizationV1Api(kube_api).read_namespaced_role("demo-broker", ns),
        "RoleBinding": client.RbacAuthorizationV1Api(kube_api).read_namespaced_role_binding("demo-broker", ns),
        "PodDisruptionBudget": client.PolicyV1Api(kube_api).read_namespaced_pod_disruption_budget("demo", ns),
    }
    for what, child in children.items():
        (ref,) = child.metadata.owner_references
        assert (ref.kind, ref.name, ref.uid, ref.controller) == ("Cluster", "demo", uid, True), what
    assert "min.insync.replicas: '2'" in children["ConfigMap"].data["broker.yaml"]

    # No node here: pods stay Pending, and status says exactly that.
    def cluster_status():
        c = get(custom, ns, "Cluster", "demo")
        ready = cond(c, "Ready")
        return c if ready and ready["observedGeneration"] == c["metadata"]["generation"] else None
    c = wait_for(cluster_status, timeout=60, what="Cluster demo status with conditions")
    ready, progressing = cond(c, "Ready"), cond(c, "Progressing")
    assert (ready["status"], ready["reason"]) == ("False", "BrokersUnreachable"), ready
    assert "no broker pod is Ready" in ready["message"]
    assert (progressing["status"], progressing["message"]) == ("True", "0 of 3 broker pods ready")
    assert c["status"]["bootstrap"] == f"demo.{ns}.svc:9092" and c["status"]["brokers"] == 0
    topic = wait_for(lambda: (lambda t: t if cond(t, "Ready") else None)(get(custom, ns, "Topic", "orders")),
                     timeout=60, what="Topic orders Ready condition")
    assert cond(topic, "Ready")["reason"] == "BrokersUnreachable" and topic["status"]["topicName"] == "orders"
    group = wait_for(lambda: (lambda g: g if cond(g, "Ready") else None)(get(custom, ns, "ConsumerGroup",
                                                                             "orders-audit")),
                     timeout=60, what="ConsumerGroup Ready condition")
    assert cond(group, "Ready")["reason"] == "BrokersUnreachable"
    # kopf's bookkeeping stays in annotations: status holds only what the CRD declares.
    declared = set(openapi_schema(load_crds()["Cluster"])["properties"]["status"]["properties"])
    assert set(c["status"]) <= declared, set(c["status"]) - declared
    assert c["status"]["httpUrl"] == f"http://demo-http.{ns}.svc:8080"
    assert c["status"]["readyBrokers"] == "0/3"

    # A spec change reaches the children; a wrong one is refused in a condition and changes nothing.
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "demo", {"spec": {"brokers": 5}})
    wait_for(lambda: apps.read_namespaced_stateful_set("demo", ns).spec.replicas == 5, timeout=60,
             what="StatefulSet scaled to 5")
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "demo",
                                          {"spec": {"config": {"log.dirs": "/elsewhere"}}})
    bad = wait_for(lambda: (lambda c: c if (cond(c, "Ready") or {}).get("reason") == "InvalidSpec" else None)(
        get(custom, ns, "Cluster", "demo")), timeout=60, what="Ready=False InvalidSpec")
    assert "log.dirs" in cond(bad, "Ready")["message"]
    assert "/elsewhere" not in core.read_namespaced_config_map("demo-config", ns).data["broker.yaml"]
    # The decision is on record as a Warning Event of the Cluster (kubectl describe shows it).
    event = wait_for(lambda: next((e for e in core.list_namespaced_event(ns).items
                                   if e.involved_object.kind == "Cluster" and e.reason == "InvalidSpec"), None),
                     timeout=30, what="InvalidSpec Event on Cluster demo")
    assert event.type == "Warning" and "log.dirs" in event.message and event.involved_object.uid == uid
    assert event.reporting_component == "kelp-operator" and event.count >= 1


def _maybe(call):
    from kubernetes import client

    try:
        return call()
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_one_operator_is_active_and_a_standby_takes_over(custom, kube_api, kube_namespace, operators) -> None:
    from kubernetes import client

    first = operators()
    first.wait_active()
    second = operators()
    wait_for(lambda: (second.health() or {}).get("role") == "standby", timeout=30, what="second operator standby")
    lease = client.CoordinationV1Api(kube_api).read_namespaced_lease("kelp-operator", kube_namespace)
    assert lease.spec.holder_identity and second.health()["role"] == "standby"
    assert first.stop() == 0
    second.wait_active(timeout=30)
    custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "clusters", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Cluster", "metadata": {"name": "solo"}, "spec": {"brokers": 1}})
    wait_for(lambda: _maybe(lambda: client.AppsV1Api(kube_api).read_namespaced_stateful_set("solo", kube_namespace)),
             timeout=60, what="the new active operator reconciles")


def test_finalizers_never_strand_a_namespace(custom, kube_api, kube_control_plane, operators) -> None:
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    ns = f"strand-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    op = OperatorProcess(kubeconfig=kube_control_plane.kubeconfig, namespace=ns,
                         log=kube_control_plane.tmp / f"operator-{ns}.log")
    try:
        op.wait_active()
        for _path, doc in load_examples():
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[doc["kind"]], doc)
        scratch = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Topic", "metadata": {"name": "scratch"},
                   "spec": {"cluster": "demo", "partitions": 1, "deletePolicy": "delete"}}
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "topics", scratch)
        # Only a Topic that must delete its Kafka topic holds a finalizer.
        wait_for(lambda: get(custom, ns, "Topic", "scratch")["metadata"].get("finalizers"), timeout=60,
                 what="finalizer on the deletePolicy=delete Topic")
        wait_for(lambda: cond(get(custom, ns, "Topic", "orders"), "Ready"), timeout=60, what="orders handled")
        assert not get(custom, ns, "Topic", "orders")["metadata"].get("finalizers")
        # The Cluster is gone: the finalizer lets go instead of waiting for brokers that will never answer.
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "demo")
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "topics", "scratch")
        wait_for(lambda: _maybe(lambda: get(custom, ns, "Topic", "scratch")) is None, timeout=60,
                 what="Topic scratch deleted once its Cluster is gone")
    finally:
        assert op.stop() is not None
        print(f"----- {op.log}\n{op.tail(30)}")
    # The operator is gone; the namespace still deletes completely.
    core.delete_namespace(ns)
    wait_for(lambda: _maybe(lambda: core.read_namespace(ns)) is None, timeout=120,
             what=f"namespace {ns} deleted with the operator stopped", interval=0.5)
