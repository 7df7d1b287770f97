"""Rack awareness end to end without a cluster: manifests, the broker's node lookup, status and clean-up.

Why: `spec.rack.topologyKey` is only worth setting if each broker really
learns its node's label (its pod gets the node name, its ServiceAccount may
read nodes, its config names the label), brokers spread over racks, the
status says whether every broker got a rack, and the cluster-scoped binding
goes away with its Cluster. The kube tier proves the same against a real
API server with RBAC (tests/kube/test_kube_operator_node.py).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import yaml

from kelp.broker.cluster import rack as broker_rack
from kelp.kube.api import KubeApiError
from kelp.operator.manifests.builders import cluster_children
from kelp.operator.manifests.rack import RACK_CLUSTER_ROLE, orphaned_bindings, rack_condition
from kelp.operator.manifests.spec import ClusterSpec, SpecError
from kelp.operator.model.status import Observed
from kelp.operator.reconcile.resync import collect_rack_bindings
from tests.kelp_operator.fakes import FakeKube, resource

ZONE = "topology.kubernetes.io/zone"


def spec_of(body: dict) -> ClusterSpec:
    return ClusterSpec.from_resource(body)


def by_kind(manifests: list[dict], kind: str) -> list[dict]:
    return [m for m in manifests if m["kind"] == kind]


def test_rack_aware_cluster_wires_node_name_label_rbac_and_spread() -> None:
    spec = spec_of(resource("Cluster", "demo", {"rack": {"topologyKey": ZONE}}))
    children = cluster_children(spec)
    (sts,) = by_kind(children, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["KELP_KUBE_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    (cm,) = by_kind(children, "ConfigMap")
    assert yaml.safe_load(cm["data"]["broker.yaml"])["broker.rack.node.label"] == ZONE
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {"kubernetes.io/hostname", ZONE}
    (role,) = by_kind(children, "ClusterRole")
    assert role["metadata"]["name"] == RACK_CLUSTER_ROLE and "namespace" not in role["metadata"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    (binding,) = by_kind(children, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == RACK_CLUSTER_ROLE
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "demo-broker", "namespace": "ns"}]
    assert "ownerReferences" not in binding["metadata"]  # cluster-scoped: cannot be owned by a namespaced Cluster

    plain = cluster_children(spec_of(resource("Cluster", "demo", {})))
    assert not by_kind(plain, "ClusterRole") and not by_kind(plain, "ClusterRoleBinding")
    (sts,) = by_kind(plain, "StatefulSet")
    assert "KELP_KUBE_NODE_NAME" not in {e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_a_user_cannot_set_the_rack_keys_the_operator_owns() -> None:
    with pytest.raises(SpecError, match="broker.rack"):
        spec_of(resource("Cluster", "demo", {"config": {"broker.rack": "a"}}))


def test_rack_condition_says_which_brokers_have_no_rack() -> None:
    spec = spec_of(resource("Cluster", "demo", {"rack": {"topologyKey": ZONE}}))
    racked = Observed(cluster={"brokers": [{"id": 0, "rack": "a"}, {"id": 1, "rack": "b"}, {"id": 2, "rack": "a"}]})
    cond = rack_condition(spec, racked)
    assert cond["status"] == "True" and "3 brokers in 2 rack(s)" in cond["message"] and "a, b" in cond["message"]
    partly = Observed(cluster={"brokers": [{"id": 0, "rack": "a"}, {"id": 1, "rack": None}]})
    cond = rack_condition(spec, partly)
    assert cond["status"] == "False" and cond["reason"] == "BrokersWithoutRack" and "broker(s) 1 " in cond["message"]
    assert rack_condition(spec_of(resource("Cluster", "demo", {})), racked) is None


def test_bindings_of_gone_or_unracked_clusters_are_collected() -> None:
    racked = resource("Cluster", "keep", {"rack": {"topologyKey": ZONE}})
    unracked = resource("Cluster", "plain", {})
    bindings = [m for body in (racked, resource("Cluster", "gone", {"rack": {"topologyKey": ZONE}}),
                               resource("Cluster", "plain", {"rack": {"topologyKey": ZONE}}))
                for m in cluster_children(spec_of(body)) if m["kind"] == "ClusterRoleBinding"]
    assert orphaned_bindings(bindings, [racked, unracked], None) == ["kelp-ns-gone-rack", "kelp-ns-plain-rack"]
    assert orphaned_bindings(bindings, [racked, unracked], ["other"]) == []  # not ours to judge
    kube = FakeKube(racked, unracked, *bindings)
    assert asyncio.run(collect_rack_bindings(kube, None)) == ["kelp-ns-gone-rack", "kelp-ns-plain-rack"]
    assert [k[2] for k in kube.objects if k[0] == "ClusterRoleBinding"] == ["kelp-ns-keep-rack"]


class FakeRequests:
    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.paths: list[str] = []

    def __call__(self, api, method, path, **_):
        self.paths.append(path)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_broker_reads_its_rack_from_the_node_label_retrying_transient_errors(monkeypatch) -> None:
    fake = FakeRequests(KubeApiError(503, "etcd busy"), ConnectionError("reset"),
                        {"metadata": {"labels": {ZONE: "zone-b"}}})
    monkeypatch.setattr(broker_rack, "request", fake)
    assert broker_rack.rack_from_node(lambda: None, "node-1", ZONE, sleep=lambda s: None) == "zone-b"
    assert fake.paths == ["/api/v1/nodes/node-1"] * 3
    monkeypatch.setattr(broker_rack, "request", FakeRequests({"metadata": {"labels": {}}}))
    assert broker_rack.rack_from_node(lambda: None, "node-1", ZONE) is None  # runs without a rack, logged
    monkeypatch.setattr(broker_rack, "request", FakeRequests(KubeApiError(403, "nodes is forbidden")))
    with pytest.raises(broker_rack.RackLookupError, match="cannot read node 'node-1'.*forbidden"):
        broker_rack.rack_from_node(lambda: None, "node-1", ZONE, sleep=lambda s: pytest.fail("403 must not be retried"))


def test_broker_without_its_node_name_refuses_to_start_saying_what_to_set(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kelp.broker", "--log-dirs", str(tmp_path), "--port", "0", "--http-port", "0",
         "--set", f"broker.rack.node.label={ZONE}"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "cannot start: broker.rack.node.label is 'topology.kubernetes.io/zone' but kube.node.name is empty" \
        in proc.stderr and "KELP_KUBE_NODE_NAME" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "kelp.broker", "--log-dirs", str(tmp_path), "--port", "0", "--http-port", "0",
         "--set", f"broker.rack.node.label={ZONE}", "--set", "kube.node.name=node-1",
         "--set", f"kube.config={tmp_path / 'missing-kubeconfig'}"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "no Kubernetes API credentials to read node 'node-1'" in proc.stderr, \
        proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_without_the_charts_rack_rbac_the_cluster_says_how_to_get_it() -> None:
    # Issue 32, item 6: the chart grants ClusterRole/ClusterRoleBinding rights only with rbac.rackAwareness.
    from kelp.operator.reconcile.cluster import reconcile_cluster
    from tests.kelp_operator.fakes import FakeAdmin, admin_of

    body = resource("Cluster", "demo", {"rack": {"topologyKey": ZONE}})
    kube = FakeKube(body)

    async def forbidden(*_args) -> None:
        raise KubeApiError(403, 'clusterroles.rbac.authorization.k8s.io "kelp-broker-rack" is forbidden')
    kube.hooks[("apply", "ClusterRole")] = forbidden
    _, conds = asyncio.run(reconcile_cluster(body, kube, admin_of(FakeAdmin(brokers=[]))))
    progressing = next(c for c in conds if c["type"] == "Progressing")
    assert progressing["reason"] == "ApplyRefused" and "rbac.rackAwareness=true" in progressing["message"]

    async def cannot_list(*_args) -> None:
        raise KubeApiError(403, "clusterrolebindings is forbidden")
    kube.hooks[("list", "ClusterRoleBinding")] = cannot_list
    assert asyncio.run(collect_rack_bindings(kube, None)) == [], "no rights, no bindings of ours: nothing to do"
