"""A Pod actually runs: kubelet + containerd + runc on this machine, image built locally.

The control-plane tests prove what the API server and controllers do; this
one closes the loop for a broker Pod: the scheduler binds it to a real node,
the kubelet asks containerd (CRI) for a sandbox on a CNI bridge, runc starts
the process, and its result comes back in the Pod's status. Skipped with the
reason when the machine lacks root, containerd/runc/CNI plugins or
busybox-static, or the kubelet cannot be built.
"""

from __future__ import annotations

import ipaddress
import re

import pytest

from tests.kube import node as nodelib
from tests.kube.kube_waits import wait_for

pytestmark = pytest.mark.kube

# The node itself is the `kube_node` fixture (tests/kube/node_fixture.py, module scope).


def test_pod_runs_a_process_on_a_real_node(kube_api, kube_namespace, kube_node):
    from kubernetes import client

    core, ns = client.CoreV1Api(kube_api), kube_namespace
    wait_for(lambda: _has_default_sa(core, ns), timeout=30, what="ServiceAccount default")
    core.create_namespaced_pod(ns, client.V1Pod(
        metadata=client.V1ObjectMeta(name="hello"),
        spec=client.V1PodSpec(
            restart_policy="Never",
            automount_service_account_token=False,
            containers=[client.V1Container(
                name="main", image=nodelib.BUSYBOX_IMAGE, image_pull_policy="Never",
                command=["/bin/sh", "-c",
                         # "$$$$": Kubernetes turns "$$" into "$" when expanding $(VAR) references.
                         'echo "ran as $(id -u) on $(hostname), pid $$$$" > /dev/termination-log'],
            )],
        )))

    def finished():
        pod = core.read_namespaced_pod("hello", ns)
        return pod.status.phase in ("Succeeded", "Failed") and pod

    pod = wait_for(finished, timeout=120, what="pod hello to run to completion", interval=0.5)
    state = pod.status.container_statuses[0].state.terminated
    print(f"\nkube node: pod ran on {pod.spec.node_name}: {state.message.strip()!r} exit {state.exit_code}")
    assert pod.spec.node_name == kube_node.name
    assert pod.status.phase == "Succeeded", pod.status
    assert state.exit_code == 0
    assert re.fullmatch(r"ran as 0 on hello, pid \d+\n?", state.message), state.message
    assert pod.status.pod_ip and ipaddress.ip_address(pod.status.pod_ip) in kube_node.subnet  # the CNI bridge


def _has_default_sa(core, ns: str) -> bool:
    return any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(ns).items)
