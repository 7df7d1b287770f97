"""The Helm chart and the CRDs without a cluster: lint, render, validate, stay in sync.

A user installs Kelp with `helm install`; these tests check what they would
get: a chart that lints strictly, renders valid Kubernetes objects in both
RBAC modes (the release namespace by default, a list, or every namespace),
grants the operator exactly what it calls, runs the operator the way the
operator expects (`kelp operator`, kopf's liveness endpoint, Lease election
with two replicas), and ships exactly the CRDs of crds/.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from kelp.operator.manifests.rack import cluster_role as rack_cluster_role
from tests.chart.crd_schema import CHART_DIR, CRD_DIR, crd_files, load_crds
from tests.chart.helm import helm_binary, run_helm

K8S_VERSION = "1.34"

pytestmark = pytest.mark.skipif(helm_binary() is None, reason="helm not installed (test extra helm-binary)")


@pytest.fixture
def helm_home(tmp_path: Path) -> Path:
    return tmp_path / "helm-home"


def render(helm_home: Path, *sets: str, namespace: str = "kelp-system") -> list[dict]:
    args = ["template", "kelp", str(CHART_DIR), "--namespace", namespace, "--include-crds"]
    for value in sets:
        args += ["--set", value]
    out = run_helm(*args, home=helm_home).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def rules_of(role: dict) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs."""
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def test_known_kubernetes_version() -> None:
    assert K8S_VERSION in {v.rsplit(".", 1)[0] if v.count(".") > 1 else v
                           for v in kubernetes_validate.utils.all_versions()}


def test_helm_lint_strict(helm_home: Path) -> None:
    proc = run_helm("lint", "--strict", str(CHART_DIR), home=helm_home)
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("value, field", [
    ("logLevel=LOUD", "logLevel"),
    ("replicaCount=0", "replicaCount"),
    ("watchNamespaces={Team_A}", "watchNamespaces"),
    ("image.pullPolicy=Sometimes", "pullPolicy"),
    ("brokerAddress=dns", "brokerAddress"),
    ("leaseDurationSeconds=0", "leaseDurationSeconds"),
    ("leaseDurationSeconds=0.5", "leaseDurationSeconds"),
    ("resyncSeconds=0", "resyncSeconds"),
    ("resyncSeconds=soon", "resyncSeconds"),
])
def test_values_outside_the_schema_are_refused(helm_home: Path, value: str, field: str) -> None:
    proc = run_helm("template", "kelp", str(CHART_DIR), "--set", value, home=helm_home, check=False)
    assert proc.returncode != 0
    assert field in proc.stderr


def test_existing_service_account(helm_home: Path) -> None:
    docs = render(helm_home, "serviceAccount.create=false", "serviceAccount.name=ops-operator")
    assert not by_kind(docs, "ServiceAccount")
    (deploy,) = by_kind(docs, "Deployment")
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == "ops-operator"
    (binding,) = by_kind(docs, "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == "ops-operator"


def test_missing_service_account_name_is_named(helm_home: Path) -> None:
    proc = run_helm("template", "kelp", str(CHART_DIR), "--set", "serviceAccount.create=false",
                    home=helm_home, check=False)
    assert proc.returncode != 0
    assert "serviceAccount.name is required when serviceAccount.create is false" in proc.stderr


@pytest.mark.parametrize("sets", [(), ("watchAnyNamespace=true", "rbac.rackAwareness=true"),
                                  ("watchNamespaces={a,b}",)],
                         ids=["release-namespace", "all-namespaces", "two-namespaces"])
def test_every_rendered_object_is_valid_kubernetes(helm_home: Path, sets: tuple[str, ...]) -> None:
    docs = render(helm_home, *sets)
    assert {d["kind"] for d in docs} >= {"CustomResourceDefinition", "Deployment", "ServiceAccount",
                                         "ClusterRole", "ClusterRoleBinding"}
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}")


def test_repository_crds_are_valid_kubernetes() -> None:
    for kind, crd in load_crds().items():
        try:
            kubernetes_validate.validate(crd, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"CRD of {kind}: {exc.message} at {list(exc.path)}")


