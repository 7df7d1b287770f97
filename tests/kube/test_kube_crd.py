"""CRD behaviour on a real kube-apiserver: schema, CEL transition rule, status subresource,
generation, watch and resourceVersion conflicts.

These are the API-server guarantees Kelp's operator relies on: a Topic's
partitions may only grow (refused by the server, not by the operator), status
writes never bump metadata.generation (so observedGeneration is meaningful),
and a stale update is refused with 409 instead of overwriting.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import yaml

from tests.kube.kube_waits import wait_for

pytestmark = pytest.mark.kube

GROUP, VERSION, PLURAL, KIND = "smoke.kelp.test", "v1alpha1", "topics", "Topic"
REPO_CRDS = Path(__file__).resolve().parents[2] / "crds"


def _topic_crd() -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "topic", "kind": KIND, "listKind": "TopicList"},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["partitions"],
                            "properties": {
                                "partitions": {
                                    "type": "integer", "minimum": 1, "maximum": 10000,
                                    "x-kubernetes-validations": [{
                                        "rule": "self >= oldSelf",
                                        "message": "partitions may only grow",
                                    }],
                                },
                                "replicationFactor": {"type": "integer", "minimum": 1},
                            },
                        },
                        "status": {
                            "type": "object",
                            "properties": {
                                "observedGeneration": {"type": "integer"},
                                "partitions": {"type": "integer"},
                            },
                        },
                    },
                }},
            }],
        },
    }


@pytest.fixture(scope="module")
def topic_crd(kube_api):
    from kubernetes import client

    ext = client.ApiextensionsV1Api(kube_api)
    crd = _topic_crd()
    ext.create_custom_resource_definition(crd)
    name = crd["metadata"]["name"]

    def established():
        got = ext.read_custom_resource_definition(name)
        conds = {c.type: c.status for c in (got.status.conditions or [])}
        return conds.get("Established") == "True" and conds.get("NamesAccepted") == "True"

    wait_for(established, timeout=30, what=f"CRD {name} Established")
    custom = client.CustomObjectsApi(kube_api)
    # Discovery of a new CRD can lag behind Established by a moment.
    wait_for(lambda: _listable(custom), timeout=30, what=f"{PLURAL}.{GROUP} served")
    yield custom
    ext.delete_custom_resource_definition(name)


def _listable(custom) -> bool:
    from kubernetes import client

    try:
        custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return True
    except client.ApiException:
        return False


def _topic(name: str, partitions) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
            "metadata": {"name": name}, "spec": {"partitions": partitions, "replicationFactor": 1}}


def _refusal(exc) -> str:
    try:
        return json.loads(exc.body)["message"]
    except (ValueError, KeyError, TypeError):
        return str(exc.body)


def test_transition_rule_refuses_shrinking_partitions(topic_crd, kube_namespace):
    from kubernetes import client

    custom, ns = topic_crd, kube_namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _topic("orders", 3))
    with pytest.raises(client.ApiException) as refused:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "orders", {"spec": {"partitions": 2}})
    assert refused.value.status == 422
    assert "partitions may only grow" in _refusal(refused.value)
    grown = custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "orders", {"spec": {"partitions": 6}})
    assert grown["spec"]["partitions"] == 6
    got = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "orders")
    assert got["spec"]["partitions"] == 6


@pytest.mark.parametrize("partitions, fragment", [
    (0, "should be greater than or equal to 1"),
    ("three", "must be of type integer"),
])
def test_schema_refuses_invalid_topic(topic_crd, kube_namespace, partitions, fragment):
    from kubernetes import client

    with pytest.raises(client.ApiException) as refused:
        topic_crd.create_namespaced_custom_object(
            GROUP, VERSION, kube_namespace, PLURAL, _topic("bad", partitions))
    assert refused.value.status == 422
    assert "spec.partitions" in _refusal(refused.value)
    assert fragment in _refusal(refused.value)


def test_status_subresource_and_generation(topic_crd, kube_namespace):
    custom, ns = topic_crd, kube_namespace
    created = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _topic("events", 2))
    assert created["metadata"]["generation"] == 1

    # A status write goes through /status: generation and spec stay as they were.
    after_status = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, "events", {"status": {"observedGeneration": 1, "partitions": 2}})
    assert after_status["metadata"]["generation"] == 1
    assert after_status["spec"] == created["spec"]
    assert after_status["status"] == {"observedGeneration": 1, "partitions": 2}
    assert int(after_status["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])

    # Status sent to the main resource is ignored (the subresource owns it).
    ignored = custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "events", {"status": {"observedGeneration": 99}})
    assert ignored["status"]["observedGeneration"] == 1
    assert ignored["metadata"]["generation"] == 1

    # A spec change bumps generation; the status still says what was last observed.
    bumped = custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "events", {"spec": {"partitions": 4}})
    assert bumped["metadata"]["generation"] == 2
    assert bumped["status"]["observedGeneration"] == 1


def test_watch_sees_spec_and_status_changes(topic_crd, kube_api, kube_namespace):
    from kubernetes import watch

    custom, ns = topic_crd, kube_namespace
    created = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _topic("audit", 1))
    start_rv = created["metadata"]["resourceVersion"]
    seen: list[tuple[str, int, dict]] = []
    done = threading.Event()

    def watcher():
        w = watch.Watch()
        for event in w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL,
                              resource_version=start_rv, timeout_seconds=20):
            obj = event["object"]
            seen.append((event["type"], obj["metadata"]["generation"], obj.get("status") or {}))
            if event["type"] == "DELETED":
                w.stop()
        done.set()

    t = threading.Thread(target=watcher, daemon=True)
    t.start()
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "audit", {"spec": {"partitions": 2}})
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, "audit", {"status": {"observedGeneration": 2}})
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "audit")
    assert done.wait(25), f"watch did not end; saw {seen}"
    assert seen == [
        ("MODIFIED", 2, {}),
        ("MODIFIED", 2, {"observedGeneration": 2}),
        ("DELETED", 2, {"observedGeneration": 2}),
    ]


def test_stale_update_is_refused_with_conflict(topic_crd, kube_namespace):
    from kubernetes import client

    custom, ns = topic_crd, kube_namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _topic("payments", 3))
    first = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "payments")
    second = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "payments")
    first["spec"]["partitions"] = 4
    custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "payments", first)
    second["spec"]["partitions"] = 5  # based on the now-stale resourceVersion
    with pytest.raises(client.ApiException) as conflict:
        custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "payments", second)
    assert conflict.value.status == 409
    assert "the object has been modified" in _refusal(conflict.value)
    got = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "payments")
    assert got["spec"]["partitions"] == 4


def test_repository_crds_are_accepted(kube_api):
    """Every CRD in crds/ is accepted by the real API server and becomes Established."""
    from kubernetes import client

    files = sorted(REPO_CRDS.glob("*.yaml")) + sorted(REPO_CRDS.glob("*.yml"))
    docs = [d for f in files for d in yaml.safe_load_all(f.read_text())
            if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]
    if not docs:
        pytest.skip(f"no CustomResourceDefinition in {REPO_CRDS} yet")
    ext = client.ApiextensionsV1Api(kube_api)
    created = []
    try:
        for doc in docs:
            ext.create_custom_resource_definition(doc)
            created.append(doc["metadata"]["name"])
        for name in created:
            def established(name=name):
                got = ext.read_custom_resource_definition(name)
                conds = {c.type: (c.status, c.message) for c in (got.status.conditions or [])}
                return conds.get("Established", ("", ""))[0] == "True" and conds
            wait_for(established, timeout=30, what=f"CRD {name} Established")
    finally:
        for name in created:
            ext.delete_custom_resource_definition(name)

