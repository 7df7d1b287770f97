"""`helm install` of charts/kelp into the kube tier's real API server.

What a user relies on: the chart installs the CRDs and the operator's
Deployment, ServiceAccount and RBAC; the RBAC really lets the operator's
ServiceAccount do its work (checked by the API server's own authorizer, and by
creating the broker Role as that ServiceAccount, which RBAC's escalation check
allows only when the operator holds every permission it grants); a namespaced
install grants nothing outside its namespaces; `helm uninstall` removes the
release's objects and keeps the CRDs (and so every Kelp resource).

The operator pod never runs here (no image on the control-plane-only tier), so
nothing waits for it: `--wait=false`.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kelp.operator.manifests.rack import cluster_role as rack_cluster_role
from tests.chart.crd_schema import CHART_DIR, load_crds
from tests.chart.helm import helm_binary, run_helm
from tests.kube.kube_waits import wait_for

pytestmark = [pytest.mark.kube,
              pytest.mark.skipif(helm_binary() is None, reason="helm not installed (test extra helm-binary)")]

RELEASE = "kelp"
BROKER_ROLE_RULES = [  # what the operator grants broker pods (docs/operator.md)
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
     "verbs": ["get", "list", "watch", "create", "update", "delete"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
]


def helm(kube_control_plane, home: Path, *args: str, check: bool = True):
    return run_helm(*args, "--kubeconfig", str(kube_control_plane.kubeconfig), home=home,
                    kubeconfig=kube_control_plane.kubeconfig, timeout=180, check=check)


def remove_kelp_crds(kube_api) -> None:
    """Delete the kelp.dev CRDs (an earlier module may have created them) and wait until gone."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(kube_api)
    names = [crd["metadata"]["name"] for crd in load_crds().values()]
    for name in names:
        try:
            ext.delete_custom_resource_definition(name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def gone() -> bool:
        present = {c.metadata.name for c in ext.list_custom_resource_definition().items}
        return not present & set(names)

    wait_for(gone, timeout=90, what="kelp.dev CRDs deleted")


def allowed(kube_api, *, sa_namespace: str, namespace: str | None, verb: str, group: str,
            resource: str, subresource: str | None = None, name: str | None = None) -> bool:
    """Ask the API server's authorizer whether the chart's ServiceAccount may do this."""
    from kubernetes import client

    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{sa_namespace}:{RELEASE}",
        groups=["system:serviceaccounts", f"system:serviceaccounts:{sa_namespace}", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(
            namespace=namespace, verb=verb, group=group, resource=resource, subresource=subresource, name=name)))
    return client.AuthorizationV1Api(kube_api).create_subject_access_review(review).status.allowed


def gone(read) -> bool:
    from kubernetes import client

    try:
        read()
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


@pytest.fixture
def helm_home(tmp_path: Path) -> Path:
    return tmp_path / "helm-home"


