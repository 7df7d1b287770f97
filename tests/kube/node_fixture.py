"""Fixtures for a real node and Kelp's image: `kube_node` (module scope) and `kelp_image` (session).

Why this exists: several test modules run real Pods — the busybox smoke test
and the broker StatefulSet — and each needs containerd + kubelet registered
with the tier's API server, plus (for the broker) Kelp's own image built by
`images/build-image.sh` and imported into that node's private containerd.
The node is module-scoped so a module's Pods share one node, and torn down
after the module: other modules expect Pods to stay Pending (no node).

What it must never do: skip for a reason the node test would not skip for
(no root, missing Debian packages, no kubelet, KELP_KUBE_NODE=0), hide an
image build failure behind a skip (it fails with the build's error unless
KELP_KUBE_BUILD=0 forbids building), or leave processes, mounts, cgroups,
the bridge or the Node object behind.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import shlex
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from tests.kube import node as nodelib
from tests.kube.kube_waits import wait_for
from tests.kube.processes import Component, free_port, last_line, start_component

REPO = Path(__file__).resolve().parents[2]
IMAGE_SCRIPT = REPO / "images" / "build-image.sh"
KELP_IMAGE = "docker.io/library/kelp:0.1.0"
IMAGE_BUILD_TIMEOUT_S = float(os.environ.get("KELP_IMAGE_BUILD_TIMEOUT", "1800"))


@dataclass
class KubeNode:
    """A running node: its Node name, private containerd and CNI bridge."""

    name: str
    base: Path
    bridge: str
    subnet: ipaddress.IPv4Network
    kubelet: Component | None = None
    kubelet_argv: list[str] = field(default_factory=list)

    def ctr(self, *args: str, timeout: float = 60) -> str:
        """Run `ctr` against this node's containerd, namespace k8s.io (the kubelet's)."""
        cmd = ["ctr", "-a", str(self.base / "containerd.sock"), "-n", "k8s.io", *args]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"`{shlex.join(cmd)}` exited {out.returncode}: {out.stderr.strip()}")
        return out.stdout

    def container_log(self, namespace: str, pod: str, container: str, *, lines: int = 30) -> str:
        """The last lines the kubelet logged for a container, newest restart last, read from disk.

        (The API server's /log needs a kubelet serving certificate this node does not have.)
        """
        files = sorted(self.base.glob(f"pod-logs/{namespace}_{pod}_*/{container}/*.log"),
                       key=lambda p: p.stat().st_mtime)
        if not files:
            return f"(no log files for {namespace}/{pod}/{container} under {self.base / 'pod-logs'})"
        text = "\n".join(f.read_text(errors="replace") for f in files[-2:])
        # CRI log lines: "<time> <stream> <P|F> <message>"
        return "\n".join(line.split(" ", 3)[-1] for line in text.splitlines()[-lines:])

    def import_image(self, archive: Path, *, timeout: float = 300) -> float:
        """Import an OCI archive into this node's containerd; returns the seconds it took."""
        t0 = time.monotonic()
        self.ctr("images", "import", str(archive), timeout=timeout)
        return time.monotonic() - t0

    def import_current_image(self, archive: Path, *, attempts: int = 3) -> float:
        """Import Kelp's image only as built from this checkout's sources; returns the seconds it took.

        The image cache is shared by every checkout on the machine, so another
        checkout's build may have replaced the archive since the session built
        it. Under the build script's own lock, `--check` confirms the archive
        matches these sources before it is imported; otherwise it is rebuilt.
        """
        import fcntl

        for _attempt in range(attempts):
            with open(archive.parent / ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                check = subprocess.run([str(IMAGE_SCRIPT), "--check"], capture_output=True, text=True,
                                       timeout=120, cwd="/")
                if check.returncode == 0:
                    return self.import_image(archive)
            build = subprocess.run([str(IMAGE_SCRIPT)], capture_output=True, text=True,
                                   timeout=IMAGE_BUILD_TIMEOUT_S, cwd="/")
            if build.returncode != 0:
                raise RuntimeError(f"kelp image rebuild failed: {last_line(build.stderr)}")
        raise RuntimeError(f"kelp image: {archive} kept being replaced by other checkouts' builds")

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container's init process (`containerd://<id>` from a Pod's containerStatuses)."""
        self.ctr("tasks", "kill", "-s", "SIGKILL", container_id.split("://", 1)[-1], timeout=30)

    def pause_container(self, container_id: str) -> None:
        """Freeze a container's processes (cgroup freezer): a hung broker. Its probes time out; signals wait
        until `resume_container`, so whoever freezes one must thaw it (a SIGKILL waits too)."""
        self.ctr("tasks", "pause", container_id.split("://", 1)[-1], timeout=30)

    def resume_container(self, container_id: str) -> None:
        self.ctr("tasks", "resume", container_id.split("://", 1)[-1], timeout=30)

    def stop_kubelet(self) -> None:
        """Stop the kubelet as `systemctl stop kubelet` would (SIGTERM); containers keep running."""
        assert self.kubelet is not None, "this node has no kubelet to stop"
        self.kubelet.stop()

    def start_kubelet(self) -> None:
        """Start the kubelet again with its first command line, appending to its log."""
        assert self.kubelet is not None and self.kubelet_argv, "this node has no kubelet to start"
        if self.kubelet.proc.poll() is None:
            return
        with open(self.kubelet.log, "ab") as fh:
            self.kubelet.proc = subprocess.Popen(self.kubelet_argv, stdout=fh, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.base)


def local_volume(*, name: str, storage_class: str, path: Path, node: str, capacity: str = "1Gi"):
    """A `local` PersistentVolume on `node` at `path`, as an admin (or a local provisioner) would make it."""
    from kubernetes import client

    return client.V1PersistentVolume(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeSpec(
            capacity={"storage": capacity}, access_modes=["ReadWriteOnce"],
            persistent_volume_reclaim_policy="Retain", storage_class_name=storage_class,
            local=client.V1LocalVolumeSource(path=str(path)),
            node_affinity=client.V1VolumeNodeAffinity(required=client.V1NodeSelector(node_selector_terms=[
                client.V1NodeSelectorTerm(match_expressions=[client.V1NodeSelectorRequirement(
                    key="kubernetes.io/hostname", operator="In", values=[node])])]))))


@contextmanager
def default_storage(kube_api, node: KubeNode, *, name: str, volumes: int, capacity: str = "10Gi") -> Iterator[str]:
    """A default StorageClass `name` with `volumes` local PersistentVolumes on `node` (as a cluster's provisioner
    would make them on demand); all removed afterwards."""
    from kubernetes import client

    core, st = client.CoreV1Api(kube_api), client.StorageV1Api(kube_api)
    st.create_storage_class(client.V1StorageClass(
        metadata=client.V1ObjectMeta(name=name, annotations={"storageclass.kubernetes.io/is-default-class": "true"}),
        provisioner="kubernetes.io/no-provisioner", volume_binding_mode="WaitForFirstConsumer"))
    pvs = []
    try:
        for i in range(volumes):
            path = node.base / f"volumes/{name}-{i}"
            path.mkdir(parents=True)
            pvs.append(f"{name}-pv-{i}")
            core.create_persistent_volume(local_volume(name=pvs[-1], storage_class=name, path=path, node=node.name,
                                                       capacity=capacity))
        yield name
    finally:
        for pv in pvs:
            try:
                core.delete_persistent_volume(pv)
            except client.ApiException:
                pass
        try:
            st.delete_storage_class(name)
        except client.ApiException:
            pass


def node_skip_reason() -> str | None:
    """Why this machine cannot run a node (the one-line skip reason), or None."""
    if os.environ.get("KELP_KUBE_NODE") == "0":
        return "kube node: disabled by KELP_KUBE_NODE=0"
    missing = nodelib.missing_prerequisites()
    if missing:
        return "kube node: missing " + "; ".join(missing)
    return None


def _cleanup_node(node: KubeNode, components: list[Component]) -> None:
    """Stop kubelet, every container of our containerd, containerd, its shims; unmount; drop the bridge."""
    sock = str(node.base / "containerd.sock")
    for comp in components:
        if comp.name == "kubelet":
            comp.stop()
    try:
        for task in node.ctr("tasks", "ls", "-q", timeout=20).split():
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
    for mnt in sorted((m for m in mounts if m.startswith(str(node.base))), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=20)
    subprocess.run(["ip", "link", "del", node.bridge], capture_output=True, timeout=20)


def _delete_node_object(kube_api, node_name: str) -> None:
    from kubernetes import client

    try:
        client.CoreV1Api(kube_api).delete_node(node_name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def _kubelet_extra(module: object, control_plane: object) -> dict[str, str] | None:
    extra = getattr(module, "KUBELET_CONFIG", None)
    return extra(control_plane) if callable(extra) else extra


@pytest.fixture(scope="module")
def kube_node(kube_control_plane, kube_api, request: pytest.FixtureRequest) -> Iterator[KubeNode]:
    """Start containerd + kubelet registered with the tier's API server; yield the node.

    A test module's `KUBELET_CONFIG` (a dict of top-level KubeletConfiguration fields, e.g.
    `{"syncFrequency": "10s"}`, or a function of the control plane returning one: the cluster DNS
    address depends on its service range) is added to its node's kubelet config."""
    reason = node_skip_reason()
    if reason:
        pytest.skip(reason)
    kubelet = kube_control_plane.bindir / "kubelet"
    if not kubelet.exists():
        pytest.skip(f"kube node: no kubelet in {kube_control_plane.bindir} "
                    "(tests/kube/build-control-plane.sh builds it by default)")
    saved_sysctls = nodelib.read_kubelet_sysctls()
    base = kube_control_plane.tmp / f"node-{random.randrange(16**6):06x}"
    for sub in ("net.d", "pod-logs", "kubelet"):
        (base / sub).mkdir(parents=True)
    (base / "containerd.toml").write_text(nodelib.containerd_config(base))
    bridge, conflist = nodelib.cni_conflist(base, service_net=str(kube_control_plane.service_net))
    (base / "net.d" / "10-kelp.conflist").write_text(conflist)
    subnet = ipaddress.ip_network(json.loads(conflist)["plugins"][0]["ipam"]["ranges"][0][0]["subnet"])
    node = KubeNode(name=f"kelp-node-{base.name[5:]}", base=base, bridge=bridge, subnet=subnet)
    components: list[Component] = []
    cgroups: list[Path] = []
    try:
        cgroups = nodelib.make_cgroup_root(node.name)
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
            node.import_image(archive)
        cfg = base / "kubelet.yaml"
        cfg.write_text(nodelib.kubelet_config(base, port=free_port(), healthz_port=free_port(),
                                               cgroup_root=node.name,
                                               extra=_kubelet_extra(request.module, kube_control_plane)))
        node.kubelet_argv = [
            str(kubelet), f"--kubeconfig={kube_control_plane.kubeconfig}", f"--config={cfg}",
            f"--root-dir={base / 'kubelet'}", f"--cert-dir={base / 'kubelet' / 'pki'}",
            f"--hostname-override={node.name}", "--v=2",
        ]
        node.kubelet = start_component("kubelet", node.kubelet_argv, base)
        components.append(node.kubelet)
        kube_control_plane.components.extend(components)
        from kubernetes import client

        core = client.CoreV1Api(kube_api)

        def ready():
            if components[-1].proc.poll() is not None:
                raise RuntimeError(f"kubelet exited {components[-1].proc.returncode}:\n{components[-1].tail(60)}")
            try:
                got = core.read_node(node.name)
            except client.ApiException:
                return None
            conds = {c.type: (c.status, c.message) for c in (got.status.conditions or [])}
            return conds.get("Ready", ("", ""))[0] == "True" and conds

        t0 = time.monotonic()
        wait_for(ready, timeout=120, what=f"node {node.name} Ready", interval=0.5)
        print(f"\nkube node: {node.name} Ready in {time.monotonic() - t0:.1f}s (files in {base})")
        yield node
    except (RuntimeError, AssertionError) as exc:
        pytest.fail(f"kube node did not come up: {exc}\n" +
                    "\n".join(f"--- {c.name}\n{c.tail(40)}" for c in components))
    finally:
        _cleanup_node(node, components)
        _delete_node_object(kube_api, node.name)  # other modules expect no node
        nodelib.restore_sysctls(saved_sysctls)
        left = nodelib.remove_cgroup_tree(cgroups)
        for comp in components:
            if comp in kube_control_plane.components:
                kube_control_plane.components.remove(comp)
        assert not left, f"cgroups still in use after the node stopped: {left}"


