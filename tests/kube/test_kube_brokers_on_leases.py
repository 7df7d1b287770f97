"""Three broker processes form one cluster through the kube tier's API server: Lease objects and ConfigMaps.

The same brokers as `make run`, with `cluster.backend=kube`: liveness and
controller election through coordination.k8s.io/v1 Leases, metadata in
ConfigMaps (the metadata log: one ConfigMap per entry, created with POST so
two controllers can never write one offset); killing the controller elects
another, which claims a newer epoch in the log, and its topics survive.
"""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.kube, pytest.mark.clients]


def test_brokers_elect_through_lease_objects_and_keep_metadata_in_configmaps(
        cluster_factory, kube_control_plane, kube_api, kube_namespace) -> None:
    from kubernetes import client

    cluster = cluster_factory(3, settings={"cluster.backend": "kube", "kube.config": str(kube_control_plane.kubeconfig),
                                           "kube.namespace": kube_namespace, "cluster.name": "demo"})
    cluster.admin("/admin/v1/topics", "POST", {"name": "orders", "partitions": 3, "replication_factor": 3})
    coord = client.CoordinationV1Api(kube_api)
    leases = {lease.metadata.name: lease for lease in coord.list_namespaced_lease(kube_namespace).items}
    assert {"kelp-demo-controller", "kelp-demo-broker-0", "kelp-demo-broker-1", "kelp-demo-broker-2"} <= set(leases)
    first = cluster.controller()
    assert leases["kelp-demo-controller"].spec.holder_identity.startswith(f"broker-{first}/")
    maps = client.CoreV1Api(kube_api).list_namespaced_config_map(
        kube_namespace, label_selector="kelp.dev/cluster=demo,kelp.dev/metadata=log-entry")
    entries = sorted((json.loads(m.data["doc.json"]) for m in maps.items), key=lambda e: e["offset"])
    assert [e["offset"] for e in entries] == list(range(len(entries)))
    assert any(r["type"] == "topic" and r["topic"]["name"] == "orders" for e in entries for r in e["records"])
    epoch_before = max(e["epoch"] for e in entries)

    cluster[first].kill()
    new = cluster.wait_for("a new controller", lambda: (lambda c: c if c != first else None)(cluster.controller()),
                           timeout=20)
    holder = coord.read_namespaced_lease("kelp-demo-controller", kube_namespace).spec
    assert holder.holder_identity.startswith(f"broker-{new}/") and holder.lease_transitions >= 1
    # The lease names the new controller as soon as it is held; partition leaders move once the
    # takeover has loaded the store and elected from the ISR, so wait for that rather than race it.
    cluster.wait_for(f"every partition of orders led by a broker other than {first}", lambda: all(
        p["leader"] in (0, 1, 2) and p["leader"] != first for p in cluster.topic("orders")["partitions"]), timeout=20)
    assert int(cluster.admin("/admin/v1/cluster")["controller_epoch"]) > epoch_before