@pytest.fixture
def extra_namespaces(kube_api):
    """Two more fresh namespaces for a namespaced install; deleted afterwards."""
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    names = [f"w-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for name in names:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield names
    for name in names:
        try:
            core.delete_namespace(name)
        except client.ApiException:
            pass


def test_install_all_namespaces_and_uninstall(kube_control_plane, kube_api, kube_namespace, helm_home) -> None:
    from kubernetes import client

    ns = kube_namespace
    remove_kelp_crds(kube_api)
    out = helm(kube_control_plane, helm_home, "install", RELEASE, str(CHART_DIR), "--namespace", ns,
               "--set", "watchAnyNamespace=true", "--set", "rbac.rackAwareness=true",
               "--wait=false", "--timeout", "120s").stdout
    assert "STATUS: deployed" in out
    assert "It watches every namespace." in out

    ext = client.ApiextensionsV1Api(kube_api)
    for crd in load_crds().values():
        got = ext.read_custom_resource_definition(crd["metadata"]["name"])
        assert got.spec.names.categories == ["kelp"]
        wait_for(lambda: {c.type: c.status for c in (ext.read_custom_resource_definition(
            crd["metadata"]["name"]).status.conditions or [])}.get("Established") == "True",  # noqa: B023 (wait_for calls it at once)
            timeout=30, what=f"CRD {crd['metadata']['name']} Established")

    apps, core, rbac = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api), client.RbacAuthorizationV1Api(kube_api)
    deploy = apps.read_namespaced_deployment(RELEASE, ns)
    assert deploy.spec.replicas == 2
    container = deploy.spec.template.spec.containers[0]
    assert container.command == ["kelp", "operator"]
    assert "--all-namespaces" in container.args
    assert deploy.spec.template.spec.service_account_name == RELEASE
    core.read_namespaced_service_account(RELEASE, ns)
    cluster_name = f"{RELEASE}-{ns}"
    rbac.read_cluster_role(cluster_name)
    binding = rbac.read_cluster_role_binding(cluster_name)
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [("ServiceAccount", RELEASE, ns)]

    # The authorizer agrees the operator may do its work in any namespace...
    elsewhere = "any-namespace"
    for verb, group, resource, sub in [
        ("watch", "kelp.dev", "topics", None), ("patch", "kelp.dev", "clusters", "status"),
        ("update", "kelp.dev", "clusters", "finalizers"), ("create", "apps", "statefulsets", None),
        ("create", "", "services", None), ("create", "rbac.authorization.k8s.io", "roles", None),
        ("create", "policy", "poddisruptionbudgets", None), ("update", "coordination.k8s.io", "leases", None),
        ("create", "", "events", None), ("get", "", "events", None), ("delete", "", "pods", None),
        ("patch", "", "pods", None), ("patch", "", "persistentvolumeclaims", None),
        ("patch", "networking.k8s.io", "networkpolicies", None),
        ("delete", "networking.k8s.io", "networkpolicies", None),
        ("get", "", "secrets", None), ("create", "", "secrets", None),  # a secured Cluster's CAs, KelpUsers
    ]:
        assert allowed(kube_api, sa_namespace=ns, namespace=elsewhere, verb=verb, group=group,
                       resource=resource, subresource=sub), f"operator may not {verb} {resource}/{sub or ''}"
    assert allowed(kube_api, sa_namespace=ns, namespace=None, verb="list", group="apiextensions.k8s.io",
                   resource="customresourcedefinitions")
    assert allowed(kube_api, sa_namespace=ns, namespace=None, verb="watch", group="", resource="namespaces")
    # rack.topologyKey: the shared kelp-broker-rack ClusterRole (get nodes) and per-Cluster bindings to it
    assert allowed(kube_api, sa_namespace=ns, namespace=None, verb="get", group="", resource="nodes")
    assert allowed(kube_api, sa_namespace=ns, namespace=None, verb="get", group="storage.k8s.io",
                   resource="storageclasses")
    assert allowed(kube_api, sa_namespace=ns, namespace=None, verb="patch", group="rbac.authorization.k8s.io",
                   resource="clusterroles", name="kelp-broker-rack")
    assert allowed(kube_api, sa_namespace=ns, namespace=None, verb="delete", group="rbac.authorization.k8s.io",
                   resource="clusterrolebindings")
    # ...and nothing beyond it: what the code never deletes, it may not delete (issue 32).
    assert not allowed(kube_api, sa_namespace=ns, namespace=elsewhere, verb="create", group="apps",
                       resource="deployments")
    for verb, group, resource in [("delete", "", "secrets"), ("delete", "apps", "statefulsets"),
                                  ("delete", "", "persistentvolumeclaims"), ("delete", "", "serviceaccounts"),
                                  ("delete", "rbac.authorization.k8s.io", "roles"), ("update", "", "secrets")]:
        assert not allowed(kube_api, sa_namespace=ns, namespace=elsewhere, verb=verb, group=group,
                           resource=resource), f"operator may {verb} {resource}, which it never does"
    assert not allowed(kube_api, sa_namespace=ns, namespace=None, verb="patch",
                       group="rbac.authorization.k8s.io", resource="clusterroles", name="cluster-admin")
    assert not allowed(kube_api, sa_namespace=ns, namespace=None, verb="delete",
                       group="rbac.authorization.k8s.io", resource="clusterroles", name="kelp-broker-rack")

    # As the operator's ServiceAccount, create the broker Role: RBAC refuses a Role
    # granting more than its creator holds, unless the creator may `escalate`.
    as_operator = kube_control_plane.api_client()
    as_operator.set_default_header("Impersonate-User", f"system:serviceaccount:{ns}:{RELEASE}")
    try:
        created = client.RbacAuthorizationV1Api(as_operator).create_namespaced_role(ns, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "demo-broker"}, "rules": BROKER_ROLE_RULES})
        assert created.metadata.name == "demo-broker"
        # The rack ClusterRole as the operator builds it passes the escalation check; one granting what
        # the operator does not hold (deployments) is refused, so `create clusterroles` grants nothing more.
        rbac_as_operator = client.RbacAuthorizationV1Api(as_operator)
        rack_role = rack_cluster_role()
        if not gone(lambda: rbac.read_cluster_role(rack_role["metadata"]["name"])):  # an operator made it before
            rbac.delete_cluster_role(rack_role["metadata"]["name"])
        rbac_as_operator.create_cluster_role(rack_role)
        try:
            with pytest.raises(client.ApiException) as refused:
                rbac_as_operator.create_cluster_role({**rack_role, "metadata": {"name": f"kelp-greedy-{ns}"},
                                                      "rules": [{"apiGroups": ["apps"], "resources": ["deployments"],
                                                                 "verbs": ["create"]}]})
            assert refused.value.status == 403
        finally:
            rbac.delete_cluster_role(rack_role["metadata"]["name"])
    finally:
        as_operator.close()

    out = helm(kube_control_plane, helm_home, "uninstall", RELEASE, "--namespace", ns, "--wait",
               "--timeout", "60s").stdout
    assert f'release "{RELEASE}" uninstalled' in out
    wait_for(lambda: gone(lambda: apps.read_namespaced_deployment(RELEASE, ns)), timeout=60,
             what="operator Deployment deleted")
    assert gone(lambda: core.read_namespaced_service_account(RELEASE, ns))
    assert gone(lambda: rbac.read_cluster_role(cluster_name))
    assert gone(lambda: rbac.read_cluster_role_binding(cluster_name))
    # helm never deletes CRDs: the user's Kelp resources survive an uninstall.
    for crd in load_crds().values():
        ext.read_custom_resource_definition(crd["metadata"]["name"])
    listed = helm(kube_control_plane, helm_home, "list", "--namespace", ns, "--short").stdout
    assert RELEASE not in listed.split()


