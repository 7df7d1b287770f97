"""Kelp's CRDs (crds/) on a real kube-apiserver: schema, defaults, CEL rules, status, columns.

What users and the operator rely on and only the API server can prove:
- every CRD is accepted and Established, the examples apply, and the server
  fills the documented defaults (the same ones tests/chart's defaulter
  computes, checked here against the server);
- the server refuses what Kafka cannot do: shrinking a Topic's partitions,
  moving a Topic or ConsumerGroup to another cluster or renaming it, an offset
  reset without its timestamp/offset — with a message naming the field;
- status writes go through /status, never bump metadata.generation, and
  everything the operator writes survives structural pruning;
- `kubectl get` columns, the `kelp` category and short names are served;
- watches see spec and status changes, and a stale update is refused (409).

The CRDs stay installed after this module: the control plane is per session
and other modules of the tier (the operator's, the chart's) use the same CRDs.
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

import pytest

from tests.chart.crd_schema import GROUP, VERSION, apply_defaults, load_crds, load_examples, openapi_schema
from tests.kube.kube_waits import wait_for

pytestmark = pytest.mark.kube

PLURALS = {"Cluster": "clusters", "Topic": "topics", "ConsumerGroup": "consumergroups", "KelpUser": "kelpusers"}
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
NOW = "2026-01-31T12:00:00Z"


def install_crds(kube_api) -> None:
    """Create or update every CRD of crds/, then wait until each is Established and served."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    for crd in load_crds().values():
        name = crd["metadata"]["name"]
        try:
            ext.create_custom_resource_definition(crd)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            current = ext.read_custom_resource_definition(name)
            body = copy.deepcopy(crd)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, body)

    def established(name: str) -> bool:
        got = ext.read_custom_resource_definition(name)
        conds = {c.type: c.status for c in (got.status.conditions or [])}
        return conds.get("Established") == "True" and conds.get("NamesAccepted") == "True"

    def served(plural: str) -> bool:
        try:
            custom.list_cluster_custom_object(GROUP, VERSION, plural)
            return True
        except client.ApiException:
            return False

    for plural in PLURALS.values():
        wait_for(lambda: established(f"{plural}.{GROUP}"), timeout=30, what=f"CRD {plural}.{GROUP} Established")  # noqa: B023 (wait_for calls it at once)
        # Discovery of a new CRD can lag behind Established by a moment.
        wait_for(lambda: served(plural), timeout=30, what=f"{plural}.{GROUP} served")  # noqa: B023 (wait_for calls it at once)


@pytest.fixture(scope="module")
def custom(kube_api):
    from kubernetes import client

    install_crds(kube_api)
    return client.CustomObjectsApi(kube_api)


def refusal(exc) -> str:
    try:
        return json.loads(exc.body)["message"]
    except (ValueError, KeyError, TypeError):
        return str(exc.body)


def resource(kind: str, name: str, spec: dict | None) -> dict:
    doc: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}}
    if spec is not None:
        doc["spec"] = spec
    return doc


def create(custom, ns: str, doc: dict) -> dict:
    return custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[doc["kind"]], doc)


def patch(custom, ns: str, kind: str, name: str, body: dict) -> dict:
    return custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[kind], name, body)


def patch_status(custom, ns: str, kind: str, name: str, status: dict) -> dict:
    return custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURALS[kind], name,
                                                        {"status": status})


def refused(call, *args) -> tuple[int, str]:
    from kubernetes import client

    with pytest.raises(client.ApiException) as caught:
        call(*args)
    return caught.value.status, refusal(caught.value)


def condition(type_: str, status: str, reason: str, message: str, generation: int = 1) -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": NOW, "observedGeneration": generation}


