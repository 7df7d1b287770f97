"""The Cluster's NetworkPolicy: who may reach which broker port (`spec.networkPolicy`, Strimzi's per-listener peers).

Why: TLS and SASL decide who a connection is, a NetworkPolicy decides who may open one at all. Strimzi writes
one policy per Kafka cluster whose rules follow its listeners (`networkPolicyPeers`), and Kafka users on
Kubernetes expect the same: the replication listener reachable by the brokers alone, each client listener by
the peers it lists (anyone when it lists none), and Kelp's HTTP port (admin API, REST proxy, the brokers'
`/cluster/v1` control plane, `/metrics`) by the brokers, the operator and the peers `spec.networkPolicy.
httpPeers` lists (anyone when it lists none: authentication still guards it). Off unless
`spec.networkPolicy.enabled` (the CNI must enforce NetworkPolicies for it to mean anything; many do not).

The plain layout (`listeners.kafkaPort`, no spec.listeners.kafka) replicates over its one Kafka port, so
that port stays open to every source; only its HTTP port is narrowed.

Pure: builds the manifest; `reconcile/cluster.py` applies it or deletes it when switched off.
"""

from __future__ import annotations

from kelp.json_types import JsonObject

from ..model.objects_network import NetworkPolicy, NetworkPolicyRule
from ..security.listener_security import REPLICATION_PORT
from .builders import child_meta, selector_for
from .spec import ClusterSpec

__all__ = ["network_policy", "policy_name", "OPERATOR_POD_LABELS"]

# The operator's pods as the chart labels them (charts/kelp/templates/_helpers.tpl, kelp.selectorLabels).
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "kelp", "app.kubernetes.io/component": "operator"}


def policy_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-network-policy"


def _rule(port: int, peers: tuple[JsonObject, ...] | None) -> NetworkPolicyRule:
    """Ingress to `port` from `peers`; None: from anywhere (a rule without `from`)."""
    rule: NetworkPolicyRule = {"ports": [{"protocol": "TCP", "port": port}]}
    if peers is not None:
        rule["from"] = list(peers)
    return rule


def network_policy(spec: ClusterSpec) -> NetworkPolicy:
    """The policy selecting the Cluster's broker pods (see the module docstring for its rules)."""
    brokers: JsonObject = {"podSelector": {"matchLabels": dict(selector_for(spec))}}
    operator: JsonObject = {"namespaceSelector": {}, "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)}}
    rules: list[NetworkPolicyRule] = []
    if spec.security is not None:
        rules.append(_rule(REPLICATION_PORT, (brokers,)))
        for listener in spec.security.listeners:
            peers = listener.network_policy_peers
            rules.append(_rule(listener.port, (brokers, *peers) if peers else None))
    else:
        rules.append(_rule(spec.kafka_port, None))
    http_peers = spec.http_peers
    rules.append(_rule(spec.http_port, (brokers, operator, *http_peers) if http_peers else None))
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": child_meta(spec, policy_name(spec)),
        "spec": {"podSelector": {"matchLabels": selector_for(spec)}, "policyTypes": ["Ingress"], "ingress": rules},
    }
