"""The operator's production knobs against the real API server (no node): what only a real server proves.

Why: node ports are allocated by the API server, load balancer addresses are
written by a cloud controller into Service status, PersistentVolumeClaims
bind through the PV controller and grow only through the API server's
resize admission (which reads the StorageClass), and a StatefulSet's claim
template is immutable (422). The operator runs as users run it
(`kelp operator`, its Lease, kopf's watches); this test plays the cloud
controller's part by writing load balancer ingress itself. No node: broker
pods stay Pending, which is what these behaviours need.
"""

from __future__ import annotations

import pytest
import yaml

from tests.kube.kube_waits import wait_for
from tests.kube.test_kube_crd import GROUP, VERSION
from tests.kube.test_kube_operator import _maybe, custom, get, operators  # noqa: F401  (fixtures)
from tests.kube.test_kube_operator import cond as condition_of

pytestmark = [pytest.mark.kube, pytest.mark.timeout(600)]


@pytest.fixture
def operator(operators):  # noqa: F811 (pytest fixture)
    op = operators()
    op.wait_active()
    return op


def cluster(name: str, spec: dict) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Cluster", "metadata": {"name": name}, "spec": spec}


def cond(obj: dict, type_: str) -> dict:
    return condition_of(obj, type_) or {}


def _get(api, ns: str, name: str) -> dict:
    return get(api, ns, "Cluster", name)


def test_external_listeners_pod_template_and_disruption_budget(custom, kube_api, kube_namespace, operator) -> None:  # noqa: F811 (pytest fixture)
    from kubernetes import client

    ns = kube_namespace
    core, apps, policy = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api), client.PolicyV1Api(kube_api)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "clusters", cluster("np", {
        "brokers": 3, "listeners": {"external": {"type": "NodePort"}},
        "config": {"default.replication.factor": "3", "min.insync.replicas": "1"},
        "podTemplate": {"metadata": {"labels": {"team": "payments"}}, "priorityClassName": "",
                        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}}))

    # NodePort: the API server allocates a node port per broker; each broker's own file advertises it.
    def files():
        cm = _maybe(lambda: core.read_namespaced_config_map("np-config", ns))
        return cm.data if cm and all(f"np-{n}.yaml" in cm.data for n in range(3)) else None
    data = wait_for(files, timeout=60, what="per-broker config files in np-config")
    for n in range(3):
        svc = core.read_namespaced_service(f"np-external-{n}", ns)
        assert svc.spec.type == "NodePort" and svc.spec.selector == {"statefulset.kubernetes.io/pod-name": f"np-{n}"}
        assert svc.spec.external_traffic_policy == "Local"
        assert yaml.safe_load(data[f"np-{n}.yaml"])["advertised.port"] == svc.spec.ports[0].node_port
        assert svc.metadata.owner_references[0].name == "np"
    sts = wait_for(lambda: _maybe(lambda: apps.read_namespaced_stateful_set("np", ns)), timeout=60,
                   what="StatefulSet np")
    pod = sts.spec.template
    assert pod.metadata.labels["team"] == "payments"
    assert [(t.key, t.operator) for t in pod.spec.tolerations] == [("dedicated", "Exists")]
    assert pod.spec.containers[0].args == ["broker", "--config", "/etc/kelp/$(POD_NAME).yaml"]
    # The budget follows the min.insync rule: RF 3 - min.insync 1 = 2 brokers may be drained at once.
    budget = wait_for(lambda: _maybe(lambda: policy.read_namespaced_pod_disruption_budget("np", ns)), timeout=60,
                      what="PodDisruptionBudget np")
    assert budget.spec.max_unavailable == 2

    # LoadBalancer: no broker pod before its address exists; the "cloud" assigns them, the brokers follow.
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "clusters", cluster("lb", {
        "brokers": 2, "listeners": {"external": {"type": "LoadBalancer"}}}))
    waiting = wait_for(lambda: (lambda c: c if cond(c, "Progressing").get("reason") == "ExternalAddressWaiting"
                                else None)(_get(custom, ns, "lb")), timeout=60, what="lb ExternalAddressWaiting")
    assert "lb-external-0" in cond(waiting, "Progressing")["message"]
    assert apps.read_namespaced_stateful_set("lb", ns).spec.replicas == 0
    for n in range(2):
        core.patch_namespaced_service_status(f"lb-external-{n}", ns, {
            "status": {"loadBalancer": {"ingress": [{"ip": f"203.0.113.{10 + n}"}]}}})
    wait_for(lambda: apps.read_namespaced_stateful_set("lb", ns).spec.replicas == 2, timeout=60,
             what="lb brokers created once their addresses exist")
    lb_files = core.read_namespaced_config_map("lb-config", ns).data
    assert yaml.safe_load(lb_files["lb-1.yaml"])["advertised.host"] == "203.0.113.11"

    # Turning the listener off removes the Services.
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "np",
                                          {"spec": {"listeners": {"external": None}}})
    wait_for(lambda: all(_maybe(lambda n=n: core.read_namespaced_service(f"np-external-{n}", ns)) is None
                         for n in range(3)), timeout=60, what="np external Services deleted")