# Everything docs/operator.md says the operator writes; pruning must keep all of it.
FULL_STATUS = {
    "Cluster": {
        "observedGeneration": 1,
        "conditions": [condition("Ready", "False", "BrokersNotReady", "2/3 broker pods ready"),
                       condition("Progressing", "True", "RollingOut", "creating broker pods"),
                       condition("Degraded", "False", "AsExpected", "")],
        "brokers": 2, "controller": 0, "topics": 4, "unmanagedTopics": ["clicks", "tmp"],
        "underReplicatedPartitions": 5, "offlinePartitions": 0, "bootstrap": "demo.ns.svc:9092",
        "readyBrokers": "2/3", "leaderSkew": 3, "preferredLeaderImbalance": 4,
        "reassignment": {"partitions": 2, "progress": 12345678901, "lastProgressTime": NOW,
                         "stalledPartitions": ["orders-1"]},
        "httpUrl": "http://demo-http.ns.svc:8080",
    },
    "Topic": {
        "observedGeneration": 1,
        "conditions": [condition("Ready", "True", "TopicReady", "6 partitions, replication factor 3")],
        "topicName": "orders", "partitions": 6, "replicationFactor": 3,
        "partitionStates": [{"partition": p, "leader": p % 3, "replicas": [p % 3, (p + 1) % 3, (p + 2) % 3],
                             "isr": [p % 3, (p + 1) % 3]} for p in range(6)],
    },
    "ConsumerGroup": {
        "observedGeneration": 1,
        "conditions": [condition("Ready", "True", "GroupFound", "group is Stable"),
                       condition("OffsetsReset", "False", "Waiting",
                                 "group has 1 members; offsets are reset when it is empty")],
        "state": "Stable", "members": 1,
        "memberList": [{"memberId": "c-1", "clientId": "audit", "host": "/10.0.0.7",
                        "assignments": [{"topic": "orders", "partitions": [0, 1, 2]}]}],
        "offsets": [{"topic": "orders", "partition": 0, "committedOffset": 40, "logEndOffset": 52, "lag": 12},
                    {"topic": "orders", "partition": 1, "committedOffset": -1, "logEndOffset": 3, "lag": 3}],
        "totalLag": 15, "lastAppliedRequestId": "replay-1",
    },
}


def test_crds_accept_their_names(custom, kube_api) -> None:
    from kubernetes import client

    ext = client.ApiextensionsV1Api(kube_api)
    for kind, crd in load_crds().items():
        accepted = ext.read_custom_resource_definition(crd["metadata"]["name"]).status.accepted_names
        assert accepted.kind == kind
        assert accepted.short_names == crd["spec"]["names"]["shortNames"]
        assert accepted.categories == ["kelp"]


def get_json(kube_api, path: str, *, accept: str = "application/json") -> dict:
    """GET a raw API path as JSON (the typed client has no method for discovery or Tables)."""
    params = kube_api.param_serialize("GET", path, header_params={"Accept": accept},
                                      auth_settings=["BearerToken"])
    resp = kube_api.call_api(*params)
    body = resp.read()
    assert resp.status == 200, f"GET {path}: HTTP {resp.status}: {body[:300]!r}"
    return json.loads(body)


def test_discovery_lists_the_kelp_category(custom, kube_api) -> None:
    listing = get_json(kube_api, f"/apis/{GROUP}/{VERSION}")
    resources = {r["name"]: r for r in listing["resources"]}
    for kind, plural in PLURALS.items():
        assert resources[plural]["kind"] == kind
        assert resources[plural]["namespaced"] is True
        assert resources[plural]["categories"] == ["kelp"]
        assert resources[f"{plural}/status"]["kind"] == kind


def test_published_openapi_documents_every_field(custom, kube_api) -> None:
    """`kubectl explain` reads the OpenAPI v3 the server publishes from the CRDs."""
    def published():
        try:
            return get_json(kube_api, f"/openapi/v3/apis/{GROUP}/{VERSION}")
        except AssertionError:
            return None

    doc = wait_for(published, timeout=30, what="OpenAPI v3 of kelp.dev")
    schemas = doc["components"]["schemas"]
    topic = schemas[f"dev.kelp.{VERSION}.Topic"]["properties"]["spec"]["properties"]
    assert "May only grow" in topic["partitions"]["description"]
    assert topic["deletePolicy"]["default"] == "retain"
    cluster = schemas[f"dev.kelp.{VERSION}.Cluster"]["properties"]["spec"]["properties"]
    assert cluster["brokers"]["description"].startswith("Number of broker pods")


