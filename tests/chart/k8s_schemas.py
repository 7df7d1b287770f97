"""Kubernetes' own schemas for the Cluster CRD's pod template fields (and NetworkPolicy peers), made structural
and written into crds/.

Why: `spec.podTemplate.affinity`, `.securityContext`, `.tolerations` and
`.topologySpreadConstraints` are core/v1 types the operator passes to the
broker pods as given. Typed by hand they were partial (or left open with
`x-kubernetes-preserve-unknown-fields`), so a misspelt field was accepted
by the API server and silently dropped or only refused later, when the
StatefulSet was applied. The same holds for the NetworkPolicy peers
(`spec.listeners.kafka[].networkPolicyPeers`, `spec.networkPolicy.httpPeers`,
networking/v1 NetworkPolicyPeer). The CRD now carries the real schemas, taken from
the same source the builder tests validate against (kubernetes-validate's
JSON schemas for Kubernetes 1.34, `K8S_VERSION`) and turned into what a CRD
accepts: `$ref`s inlined, `type: [x, "null"]` made `type: x`, the
`x-kubernetes-*` list/map/union markers dropped (a CRD would refuse
`x-kubernetes-unions`; the others only tune server-side apply merges), plus
the value sets Kubernetes' pod validation enforces (`ENUMS`, `MINIMUMS`),
so a wrong value is refused when the Cluster is applied too.

The generated blocks sit between `# BEGIN generated ...` / `# END generated`
comments in crds/kelp.dev_clusters.yaml. Regenerate them (after bumping
kubernetes-validate or editing this file) with

    make crd-schemas        # this file as a script, then `make chart-crds`

`tests/chart/test_crd_pod_template.py` fails while the file differs from
what this module generates. Pure apart from `main()`; never edits anything
outside the marked blocks.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

K8S_VERSION = "1.34"
# Run as a script too (imports nothing from tests/, so the checkout need not be on sys.path).
CLUSTER_CRD = Path(__file__).resolve().parents[2] / "crds" / "kelp.dev_clusters.yaml"
CORE = "io.k8s.api.core.v1."
META = "io.k8s.apimachinery.pkg.apis.meta.v1."

# Value sets the API server's pod validation enforces (Kubernetes 1.34), by definition and property.
ENUMS: dict[tuple[str, str], list[str]] = {
    (CORE + "Toleration", "operator"): ["Exists", "Equal"],
    (CORE + "Toleration", "effect"): ["NoSchedule", "PreferNoSchedule", "NoExecute"],
    (CORE + "TopologySpreadConstraint", "whenUnsatisfiable"): ["DoNotSchedule", "ScheduleAnyway"],
    (CORE + "TopologySpreadConstraint", "nodeAffinityPolicy"): ["Honor", "Ignore"],
    (CORE + "TopologySpreadConstraint", "nodeTaintsPolicy"): ["Honor", "Ignore"],
    (CORE + "NodeSelectorRequirement", "operator"): ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"],
    (META + "LabelSelectorRequirement", "operator"): ["In", "NotIn", "Exists", "DoesNotExist"],
    (CORE + "SeccompProfile", "type"): ["Unconfined", "RuntimeDefault", "Localhost"],
    (CORE + "AppArmorProfile", "type"): ["Unconfined", "RuntimeDefault", "Localhost"],
    (CORE + "PodSecurityContext", "fsGroupChangePolicy"): ["OnRootMismatch", "Always"],
    (CORE + "PodSecurityContext", "seLinuxChangePolicy"): ["MountOption", "Recursive"],
    (CORE + "PodSecurityContext", "supplementalGroupsPolicy"): ["Merge", "Strict"],
}
MINIMUMS: dict[tuple[str, str], int] = {
    (CORE + "TopologySpreadConstraint", "maxSkew"): 1,
    (CORE + "TopologySpreadConstraint", "minDomains"): 1,
    (CORE + "WeightedPodAffinityTerm", "weight"): 1,
    (CORE + "PreferredSchedulingTerm", "weight"): 1,
}
# The JSON Schema keys a structural CRD schema keeps from Kubernetes' own.
KEPT = ("description", "format", "required")


@cache
def definitions() -> dict[str, Any]:
    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{K8S_VERSION}.0-local-strict"
    return json.loads((base / "_definitions.json").read_text())["$defs"]


def _type(node: dict[str, Any]) -> str:
    kinds = node["type"] if isinstance(node["type"], list) else [node["type"]]
    (kind,) = [k for k in kinds if k != "null"]
    return kind


def structural(name: str, *, description: str | None = None) -> dict[str, Any]:
    """The definition `name` (for example `io.k8s.api.core.v1.Affinity`) as a structural CRD schema."""
    return _convert(definitions()[name], name, description)


def _convert(node: dict[str, Any], owner: str | None, description: str | None = None) -> dict[str, Any]:
    if "$ref" in node:
        target = node["$ref"].rsplit("/", 1)[-1]
        return _convert(definitions()[target], target, description or node.get("description"))
    out: dict[str, Any] = {"type": _type(node)}
    if description or node.get("description"):
        out["description"] = description or node["description"]
    for key in KEPT[1:]:
        if key in node:
            out[key] = node[key]
    if "properties" in node:
        props = {}
        for prop, sub in sorted(node["properties"].items()):
            converted = _convert(sub, None)
            if (owner, prop) in ENUMS:
                converted["enum"] = ENUMS[(owner, prop)]
            if (owner, prop) in MINIMUMS:
                converted["minimum"] = MINIMUMS[(owner, prop)]
            props[prop] = converted
        out["properties"] = props
    if "items" in node:
        out["items"] = _convert(node["items"], None)
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _convert(node["additionalProperties"], None)
    return out


NETWORKING = "io.k8s.api.networking.v1."


def generated_fields() -> dict[str, dict[str, Any]]:
    """The generated properties (of `spec.podTemplate`, and the NetworkPolicy peers of `spec.listeners.kafka[]`
    and `spec.networkPolicy`), by name, each with Kelp's own description on top."""
    return {
        "networkPolicyPeers": {
            "type": "array",
            "description": "With spec.networkPolicy.enabled, who may connect to this listener (networking/v1 "
                           "NetworkPolicyPeer: podSelector, namespaceSelector, ipBlock); the brokers always may. "
                           "None listed: anyone.",
            "items": structural(NETWORKING + "NetworkPolicyPeer")},
        "httpPeers": {
            "type": "array",
            "description": "Who may reach the HTTP port (admin API, REST proxy, /metrics) besides the brokers and "
                           "the operator's pods (networking/v1 NetworkPolicyPeer). None listed: anyone "
                           "(authentication still applies).",
            "items": structural(NETWORKING + "NetworkPolicyPeer")},
        "affinity": structural(CORE + "Affinity", description=(
            "Scheduling affinity of the broker pods (core/v1 Affinity: nodeAffinity, podAffinity, podAntiAffinity), "
            "taken as given.")),
        "tolerations": {"type": "array", "description": "Tolerations of the broker pods (core/v1 Toleration).",
                        "items": structural(CORE + "Toleration")},
        "topologySpreadConstraints": {
            "type": "array",
            "description": "Replace the default spread of broker pods over nodes (kubernetes.io/hostname, "
                           "ScheduleAnyway). A constraint without labelSelector selects the cluster's broker pods.",
            "items": structural(CORE + "TopologySpreadConstraint")},
        "securityContext": structural(CORE + "PodSecurityContext", description=(
            "Pod security context (core/v1 PodSecurityContext), merged over the default (runAsNonRoot, "
            "uid/gid/fsGroup 10001, seccomp RuntimeDefault); a key given here wins.")),
    }