@pytest.fixture
def volumes(kube_api, kube_namespace):
    """Two StorageClasses (one allows expansion) with Immediate binding, and pre-made PVs for the claims."""
    from kubernetes import client

    core, st = client.CoreV1Api(kube_api), client.StorageV1Api(kube_api)
    made: list[tuple[str, str]] = []
    for klass, expand in ((f"grow-{kube_namespace}", True), (f"fixed-{kube_namespace}", False)):
        st.create_storage_class(client.V1StorageClass(
            metadata=client.V1ObjectMeta(name=klass), provisioner="kubernetes.io/no-provisioner",
            volume_binding_mode="Immediate", allow_volume_expansion=expand))
        made.append(("sc", klass))
        for n in range(2):
            pv = f"{klass}-{n}"
            core.create_persistent_volume(client.V1PersistentVolume(
                metadata=client.V1ObjectMeta(name=pv), spec=client.V1PersistentVolumeSpec(
                    capacity={"storage": "1Gi"}, access_modes=["ReadWriteOnce"], storage_class_name=klass,
                    persistent_volume_reclaim_policy="Retain", host_path=client.V1HostPathVolumeSource(
                        path=f"/tmp/kelp-never-mounted/{pv}"))))
            made.append(("pv", pv))
    yield {"grow": f"grow-{kube_namespace}", "fixed": f"fixed-{kube_namespace}"}
    for kind, name in reversed(made):
        try:
            (core.delete_persistent_volume if kind == "pv" else st.delete_storage_class)(name)
        except client.ApiException:
            pass


def test_storage_grows_in_place_or_is_refused_never_a_raw_422(custom, kube_api, kube_namespace, volumes,  # noqa: F811 (pytest fixture)
                                                              operator) -> None:
    from kubernetes import client

    ns = kube_namespace
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    for name, klass in (("grow", volumes["grow"]), ("fixed", volumes["fixed"])):
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "clusters", cluster(name, {
            "brokers": 2, "storage": {"size": "1Gi", "storageClassName": klass}}))

    def bound(name: str):
        claims = [_maybe(lambda n=n: core.read_namespaced_persistent_volume_claim(f"data-{name}-{n}", ns))
                  for n in range(2)]
        return claims if all(c is not None and c.status.phase == "Bound" for c in claims) else None
    for name in ("grow", "fixed"):
        wait_for(lambda: bound(name), timeout=120, what=f"claims of {name} bound by the PV controller")  # noqa: B023 (wait_for calls it at once)

    # First, what the operator used to do: apply the StatefulSet with a bigger claim template. The server refuses.
    sts = apps.read_namespaced_stateful_set("grow", ns)
    sts.spec.volume_claim_templates[0].spec.resources.requests["storage"] = "2Gi"
    with pytest.raises(client.ApiException) as refused:
        apps.replace_namespaced_stateful_set("grow", ns, sts)
    assert refused.value.status == 422 and "Forbidden" in refused.value.body

    for name in ("grow", "fixed"):
        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "clusters", name,
                                              {"spec": {"storage": {"size": "2Gi"}}})
    wait_for(lambda: all(core.read_namespaced_persistent_volume_claim(f"data-grow-{n}", ns)
                         .spec.resources.requests["storage"] == "2Gi" for n in range(2)),
             timeout=60, what="grow's claims asked to grow to 2Gi")
    assert apps.read_namespaced_stateful_set("grow", ns).spec.volume_claim_templates[0].spec.resources.requests[
        "storage"] == "1Gi"  # the immutable template stays

    def refused_condition():
        c = _get(custom, ns, "fixed")
        return c if cond(c, "Progressing").get("reason") == "StorageChangeRefused" else None
    fixed = wait_for(refused_condition, timeout=60, what="fixed: StorageChangeRefused")
    assert "does not allow volume expansion" in cond(fixed, "Progressing")["message"]
    assert all(core.read_namespaced_persistent_volume_claim(f"data-fixed-{n}", ns).spec.resources.requests["storage"]
               == "1Gi" for n in range(2))
    events = [e for e in core.list_namespaced_event(ns).items if e.involved_object.name == "fixed"]
    assert any(e.reason == "StorageChangeRefused" and e.type == "Warning" for e in events)
    # Everything else is still reconciled: a label change on the pods reaches the StatefulSet.
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "fixed", {
        "spec": {"podTemplate": {"metadata": {"labels": {"tier": "gold"}}}}})
    wait_for(lambda: (apps.read_namespaced_stateful_set("fixed", ns).spec.template.metadata.labels or {}).get("tier")
             == "gold", timeout=60, what="fixed's pod template still reconciled")