def test_the_production_example_applies(custom, kube_namespace) -> None:
    """examples/production/cluster.yaml (every knob) passes the server's schema and CEL rules unchanged."""
    import yaml

    from tests.chart.crd_schema import EXAMPLES_DIR

    doc = yaml.safe_load((EXAMPLES_DIR / "production" / "cluster.yaml").read_text())
    created = create(custom, kube_namespace, doc)
    assert created["spec"]["podTemplate"] == doc["spec"]["podTemplate"]
    assert created["spec"]["listeners"]["external"] == doc["spec"]["listeners"]["external"]


def test_examples_apply_with_server_defaults(custom, kube_namespace) -> None:
    schemas = {kind: openapi_schema(crd) for kind, crd in load_crds().items()}
    for path, doc in load_examples():
        created = create(custom, kube_namespace, doc)
        assert created["spec"] == apply_defaults(doc, schemas[doc["kind"]])["spec"], path.name
    topic = custom.get_namespaced_custom_object(GROUP, VERSION, kube_namespace, "topics", "orders")
    assert (topic["spec"]["partitions"], topic["spec"]["replicationFactor"]) == (6, 3)


@pytest.mark.parametrize("kind, spec, expected", [
    ("Cluster", None, {"brokers": 3, "image": "kelp:0.1.0", "imagePullPolicy": "IfNotPresent",
                       "storage": {"size": "10Gi"}, "config": {},
                       "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
                       "listeners": {"kafkaPort": 9092, "httpPort": 8080, "advertise": "dns"},
                       "reassignment": {"stallTimeoutSeconds": 300, "throttleBytesPerSecond": 104857600},
        "restart": {"podReadyTimeoutSeconds": 300}}),
    ("Cluster", {"brokers": 1, "storage": {"storageClassName": "fast"}},
     {"brokers": 1, "image": "kelp:0.1.0", "imagePullPolicy": "IfNotPresent",
      "storage": {"size": "10Gi", "storageClassName": "fast"}, "config": {},
      "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
      "listeners": {"kafkaPort": 9092, "httpPort": 8080, "advertise": "dns"},
      "reassignment": {"stallTimeoutSeconds": 300, "throttleBytesPerSecond": 104857600},
        "restart": {"podReadyTimeoutSeconds": 300}}),
    ("Topic", {"cluster": "demo"}, {"cluster": "demo", "partitions": 1, "config": {}, "deletePolicy": "retain"}),
    ("ConsumerGroup", {"cluster": "demo"}, {"cluster": "demo"}),
], ids=["cluster-no-spec", "cluster-partial", "topic-minimal", "group-minimal"])
def test_server_defaults_match_the_schema_defaulter(custom, kube_namespace, kind, spec, expected) -> None:
    doc = resource(kind, "defaults", spec)
    created = create(custom, kube_namespace, doc)
    assert created["spec"] == expected
    assert created["spec"] == apply_defaults(doc, openapi_schema(load_crds()[kind]))["spec"]


def test_partitions_may_only_grow(custom, kube_namespace) -> None:
    ns = kube_namespace
    create(custom, ns, resource("Topic", "orders", {"cluster": "demo", "partitions": 3}))
    status, message = refused(patch, custom, ns, "Topic", "orders", {"spec": {"partitions": 2}})
    assert status == 422
    assert "spec.partitions may only grow" in message
    grown = patch(custom, ns, "Topic", "orders", {"spec": {"partitions": 6}})
    assert grown["spec"]["partitions"] == 6
    assert custom.get_namespaced_custom_object(GROUP, VERSION, ns, "topics", "orders")["spec"]["partitions"] == 6


