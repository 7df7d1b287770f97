"""The README's Kubernetes quick start, run as written on the kube tier, with the defaults (issue 32, item 7).

What a new user does is what this runs: the commands of the README's quick start block, in order,
through real kubectl and helm, against the tier's API server and its real node — the chart's defaults
(`brokerAddress: service`: the operator reaches the brokers at `demo.<ns>.svc:8080`), the example
Cluster's (`advertise: dns`: brokers advertise `demo-N.demo-brokers.<ns>.svc`), a client pod that
produces and consumes through the client Service `demo:9092`. Until issue 32 none of that had run:
every kube test used pod IPs, because the tier had no cluster DNS.

What the tier provides, as a cluster would (kind does the same): cluster DNS (`cluster_dns`, answering
from the API server; the one difference — a ClusterIP Service name resolves to its ready endpoints,
the tier having no kube-proxy — is in its docstring), the `kubernetes` Service's address
(`api_forwarder`), a default StorageClass with a volume per claim (kind's local-path provisioner makes
them on demand), and the image: the README's Docker + kind line cannot run here (no Docker engine), so
the image is built and loaded by the README's other line, `images/build-image.sh` and
`ctr -n k8s.io images import` into the node's containerd. Two commands read what the API server cannot
give on this tier, whose kubelet serves on loopback (`kubectl logs` needs the kubelet's server): the
client pod's log is read from the node's pod-log files instead.

kubectl is built like the control plane, from the Go module proxy (`KELP_KUBE_COMPONENTS=kubectl
tests/kube/build-control-plane.sh`, cached with it).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.chart.helm import helm_binary, helm_env
from tests.kube.api_forwarder import ApiForwarder
from tests.kube.cluster_dns import ClusterDns
from tests.kube.kube_waits import wait_for
from tests.kube.node_fixture import KubeNode, default_storage

pytestmark = [pytest.mark.kube, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "tests" / "kube" / "build-control-plane.sh"
NAMESPACE = "kelp"  # the README's
# The lines of the README's block that need a Docker engine and kind: the image comes the README's other way.
IMAGE_LINES = ("docker build", "kind load")


def KUBELET_CONFIG(control_plane) -> dict[str, str]:  # the node fixture's module attribute
    """Every pod's nameserver is the cluster DNS, at the service range's tenth address (kube-dns's)."""
    return {"clusterDNS": f"[{control_plane.service_net[10]}]", "clusterDomain": "cluster.local"}


def quick_start_commands() -> list[str]:
    """The README's quick start, one shell command per entry (continuation lines joined, comments dropped)."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n### Kubernetes with Helm\n", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README.md has no ```sh block under 'Kubernetes with Helm'"
    commands, current = [], ""
    for line in block.group(1).splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        commands.append(current + stripped)
        current = ""
    return commands


@pytest.fixture(scope="module")
def kubectl(kube_control_plane) -> Path:
    env = {**os.environ, "KELP_KUBE_COMPONENTS": "kubectl"}
    proc = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=3600, env=env)
    if proc.returncode != 0:
        pytest.fail(f"building kubectl failed: {proc.stderr.strip().splitlines()[-3:]}")
    path = Path(proc.stdout.strip().splitlines()[-1]) / "kubectl"
    assert path.exists(), proc.stdout
    return path


@pytest.fixture(scope="module")
def stage(kube_control_plane, kube_api, kube_node: KubeNode, kelp_image: Path, kubectl: Path, tmp_path_factory):
    """The cluster around the quick start: DNS, the API Service address, storage, the image, kubectl, helm."""
    from kubernetes import client

    helm = helm_binary()
    if helm is None:
        pytest.skip("helm not installed (test extra helm-binary)")
    core = client.CoreV1Api(kube_api)
    env = helm_env(tmp_path_factory.mktemp("quickstart") / "home", kubeconfig=kube_control_plane.kubeconfig)
    env["PATH"] = os.pathsep.join([str(kubectl.parent), str(helm.parent), "/usr/local/bin", "/usr/bin", "/bin"])
    with ExitStack() as stack:
        port = int(kube_control_plane.server.rsplit(":", 1)[1])
        forwarder = ApiForwarder(name=f"kapi{kube_node.bridge[4:]}", api_port=port,
                                 service_ip=kube_control_plane.service_ip)
        stack.callback(forwarder.stop)
        dns = ClusterDns(name=f"kdns{kube_node.bridge[4:]}", kube_api=kube_api,
                         address=str(kube_control_plane.service_net[10]),
                         api_service_ip=kube_control_plane.service_ip)
        stack.callback(dns.stop)
        # kind's default StorageClass makes a volume per claim; here the volumes are made first.
        stack.enter_context(default_storage(kube_api, kube_node, name=f"quickstart-{kube_node.name[-6:]}",
                                            volumes=4))
        # Last in, first out: helm's cluster-scoped objects (ClusterRole, binding) outlive the namespace.
        stack.callback(_remove_namespace, core, kubectl, env)
        stack.callback(subprocess.run, [str(helm), "uninstall", "kelp", "--namespace", NAMESPACE, "--wait",
                                        "--timeout", "60s"], env=env, capture_output=True, timeout=120)
        # The README's image line for containerd nodes: images/build-image.sh (the kelp_image fixture), then
        # `ctr -n k8s.io images import` (into this node's containerd).
        print(f"\nquick start: image imported in {kube_node.import_current_image(kelp_image):.1f}s")
        yield env, dns


def _remove_namespace(core, kubectl: Path, env: dict[str, str]) -> None:
    subprocess.run([str(kubectl), "delete", "namespace", NAMESPACE, "--wait=false"], env=env, capture_output=True,
                   timeout=60)
    try:
        wait_for(lambda: _namespace_gone(core), timeout=180, interval=2, what=f"namespace {NAMESPACE} deleted")
    except AssertionError as exc:
        print(f"quick start: {exc}")


def _namespace_gone(core) -> bool:
    from kubernetes import client

    for pod in core.list_namespaced_pod(NAMESPACE).items:  # brokers get 120 s to stop; nothing here needs that
        try:
            core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
        except client.ApiException:
            pass
    try:
        core.read_namespace(NAMESPACE)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def test_the_readme_quick_start_runs_as_written_with_the_defaults(stage, kube_node: KubeNode, kube_api) -> None:
    env, dns = stage
    commands = quick_start_commands()
    assert any(c.startswith(IMAGE_LINES) for c in commands), "the quick start no longer says how to get the image"
    ran: list[str] = []
    for command in commands:
        if command.startswith(IMAGE_LINES):
            continue
        if command.startswith("kubectl logs"):
            # The kubelet here serves on loopback, so the API server cannot proxy a log: read it from the node.
            pod = shlex.split(command, comments=True)[-1]
            log = kube_node.container_log(NAMESPACE, pod, pod, lines=500)
            ran.append(f"$ {command}  (read from the node)\n{log[-2000:]}")
            continue
        t0 = time.monotonic()
        proc = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=1200)
        ran.append(f"$ {command}  ({time.monotonic() - t0:.1f}s, exit {proc.returncode})\n{proc.stdout[-1500:]}"
                   f"{proc.stderr[-1500:]}")
        assert proc.returncode == 0, "\n".join(ran) + "\n" + _diagnose(kube_api, kube_node)
    print("\n".join(ran))
    # The client pod produced 1..100 through demo:9092 and read every one back.
    log = kube_node.container_log(NAMESPACE, "client", "client", lines=1000)
    values = {line.strip() for line in log.splitlines()}
    assert {str(n) for n in range(1, 101)} <= values, log[-2000:]
    assert dns.queries > 0, "nobody asked the cluster DNS: the defaults were not used"


def _diagnose(kube_api, node: KubeNode) -> str:
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    lines = []
    try:
        for pod in core.list_namespaced_pod(NAMESPACE).items:
            conds = [(c.type, c.status) for c in pod.status.conditions or []]
            lines.append(f"pod {pod.metadata.name}: {pod.status.phase} {conds}")
            for c in pod.spec.containers:
                lines.append(node.container_log(NAMESPACE, pod.metadata.name, c.name, lines=15))
        for e in core.list_namespaced_event(NAMESPACE).items[-25:]:
            lines.append(f"event {e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}")
    except client.ApiException as exc:
        lines.append(f"(diagnosis incomplete: {exc})")
    return "\n".join(lines)
