"""A Kelp Cluster run by the operator on the kube tier's real node, for the churn suite's cases.

Why this exists: the churn cases (rolls, scaling, kills, a stopped kubelet,
a lost volume) all need the same stage — the image imported, PersistentVolumes
on the node, the API server reachable from pods, the operator as the chart
installs it (`helm install`: two replicas in pods, one active, one standing by
on the Lease) and a Cluster `churn` of three brokers that is Ready — plus the
same probes: is the cluster settled (Ready as the operator reports it *and*
as observed directly: pods, StatefulSet, every partition's ISR), what does
each replica hold on disk, what does a client read back. One module-scoped stage serves
every case; a case that leaves the cluster unsettled makes the next case
rebuild it in a fresh namespace instead of inheriting the damage.

Network rule: the host talks only to pod IPs on the node's own bridge, and
pods reach the API server through 10.0.0.1 on that bridge (api_forwarder).

What it must never do: wait without a bound, leave a helm release (its
ClusterRole outlives the namespace), a namespace, a PersistentVolume or a
StorageClass behind (`teardown` runs on every path), or hide why something
did not settle (every timeout carries the last observation and `diagnose()`,
which includes the operator pods, the Lease holder and their logs).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.kube.api_forwarder import ApiForwarder
from tests.kube.churn_check import compare_replicas, read_replica_batches
from tests.kube.kube_waits import wait_for
from tests.kube.node_fixture import KubeNode, local_volume
from tests.kube.operator_chart import ChartOperators, OperatorPod
from tests.kube.test_kube_crd import GROUP, VERSION, install_crds

__all__ = ["ChurnEnv", "churn_env", "churn", "condition_of", "CLUSTER", "BASE_BROKERS"]

CLUSTER = "churn"
BASE_BROKERS = 3
PARTITIONS = 6
OPERATORS = 2  # the chart's default replicaCount
# The chart's values for this tier; everything else is the chart's default (two replicas, RBAC, in-cluster
# credentials). The Lease and resync timings are short so a take-over and a repair fit a case's time.
OPERATOR_VALUES = {
    "image.pullPolicy": "Never",  # the image imported into the node's containerd; nothing can be pulled
    "brokerAddress": "pod-ip",  # the tier has no cluster DNS
    "resources.requests.cpu": "50m",  # the node's two cores run every broker, client and the control plane
    "leaseDurationSeconds": "6",
    "resyncSeconds": "2",
}
SELECTOR = f"app.kubernetes.io/instance={CLUSTER},app.kubernetes.io/component=broker"


def condition_of(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), {})


def _pod_ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


class PodLogArchive:
    """Copies the node's container log files of one namespace as they grow, so replaced pods' logs survive.

    The kubelet deletes a pod's log directory with the pod; a roll or a scale-down would take the
    evidence of a broker bug with it. Every container of the namespace is copied: the brokers and the
    chart's operator pods (a restarted container's log is a new file, `<container>/<restarts>.log`).
    A thread appends new bytes every second; `stop()` ends it.
    """

    def __init__(self, *, source: Path, dest: Path, namespace: str) -> None:
        self.source, self.dest, self.namespace = source, dest, namespace
        self._offsets: dict[Path, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"pod-logs-{namespace}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.sync()

    def sync(self) -> None:
        for f in self.source.glob(f"{self.namespace}_*/*/*.log"):
            rel = f.relative_to(self.source)
            try:
                size = f.stat().st_size
                start = self._offsets.get(rel, 0)
                if size < start:  # rotated by the kubelet
                    start = 0
                if size == start:
                    continue
                with open(f, "rb") as src:
                    src.seek(start)
                    data = src.read(size - start)
            except OSError:  # deleted with its pod between the glob and the read
                continue
            out = self.dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "ab") as fh:
                fh.write(data)
            self._offsets[rel] = start + len(data)

    def tails(self, container: str, *, files: int = 6, lines: int = 15) -> str:
        """The last lines of the newest archived logs of `container`, replaced pods included."""
        found = sorted(self.dest.glob(f"*/{container}/*.log"), key=lambda f: f.stat().st_mtime)[-files:]
        out = []
        for f in found:
            text = f.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {f.relative_to(self.dest)}\n" + "\n".join(x.split(" ", 3)[-1] for x in text))
        return "\n".join(out) or f"(no {container} logs archived under {self.dest})"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sync()


class PodTerminations:
    """Watches (by polling every second) for broker pods still there when their termination grace ran out.

    A pod is deleted with a deadline (`deletionTimestamp` = deletion + grace period); a broker
    that finishes its graceful stop is gone well before it. One still present at the deadline
    was SIGKILLed by the kubelet after hanging for the whole grace period (120 s), which the
    roll or scale-down that deleted it spent waiting.
    """

    def __init__(self, *, core, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        # uid -> (name, deleted at, deadline, last seen while terminating), epoch seconds
        self.seen: dict[str, tuple[str, float, float, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"pod-terminations-{namespace}")
        self._thread.start()

    def _run(self) -> None:
        from kubernetes import client

        while not self._stop.wait(1.0):
            try:
                pods = self.core.list_namespaced_pod(self.namespace, label_selector=SELECTOR).items
            except (client.ApiException, OSError):
                continue
            now = time.time()
            for pod in pods:
                meta = pod.metadata
                if meta.deletion_timestamp is not None:
                    deadline = meta.deletion_timestamp.timestamp()
                    self.seen[meta.uid] = (meta.name, deadline - (meta.deletion_grace_period_seconds or 0),
                                           deadline, now)

    def killed_at_grace(self, *, since: float) -> list[str]:
        """Pods deleted after `since` (epoch seconds) that were still there at their grace deadline."""
        return [f"{name} (uid {uid[:8]}) deleted at {time.strftime('%H:%M:%S', time.gmtime(deleted))}Z was still "
                f"terminating at its grace deadline {deadline - deleted:.0f}s later"
                for uid, (name, deleted, deadline, last) in sorted(self.seen.items(), key=lambda x: x[1][1])
                if deleted >= since - 1 and deadline > deleted and last >= deadline - 1]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class ChurnEnv:
    """The stage of the churn cases; `start()` builds it, `teardown()` removes everything it made."""

    def __init__(self, *, kube_api, control_plane, node: KubeNode, tmp: Path) -> None:
        from kubernetes import client

        self.api, self.cp, self.node, self.tmp = kube_api, control_plane, node, tmp
        self.core, self.apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
        self.custom, self.storage = client.CustomObjectsApi(kube_api), client.StorageV1Api(kube_api)
        self.ns = ""
        self.storage_class = ""
        self.pvs: list[str] = []
        self.operators: ChartOperators | None = None
        self.logs: PodLogArchive | None = None
        self.terminations: PodTerminations | None = None
        self.built_in_s = 0.0

    # -- building and removing the stage ------------------------------------------------
    def start(self) -> None:
        from kubernetes import client

        t0 = time.monotonic()
        self.ns = f"churn-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.ns)))
        self.logs = PodLogArchive(source=self.node.base / "pod-logs", dest=self.tmp / "pod-logs",
                                  namespace=self.ns)
        self.terminations = PodTerminations(core=self.core, namespace=self.ns)
        self.storage_class = f"kelp-local-{self.ns}"
        self.storage.create_storage_class(client.V1StorageClass(
            metadata=client.V1ObjectMeta(name=self.storage_class), provisioner="kubernetes.io/no-provisioner",
            volume_binding_mode="WaitForFirstConsumer"))
        self.add_volumes(BASE_BROKERS)
        self.ensure_operators()
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "clusters", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Cluster", "metadata": {"name": CLUSTER},
            "spec": {"brokers": BASE_BROKERS,
                     "storage": {"size": "1Gi", "storageClassName": self.storage_class},
                     # The node has two cores for every broker, client and the control plane.
                     "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                     "config": {"default.replication.factor": "3", "min.insync.replicas": "2",
                                "offsets.topic.replication.factor": "3"},
                     "listeners": {"advertise": "podIP"}}})
        self.wait_settled(BASE_BROKERS, since=t0, timeout=300, what=f"Cluster {CLUSTER} built")
        self.built_in_s = time.monotonic() - t0
        print(f"\nchurn: Cluster {self.ns}/{CLUSTER} of {BASE_BROKERS} brokers settled in {self.built_in_s:.1f}s")

    def teardown(self) -> None:
        from kubernetes import client

        if self.operators is not None:
            failed = self.operators.uninstall()
            if failed:
                print(f"churn: {failed}")
            self.operators = None
        if self.terminations is not None:
            self.terminations.stop()
            self.terminations = None
        if self.logs is not None:
            self.logs.stop()
            self.logs = None
        if self.ns:
            try:
                self.core.delete_namespace(self.ns)
            except client.ApiException:
                pass
            # Brokers get 120 s to shut down gracefully; nothing here needs that.
            for pod in self.core.list_namespaced_pod(self.ns).items:
                try:
                    self.core.delete_namespaced_pod(pod.metadata.name, self.ns, grace_period_seconds=0)
                except client.ApiException:
                    pass

            def gone() -> bool:
                try:
                    self.core.read_namespace(self.ns)
                except client.ApiException as exc:
                    return exc.status == 404
                return False
            try:
                wait_for(gone, timeout=120, interval=1, what=f"namespace {self.ns} deleted")
            except AssertionError as exc:
                print(f"churn: {exc}")
        for pv in self.pvs:
            try:
                self.core.delete_persistent_volume(pv)
            except client.ApiException:
                pass
        self.pvs = []
        if self.storage_class:
            try:
                self.storage.delete_storage_class(self.storage_class)
            except client.ApiException:
                pass
        self.ns = self.storage_class = ""

    def rebuild(self) -> None:
        self.teardown()
        self.start()

    def add_volumes(self, count: int) -> list[str]:
        """`count` new, empty local PersistentVolumes of the stage's StorageClass on the node."""
        made = []
        for _ in range(count):
            name = f"{self.ns}-pv-{len(self.pvs)}"
            path = self.node.base / "volumes" / name
            path.mkdir(parents=True)
            self.core.create_persistent_volume(local_volume(name=name, storage_class=self.storage_class, path=path,
                                                            node=self.node.name, capacity="10Gi"))
            self.pvs.append(name)
            made.append(name)
        return made

    # -- operators ------------------------------------------------------------------------
    def ensure_operators(self, *, timeout: float = 90) -> OperatorPod:
        """The chart's operator at full strength: `helm install`ed with the stage, then both replicas running,
        one holding the Lease and active, the other standing by. A killed container is the kubelet's to
        restart and a deleted pod the Deployment's to replace; this only waits for them (bounded)."""
        if self.operators is None:
            self.operators = ChartOperators(kube_api=self.api, kubeconfig=self.cp.kubeconfig, namespace=self.ns,
                                            home=self.tmp / "helm-home", values=OPERATOR_VALUES)
            self.operators.install()
            replicas = self.operators.replicas()
            assert replicas == OPERATORS, f"the chart's Deployment has {replicas} replicas, the stage wants {OPERATORS}"
        return self.operators.wait_ready(timeout=timeout)

    def active_operator(self, *, timeout: float) -> OperatorPod:
        """The operator pod holding the Lease whose own health endpoint says it is active."""
        assert self.operators is not None, "no operator release installed"
        return self.operators.active(timeout=timeout)

    def kill_operator(self, op: OperatorPod) -> None:
        """SIGKILL an operator pod's container through the node's containerd, as an OOM kill would end it."""
        self.node.kill_container(op.container_id)

    # -- observing ----------------------------------------------------------------------
    def cluster(self) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "clusters", CLUSTER)

    def patch_cluster(self, spec: dict) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, "clusters", CLUSTER, {"spec": spec})

    def pods(self) -> dict[str, Any]:
        return {p.metadata.name: p for p in self.core.list_namespaced_pod(self.ns, label_selector=SELECTOR).items}

    def ready_ips(self) -> list[str]:
        return [p.status.pod_ip for _, p in sorted(self.pods().items())
                if _pod_ready(p) and p.status.pod_ip and p.metadata.deletion_timestamp is None]

    def bootstrap(self) -> str:
        return ",".join(f"{ip}:9092" for ip in self.ready_ips())

    def admin(self, path: str) -> Any:
        """GET the brokers' admin API at the first ready pod that answers."""
        last = "no ready broker pod"
        for ip in self.ready_ips():
            try:
                with urllib.request.urlopen(f"http://{ip}:8080{path}", timeout=5) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                last = f"{ip}: HTTP {exc.code} {exc.read()[:200]!r}"
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = f"{ip}: {exc}"
        raise AssertionError(f"admin GET {path}: no broker answered ({last})")

    def post_admin(self, path: str, body: Any) -> Any:
        """POST to the brokers' admin API at the first ready pod that answers (an application's call)."""
        last = "no ready broker pod"
        for ip in self.ready_ips():
            req = urllib.request.Request(f"http://{ip}:8080{path}", data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=15) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                last = f"{ip}: HTTP {exc.code} {exc.read()[:200]!r}"
                if exc.code < 500 and exc.code not in (421, 503):
                    break
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = f"{ip}: {exc}"
        raise AssertionError(f"admin POST {path}: {last}")

    def topics(self) -> list[dict]:
        return [self.admin(f"/admin/v1/topics/{t['name']}") for t in self.admin("/admin/v1/topics")["topics"]]

    def unsettled(self, brokers: int) -> str | None:
        """Why the cluster is not settled at `brokers` brokers, or None when it is.

        Settled: the operator reports Ready=True for the current generation
        with `brokers` brokers, Progressing=False because everything is
        `Reconciled` (not because something is blocked), not Degraded, no
        rebalance pending; the StatefulSet has exactly `brokers` Ready pods, all on its
        current revision; the brokers agree that exactly brokers 0..n-1 are
        registered, a controller is elected, and every partition of every
        topic has its whole replica set in sync, all on those brokers, with
        no reassignment running.
        """
        c = self.cluster()
        st, gen = c.get("status") or {}, c["metadata"].get("generation")
        if st.get("observedGeneration") != gen:
            return f"Cluster status is for generation {st.get('observedGeneration')}, spec is {gen}"
        for type_, want, reason in (("Ready", "True", None), ("Progressing", "False", "Reconciled"),
                                    ("Degraded", "False", None)):
            got = condition_of(c, type_)
            if got.get("status") != want or reason not in (None, got.get("reason")):
                return f"Cluster {type_}={got.get('status')} ({got.get('reason')}: {got.get('message')})"
        if st.get("brokers") != brokers:
            return f"Cluster status.brokers={st.get('brokers')}, want {brokers}"
        if (c["metadata"].get("annotations") or {}).get("kelp.dev/rebalance"):
            return "the kelp.dev/rebalance annotation is still set"
        sts = self.apps.read_namespaced_stateful_set(CLUSTER, self.ns)
        if sts.spec.replicas != brokers:
            return f"StatefulSet replicas={sts.spec.replicas}, want {brokers}"
        pods = self.pods()
        want = {f"{CLUSTER}-{i}" for i in range(brokers)}
        if set(pods) != want:
            return f"broker pods {sorted(pods)}, want {sorted(want)}"
        for name, p in sorted(pods.items()):
            if p.metadata.deletion_timestamp is not None or not _pod_ready(p):
                return f"pod {name} is not Ready"
            if p.metadata.labels.get("controller-revision-hash") != sts.status.update_revision:
                return f"pod {name} is not on the StatefulSet's revision {sts.status.update_revision}"
        view = self.admin("/admin/v1/cluster")
        ids = sorted(int(b["id"]) for b in view.get("brokers", []))
        if ids != list(range(brokers)) or int(view.get("controller", -1)) < 0:
            return f"brokers registered {ids}, controller {view.get('controller')}"
        for t in self.topics():
            for p in t["partitions"]:
                where = f"{t['name']}-{p['partition']}"
                if p.get("adding") or p.get("removing"):
                    return f"{where} is being reassigned (adding {p.get('adding')}, removing {p.get('removing')})"
                if not set(p["replicas"]) <= set(range(brokers)):
                    return f"{where} has replicas {p['replicas']} outside brokers 0..{brokers - 1}"
                if sorted(p["isr"]) != sorted(p["replicas"]) or p["leader"] not in p["isr"]:
                    return f"{where}: leader {p['leader']}, replicas {p['replicas']}, ISR {p['isr']}"
        return None

    def wait_settled(self, brokers: int, *, since: float, timeout: float, what: str) -> float:
        """Wait until `unsettled(brokers)` is None; returns seconds since `since`."""
        deadline = time.monotonic() + timeout
        last: str | None = "not looked yet"
        timeline: list[str] = []
        while time.monotonic() < deadline:
            try:
                now = self.unsettled(brokers)
            except AssertionError as exc:  # no broker answered the admin API (yet)
                now = str(exc)
            if now != last or not timeline:
                timeline.append(f"  +{time.monotonic() - since:6.1f}s {now or 'settled'}")
            last = now
            if last is None:
                print(f"churn: {what}, settled at {brokers} brokers:\n" + "\n".join(timeline))
                return time.monotonic() - since
            time.sleep(1)
        raise AssertionError(f"{what}: not settled at {brokers} brokers within {timeout:.0f}s "
                             f"(last: {last})\n" + "\n".join(timeline[-40:]) + f"\n{self.diagnose()}")

    def watch(self, probe: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.2) -> Any:
        """wait_for with the stage's diagnosis in the failure."""
        try:
            return wait_for(probe, timeout=timeout, interval=interval, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.diagnose()}") from None

    # -- topics, replicas and what a client reads back ---------------------------------------------
    def create_topic(self, name: str) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "topics", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Topic", "metadata": {"name": name},
            "spec": {"cluster": CLUSTER, "partitions": PARTITIONS, "replicationFactor": 3,
                     "config": {"min.insync.replicas": "2"}}})

        def ready():
            t = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "topics", name)
            return condition_of(t, "Ready").get("status") == "True"
        self.watch(ready, timeout=90, interval=0.5, what=f"Topic {name} Ready")

    def replica_dir(self, broker: int, topic: str, partition: int) -> Path:
        """Where broker `broker` keeps `topic-partition`: its claim's PersistentVolume on the node's disk."""
        claim = self.core.read_namespaced_persistent_volume_claim(f"data-{CLUSTER}-{broker}", self.ns)
        root = Path(self.core.read_persistent_volume(claim.spec.volume_name).spec.local.path)
        # The volume's root or a directory below it, wherever the broker's effective log.dirs points.
        name = f"{topic}-{partition}"
        found = [d for d in (root / name, *root.glob(f"*/{name}")) if d.is_dir()]
        assert len(found) <= 1, f"broker {broker} has two directories for {name}: {found}"
        return found[0] if found else root / name

    def replica_differences(self, topic: str, *, timeout: float = 60) -> list[str]:
        """Compare every replica's batches below the high watermark; waits (bounded) for followers to catch up."""
        deadline = time.monotonic() + timeout
        while True:
            described = self.admin(f"/admin/v1/topics/{topic}")
            problems = []
            for p in described["partitions"]:
                batches = {b: read_replica_batches(self.replica_dir(b, topic, p["partition"]))
                           for b in p["replicas"]}
                problems += compare_replicas(topic, p["partition"], batches, high_watermark=p["high_watermark"] or 0)
            if not problems or time.monotonic() > deadline:
                return problems
            time.sleep(1)

    def read_log(self, topic: str, *, timeout: float = 120) -> dict[int, list[tuple[int, bytes]]]:
        """Every record of `topic` as a client reads it, from each partition's start to its high watermark."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap(), "group.id": f"churn-check-{uuid.uuid4().hex[:6]}",
                      "enable.auto.commit": False, "log_level": 3})
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        try:
            ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
            c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS) if ends[p] > 0])
            deadline = time.monotonic() + timeout
            while any(out[p][-1][0] + 1 < ends[p] if out[p] else ends[p] > 0 for p in out):
                if time.monotonic() > deadline:
                    got = {p: (out[p][-1][0] + 1 if out[p] else 0, ends[p]) for p in out}
                    raise AssertionError(f"reading {topic} back stopped short of the high watermarks "
                                         f"(partition: (read to, high watermark)) {got}")
                for m in c.consume(num_messages=1000, timeout=0.5):
                    if m.error() is None:
                        out[m.partition()].append((m.offset(), m.value()))
        finally:
            c.close()
        return out

    def broker_containers(self) -> dict[str, str]:
        """Pod name -> containerd id of its broker container."""
        return {name: s.container_id for name, p in self.pods().items() for s in p.status.container_statuses or []
                if s.name == "broker" and s.container_id}

    # -- when something went wrong ---------------------------------------------------------
    def diagnose(self) -> str:
        from kubernetes import client

        lines = []
        try:
            c = self.cluster()
            lines.append(f"Cluster status: {json.dumps(c.get('status'), indent=None)[:2000]}")
            for name, p in sorted(self.pods().items()):
                restarts = [s.restart_count for s in p.status.container_statuses or []]
                conds = [(x.type, x.status) for x in p.status.conditions or []]
                lines.append(f"pod {name}: {p.status.phase} ip={p.status.pod_ip} restarts={restarts} {conds} "
                             f"rev={p.metadata.labels.get('controller-revision-hash')}"
                             f"{' deleting' if p.metadata.deletion_timestamp else ''}")
            for e in self.core.list_namespaced_event(self.ns).items[-20:]:
                lines.append(f"event {e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}")
            if self.logs is not None:
                self.logs.sync()
                lines.append(f"broker logs (every pod, replaced ones too, in {self.logs.dest}):\n"
                             + self.logs.tails("broker"))
        except (client.ApiException, OSError) as exc:
            lines.append(f"(diagnosis incomplete: {exc})")
        if self.operators is not None:
            lines.append(f"operators: {self.operators.describe()}")
        if self.logs is not None:
            lines.append(f"operator logs (every container, restarted ones too, in {self.logs.dest}):\n"
                         + self.logs.tails("operator", files=4, lines=30))
        return "\n".join(lines)


@pytest.fixture(scope="module")
def churn_env(kube_api, kube_control_plane, kube_node: KubeNode, kelp_image: Path,
              tmp_path_factory) -> Iterator[ChurnEnv]:
    install_crds(kube_api)
    print(f"\nkelp image: imported in {kube_node.import_current_image(kelp_image):.1f}s")
    port = int(kube_control_plane.server.rsplit(":", 1)[1])
    forwarder = ApiForwarder(name=f"kapi{kube_node.bridge[4:]}", api_port=port,
                           service_ip=kube_control_plane.service_ip)
    env = ChurnEnv(kube_api=kube_api, control_plane=kube_control_plane, node=kube_node,
                   tmp=tmp_path_factory.mktemp("churn"))
    try:
        env.start()
        yield env
    finally:
        env.teardown()
        forwarder.stop()


@pytest.fixture
def churn(churn_env: ChurnEnv, request: pytest.FixtureRequest) -> Iterator[ChurnEnv]:
    """The stage at its baseline (three brokers, settled); rebuilt when the previous case left it otherwise."""
    try:
        churn_env.ensure_operators()
        churn_env.wait_settled(BASE_BROKERS, since=time.monotonic(), timeout=90,
                               what="the baseline before this case")
    except AssertionError as exc:
        print(f"\nchurn: the previous case left the cluster unsettled; building a fresh one\n{exc}")
        churn_env.rebuild()
    yield churn_env
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(churn_env.diagnose())