@pytest.mark.parametrize("kind, spec, change, fragment", [
    ("Topic", {"cluster": "demo"}, {"cluster": "other"}, "spec.cluster is immutable"),
    ("Topic", {"cluster": "demo", "topicName": "Orders_v1"}, {"topicName": "Orders_v2"},
     "spec.topicName is immutable"),
    ("Topic", {"cluster": "demo"}, {"topicName": "Orders_v1"}, "spec.topicName is immutable"),
    ("Topic", {"cluster": "demo", "topicName": "Orders_v1"}, {"topicName": None}, "spec.topicName is immutable"),
    ("ConsumerGroup", {"cluster": "demo"}, {"cluster": "other"}, "spec.cluster is immutable"),
    ("ConsumerGroup", {"cluster": "demo", "groupId": "audit"}, {"groupId": "audit-2"},
     "spec.groupId is immutable"),
    ("ConsumerGroup", {"cluster": "demo"}, {"groupId": "audit"}, "spec.groupId is immutable"),
], ids=["topic-cluster", "topic-name-change", "topic-name-add", "topic-name-remove",
        "group-cluster", "group-id-change", "group-id-add"])
def test_identity_fields_are_immutable(custom, kube_namespace, kind, spec, change, fragment) -> None:
    ns = kube_namespace
    before = create(custom, ns, resource(kind, "subject", spec))
    status, message = refused(patch, custom, ns, kind, "subject", {"spec": change})
    assert status == 422
    assert fragment in message
    after = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[kind], "subject")
    assert after["spec"] == before["spec"]


@pytest.mark.parametrize("reset, fragment", [
    ({"to": "timestamp"}, "spec.resetOffsets.timestamp is required when to is timestamp"),
    ({"to": "offset"}, "spec.resetOffsets.offset is required when to is offset"),
    ({"to": "earliest", "offset": 5}, "spec.resetOffsets.offset is only used with to offset"),
    ({"to": "latest", "timestamp": NOW}, "spec.resetOffsets.timestamp is only used with to timestamp"),
    ({"to": "timestamp", "timestamp": "yesterday"}, "spec.resetOffsets.timestamp"),
    ({"to": "sometime"}, "spec.resetOffsets.to"),
])
def test_reset_offsets_rules(custom, kube_namespace, reset, fragment) -> None:
    spec = {"cluster": "demo", "resetOffsets": {"requestId": "r1", "topic": "orders", **reset}}
    status, message = refused(create, custom, kube_namespace, resource("ConsumerGroup", "g", spec))
    assert status == 422
    assert fragment in message


@pytest.mark.parametrize("reset", [
    {"to": "earliest"}, {"to": "latest", "partitions": [0, 2]},
    {"to": "timestamp", "timestamp": NOW}, {"to": "offset", "offset": 0},
])
def test_valid_resets_are_accepted(custom, kube_namespace, reset) -> None:
    spec = {"cluster": "demo", "resetOffsets": {"requestId": "r1", "topic": "orders", **reset}}
    created = create(custom, kube_namespace, resource("ConsumerGroup", "g", spec))
    assert created["spec"]["resetOffsets"] == spec["resetOffsets"]


