"""The networking.k8s.io/v1 NetworkPolicy as the operator writes it (network_policy.py): the fields it uses.

Why: kept beside objects.py (the other kinds' types) rather than in it, which is long enough; the same rules
hold — types only, no logic, no I/O; peers are passed through as the user wrote them (free-form JSON the CRD
checks against Kubernetes' own NetworkPolicyPeer schema).
"""

from __future__ import annotations

from typing import TypedDict

from kelp.json_types import JsonObject

from .objects import KubeObject, LabelSelector

__all__ = ["NetworkPolicyPort", "NetworkPolicyRule", "NetworkPolicySpec", "NetworkPolicy"]


class NetworkPolicyPort(TypedDict):
    protocol: str
    port: int


NetworkPolicyRule = TypedDict("NetworkPolicyRule", {"ports": list[NetworkPolicyPort], "from": list[JsonObject]},
                              total=False)


class NetworkPolicySpec(TypedDict):
    podSelector: LabelSelector
    policyTypes: list[str]
    ingress: list[NetworkPolicyRule]


class NetworkPolicy(KubeObject, total=False):
    spec: NetworkPolicySpec
