"""The real kube-controller-manager acting on what Kelp's operator creates.

A Kelp Cluster becomes a StatefulSet with a volumeClaimTemplate: the
StatefulSet controller must create the broker Pods and one PVC per Pod named
``<template>-<statefulset>-<ordinal>``, which is how a broker finds its disk
again after a restart. Everything the operator creates carries an
ownerReference to the custom resource, so deleting the resource lets the
garbage collector remove the children. No node runs here, so Pods stay
Pending; their existence and wiring is what is checked.
"""

from __future__ import annotations

import pytest

from tests.kube.kube_waits import wait_for

pytestmark = pytest.mark.kube

REPLICAS = 3


def _broker_statefulset(name: str):
    from kubernetes import client

    labels = {"app.kubernetes.io/name": "kelp", "app.kubernetes.io/instance": name}
    return client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1StatefulSetSpec(
            replicas=REPLICAS,
            service_name=f"{name}-headless",
            pod_management_policy="Parallel",
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(
                    name="broker", image="kelp.invalid/kelp-broker:test",
                    volume_mounts=[client.V1VolumeMount(name="data", mount_path="/var/lib/kelp")],
                )]),
            ),
            volume_claim_templates=[client.V1PersistentVolumeClaim(
                metadata=client.V1ObjectMeta(name="data"),
                spec=client.V1PersistentVolumeClaimSpec(
                    access_modes=["ReadWriteOnce"],
                    resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
                ),
            )],
        ),
    )


def test_statefulset_controller_creates_pods_and_claims(kube_api, kube_namespace):
    from kubernetes import client

    apps, core, ns = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api), kube_namespace
    core.create_namespaced_service(ns, client.V1Service(
        metadata=client.V1ObjectMeta(name="kelp-headless"),
        spec=client.V1ServiceSpec(cluster_ip="None", selector={"app.kubernetes.io/instance": "kelp"},
                                  ports=[client.V1ServicePort(name="kafka", port=9092)])))
    sts = apps.create_namespaced_stateful_set(ns, _broker_statefulset("kelp"))

    want_pods = {f"kelp-{i}" for i in range(REPLICAS)}
    want_pvcs = {f"data-kelp-{i}" for i in range(REPLICAS)}

    def pods():
        got = {p.metadata.name: p for p in core.list_namespaced_pod(ns).items}
        return got if set(got) == want_pods else None

    def pvcs():
        got = {c.metadata.name: c for c in core.list_namespaced_persistent_volume_claim(ns).items}
        return got if set(got) == want_pvcs else None

    # The ServiceAccount controller must first create "default" in the new namespace;
    # the StatefulSet controller retries pod creation until admission accepts it.
    got_pods = wait_for(pods, timeout=60, what=f"pods {sorted(want_pods)} from the StatefulSet controller")
    got_pvcs = wait_for(pvcs, timeout=30, what=f"claims {sorted(want_pvcs)}")
    for i in range(REPLICAS):
        pod = got_pods[f"kelp-{i}"]
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.uid, owner.controller) == ("StatefulSet", "kelp", sts.metadata.uid, True)
        claims = {v.name: v.persistent_volume_claim.claim_name
                  for v in pod.spec.volumes if v.persistent_volume_claim}
        assert claims == {"data": f"data-kelp-{i}"}
        assert pod.metadata.labels["statefulset.kubernetes.io/pod-name"] == f"kelp-{i}"
        assert pod.spec.hostname == f"kelp-{i}" and pod.spec.subdomain == "kelp-headless"
        assert pod.status.phase == "Pending"  # no node here
        pvc = got_pvcs[f"data-kelp-{i}"]
        assert pvc.spec.resources.requests["storage"] == "1Gi"
        assert pvc.metadata.labels["app.kubernetes.io/instance"] == "kelp"

    def status_replicas():
        s = apps.read_namespaced_stateful_set_status("kelp", ns).status
        return s.replicas == REPLICAS and s.observed_generation == 1 and s
    wait_for(status_replicas, timeout=30, what="StatefulSet status.replicas == 3")

    # Scale down: the controller deletes the highest ordinal; the claim is retained (default policy).
    apps.patch_namespaced_stateful_set_scale("kelp", ns, {"spec": {"replicas": 2}})
    wait_for(lambda: {p.metadata.name for p in core.list_namespaced_pod(ns).items
                      if p.metadata.deletion_timestamp is None} == {"kelp-0", "kelp-1"},
             timeout=30, what="kelp-2 removed on scale-down")
    assert {c.metadata.name for c in core.list_namespaced_persistent_volume_claim(ns).items} == want_pvcs


def test_garbage_collector_deletes_owned_children(kube_api, kube_namespace):
    from kubernetes import client

    core, ns = client.CoreV1Api(kube_api), kube_namespace
    parent = core.create_namespaced_config_map(ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="cluster-owner"), data={"role": "owner"}))
    owner_ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name="cluster-owner",
                                        uid=parent.metadata.uid, controller=True,
                                        block_owner_deletion=True)
    for i in range(3):
        core.create_namespaced_config_map(ns, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"child-{i}", owner_references=[owner_ref])))
    core.create_namespaced_config_map(ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="unowned")))

    core.delete_namespaced_config_map("cluster-owner", ns, propagation_policy="Background")

    def remaining():
        names = {c.metadata.name for c in core.list_namespaced_config_map(ns).items}
        left = names & {"cluster-owner", "child-0", "child-1", "child-2"}
        return names if not left else None

    names = wait_for(remaining, timeout=60, what="garbage collector to delete child-0..2")
    assert "unowned" in names


def test_deleting_statefulset_collects_its_pods(kube_api, kube_namespace):
    from kubernetes import client

    apps, core, ns = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api), kube_namespace
    apps.create_namespaced_stateful_set(ns, _broker_statefulset("gone"))
    wait_for(lambda: len(core.list_namespaced_pod(ns).items) == REPLICAS,
             timeout=60, what="3 pods of StatefulSet gone")
    apps.delete_namespaced_stateful_set("gone", ns, propagation_policy="Background")
    # Pods are bound to no node, so the API server deletes them at once when the GC asks.
    wait_for(lambda: not core.list_namespaced_pod(ns).items, timeout=60,
             what="garbage collector to delete the StatefulSet's pods")
    # Claims are retained by default (persistentVolumeClaimRetentionPolicy whenDeleted=Retain).
    assert {c.metadata.name for c in core.list_namespaced_persistent_volume_claim(ns).items} == {
        f"data-gone-{i}" for i in range(REPLICAS)}