@pytest.mark.parametrize("kind, spec, fragment", [
    ("Topic", {"cluster": "demo", "partitions": 0}, "spec.partitions"),
    ("Topic", {"cluster": "demo", "partitions": "three"}, "spec.partitions"),
    ("Topic", {"cluster": "demo", "replicationFactor": 0}, "spec.replicationFactor"),
    ("Topic", {"cluster": "demo", "topicName": "orders/eu"}, "spec.topicName"),
    ("Topic", {"partitions": 3}, "spec.cluster"),
    ("Topic", {"cluster": "demo", "deletePolicy": "purge"}, "spec.deletePolicy"),
    ("Cluster", {"brokers": 0}, "spec.brokers"),
    ("Cluster", {"listeners": {"kafkaPort": 8080}}, "listeners.kafkaPort and listeners.httpPort must differ"),
    ("Cluster", {"podTemplate": {"metadata": {"labels": {"app.kubernetes.io/instance": "x"}}}},
     "spec.podTemplate.metadata.labels may not set app.kubernetes.io/name"),
    ("Cluster", {"podTemplate": {"metadata": {"annotations": {"kelp.dev/config-hash": "x"}}}},
     "spec.podTemplate.metadata.annotations may not set kelp.dev/config-hash"),
    ("Cluster", {"podTemplate": {"tolerations": [{"key": "a", "operator": "Maybe"}]}},
     "spec.podTemplate.tolerations[0].operator"),
    ("Cluster", {"podTemplate": {"topologySpreadConstraints": [{"maxSkew": 1}]}},
     "spec.podTemplate.topologySpreadConstraints[0].topologyKey"),
    # Kubernetes' own schemas (tests/chart/k8s_schemas.py): values, types and required fields deep inside.
    ("Cluster", {"podTemplate": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "Inn"}]}]}}}}},
     "spec.podTemplate.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].operator"),
    ("Cluster", {"podTemplate": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "kelp"}}}]}}}},
     "spec.podTemplate.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey"),
    ("Cluster", {"podTemplate": {"securityContext": {"runAsUser": "root"}}},
     "spec.podTemplate.securityContext.runAsUser"),
    ("Cluster", {"listeners": {"external": {"type": "Ingress"}}}, "spec.listeners.external.type"),
    ("Cluster", {"listeners": {"external": {"type": "LoadBalancer", "nodePorts": [31000, 31001, 31002]}}},
     "spec.listeners.external.nodePorts is only used with type NodePort"),
    ("Cluster", {"brokers": 3, "listeners": {"external": {"type": "NodePort", "nodePorts": [31000]}}},
     "spec.listeners.external.nodePorts needs one port per broker"),
    ("Cluster", {"podDisruptionBudget": {"maxUnavailable": -1}}, "spec.podDisruptionBudget.maxUnavailable"),
    ("Cluster", {"http": {"service": {"type": "ExternalName"}}}, "spec.http.service.type"),
    ("Cluster", {"http": {"service": {"port": 0}}}, "spec.http.service.port"),
    ("Cluster", {"http": {"service": {"type": "LoadBalancer", "nodePort": 30080}}},
     "spec.http.service.nodePort is only used with type NodePort"),
    ("Cluster", {"http": {"service": {"nodePort": 30080}}},  # the default type, ClusterIP, too
     "spec.http.service.nodePort is only used with type NodePort"),
    ("Cluster", {"http": {"restProxy": {"enabled": "no"}}}, "spec.http.restProxy.enabled"),
    ("Cluster", {"reassignment": {"stallTimeoutSeconds": 1}}, "spec.reassignment.stallTimeoutSeconds"),
    ("Cluster", {"reassignment": {"throttleBytesPerSecond": 1000}}, "spec.reassignment.throttleBytesPerSecond"),
    ("Cluster", {"restart": {"podReadyTimeoutSeconds": 5}}, "spec.restart.podReadyTimeoutSeconds"),
])
def test_schema_refuses_invalid_resources(custom, kube_namespace, kind, spec, fragment) -> None:
    status, message = refused(create, custom, kube_namespace, resource(kind, "bad", spec))
    assert status == 422
    assert fragment in message


@pytest.mark.parametrize("template, field", [
    ({"affinity": {"nodeAfinity": {}}}, "nodeAfinity"),
    ({"securityContext": {"runAsUsr": 1000}}, "runAsUsr"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                     "labelSelectr": {}}]}, "labelSelectr"),
])
def test_a_misspelt_pod_template_field_is_refused_as_kubectl_applies(custom, kube_namespace, template,
                                                                     field) -> None:
    """kubectl validates fields strictly by default: a typo in a Kubernetes type is refused, not pruned."""
    doc = resource("Cluster", "typo", {"podTemplate": template})
    status, message = refused(lambda: custom.create_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, "clusters", doc, field_validation="Strict"))
    assert status in (400, 422) and field in message, (status, message)


