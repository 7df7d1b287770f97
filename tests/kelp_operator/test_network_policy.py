"""spec.networkPolicy: the NetworkPolicy of the broker pods (operator/network_policy.py), applied and removed.

What a user relies on (docs/operator.md, "NetworkPolicy"): with it enabled, replication (9091) is open to the
Cluster's brokers alone, each Kafka listener to its networkPolicyPeers (and the brokers), or to anyone when it
lists none, the HTTP port to the brokers, the operator's pods and spec.networkPolicy.httpPeers; the manifest is
one Kubernetes accepts; switching it off deletes the policy with an Event; the CRD refuses a peer that is not a
NetworkPolicyPeer, with Kubernetes' own schema.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from kelp.operator.manifests.network_policy import OPERATOR_POD_LABELS, network_policy
from kelp.operator.manifests.spec import ClusterSpec
from kelp.operator.reconcile.cluster import reconcile_cluster
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, resource, statefulset

BROKERS = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "kelp", "app.kubernetes.io/instance": "demo",
                                           "app.kubernetes.io/component": "broker"}}}
OPERATOR = {"namespaceSelector": {}, "podSelector": {"matchLabels": OPERATOR_POD_LABELS}}
CLIENTS = {"podSelector": {"matchLabels": {"kelp.dev/client": "true"}}}
MONITORING = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
CRD = Path(__file__).resolve().parents[2] / "crds" / "kelp.dev_clusters.yaml"


def spec_of(spec: dict) -> ClusterSpec:
    return ClusterSpec.from_resource(resource("Cluster", "demo", spec))


def rules(policy: dict) -> dict[int, list[dict] | None]:
    return {rule["ports"][0]["port"]: rule.get("from") for rule in policy["spec"]["ingress"]}


SECURED = {"networkPolicy": {"enabled": True, "httpPeers": [MONITORING]},
           "listeners": {"kafka": [
               {"name": "tls", "port": 9093, "tls": True, "authentication": {"type": "scram-sha-512"},
                "networkPolicyPeers": [CLIENTS]},
               {"name": "plain", "port": 9092}]}}


def test_secured_layout_rules_follow_the_listeners() -> None:
    policy = network_policy(spec_of(SECURED))
    kubernetes_validate.validate(policy, "1.34", strict=True)
    assert policy["metadata"]["name"] == "demo-network-policy"
    assert policy["spec"]["podSelector"] == BROKERS["podSelector"] and policy["spec"]["policyTypes"] == ["Ingress"]
    assert rules(policy) == {
        9091: [BROKERS],  # replication: brokers only
        9093: [BROKERS, CLIENTS],  # a listener with peers: them and the brokers
        9092: None,  # a listener without peers: anyone
        8080: [BROKERS, OPERATOR, MONITORING],
    }


def test_plain_layout_keeps_its_kafka_port_open_and_http_open_without_peers() -> None:
    policy = network_policy(spec_of({"networkPolicy": {"enabled": True}}))
    kubernetes_validate.validate(policy, "1.34", strict=True)
    assert rules(policy) == {9092: None, 8080: None}


def run(body: dict, kube: FakeKube) -> None:
    admin = FakeAdmin(brokers=[0, 1, 2], topics={})
    asyncio.run(reconcile_cluster(body, kube, admin_of(admin)))


def test_the_policy_is_applied_when_enabled_and_deleted_when_switched_off() -> None:
    body = resource("Cluster", "demo", {"networkPolicy": {"enabled": True, "httpPeers": [MONITORING]}})
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    run(body, kube)
    applied = kube.objects[("NetworkPolicy", "ns", "demo-network-policy")]
    assert rules(applied)[8080] == [BROKERS, OPERATOR, MONITORING]
    assert applied["metadata"]["ownerReferences"][0]["kind"] == "Cluster"  # garbage-collected with the Cluster
    body = resource("Cluster", "demo", {"networkPolicy": {"enabled": False}})
    kube.put(body)
    run(body, kube)
    assert ("NetworkPolicy", "ns", "demo-network-policy") not in kube.objects
    assert kube.events("NetworkPolicyRemoved")
    run(body, kube)  # nothing left to delete: no second Event
    assert len(kube.events("NetworkPolicyRemoved")) == 1


def test_never_enabled_writes_no_policy() -> None:
    body = resource("Cluster", "demo", {})
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    run(body, kube)
    assert not [key for key in kube.objects if key[0] == "NetworkPolicy"]
    assert not kube.events("NetworkPolicyRemoved")


def crd_schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


@pytest.mark.parametrize("peer, ok", [
    (CLIENTS, True),
    ({"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}, True),
    ({"ipBlock": {"except": ["10.1.0.0/16"]}}, False),  # cidr is required
    ({"podSelector": {"matchLabels": {"a": 1}}}, False),  # label values are strings
])
def test_the_crd_checks_peers_with_kubernetes_schema(peer: dict, ok: bool) -> None:
    spec = {"networkPolicy": {"enabled": True, "httpPeers": [peer]},
            "listeners": {"kafka": [{"name": "tls", "port": 9093, "networkPolicyPeers": [peer]}]}}
    validator = jsonschema.Draft7Validator(crd_schema())
    errors = list(validator.iter_errors(spec))
    assert (not errors) == ok, errors