def test_chart_crds_are_byte_identical_to_crds_dir() -> None:
    ours = {p.name: p.read_bytes() for p in crd_files()}
    shipped = {p.name: p.read_bytes() for p in sorted((CHART_DIR / "crds").glob("*"))}
    assert ours, f"no CRDs in {CRD_DIR}"
    assert sorted(shipped) == sorted(ours), "charts/kelp/crds/ has other files than crds/: run `make chart-crds`"
    drifted = [name for name in ours if shipped[name] != ours[name]]
    assert not drifted, f"charts/kelp/crds/ differs from crds/ in {drifted}: run `make chart-crds`"


def test_rendered_crds_are_the_repository_crds(helm_home: Path) -> None:
    rendered = {d["metadata"]["name"]: d for d in by_kind(render(helm_home), "CustomResourceDefinition")}
    assert rendered == {c["metadata"]["name"]: c for c in load_crds().values()}


def test_operator_deployment_defaults(helm_home: Path) -> None:
    (deploy,) = by_kind(render(helm_home), "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deploy["spec"]["replicas"] == 2
    assert deploy["metadata"]["namespace"] == "kelp-system"
    assert container["image"] == "kelp:0.1.0"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["command"] == ["kelp", "operator"]
    assert container["args"] == ["--namespace", "kelp-system", "--liveness", "http://0.0.0.0:8081/healthz"]
    env = {e["name"]: e for e in container["env"]}
    assert env["KELP_LOG_LEVEL"]["value"] == "INFO"
    assert env["KELP_OPERATOR_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # The Lease holder identity is new per process (`<pod name>-<hex>`, the operator's fallback without POD_NAME):
    # a container restarted in the same pod must stand by, not take its pod's Lease back as a renewal.
    assert "POD_NAME" not in env
    assert "KELP_OPERATOR_RESYNC_SECONDS" not in env  # empty leaseDurationSeconds/resyncSeconds: the operator's 15 s
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert ports["health"] == 8081
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert pod["serviceAccountName"] == "kelp"
    labels = deploy["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "kelp"
    assert labels["app.kubernetes.io/instance"] == "kelp"
    assert labels["app.kubernetes.io/version"] == "0.1.0"
    assert labels["app.kubernetes.io/managed-by"] == "Helm"
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deploy["spec"]["template"]["metadata"]["labels"].items()


def test_values_reach_the_deployment(helm_home: Path) -> None:
    (deploy,) = by_kind(render(helm_home, "replicaCount=3", "logLevel=DEBUG", "image.tag=0.2.0",
                               "image.repository=registry.example/kelp", "nodeSelector.pool=ops",
                               "watchNamespaces={a,b}", "brokerAddress=pod-ip", "leaseDurationSeconds=6",
                               "resyncSeconds=2.5"), "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deploy["spec"]["replicas"] == 3
    assert container["image"] == "registry.example/kelp:0.2.0"
    assert container["args"] == ["--namespace", "a", "--namespace", "b",
                                 "--liveness", "http://0.0.0.0:8081/healthz", "--lease-duration", "6"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KELP_LOG_LEVEL"] == "DEBUG" and env["KELP_OPERATOR_BROKER_ADDRESS"] == "pod-ip"
    assert env["KELP_OPERATOR_RESYNC_SECONDS"] == "2.5"
    assert pod["nodeSelector"] == {"pool": "ops"}


# What the operator calls (issue 32: the chart grants this and nothing more). Children are server-side applied
# (create, patch); it deletes only pods, Services and NetworkPolicies; kopf watches the kelp.dev kinds and patches
# their annotations, finalizers and status.
KINDS = ("clusters", "topics", "consumergroups", "kelpusers")
OPERATOR_CALLS = {
    ("kelp.dev", "clusters"): {"get", "list", "watch", "patch", "update"},
    ("kelp.dev", "topics"): {"get", "list", "watch", "patch", "update"},
    ("kelp.dev", "consumergroups"): {"get", "list", "watch", "patch", "update"},
    ("kelp.dev", "kelpusers"): {"get", "list", "watch", "patch", "update"},  # patch: the operator's own finalizer
    **{("kelp.dev", f"{kind}/status"): {"get", "patch", "update"} for kind in KINDS},
    # blockOwnerDeletion on the children's owner references needs update on the owner's finalizers
    **{("kelp.dev", f"{kind}/finalizers"): {"update"} for kind in KINDS},
    ("", "secrets"): {"get", "list", "create", "patch"},  # CAs, certificates, user credentials; never deleted
    ("apps", "statefulsets"): {"get", "create", "patch"},
    ("", "services"): {"get", "list", "create", "patch", "delete"},  # external and HTTP Services switched off
    ("", "serviceaccounts"): {"create", "patch"},
    ("", "persistentvolumeclaims"): {"get", "patch"},  # volumes grown in place
    ("", "pods"): {"get", "list", "watch", "delete", "patch"},  # rolling restarts, manual-rolling-update marks
    ("", "events"): {"get", "create", "patch"},  # one Event per decision, its count bumped when repeated
    ("events.k8s.io", "events"): {"get", "create", "patch"},
    ("rbac.authorization.k8s.io", "roles"): {"create", "patch"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"create", "patch"},
    ("policy", "poddisruptionbudgets"): {"create", "patch"},
    ("networking.k8s.io", "networkpolicies"): {"get", "create", "patch", "delete"},  # spec.networkPolicy
}


def _broker_role_rights() -> dict[tuple[str, str], set[str]]:
    """What the broker Role grants: RBAC's escalation check makes its creator hold it too."""
    from kelp.operator.manifests.builders import role
    from kelp.operator.manifests.spec import ClusterSpec

    return rules_of(role(ClusterSpec.from_resource({"metadata": {"name": "demo", "namespace": "ns"}, "spec": {}})))


def operator_needs() -> dict[tuple[str, str], set[str]]:
    needs = {k: set(v) for k, v in OPERATOR_CALLS.items()}
    for res, verbs in _broker_role_rights().items():
        needs[res] = needs.get(res, set()) | verbs
    return needs


CLUSTER_SCOPED_NEEDS = {
    ("", "namespaces"): {"get", "list", "watch"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},
    ("storage.k8s.io", "storageclasses"): {"get"},  # may a broker volume grow in place?
}
# rbac.rackAwareness: server-side apply of the shared ClusterRole and a per-Cluster binding, the resync's
# clean-up of bindings whose Cluster is gone, and (RBAC's escalation check) what the ClusterRole grants.
RACK_NEEDS = {
    ("rbac.authorization.k8s.io", "clusterroles"): {"create", "get", "patch"},
    ("rbac.authorization.k8s.io", "clusterrolebindings"): {"list", "create", "patch", "delete"},
    **{(group, res): set(rule["verbs"]) for rule in rack_cluster_role()["rules"]
       for group in rule["apiGroups"] for res in rule["resources"]},
}


def _missing(granted: dict[tuple[str, str], set[str]], needs: dict) -> dict:
    return {res: verbs - granted.get(res, set()) for res, verbs in needs.items()
            if verbs - granted.get(res, set())}


def _beyond(granted: dict[tuple[str, str], set[str]], needs: dict) -> dict:
    return {res: verbs - needs.get(res, set()) for res, verbs in granted.items() if verbs - needs.get(res, set())}


def test_the_chart_grants_what_the_operator_calls_and_nothing_more(helm_home: Path) -> None:
    # Issue 32, item 6: delete on Secrets, PVCs, StatefulSets and more, which the code never does.
    for sets in ((), ("watchAnyNamespace=true",), ("watchNamespaces={a,b}",), ("certManager.enabled=true",)):
        docs = render(helm_home, *sets)
        for role in by_kind(docs, "Role") + by_kind(docs, "ClusterRole"):
            granted = rules_of(role)
            if ("kelp.dev", "clusters") not in granted:
                continue  # the election Role, or the cluster-scoped reads alone
            granted = {k: v for k, v in granted.items() if k not in CLUSTER_SCOPED_NEEDS}
            certs = {("cert-manager.io", "certificates"): {"get", "create", "patch"}}
            assert _beyond(granted, operator_needs() | certs) == {}, (sets, role["metadata"]["name"])
            assert _missing(granted, operator_needs()) == {}, (sets, role["metadata"]["name"])
    # No cluster-wide write at all unless rack awareness is asked for.
    (cluster_role,) = by_kind(render(helm_home), "ClusterRole")
    assert rules_of(cluster_role) == CLUSTER_SCOPED_NEEDS
    (cluster_role,) = by_kind(render(helm_home, "rbac.rackAwareness=true"), "ClusterRole")
    assert rules_of(cluster_role) == CLUSTER_SCOPED_NEEDS | RACK_NEEDS


def test_rbac_is_namespaced_by_default(helm_home: Path) -> None:
    docs = render(helm_home)
    (deploy,) = by_kind(docs, "Deployment")
    assert deploy["spec"]["template"]["spec"]["containers"][0]["args"][:2] == ["--namespace", "kelp-system"]
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in by_kind(docs, "Role")}
    assert roles == {("kelp-system", "kelp")}, "the release namespace alone, its Lease included"
    (binding,) = by_kind(docs, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kelp", "namespace": "kelp-system"}]


def test_rbac_all_namespaces(helm_home: Path) -> None:
    docs = render(helm_home, "watchAnyNamespace=true", "watchNamespaces={ignored}", "rbac.rackAwareness=true")
    assert not by_kind(docs, "Role") and not by_kind(docs, "RoleBinding")
    (role,) = by_kind(docs, "ClusterRole")
    (binding,) = by_kind(docs, "ClusterRoleBinding")
    (deploy,) = by_kind(docs, "Deployment")
    assert deploy["spec"]["template"]["spec"]["containers"][0]["args"][0] == "--all-namespaces"
    assert role["metadata"]["name"] == "kelp-kelp-system"
    assert _missing(rules_of(role), operator_needs() | CLUSTER_SCOPED_NEEDS | RACK_NEEDS) == {}
    assert not {"bind", "escalate", "*"} & set().union(*rules_of(role).values())
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kelp", "namespace": "kelp-system"}]


def test_rbac_listed_namespaces(helm_home: Path) -> None:
    docs = render(helm_home, "watchNamespaces={a,b}")
    (cluster_role,) = by_kind(docs, "ClusterRole")
    # Cluster-wide: only what kopf must read across namespaces.
    assert set(rules_of(cluster_role)) == set(CLUSTER_SCOPED_NEEDS)
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in by_kind(docs, "Role")}
    bindings = {(b["metadata"]["namespace"], b["metadata"]["name"]): b for b in by_kind(docs, "RoleBinding")}
    assert set(roles) == set(bindings) == {("a", "kelp"), ("b", "kelp"), ("kelp-system", "kelp-election")}
    for ns in ("a", "b"):
        assert _missing(rules_of(roles[(ns, "kelp")]), operator_needs()) == {}
        assert bindings[(ns, "kelp")]["subjects"][0] == {
            "kind": "ServiceAccount", "name": "kelp", "namespace": "kelp-system"}
    election = rules_of(roles[("kelp-system", "kelp-election")])
    assert {"get", "create", "update"} <= election[("coordination.k8s.io", "leases")]


def test_rbac_release_namespace_among_watched_needs_no_election_role(helm_home: Path) -> None:
    docs = render(helm_home, "watchNamespaces={kelp-system}")
    assert {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in by_kind(docs, "Role")} == {
        ("kelp-system", "kelp")}


def test_cert_manager_certificates_only_when_asked(helm_home: Path) -> None:
    """Clusters with spec.tls.issuerRef: the operator writes cert-manager Certificates (certManager.enabled)."""
    certificates = ("cert-manager.io", "certificates")
    (role,) = by_kind(render(helm_home, "watchAnyNamespace=true"), "ClusterRole")
    assert certificates not in rules_of(role)
    (role,) = by_kind(render(helm_home, "certManager.enabled=true", "watchAnyNamespace=true"), "ClusterRole")
    assert {"get", "create", "patch"} <= rules_of(role)[certificates]
    roles = by_kind(render(helm_home, "certManager.enabled=true", "watchNamespaces={a}"), "Role")
    assert certificates in rules_of(next(r for r in roles if r["metadata"]["namespace"] == "a"))