@pytest.mark.parametrize("kind, spec", [
    ("Cluster", {}), ("Topic", {"cluster": "demo", "partitions": 6, "replicationFactor": 3}),
    ("ConsumerGroup", {"cluster": "demo"}),
])
def test_status_subresource_keeps_what_the_operator_writes(custom, kube_namespace, kind, spec) -> None:
    ns, plural = kube_namespace, PLURALS[kind]
    created = create(custom, ns, resource(kind, "subject", spec))
    assert created["metadata"]["generation"] == 1

    # A status write goes through /status: generation and spec stay, nothing is pruned.
    after = patch_status(custom, ns, kind, "subject", FULL_STATUS[kind])
    assert after["metadata"]["generation"] == 1
    assert after["spec"] == created["spec"]
    assert after["status"] == FULL_STATUS[kind]
    assert custom.get_namespaced_custom_object(GROUP, VERSION, ns, plural, "subject")["status"] == FULL_STATUS[kind]

    # Status sent to the main resource is ignored (the subresource owns it).
    ignored = patch(custom, ns, kind, "subject", {"status": {"observedGeneration": 99}})
    assert ignored["status"]["observedGeneration"] == 1
    assert ignored["metadata"]["generation"] == 1

    # A spec change bumps generation; status still says what was last observed.
    bumped = patch(custom, ns, kind, "subject", {"metadata": {"labels": {"x": "y"}},
                                                 "spec": {"config": {"retention.ms": "1000"}}}
                   if kind != "ConsumerGroup"
                   else {"spec": {"resetOffsets": {"requestId": "r1", "topic": "orders", "to": "earliest"}}})
    assert bumped["metadata"]["generation"] == 2
    assert bumped["status"]["observedGeneration"] == 1


def test_status_refuses_a_malformed_condition(custom, kube_namespace) -> None:
    create(custom, kube_namespace, resource("Topic", "t", {"cluster": "demo"}))
    bad = condition("Ready", "Yes", "not ready", "")
    status, message = refused(patch_status, custom, kube_namespace, "Topic", "t", {"conditions": [bad]})
    assert status == 422
    assert "status.conditions[0].status" in message and "status.conditions[0].reason" in message


def _table(kube_api, ns: str, plural: str) -> dict:
    return get_json(kube_api, f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{plural}", accept=TABLE)


def test_printer_columns(custom, kube_api, kube_namespace) -> None:
    ns = kube_namespace
    for _path, doc in load_examples():
        create(custom, ns, doc)
        patch_status(custom, ns, doc["kind"], doc["metadata"]["name"], FULL_STATUS[doc["kind"]])

    def row(plural: str) -> dict[str, Any]:
        table = _table(kube_api, ns, plural)
        assert table["kind"] == "Table"
        names = [c["name"] for c in table["columnDefinitions"]]
        (only,) = table["rows"]
        return dict(zip(names, only["cells"], strict=True))

    cluster = row("clusters")
    assert list(cluster) == ["Name", "Ready", "Brokers", "Controller", "Under-Replicated", "Operation", "Offline",
                             "Leader-Skew", "Bootstrap", "Age"]
    assert (cluster["Name"], cluster["Ready"], cluster["Brokers"]) == ("demo", "False", "2/3")
    assert (cluster["Controller"], cluster["Under-Replicated"], cluster["Operation"]) == (0, 5, "RollingOut")
    assert (cluster["Offline"], cluster["Leader-Skew"], cluster["Bootstrap"]) == (0, 3, "demo.ns.svc:9092")
    topic = row("topics")
    assert list(topic) == ["Name", "Cluster", "Topic", "Partitions", "RF", "Ready", "Age"]
    assert [topic[c] for c in ("Name", "Cluster", "Topic", "Partitions", "RF", "Ready")] == [
        "orders", "demo", "orders", 6, 3, "True"]
    group = row("consumergroups")
    assert list(group) == ["Name", "Cluster", "State", "Members", "Lag", "Ready", "Age"]
    assert [group[c] for c in ("Name", "Cluster", "State", "Members", "Lag", "Ready")] == [
        "orders-audit", "demo", "Stable", 1, 15, "True"]


def test_watch_sees_spec_and_status_changes(custom, kube_namespace) -> None:
    from kubernetes import watch

    ns = kube_namespace
    created = create(custom, ns, resource("Topic", "audit", {"cluster": "demo"}))
    start_rv = created["metadata"]["resourceVersion"]
    seen: list[tuple[str, int, int | None]] = []
    done = threading.Event()

    def watcher() -> None:
        w = watch.Watch()
        for event in w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, ns, "topics",
                              resource_version=start_rv, timeout_seconds=20):
            obj = event["object"]
            seen.append((event["type"], obj["metadata"]["generation"],
                         (obj.get("status") or {}).get("observedGeneration")))
            if event["type"] == "DELETED":
                w.stop()
        done.set()

    t = threading.Thread(target=watcher, daemon=True)
    t.start()
    patch(custom, ns, "Topic", "audit", {"spec": {"partitions": 2}})
    patch_status(custom, ns, "Topic", "audit", {"observedGeneration": 2})
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "topics", "audit")
    assert done.wait(25), f"watch did not end; saw {seen}"
    assert seen == [("MODIFIED", 2, None), ("MODIFIED", 2, 2), ("DELETED", 2, 2)]


