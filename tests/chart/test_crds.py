"""The CRDs of crds/ against docs/operator.md, without an API server.

What users rely on: `kubectl explain` documents every field, `kubectl get kelp`
lists all four kinds with useful columns, the operator's status writes are
never pruned, and the API server refuses the edits Kafka cannot do.
"""

from __future__ import annotations

import jsonschema
import pytest

from tests.chart.crd_schema import GROUP, KINDS, VERSION, load_crds, openapi_schema, to_json_schema, version_of, walk

READY_PATH = '.status.conditions[?(@.type=="Ready")].status'
SHORT_NAMES = {"Cluster": ["kc", "kelpcluster", "kelpclusters"], "Topic": ["kt"], "ConsumerGroup": ["kcg"],
               "KelpUser": ["ku"]}
PLURALS = {"Cluster": "clusters", "Topic": "topics", "ConsumerGroup": "consumergroups", "KelpUser": "kelpusers"}
COLUMNS = {
    "Cluster": ["Ready", "Brokers", "Controller", "Under-Replicated", "Operation", "Offline", "Leader-Skew",
                "Bootstrap", "Age"],
    "Topic": ["Cluster", "Topic", "Partitions", "RF", "Ready", "Age"],
    "ConsumerGroup": ["Cluster", "State", "Members", "Lag", "Ready", "Age"],
    "KelpUser": ["Cluster", "Authentication", "Principal", "Ready", "Age"],
}
# What the operator writes (docs/operator.md); pruning would drop anything else.
STATUS_FIELDS = {
    "Cluster": {"observedGeneration", "conditions", "brokers", "controller", "topics", "unmanagedTopics",
                "underReplicatedPartitions", "offlinePartitions", "bootstrap", "readyBrokers", "leaderSkew",
                "preferredLeaderImbalance", "reassignment", "externalAddresses", "listeners", "httpUrl"},
    "Topic": {"observedGeneration", "conditions", "topicName", "partitions", "replicationFactor",
              "partitionStates"},
    "ConsumerGroup": {"observedGeneration", "conditions", "state", "members", "memberList", "offsets",
                      "totalLag", "lastAppliedRequestId"},
    "KelpUser": {"observedGeneration", "conditions", "username", "principal", "secret"},
}
SPEC_FIELDS = {
    "Cluster": {"brokers", "image", "imagePullPolicy", "storage", "resources", "config", "rack", "listeners",
                "reassignment", "restart", "podTemplate", "podDisruptionBudget", "authorization", "tls",
                "networkPolicy", "http"},
    "Topic": {"cluster", "topicName", "partitions", "replicationFactor", "config", "deletePolicy"},
    "ConsumerGroup": {"cluster", "groupId", "resetOffsets"},
    "KelpUser": {"cluster", "authentication", "authorization"},
}


@pytest.fixture(scope="module")
def crds() -> dict[str, dict]:
    return load_crds()


def test_one_crd_per_kind(crds: dict[str, dict]) -> None:
    assert sorted(crds) == sorted(KINDS)
    for kind, crd in crds.items():
        spec = crd["spec"]
        assert crd["metadata"]["name"] == f"{PLURALS[kind]}.{GROUP}"
        assert spec["group"] == GROUP and spec["scope"] == "Namespaced"
        assert spec["names"]["shortNames"] == SHORT_NAMES[kind]
        assert spec["names"]["categories"] == ["kelp"]
        (version,) = spec["versions"]
        assert (version["name"], version["served"], version["storage"]) == (VERSION, True, True)
        assert version["subresources"] == {"status": {}}


def test_spec_and_status_fields_are_the_contract(crds: dict[str, dict]) -> None:
    for kind, crd in crds.items():
        props = openapi_schema(crd)["properties"]
        assert set(props["spec"]["properties"]) == SPEC_FIELDS[kind], kind
        assert set(props["status"]["properties"]) == STATUS_FIELDS[kind], kind


def test_every_field_is_described_and_typed(crds: dict[str, dict]) -> None:
    for kind, crd in crds.items():
        for path, node in walk(openapi_schema(crd)):
            if path == ".metadata":
                continue
            assert node.get("description") or path.endswith(("[]", "{}")), f"{kind} {path}: no description"
            assert ("type" in node or node.get("x-kubernetes-int-or-string")
                    or node.get("x-kubernetes-preserve-unknown-fields")), f"{kind} {path}: no type"


def test_defaults_satisfy_their_own_schema(crds: dict[str, dict]) -> None:
    checked = 0
    for crd in crds.values():
        for _path, node in walk(openapi_schema(crd)):
            if "default" in node:
                jsonschema.validate(node["default"], to_json_schema(node))
                checked += 1
    assert checked >= 10


