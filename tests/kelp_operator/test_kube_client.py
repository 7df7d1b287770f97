"""The operator's Kubernetes client: each kind at its path, answers typed by kind, writes guarded.

What the operator relies on: `kube/client.py` is its one door to the API server,
and every object comes back as the type its `Kind` names — so list items
carry their `kind` as a single GET's answer does (the API server leaves it
out of a built-in kind's list), and every child a Cluster has can be
applied (its `kind` has a path). The API server is a stand-in here that
records each call; the kube tier runs the same client against a real one.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from kelp.operator.kube.client import CLUSTER, KINDS, POD, STORAGE_CLASS, TOPIC, KubeClient, resource_path
from kelp.operator.kube.leadership import LeadershipLost
from kelp.operator.manifests.builders import cluster_children
from kelp.operator.manifests.spec import ClusterSpec


class _Answer:
    def __init__(self, body: dict) -> None:
        self.status = 200
        self._raw = json.dumps(body).encode()

    def read(self) -> bytes:
        return self._raw


class FakeApi:
    """Just what `kube_api.request` calls on a kubernetes ApiClient; answers one body per path."""

    def __init__(self, answers: dict[str, dict]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str]] = []
        self.closed = False

    def param_serialize(self, method: str, path: str, **_: object) -> tuple[str, str]:
        return method, path

    def call_api(self, method: str, path: str, **_: object) -> _Answer:
        self.calls.append((method, path))
        return _Answer(self.answers.get(path, {}))

    def close(self) -> None:
        self.closed = True


class Refusing:
    def check(self) -> None:
        raise LeadershipLost("not the leader")

    async def fence(self) -> None:
        raise LeadershipLost("not the leader")


def test_each_kind_has_its_path() -> None:
    assert resource_path(POD, "ns", "demo-0") == "/api/v1/namespaces/ns/pods/demo-0"
    assert resource_path(STORAGE_CLASS, "ns", "fast") == "/apis/storage.k8s.io/v1/storageclasses/fast"
    assert resource_path(TOPIC, "ns") == "/apis/kelp.dev/v1alpha1/namespaces/ns/topics"


def test_list_items_say_their_kind() -> None:
    api = FakeApi({"/api/v1/namespaces/ns/pods": {"items": [{"metadata": {"name": "demo-0"}}]},
                   "/apis/kelp.dev/v1alpha1/clusters": {"items": [
                       {"apiVersion": "kelp.dev/v1alpha1", "kind": "Cluster", "metadata": {"name": "demo"}}]}})
    kube = KubeClient(api)
    pods = asyncio.run(kube.list(POD, "ns"))
    assert pods == [{"metadata": {"name": "demo-0"}, "kind": "Pod"}]
    clusters = asyncio.run(kube.list_everywhere(CLUSTER, None))
    assert [c["kind"] for c in clusters] == ["Cluster"]
    assert api.calls == [("GET", "/api/v1/namespaces/ns/pods"), ("GET", "/apis/kelp.dev/v1alpha1/clusters")]
    kube.close()
    assert api.closed


def test_every_child_of_a_cluster_has_a_kind_to_apply_it_as() -> None:
    spec = ClusterSpec.from_resource({"kind": "Cluster", "metadata": {"name": "demo", "namespace": "ns"},
                                      "spec": {"rack": {"topologyKey": "topology.kubernetes.io/zone"}}})
    kinds = {m["kind"] for m in cluster_children(spec)}
    assert kinds <= set(KINDS), kinds - set(KINDS)


def test_writes_ask_the_guard_reads_do_not() -> None:
    api = FakeApi({"/api/v1/namespaces/ns/pods/demo-0": {"kind": "Pod", "metadata": {"name": "demo-0"}}})
    kube = KubeClient(api, guard=Refusing())
    assert asyncio.run(kube.get(POD, "ns", "demo-0")) == {"kind": "Pod", "metadata": {"name": "demo-0"}}
    with pytest.raises(LeadershipLost):
        asyncio.run(kube.delete(POD, "ns", "demo-0"))
    with pytest.raises(LeadershipLost):
        asyncio.run(kube.merge_patch(POD, "ns", "demo-0", {"metadata": {"annotations": {"a": "b"}}}))
    assert api.calls == [("GET", "/api/v1/namespaces/ns/pods/demo-0")]