def test_stale_update_is_refused_with_conflict(custom, kube_namespace) -> None:
    ns = kube_namespace
    create(custom, ns, resource("Topic", "payments", {"cluster": "demo", "partitions": 3}))
    first = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "topics", "payments")
    second = copy.deepcopy(first)
    first["spec"]["partitions"] = 4
    custom.replace_namespaced_custom_object(GROUP, VERSION, ns, "topics", "payments", first)
    second["spec"]["partitions"] = 5  # based on the now-stale resourceVersion
    status, message = refused(custom.replace_namespaced_custom_object, GROUP, VERSION, ns, "topics",
                              "payments", second)
    assert status == 409
    assert "the object has been modified" in message
    got = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "topics", "payments")
    assert got["spec"]["partitions"] == 4


# -- issue 20: the secured layout's rules and KelpUser (docs/operator.md, "Security") ----------------------------

def _listener(name: str, port: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "port": port, **extra}


SECURED = {"listeners": {"kafka": [_listener("tls", 9093, tls=True, authentication={"type": "scram-sha-512"})]},
           "authorization": {"type": "simple", "superUsers": ["admin"]}}


@pytest.mark.parametrize("spec, fragment", [
    ({"listeners": {"kafka": [_listener("a", 9092), _listener("b", 9092)]}}, "ports must be unique"),
    ({"listeners": {"kafka": [_listener("a", 9091)]}}, "must differ from 9091"),
    ({"listeners": {"kafka": [_listener("a", 8080)]}}, "must differ from 9091"),
    ({"listeners": {"kafka": [_listener("replication", 9092)]}}, "the operator's own inter-broker listener"),
    ({"listeners": {"kafka": [_listener("a", 9092, authentication={"type": "tls"})]}}, "needs tls true"),
    ({"listeners": {"kafka": [_listener("e", 9092, type="external")], "external": {"type": "NodePort"}}},
     "at least one internal"),
    ({"listeners": {"kafka": [_listener("a", 9092), _listener("e", 9093, type="external")]}},
     "needs spec.listeners.external"),
    ({"tls": {"renewalDays": 10}}, "spec.tls needs spec.listeners.kafka"),
    ({"authorization": {"type": "simple"}}, "spec.authorization needs spec.listeners.kafka"),
    ({**SECURED, "tls": {"certificateValidityDays": 10, "renewalDays": 10}}, "renewalDays must be less"),
])
def test_secured_layout_rules(custom, kube_namespace, spec, fragment) -> None:
    status, message = refused(create, custom, kube_namespace, resource("Cluster", "bad", spec))
    assert status == 422 and fragment in message, message


def test_the_secured_layout_cannot_be_added_or_removed(custom, kube_namespace) -> None:
    ns = kube_namespace
    create(custom, ns, resource("Cluster", "plain", {}))
    status, message = refused(patch, custom, ns, "Cluster", "plain", {"spec": SECURED})
    assert status == 422 and "cannot be added to or removed from an existing Cluster" in message
    created = create(custom, ns, resource("Cluster", "secured", SECURED))
    assert created["spec"]["listeners"]["kafka"][0]["type"] == "internal"  # the server's default
    more = [*SECURED["listeners"]["kafka"], _listener("plain", 9092)]
    assert len(patch(custom, ns, "Cluster", "secured", {"spec": {"listeners": {"kafka": more}}})
               ["spec"]["listeners"]["kafka"]) == 2