class _Dumper(yaml.SafeDumper):
    """The CRD files' style: no anchors, sequences indented under their key, scalar lists on one line."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
        return super().increase_indent(flow, False)


_Dumper.add_representer(list, lambda dumper, data: dumper.represent_sequence(
    "tag:yaml.org,2002:seq", data, flow_style=all(isinstance(v, (str, int)) for v in data)))


BLOCK = re.compile(r"^(?P<indent> *)# BEGIN generated: (?P<name>\w+)\n.*?^(?P=indent)# END generated: (?P=name)\n",
                   re.S | re.M)


def render(text: str) -> str:
    """`text` (the Cluster CRD) with every marked block replaced by what this module generates."""
    fields = generated_fields()

    def block(match: re.Match) -> str:
        indent, name = match.group("indent"), match.group("name")
        body = yaml.dump({name: fields[name]}, Dumper=_Dumper, sort_keys=False, width=1 << 20,
                         default_flow_style=False)
        lines = [f"{indent}# BEGIN generated: {name}",
                 f"{indent}# (tests/chart/k8s_schemas.py, from Kubernetes {K8S_VERSION}'s schema; do not edit)"]
        lines += [f"{indent}{line}" if line else line for line in body.splitlines()]
        return "\n".join(lines) + f"\n{indent}# END generated: {name}\n"

    out, count = BLOCK.subn(block, text)
    if count != len(fields):
        raise ValueError(f"{CLUSTER_CRD.name}: expected {len(fields)} generated blocks, found {count}")
    return out


def main() -> None:
    text = CLUSTER_CRD.read_text()
    CLUSTER_CRD.write_text(render(text))
    print(f"{CLUSTER_CRD}: pod template schemas from Kubernetes {K8S_VERSION}")


if __name__ == "__main__":
    main()
