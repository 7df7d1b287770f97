"""docs/operator.md's YAML examples against the CRDs, the operator's own checks and Kubernetes' schemas.

Why: readers copy these blocks into `kubectl apply`; an example with a
misspelt field (which the API server would prune or refuse) or one the
operator refuses teaches the wrong thing, and nothing else would notice.
Every ```yaml block of the page is either a whole Kelp resource (`kind`
given) or a fragment of a Cluster's spec (`spec:` alone). Each is validated
like the files in examples/ (unknown fields refused); a Cluster also goes
through the operator's spec validation, and the broker StatefulSet built
from it through kubernetes-validate for Kubernetes 1.34.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.chart.crd_schema import GROUP, REPO, VERSION, apply_defaults, format_checker, load_crds, openapi_schema
from tests.chart.crd_schema import to_json_schema as json_schema

DOCS = REPO / "docs" / "operator.md"
BLOCK = re.compile(r"^( *)```yaml\n(.*?)^\1```", re.S | re.M)


def doc_examples() -> list[tuple[int, dict[str, Any]]]:
    """(line, resource) for every ```yaml block of docs/operator.md; Cluster spec fragments made whole."""
    text = DOCS.read_text()
    found = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        doc = yaml.safe_load(textwrap.dedent(match.group(2)))
        if "kind" not in doc:
            assert set(doc) == {"spec"}, f"docs/operator.md:{line}: a fragment must be a Cluster's `spec:` alone"
            doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Cluster", "metadata": {"name": "demo"}, **doc}
        found.append((line, doc))
    return found


EXAMPLES = doc_examples()


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict]:
    return {kind: openapi_schema(crd) for kind, crd in load_crds().items()}


def test_the_docs_show_every_kind_and_the_production_knobs() -> None:
    assert {doc["kind"] for _line, doc in EXAMPLES} == {"Cluster", "Topic", "ConsumerGroup", "KelpUser"}
    shown = set()
    for _line, doc in EXAMPLES:
        if doc["kind"] == "Cluster":
            shown |= _paths(doc["spec"])
    for path in ("podTemplate.affinity", "podTemplate.metadata.annotations", "podTemplate.metadata.labels",
                 "podTemplate.tolerations", "podTemplate.topologySpreadConstraints", "podTemplate.securityContext",
                 "podTemplate.nodeSelector", "podTemplate.priorityClassName", "reassignment.stallTimeoutSeconds",
                 "listeners.external.type", "listeners.external.nodePorts", "listeners.external.annotations",
                 "podDisruptionBudget.maxUnavailable", "config", "listeners.kafka", "authorization.type",
                 "authorization.superUsers", "tls.certificateValidityDays", "tls.renewalDays"):
        assert path in shown, f"docs/operator.md has no example of spec.{path}"
    types = {doc["spec"].get("listeners", {}).get("external", {}).get("type") for _l, doc in EXAMPLES
             if doc["kind"] == "Cluster"}
    assert {"NodePort", "LoadBalancer"} <= types
    users = {doc["spec"]["authentication"]["type"] for _l, doc in EXAMPLES if doc["kind"] == "KelpUser"}
    assert users == {"scram-sha-512", "tls"}


def _paths(node: Any, prefix: str = "") -> set[str]:
    out = set()
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            out |= {path} | _paths(value, path)
    return out


@pytest.mark.parametrize("line, doc", EXAMPLES, ids=[f"line-{line}" for line, _doc in EXAMPLES])
def test_docs_example_is_valid(line: int, doc: dict, schemas: dict[str, dict]) -> None:
    schema = schemas[doc["kind"]]
    try:
        jsonschema.validate(apply_defaults(doc, schema), json_schema(schema), format_checker=format_checker())
    except jsonschema.ValidationError as exc:
        pytest.fail(f"docs/operator.md:{line}: {exc.message} at {'.'.join(map(str, exc.absolute_path))}")
    if doc["kind"] != "Cluster":
        return
    from kelp.operator.manifests.builders import cluster_children, external_service
    from kelp.operator.manifests.spec import ClusterSpec

    body = apply_defaults({**doc, "metadata": {**doc["metadata"], "namespace": "team-a", "uid": "u"}}, schema)
    spec = ClusterSpec.from_resource(body)  # the operator's own checks (a SpecError fails the test)
    children = cluster_children(spec)
    if spec.external_type:
        children.append(external_service(spec, 0))
    for manifest in children:
        kubernetes_validate.validate(manifest, "1.34", strict=True)