def test_kelpuser_rules_and_status(custom, kube_namespace) -> None:
    ns = kube_namespace
    user = resource("KelpUser", "alice", {"cluster": "demo", "authentication": {"type": "scram-sha-512"},
                                          "authorization": {"type": "simple", "acls": [
                                              {"resource": {"type": "topic", "name": "orders"},
                                               "operations": ["Read"]}]}})
    created = create(custom, ns, user)
    acl = created["spec"]["authorization"]["acls"][0]
    assert (acl["host"], acl["type"], acl["resource"]["patternType"]) == ("*", "allow", "literal")
    status, message = refused(patch, custom, ns, "KelpUser", "alice", {"spec": {"cluster": "other"}})
    assert status == 422 and "spec.cluster is immutable" in message
    status, message = refused(create, custom, ns, resource("KelpUser", "x" * 65, user["spec"]))
    assert status == 422 and "at most 64 characters" in message
    nameless = {**user["spec"], "authorization": {"type": "simple", "acls": [
        {"resource": {"type": "topic"}, "operations": ["Read"]}]}}
    status, message = refused(create, custom, ns, resource("KelpUser", "bob", nameless))
    assert status == 422 and "resource.name is required" in message
    full = {"observedGeneration": 1, "conditions": [condition("Ready", "True", "UserReady", "ok")],
            "username": "alice", "principal": "User:alice", "secret": "alice"}
    assert patch_status(custom, ns, "KelpUser", "alice", full)["status"] == full


def test_the_security_examples_apply(custom, kube_namespace) -> None:
    import yaml

    from tests.chart.crd_schema import EXAMPLES_DIR

    for path in sorted((EXAMPLES_DIR / "security").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in PLURALS:
                create(custom, kube_namespace, doc)


def test_network_policy_peers_are_checked_by_kubernetes_schema(custom, kube_namespace) -> None:
    """spec.networkPolicy and listeners' networkPolicyPeers (docs/operator.md, "NetworkPolicy") on a real API server:
    a NetworkPolicyPeer as Kubernetes defines it is kept whole, one that is not is refused naming the field."""
    peer = {"namespaceSelector": {"matchLabels": {"team": "a"}}, "podSelector": {"matchLabels": {"app": "orders"}}}
    spec = {"networkPolicy": {"enabled": True, "httpPeers": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]},
            "listeners": {"kafka": [_listener("tls", 9093, tls=True, networkPolicyPeers=[peer])]}}
    created = create(custom, kube_namespace, resource("Cluster", "fenced", spec))
    assert created["spec"]["listeners"]["kafka"][0]["networkPolicyPeers"] == [peer]
    assert created["spec"]["networkPolicy"]["httpPeers"] == [{"ipBlock": {"cidr": "10.0.0.0/8"}}]
    bad = {"networkPolicy": {"enabled": True, "httpPeers": [{"ipBlock": {"except": ["10.1.0.0/16"]}}]}}
    status, message = refused(create, custom, kube_namespace, resource("Cluster", "badpeer", bad))
    assert status == 422 and "spec.networkPolicy.httpPeers[0].ipBlock.cidr" in message, message


def test_http_services_and_their_service_with_server_defaults(custom, kube_namespace) -> None:
    """spec.http (docs/operator.md, "HTTP services") on a real API server: the switches default to true and the
    Service's type to ClusterIP inside what is given; a NodePort with its node port and annotations is kept."""
    created = create(custom, kube_namespace, resource("Cluster", "web", {"http": {
        "restProxy": {}, "schemaRegistry": {"enabled": False}, "service": {"port": 443}}}))
    assert created["spec"]["http"] == {"restProxy": {"enabled": True}, "schemaRegistry": {"enabled": False},
                                       "service": {"type": "ClusterIP", "port": 443}}
    node_port = {"type": "NodePort", "port": 8080, "nodePort": 30080, "annotations": {"example.com/team": "a"}}
    created = create(custom, kube_namespace, resource("Cluster", "webnp", {"http": {"service": node_port}}))
    assert created["spec"]["http"] == {"service": node_port}