def test_printer_columns(crds: dict[str, dict]) -> None:
    for kind, crd in crds.items():
        columns = version_of(crd)["additionalPrinterColumns"]
        assert [c["name"] for c in columns] == COLUMNS[kind]
        ready = next(c for c in columns if c["name"] == "Ready")
        assert ready["jsonPath"] == READY_PATH
        assert columns[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def test_conditions_have_the_metav1_condition_shape(crds: dict[str, dict]) -> None:
    shapes = []
    for crd in crds.values():
        conditions = openapi_schema(crd)["properties"]["status"]["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        item = conditions["items"]
        assert item["required"] == ["type", "status", "lastTransitionTime", "reason", "message"]
        assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
        shapes.append({k: {f: v for f, v in p.items() if f != "description"}
                       for k, p in item["properties"].items()})
    assert all(shape == shapes[0] for shape in shapes), "the CRDs' condition schemas drifted apart"
    reason = to_json_schema(shapes[0]["reason"])
    jsonschema.validate("BrokersNotReady", reason)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate("brokers not ready", reason)


def _rules(node: dict) -> list[str]:
    return [v["rule"] for v in node.get("x-kubernetes-validations", [])]


def test_transition_and_cross_field_rules(crds: dict[str, dict]) -> None:
    topic = openapi_schema(crds["Topic"])["properties"]["spec"]
    assert _rules(topic["properties"]["partitions"]) == ["self >= oldSelf"]
    assert _rules(topic["properties"]["cluster"]) == ["self == oldSelf"]
    assert any("self.topicName == oldSelf.topicName" in r for r in _rules(topic))
    assert topic["properties"]["replicationFactor"]["minimum"] == 1
    assert topic["properties"]["topicName"]["pattern"] == "^[a-zA-Z0-9._-]{1,249}$"
    group = openapi_schema(crds["ConsumerGroup"])["properties"]["spec"]
    assert _rules(group["properties"]["cluster"]) == ["self == oldSelf"]
    assert any("self.groupId == oldSelf.groupId" in r for r in _rules(group))
    reset = _rules(group["properties"]["resetOffsets"])
    assert "self.to != 'timestamp' || has(self.timestamp)" in reset
    assert "self.to != 'offset' || has(self.offset)" in reset


def test_secured_layout_rules(crds: dict[str, dict]) -> None:
    """The rules the API server enforces on spec.listeners.kafka, spec.tls and spec.authorization (the operator's
    own checks say the same, tests/kelp_operator/test_security_config.py; the kube tier runs the CEL)."""
    spec = openapi_schema(crds["Cluster"])["properties"]["spec"]
    listeners = spec["properties"]["listeners"]
    kafka = listeners["properties"]["kafka"]
    assert kafka["x-kubernetes-list-type"] == "map" and kafka["x-kubernetes-list-map-keys"] == ["name"]
    assert kafka["items"]["properties"]["name"]["pattern"] == "^[a-z][a-z0-9]{0,10}$"
    assert kafka["items"]["properties"]["authentication"]["properties"]["type"]["enum"] == [
        "none", "scram-sha-512", "tls", "plain"]
    rules = _rules(listeners)
    assert "has(self.kafka) == has(oldSelf.kafka)" in rules
    assert any("exists_one(m, m.port == l.port)" in r for r in rules)
    assert any("l.port != 9091" in r for r in rules)
    assert any("size() <= 1" in r for r in rules)
    assert any("self.name != 'replication'" in r for r in _rules(kafka["items"]))
    assert any("self.renewalDays < self.certificateValidityDays" in r for r in _rules(spec["properties"]["tls"]))
    assert any("has(self.listeners.kafka)" in r and "self.tls" in r for r in _rules(spec))
    assert any("has(self.listeners.kafka)" in r and "self.authorization" in r for r in _rules(spec))
    assert spec["properties"]["authorization"]["properties"]["type"]["enum"] == ["simple"]


def test_kelpuser_rules(crds: dict[str, dict]) -> None:
    schema = openapi_schema(crds["KelpUser"])
    assert any("self.metadata.name.size() <= 64" in r for r in _rules(schema))
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["cluster", "authentication"]
    assert _rules(spec["properties"]["cluster"]) == ["self == oldSelf"]
    assert spec["properties"]["authentication"]["properties"]["type"]["enum"] == ["scram-sha-512", "tls"]
    rule = spec["properties"]["authorization"]["properties"]["acls"]["items"]
    assert rule["properties"]["resource"]["properties"]["patternType"]["enum"] == ["literal", "prefix"]
    assert rule["properties"]["type"]["default"] == "allow" and rule["properties"]["host"]["default"] == "*"


def test_http_rules(crds: dict[str, dict]) -> None:
    """spec.http (the REST Proxy, the Schema Registry and `<cluster>-http`): the switches default on, the Service's
    type is one of three, a node port only with NodePort (the operator says the same, tests/kelp_operator)."""
    http = openapi_schema(crds["Cluster"])["properties"]["spec"]["properties"]["http"]["properties"]
    assert http["restProxy"]["properties"]["enabled"]["default"] is True
    assert http["schemaRegistry"]["properties"]["enabled"]["default"] is True
    service = http["service"]
    assert service["properties"]["type"]["enum"] == ["ClusterIP", "NodePort", "LoadBalancer"]
    assert service["properties"]["type"]["default"] == "ClusterIP"
    assert (service["properties"]["port"]["minimum"], service["properties"]["port"]["maximum"]) == (1, 65535)
    assert any("self.type == 'NodePort'" in r and "self.nodePort" in r for r in _rules(service))
