"""Changing spec.storage on a running cluster (finding 6 of issue 18).

What a user relies on: asking for bigger broker volumes grows them in place
when the StorageClass allows expansion, and otherwise says clearly why not —
never a raw 422 from the StatefulSet's immutable volumeClaimTemplates, and
nothing else about the Cluster stops being reconciled. The fake API server
refuses a changed claim template with the real server's 422 (the kube tier
checks that against a real one).
"""

from __future__ import annotations

import asyncio

import pytest

from kelp.operator.reconcile.cluster import reconcile_cluster
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, resource, statefulset


def pvc(n: int, size: str, klass: str | None = "expandable", bound: bool = True) -> dict:
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if klass:
        spec["storageClassName"] = klass
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"data-demo-{n}", "namespace": "ns"}, "spec": spec,
            "status": {"phase": "Bound" if bound else "Pending", "capacity": {"storage": size}}}


def storage_class(name: str, expand: bool) -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": "example.com/csi", "allowVolumeExpansion": expand}


def cluster_with(size: str, *objects: dict, storage_class_name: str | None = None) -> tuple[dict, FakeKube]:
    storage = {"size": size}
    if storage_class_name:
        storage["storageClassName"] = storage_class_name
    body = resource("Cluster", "demo", {"brokers": 3, "storage": storage})
    kube = FakeKube(body, statefulset("demo", 3, storage="10Gi", storage_class="expandable"),
                    *(broker_pod("demo", n) for n in range(3)), *objects)
    return body, kube


def run(body: dict, kube: FakeKube) -> list[dict]:
    admin = FakeAdmin(brokers=[0, 1, 2])
    return asyncio.run(reconcile_cluster(body, kube, admin_of(admin)))[1]


def progressing(conds: list[dict]) -> dict:
    return next(c for c in conds if c["type"] == "Progressing")


def test_bigger_volumes_are_expanded_in_place() -> None:
    body, kube = cluster_with("20Gi", storage_class("expandable", True), pvc(0, "10Gi"), pvc(1, "10Gi"),
                              pvc(2, "10Gi", bound=False))
    conds = run(body, kube)
    p = progressing(conds)
    assert (p["status"], p["reason"]) == ("True", "ExpandingVolumes") and "data-demo-2 grow once bound" in p["message"]
    assert kube.events("ExpandingVolumes"), "the wait for the volumes is an Event too"
    claims = {n: kube.objects[("PersistentVolumeClaim", "ns", f"data-demo-{n}")]["spec"]["resources"]["requests"]
              ["storage"] for n in range(3)}
    assert claims == {0: "20Gi", 1: "20Gi", 2: "10Gi"}  # an unbound claim cannot be resized yet
    # The StatefulSet keeps its (immutable) claim template; every other child was applied.
    sts = kube.objects[("StatefulSet", "ns", "demo")]
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert {m["kind"] for m in kube.applied} >= {"ConfigMap", "StatefulSet", "PodDisruptionBudget"}
    assert len(kube.events("VolumeExpanding")) == 2


def test_a_class_without_expansion_is_refused_clearly() -> None:
    body, kube = cluster_with("20Gi", storage_class("expandable", False), pvc(0, "10Gi"), pvc(1, "10Gi"),
                              pvc(2, "10Gi"))
    p = progressing(run(body, kube))
    assert (p["status"], p["reason"]) == ("False", "StorageChangeRefused")
    assert "'expandable' does not allow volume expansion" in p["message"] and "back to 10Gi" in p["message"]
    assert all(kube.objects[("PersistentVolumeClaim", "ns", f"data-demo-{n}")]["spec"]["resources"]["requests"]
               ["storage"] == "10Gi" for n in range(3))
    assert kube.events("StorageChangeRefused")[0]["type"] == "Warning"


@pytest.mark.parametrize("size, klass, fragment", [
    ("5Gi", None, "cannot shrink"),
    ("10Gi", "other", "StorageClass cannot change"),
])
def test_shrinking_or_another_class_is_refused(size: str, klass: str | None, fragment: str) -> None:
    body, kube = cluster_with(size, storage_class("expandable", True), pvc(0, "10Gi"), storage_class_name=klass)
    p = progressing(run(body, kube))
    assert p["reason"] == "StorageChangeRefused" and fragment in p["message"]


def test_quantities() -> None:
    from kelp.operator.reconcile.storage import parse_quantity

    assert parse_quantity("10Gi") == 10 * 2**30 and parse_quantity("1.5G") == 1_500_000_000
    assert parse_quantity("20Gi") > parse_quantity("21G") > parse_quantity("19Gi")
    with pytest.raises(ValueError, match="not a storage quantity"):
        parse_quantity("ten gigs")


def resize_pending(claim: dict) -> dict:
    """A claim whose volume grew but whose filesystem grows only when its pod restarts (an offline-resize driver)."""
    claim["spec"]["resources"]["requests"]["storage"] = "20Gi"
    claim["status"]["conditions"] = [{"type": "FileSystemResizePending", "status": "True",
                                      "message": "Waiting for user to (re-)start a pod to finish file system resize"}]
    return claim


def test_a_volume_waiting_for_a_restart_gets_one_under_the_roll_rule() -> None:
    # Issue 32, item 8: the claim said FileSystemResizePending and the Cluster said ExpandingVolumes forever.
    claims = [pvc(0, "20Gi"), resize_pending(pvc(1, "10Gi")), pvc(2, "20Gi")]
    body, kube = cluster_with("20Gi", storage_class("expandable", True), *claims)
    admin = FakeAdmin(brokers=[0, 1, 2], controller=0, topics={"t": [{"replicas": [0, 1, 2], "isr": [0, 1, 2]}]})
    conds = asyncio.run(reconcile_cluster(body, kube, admin_of(admin)))[1]
    pod = kube.objects.get(("Pod", "ns", "demo-1"))
    assert pod is None or (pod["metadata"].get("annotations") or {}).get("kelp.dev/manual-rolling-update") == "true"
    assert ("Pod", "demo-1") in kube.deleted, "the pod restarts, one at a time, to finish the resize"
    assert kube.events("VolumeResizeRestart")
    assert progressing(conds)["reason"] == "RollingRestart", progressing(conds)


def test_growing_volumes_do_not_hide_a_blocked_roll() -> None:
    # ExpandingVolumes took the Progressing condition from every other step: a roll blocked on min.insync (or a
    # drain blocked on a dead broker) was never shown while a volume grew.
    claims = [pvc(n, "10Gi") for n in range(3)]
    for c in claims:
        c["spec"]["resources"]["requests"]["storage"] = "20Gi"  # asked to grow; the driver has not finished
    body = resource("Cluster", "demo", {"brokers": 3, "storage": {"size": "20Gi"}})
    kube = FakeKube(body, storage_class("expandable", True), *claims,
                    statefulset("demo", 3, storage="10Gi", storage_class="expandable", revision="rev-2"),
                    *(broker_pod("demo", n, revision="rev-1") for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], controller=0, topics={
        "orders": [{"replicas": [0, 1, 2], "isr": [1, 2]}, {"replicas": [1, 2, 0], "isr": [1, 0]}]})
    conds = asyncio.run(reconcile_cluster(body, kube, admin_of(admin)))[1]
    p = progressing(conds)
    assert (p["status"], p["reason"]) == ("False", "RestartBlocked"), p
