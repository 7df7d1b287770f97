"""examples/ against the CRDs' schemas, and the schemas' defaults, without an API server.

The API server only proves a sample valid once applied; these tests catch a
broken sample or a lost default at the first `pytest`. Unknown fields are
errors here (the API server would prune them silently: in a sample, a typo).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from tests.chart.crd_schema import (
    GROUP,
    VERSION,
    apply_defaults,
    format_checker,
    load_crds,
    load_examples,
    openapi_schema,
    to_json_schema,
)


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict]:
    return {kind: openapi_schema(crd) for kind, crd in load_crds().items()}


def validate(doc: dict[str, Any], schemas: dict[str, dict]) -> None:
    schema = schemas[doc["kind"]]
    jsonschema.validate(apply_defaults(doc, schema), to_json_schema(schema),
                        format_checker=format_checker())


def test_examples_cover_every_kind(schemas: dict[str, dict]) -> None:
    found = {(doc["kind"], doc["metadata"]["name"]) for _path, doc in load_examples()}
    assert found == {("Cluster", "demo"), ("Topic", "orders"), ("ConsumerGroup", "orders-audit")}


@pytest.mark.parametrize("path, doc", load_examples(), ids=lambda v: getattr(v, "name", None) or "doc")
def test_example_is_valid(path, doc: dict, schemas: dict[str, dict]) -> None:
    assert doc["apiVersion"] == f"{GROUP}/{VERSION}", path
    try:
        validate(doc, schemas)
    except jsonschema.ValidationError as exc:
        pytest.fail(f"{path.name}: {exc.message} at {'.'.join(map(str, exc.absolute_path))}")


def test_the_production_example_is_valid_and_accepted_by_the_operator(schemas: dict[str, dict]) -> None:
    """examples/production/cluster.yaml: every knob, valid for the schema and for the operator's own checks."""
    import yaml

    from kelp.operator.manifests.builders import cluster_children
    from kelp.operator.manifests.spec import ClusterSpec
    from tests.chart.crd_schema import EXAMPLES_DIR

    doc = yaml.safe_load((EXAMPLES_DIR / "production" / "cluster.yaml").read_text())
    validate(doc, schemas)
    spec = ClusterSpec.from_resource({**doc, "metadata": {**doc["metadata"], "namespace": "prod"}})
    assert spec.external_type == "NodePort" and spec.disruptions_allowed() == 1
    kinds = [m["kind"] for m in cluster_children(spec)]
    assert "StatefulSet" in kinds and "PodDisruptionBudget" in kinds


def test_examples_say_what_the_docs_say() -> None:
    docs = {doc["kind"]: doc for _path, doc in load_examples()}
    assert docs["Cluster"]["spec"]["brokers"] == 3
    topic = docs["Topic"]["spec"]
    assert (topic["cluster"], topic["partitions"], topic["replicationFactor"]) == ("demo", 6, 3)
    assert topic["config"]["min.insync.replicas"] == "2" and "retention.ms" in topic["config"]
    assert docs["ConsumerGroup"]["spec"]["cluster"] == "demo"


def _resource(kind: str, spec: dict | None) -> dict:
    doc: dict = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": "x"}}
    if spec is not None:
        doc["spec"] = spec
    return doc


@pytest.mark.parametrize("spec", [{}, None], ids=["empty-spec", "no-spec"])
def test_cluster_defaults(schemas: dict[str, dict], spec: dict | None) -> None:
    got = apply_defaults(_resource("Cluster", spec), schemas["Cluster"])["spec"]
    assert got == {
        "brokers": 3,
        "image": "kelp:0.1.0",
        "imagePullPolicy": "IfNotPresent",
        "storage": {"size": "10Gi"},
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
        "config": {},
        "listeners": {"kafkaPort": 9092, "httpPort": 8080, "advertise": "dns"},
        "reassignment": {"stallTimeoutSeconds": 300, "throttleBytesPerSecond": 104857600},
        "restart": {"podReadyTimeoutSeconds": 300},
    }
    validate(_resource("Cluster", spec), schemas)


def test_defaults_fill_only_what_is_missing(schemas: dict[str, dict]) -> None:
    got = apply_defaults(_resource("Cluster", {"brokers": 5, "listeners": {"kafkaPort": 19092}}),
                         schemas["Cluster"])["spec"]
    assert got["brokers"] == 5
    assert got["listeners"] == {"kafkaPort": 19092, "httpPort": 8080, "advertise": "dns"}


def test_reset_with_rfc3339_timestamp_is_valid(schemas: dict[str, dict]) -> None:
    validate(_resource("ConsumerGroup", {"cluster": "demo", "resetOffsets": {
        "requestId": "r1", "topic": "orders", "to": "timestamp", "timestamp": "2026-01-31T12:00:00.5+01:00"}}),
        schemas)