def test_install_listed_namespaces(kube_control_plane, kube_api, kube_namespace, extra_namespaces,
                                   helm_home) -> None:
    from kubernetes import client

    ns, (watched_a, watched_b) = kube_namespace, extra_namespaces
    out = helm(kube_control_plane, helm_home, "install", RELEASE, str(CHART_DIR), "--namespace", ns,
               "--set", f"watchNamespaces={{{watched_a},{watched_b}}}", "--wait=false", "--timeout", "120s").stdout
    assert f"It watches the namespace(s) {watched_a}, {watched_b}." in out

    rbac = client.RbacAuthorizationV1Api(kube_api)
    for watched in (watched_a, watched_b):
        rbac.read_namespaced_role(RELEASE, watched)
        rbac.read_namespaced_role_binding(RELEASE, watched)
        assert allowed(kube_api, sa_namespace=ns, namespace=watched, verb="create", group="apps",
                       resource="statefulsets")
        assert allowed(kube_api, sa_namespace=ns, namespace=watched, verb="patch", group="kelp.dev",
                       resource="topics", subresource="status")
    # The release namespace holds only the election Lease; other namespaces nothing.
    assert allowed(kube_api, sa_namespace=ns, namespace=ns, verb="update", group="coordination.k8s.io",
                   resource="leases")
    assert not allowed(kube_api, sa_namespace=ns, namespace=ns, verb="create", group="apps",
                       resource="statefulsets")
    assert not allowed(kube_api, sa_namespace=ns, namespace="unwatched", verb="list", group="kelp.dev",
                       resource="clusters")
    assert allowed(kube_api, sa_namespace=ns, namespace=None, verb="watch", group="apiextensions.k8s.io",
                   resource="customresourcedefinitions")
    args = client.AppsV1Api(kube_api).read_namespaced_deployment(RELEASE, ns).spec.template.spec.containers[0].args
    assert args[:4] == ["--namespace", watched_a, "--namespace", watched_b]

    helm(kube_control_plane, helm_home, "uninstall", RELEASE, "--namespace", ns, "--wait", "--timeout", "60s")
    for watched in (watched_a, watched_b):
        assert gone(lambda: rbac.read_namespaced_role(RELEASE, watched))  # noqa: B023 (gone calls it at once)
        assert gone(lambda: rbac.read_namespaced_role_binding(RELEASE, watched))  # noqa: B023 (gone calls it at once)
    assert gone(lambda: rbac.read_namespaced_role(f"{RELEASE}-election", ns))
