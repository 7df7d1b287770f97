"""A Pod actually runs: kubelet + containerd + runc on this machine, image built locally.

The control-plane tests prove what the API server and controllers do; this
one closes the loop for a broker Pod: the scheduler binds it to a real node,
the kubelet asks containerd (CRI) for a sandbox on a CNI bridge, runc starts
the process, and its result comes back in the Pod's status. Skipped with the
reason when the machine lacks root, containerd/runc/CNI plugins or
busybox-static, or the kubelet cannot be built.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.kube import node as nodelib
from tests.kube.processes import Component, free_port, start_component
from tests.kube.kube_waits import wait_for

pytestmark = pytest.mark.kube



def _ctr(base: Path, *args: str, timeout: float = 60) -> str:
    cmd = ["ctr", "-a", str(base / "containerd.sock"), "-n", "k8s.io", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` exited {out.returncode}: {out.stderr.strip()}")
    return out.stdout


def _cleanup_node(base: Path, bridge: str, components: list[Component]) -> None:
    """Stop kubelet, every container of our containerd, containerd, its shims; unmount; drop the bridge."""
    sock = str(base / "containerd.sock")
    for comp in components:
        if comp.name == "kubelet":
            comp.stop()
    try:
        for task in _ctr(base, "tasks", "ls", "-q", timeout=20).split():
            subprocess.run(["ctr", "-a", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", task],
                           capture_output=True, timeout=20)
    except (RuntimeError, subprocess.TimeoutExpired, OSError):
        pass
    for comp in components:
        comp.stop()
    # Shims daemonise out of containerd's process group; they are ours when their
    # command line names our private containerd socket.
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            cmdline = (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "containerd-shim" in cmdline and sock in cmdline:
            try:
                os.kill(int(proc_dir.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mnt in sorted((m for m in mounts if m.startswith(str(base))), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=20)
    subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=20)


def _delete_node_object(kube_api, node_name: str) -> None:
    from kubernetes import client

    try:
        client.CoreV1Api(kube_api).delete_node(node_name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def kube_node(kube_control_plane, kube_api) -> Iterator[str]:
    """Start containerd + kubelet registered with the tier's API server; yield the node name."""
    if os.environ.get("KELP_KUBE_NODE") == "0":
        pytest.skip("kube node: disabled by KELP_KUBE_NODE=0")
    missing = nodelib.missing_prerequisites()
    if missing:
        pytest.skip("kube node: missing " + "; ".join(missing))
    kubelet = kube_control_plane.bindir / "kubelet"
    if not kubelet.exists():
        pytest.skip(f"kube node: no kubelet in {kube_control_plane.bindir} "
                    "(tests/kube/build-control-plane.sh builds it by default)")
    saved_sysctls = nodelib.read_kubelet_sysctls()
    base = kube_control_plane.tmp / f"node-{random.randrange(16**6):06x}"
    for sub in ("net.d", "pod-logs", "kubelet"):
        (base / sub).mkdir(parents=True)
    (base / "containerd.toml").write_text(nodelib.containerd_config(base))
    bridge, conflist = nodelib.cni_conflist(base)
    (base / "net.d" / "10-kelp.conflist").write_text(conflist)
    node_name = f"kelp-node-{base.name[5:]}"
    components: list[Component] = []
    cgroups: list[Path] = []
    try:
        cgroups = nodelib.make_cgroup_root(node_name)
        ctrd = start_component("containerd", ["containerd", "--config", str(base / "containerd.toml")], base)
        components.append(ctrd)
        wait_for(lambda: (base / "containerd.sock").exists() or ctrd.proc.poll() is not None,
                 timeout=30, what="containerd socket")
        if ctrd.proc.poll() is not None:
            raise RuntimeError(f"containerd exited {ctrd.proc.returncode}:\n{ctrd.tail()}")
        for ref, cmd in ((nodelib.PAUSE_IMAGE, ["/bin/sleep", "2147483647"]),
                         (nodelib.BUSYBOX_IMAGE, ["/bin/sh"])):
            archive = base / (ref.rsplit("/", 1)[-1].replace(":", "-") + ".tar")
            nodelib.build_busybox_image(archive, ref=ref, cmd=cmd)
            _ctr(base, "images", "import", str(archive))
        cfg = base / "kubelet.yaml"
        cfg.write_text(nodelib.kubelet_config(base, port=free_port(), healthz_port=free_port(),
                                               cgroup_root=node_name))
        components.append(start_component("kubelet", [
            str(kubelet), f"--kubeconfig={kube_control_plane.kubeconfig}", f"--config={cfg}",
            f"--root-dir={base / 'kubelet'}", f"--cert-dir={base / 'kubelet' / 'pki'}",
            f"--hostname-override={node_name}", "--v=2",
        ], base))
        kube_control_plane.components.extend(components)
        from kubernetes import client

        core = client.CoreV1Api(kube_api)

        def ready():
            if components[-1].proc.poll() is not None:
                raise RuntimeError(f"kubelet exited {components[-1].proc.returncode}:\n{components[-1].tail(60)}")
            try:
                got = core.read_node(node_name)
            except client.ApiException:
                return None
            conds = {c.type: (c.status, c.message) for c in (got.status.conditions or [])}
            return conds.get("Ready", ("", ""))[0] == "True" and conds

        t0 = time.monotonic()
        wait_for(ready, timeout=120, what=f"node {node_name} Ready", interval=0.5)
        print(f"\nkube node: {node_name} Ready in {time.monotonic() - t0:.1f}s (files in {base})")
        yield node_name
    except (RuntimeError, AssertionError) as exc:
        pytest.fail(f"kube node did not come up: {exc}\n" +
                    "\n".join(f"--- {c.name}\n{c.tail(40)}" for c in components))
    finally:
        _cleanup_node(base, bridge, components)
        _delete_node_object(kube_api, node_name)  # other tests expect no node
        nodelib.restore_sysctls(saved_sysctls)
        left = nodelib.remove_cgroup_tree(cgroups)
        assert not left, f"cgroups still in use after the node stopped: {left}"
        for comp in components:
            if comp in kube_control_plane.components:
                kube_control_plane.components.remove(comp)


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
    assert pod.spec.node_name == kube_node
    assert pod.status.phase == "Succeeded", pod.status
    assert state.exit_code == 0
    assert re.fullmatch(r"ran as 0 on hello, pid \d+\n?", state.message), state.message
    assert pod.status.pod_ip and not pod.status.pod_ip.startswith("127.")  # from the CNI bridge


def _has_default_sa(core, ns: str) -> bool:
    return any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(ns).items)