def test_topic_and_group_defaults(schemas: dict[str, dict]) -> None:
    topic = apply_defaults(_resource("Topic", {"cluster": "demo"}), schemas["Topic"])["spec"]
    assert topic == {"cluster": "demo", "partitions": 1, "config": {}, "deletePolicy": "retain"}
    group = apply_defaults(_resource("ConsumerGroup", {"cluster": "demo"}), schemas["ConsumerGroup"])["spec"]
    assert group == {"cluster": "demo"}


@pytest.mark.parametrize("kind, spec, where", [
    ("Topic", {"cluster": "demo", "partition": 3}, "partition"),            # typo: pruned by the server
    ("Topic", {"cluster": "demo", "topicName": "a/b"}, "topicName"),        # not a Kafka topic name
    ("Topic", {"cluster": "demo", "topicName": "t" * 250}, "topicName"),
    ("Topic", {"cluster": "demo", "replicationFactor": 0}, "replicationFactor"),
    ("Topic", {"cluster": "demo", "deletePolicy": "purge"}, "deletePolicy"),
    ("Topic", {"partitions": 3}, "cluster"),
    ("Cluster", {"brokers": 0}, "brokers"),
    ("Cluster", {"listeners": {"advertise": "nodePort"}}, "advertise"),
    ("Cluster", {"storage": {"size": "ten gigs"}}, "size"),
    ("ConsumerGroup", {"cluster": "demo", "resetOffsets": {"requestId": "r1", "topic": "orders",
                                                           "to": "yesterday"}}, "to"),
    ("ConsumerGroup", {"cluster": "demo", "resetOffsets": {"topic": "orders", "to": "earliest"}}, "requestId"),
    ("ConsumerGroup", {"cluster": "demo", "resetOffsets": {"requestId": "r1", "topic": "orders",
                                                           "to": "timestamp", "timestamp": "noon"}},
     "timestamp"),
    ("ConsumerGroup", {"cluster": "demo", "resetOffsets": {"requestId": "r1", "topic": "orders",
                                                           "to": "timestamp", "timestamp": "2026-02-30T00:00:00Z"}},
     "timestamp"),
])
def test_schema_refuses(schemas: dict[str, dict], kind: str, spec: dict, where: str) -> None:
    with pytest.raises(jsonschema.ValidationError) as refused:
        validate(_resource(kind, spec), schemas)
    assert where in (str(refused.value.message) + ".".join(map(str, refused.value.absolute_path)))


def _security_examples() -> list[dict]:
    import yaml

    from tests.chart.crd_schema import EXAMPLES_DIR

    return [doc for path in sorted((EXAMPLES_DIR / "security").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def test_the_security_examples_are_valid_and_fit_together(schemas: dict[str, dict]) -> None:
    """examples/security/: a Cluster with a TLS+SCRAM listener, KelpUsers of it, and a client Pod using a user's
    Secret — each valid for its schema (the Pod for Kubernetes 1.34), the Cluster and the ACLs for the operator."""
    import kubernetes_validate

    from kelp.operator.manifests.builders import cluster_children
    from kelp.operator.manifests.spec import ClusterSpec
    from kelp.operator.security.user_builders import MOUNT_DIR, acl_bindings

    docs = _security_examples()
    kinds = sorted(doc["kind"] for doc in docs)
    assert kinds == ["Cluster", "KelpUser", "KelpUser", "Pod"]
    (cluster,) = [d for d in docs if d["kind"] == "Cluster"]
    users = [d for d in docs if d["kind"] == "KelpUser"]
    (pod,) = [d for d in docs if d["kind"] == "Pod"]
    for doc in (cluster, *users):
        validate(doc, schemas)
    spec = ClusterSpec.from_resource(apply_defaults({**cluster, "metadata": {**cluster["metadata"],
                                                                             "namespace": "team-a"}},
                                                    schemas["Cluster"]))
    assert spec.security is not None and spec.security.super_users == ("User:admin",)
    protocols = {listener.name: listener.security_protocol for listener in spec.security.listeners}
    assert protocols == {"tls": "SASL_SSL", "mtls": "SSL"}
    for manifest in cluster_children(spec, trust_floor="cluster=0,clients=0"):
        kubernetes_validate.validate(manifest, "1.34", strict=True)
    assert spec.http_url == "https://secure-http.team-a.svc:8443"  # what the example's comment tells clients
    assert {u["spec"]["authentication"]["type"] for u in users} == {"scram-sha-512", "tls"}
    for user in users:
        assert user["spec"]["cluster"] == cluster["metadata"]["name"]
        acl_bindings(user["spec"]["authorization"]["acls"], f"User:{user['metadata']['name']}")
    kubernetes_validate.validate(pod, "1.34", strict=True)
    (volume,) = pod["spec"]["volumes"]
    assert volume["secret"]["secretName"] in {u["metadata"]["name"] for u in users}
    assert pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == MOUNT_DIR