@pytest.fixture(scope="session")
def kelp_image() -> Path:
    """The OCI archive of Kelp's image (`images/build-image.sh`), built or reused from the cache.

    Skips exactly when a node could not run anyway; a failing build fails the
    test with the script's error, unless KELP_KUBE_BUILD=0 (then only a cached
    archive built from these sources is accepted, and the test skips without one).
    """
    reason = node_skip_reason()
    if reason:
        pytest.skip(reason)
    cmd = [str(IMAGE_SCRIPT)]
    no_build = os.environ.get("KELP_KUBE_BUILD") == "0"
    if no_build:
        cmd.append("--check")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=IMAGE_BUILD_TIMEOUT_S, cwd="/")
    except subprocess.TimeoutExpired:
        pytest.fail(f"kelp image: `{shlex.join(cmd)}` did not finish within {IMAGE_BUILD_TIMEOUT_S:.0f}s "
                    "(KELP_IMAGE_BUILD_TIMEOUT raises the limit)")
    if proc.returncode != 0:
        if no_build:
            pytest.skip(f"kelp image: KELP_KUBE_BUILD=0 and {last_line(proc.stderr)}")
        tail = "\n".join(proc.stderr.strip().splitlines()[-30:])
        pytest.fail(f"kelp image: `{shlex.join(cmd)}` exited {proc.returncode}:\n{tail}")
    archive = Path(proc.stdout.strip().splitlines()[-1])
    print(f"\nkelp image: {archive} ({archive.stat().st_size / 1e6:.0f} MB) ready in "
          f"{time.monotonic() - t0:.1f}s")
    return archive
