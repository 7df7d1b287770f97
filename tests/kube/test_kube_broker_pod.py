"""Kelp's own image runs a broker in a StatefulSet Pod on a real kubelet, and keeps its data.

Why this exists: the operator will run brokers exactly like this — a
StatefulSet whose `volumeClaimTemplate` binds each broker to a
PersistentVolume, the pod IP advertised through the downward API, readiness
from `/readyz` — so the image, its non-root user and the broker's recovery
must work together on a real node before any operator logic sits on top.
The image is the one `images/build-image.sh` builds (the Dockerfile's twin),
and the first test keeps the two in step.

Network rule: the host's Kafka client talks only to the pod IP on the
node's own CNI bridge (created by the test's node fixture).

Skips with the node's reason (no root, missing Debian packages); an image
that cannot be built fails the test with the build's error.
"""

from __future__ import annotations

import ipaddress
import json
import re
import tarfile
import time
from pathlib import Path

import pytest

from tests.kube.kube_waits import wait_for
from tests.kube.node_fixture import KELP_IMAGE, KubeNode, local_volume

pytestmark = [pytest.mark.kube, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
KELP_UID = 10001
RECORDS = 1000
TOPIC = "orders"
PARTITIONS = 3


# -- the Dockerfile and the built image say the same -----------------------------

def dockerfile_final_stage(text: str) -> dict[str, object]:
    """ENTRYPOINT, CMD, USER, WORKDIR, ENV, EXPOSE and LABEL of a Dockerfile's last stage."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stage: dict[str, object] = {}
    for line in logical:
        instr, _, rest = line.partition(" ")
        instr, rest = instr.upper(), rest.strip()
        if instr == "FROM":
            stage = {"Env": {}, "Labels": {}, "ExposedPorts": set()}
        elif instr in ("ENTRYPOINT", "CMD"):
            stage[instr.capitalize() if instr == "CMD" else "Entrypoint"] = json.loads(rest)
        elif instr == "USER":
            stage["User"] = rest
        elif instr == "WORKDIR":
            stage["WorkingDir"] = rest
        elif instr in ("ENV", "LABEL"):
            pairs = re.findall(r'([A-Za-z_][\w.\-]*)=("(?:[^"\\]|\\.)*"|\S+)', rest)
            target = stage["Env" if instr == "ENV" else "Labels"]
            for key, value in pairs:
                target[key] = value[1:-1] if value.startswith('"') else value  # type: ignore[index]
        elif instr == "EXPOSE":
            stage["ExposedPorts"] |= {p if "/" in p else p + "/tcp" for p in rest.split()}  # type: ignore[operator]
    return stage


def read_oci_archive(archive: Path) -> tuple[dict, list[tarfile.TarInfo]]:
    """(image config, every entry of every layer, lowest first) of a one-image OCI archive."""
    with tarfile.open(archive) as outer:
        def blob(digest: str) -> bytes:
            return outer.extractfile("blobs/sha256/" + digest.split(":", 1)[1]).read()  # type: ignore[union-attr]

        index = json.loads(outer.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        entries: list[tarfile.TarInfo] = []
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=outer.extractfile("blobs/sha256/" + layer["digest"].split(":", 1)[1]),
                              mode="r|*") as tf:
                entries.extend(tf)
    return {"index": index, **config}, entries


def test_image_matches_dockerfile_and_stays_lean(kelp_image: Path):
    config, entries = read_oci_archive(kelp_image)
    refs = {m["annotations"].get("io.containerd.image.name") for m in config["index"]["manifests"]}
    assert refs == {KELP_IMAGE}

    want = dockerfile_final_stage((REPO / "Dockerfile").read_text())
    got = config["config"]
    for key in ("Entrypoint", "Cmd", "User", "WorkingDir"):
        assert got.get(key) == want[key], f"{key}: image {got.get(key)!r}, Dockerfile {want[key]!r}"
    assert set(got.get("ExposedPorts", {})) == want["ExposedPorts"] == {"9092/tcp", "8080/tcp"}
    image_env = dict(e.split("=", 1) for e in got.get("Env", []))
    assert image_env == want["Env"], "ENV of the Dockerfile's final stage and of the built image differ"
    assert got.get("Labels") == want["Labels"]
    assert want["User"] == f"{KELP_UID}:{KELP_UID}"

    files = {e.name.lstrip("./").rstrip("/"): e for e in entries}
    data = files["var/lib/kelp"]
    assert data.isdir() and (data.uid, data.gid) == (KELP_UID, KELP_UID), "data dir must belong to kelp"
    assert files["opt/kelp/bin/kelp"].isfile() and files["usr/bin/tini"].isfile()
    assert any(n.startswith("opt/kelp/lib/python3.11/site-packages/kelp/broker/") for n in files)
    # What a lean image leaves out: compilers, apt lists, pip caches, docs, build-host files, devices.
    unwanted = [n for n, e in files.items()
                if re.match(r"usr/bin/(gcc|cc|g\+\+|make)$", n)
                or (n.startswith("var/lib/apt/lists/") and e.isfile() and not n.endswith("lock"))
                or n.startswith(("root/.cache/", "opt/kelp/lib/python3.11/site-packages/pip/",
                                 "usr/share/man/", "etc/resolv.conf", "tmp/kelp"))
                or (n.startswith("usr/share/doc/") and e.isfile() and not n.endswith("/copyright"))
                or e.ischr() or e.isblk()]
    assert not unwanted, f"the image holds files it should not: {unwanted[:10]}"
    size_mb = sum(e.size for e in entries) / 1e6
    print(f"\nkelp image: {kelp_image.stat().st_size / 1e6:.0f} MB archive, {size_mb:.0f} MB unpacked")


# -- a broker StatefulSet on the real node ----------------------------------------

def _broker_statefulset(*, storage_class: str):
    from kubernetes import client

    labels = {"app.kubernetes.io/name": "kelp", "app.kubernetes.io/component": "broker"}
    container = client.V1Container(
        name="broker", image=KELP_IMAGE, image_pull_policy="Never",
        args=["broker", "--host", "0.0.0.0", "--set", "advertised.host=$(KELP_ADVERTISED_HOST)"],
        env=[client.V1EnvVar(name="KELP_ADVERTISED_HOST", value_from=client.V1EnvVarSource(
            field_ref=client.V1ObjectFieldSelector(field_path="status.podIP")))],
        ports=[client.V1ContainerPort(name="kafka", container_port=9092),
               client.V1ContainerPort(name="http", container_port=8080)],
        readiness_probe=client.V1Probe(
            http_get=client.V1HTTPGetAction(path="/readyz", port="http"),
            period_seconds=1, failure_threshold=3, timeout_seconds=2),
        volume_mounts=[client.V1VolumeMount(name="data", mount_path="/var/lib/kelp")],
        security_context=client.V1SecurityContext(allow_privilege_escalation=False,
                                                  capabilities=client.V1Capabilities(drop=["ALL"])),
    )
    return client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name="kelp", labels=labels),
        spec=client.V1StatefulSetSpec(
            replicas=1, service_name="kelp", selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[container], automount_service_account_token=False,
                    termination_grace_period_seconds=30,
                    security_context=client.V1PodSecurityContext(
                        run_as_non_root=True, run_as_user=KELP_UID, run_as_group=KELP_UID,
                        fs_group=KELP_UID))),
            volume_claim_templates=[client.V1PersistentVolumeClaim(
                metadata=client.V1ObjectMeta(name="data"),
                spec=client.V1PersistentVolumeClaimSpec(
                    access_modes=["ReadWriteOnce"], storage_class_name=storage_class,
                    resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"})))],
        ))


def _ready_pod(core, node: KubeNode, ns: str, name: str, *, not_uid: str | None = None):
    """The pod once Ready (and, with not_uid, only a newer incarnation); None before."""
    from kubernetes import client

    try:
        pod = core.read_namespaced_pod(name, ns)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    if not_uid is not None and pod.metadata.uid == not_uid:
        return None
    for status in pod.status.container_statuses or []:
        term = status.state.terminated or (status.last_state and status.last_state.terminated)
        if term is not None and term.exit_code not in (0, None) and status.restart_count >= 2:
            logs = node.container_log(ns, name, status.name)
            raise AssertionError(f"broker container of {ns}/{name} keeps failing: exit {term.exit_code} "
                                 f"({term.reason}); its last log lines:\n{logs}")
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    return pod if ready else None


def _wait_ready(core, node: KubeNode, ns: str, name: str, *, what: str, not_uid: str | None = None):
    """Wait (bounded) for a Ready pod; on timeout say what the pod and its container were doing."""
    try:
        return wait_for(lambda: _ready_pod(core, node, ns, name, not_uid=not_uid),
                        timeout=180, interval=0.25, what=what)
    except AssertionError as exc:
        try:
            status = core.read_namespaced_pod(name, ns).status
            seen = f"phase {status.phase}, conditions {[(c.type, c.status, c.reason) for c in status.conditions or []]}"
        except Exception as read_exc:  # the report must not hide the timeout
            seen = f"pod unreadable: {read_exc}"
        raise AssertionError(f"{exc}\n{seen}\ncontainer log:\n{node.container_log(ns, name, 'broker')}") from None


def _produce(bootstrap: str) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """Produce RECORDS keyed records with acks=all; {(partition, offset): (key, value)} of the acknowledged."""
    from confluent_kafka import Producer

    acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    errors: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": False, "message.timeout.ms": 60000})
    for i in range(RECORDS):
        producer.produce(TOPIC, key=f"key-{i % 97:03d}".encode(), value=f"value-{i:05d}".encode(),
                         on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(90)
    assert left == 0 and not errors, f"{left} records unacknowledged, errors: {errors[:5]}"
    assert len(acked) == RECORDS
    return acked


def _consume_all(bootstrap: str, *, expect: int) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """Every record of TOPIC from offset 0 (assign, no group commits), bounded by a deadline."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kube-broker-pod-check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        deadline = time.monotonic() + 90
        while len(got) < expect and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                if msg.error() is None:
                    got[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
        return got
    finally:
        consumer.close()


def _create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)],
                                  operation_timeout=30, request_timeout=30)
    futures[TOPIC].result(timeout=60)


def test_broker_statefulset_serves_and_keeps_acknowledged_records(
        kube_api, kube_namespace, kube_node: KubeNode, kelp_image: Path):
    from kubernetes import client

    core, apps, storage = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api), client.StorageV1Api(kube_api)
    ns = kube_namespace
    import_s = kube_node.import_image(kelp_image)
    print(f"\nkelp image: imported into {kube_node.name}'s containerd in {import_s:.1f}s")

    # A local PersistentVolume on the node, as an admin (or a local provisioner) would make it.
    volume_dir = kube_node.base / f"volumes/{ns}-data-kelp-0"
    volume_dir.mkdir(parents=True)
    storage_class, pv_name = f"kelp-local-{ns}", f"kelp-{ns}-data-0"
    storage.create_storage_class(client.V1StorageClass(
        metadata=client.V1ObjectMeta(name=storage_class), provisioner="kubernetes.io/no-provisioner",
        volume_binding_mode="WaitForFirstConsumer"))
    try:
        core.create_persistent_volume(local_volume(name=pv_name, storage_class=storage_class,
                                                    path=volume_dir, node=kube_node.name))
        wait_for(lambda: any(sa.metadata.name == "default"
                             for sa in core.list_namespaced_service_account(ns).items),
                 timeout=30, what="ServiceAccount default")
        core.create_namespaced_service(ns, client.V1Service(
            metadata=client.V1ObjectMeta(name="kelp"),
            spec=client.V1ServiceSpec(cluster_ip="None", selector={"app.kubernetes.io/name": "kelp"},
                                      ports=[client.V1ServicePort(name="kafka", port=9092)])))
        t0 = time.monotonic()
        apps.create_namespaced_stateful_set(ns, _broker_statefulset(storage_class=storage_class))
        pod = _wait_ready(core, kube_node, ns, "kelp-0", what="pod kelp-0 Ready (readiness GET /readyz on 8080)")
        first_ready_s = time.monotonic() - t0
        pod_ip = ipaddress.ip_address(pod.status.pod_ip)
        assert pod_ip in kube_node.subnet, f"pod IP {pod_ip} is not on the node's bridge {kube_node.subnet}"
        assert pod.spec.node_name == kube_node.name
        claim = core.read_namespaced_persistent_volume_claim("data-kelp-0", ns)
        assert claim.spec.volume_name == pv_name and claim.status.phase == "Bound"
        print(f"kelp broker: StatefulSet created -> kelp-0 Ready at {pod_ip} in {first_ready_s:.1f}s")

        bootstrap = f"{pod_ip}:9092"
        _create_topic(bootstrap)
        t1 = time.monotonic()
        acked = _produce(bootstrap)
        produce_s = time.monotonic() - t1
        assert {p for p, _ in acked} == set(range(PARTITIONS)), "keys should spread over every partition"
        got = _consume_all(bootstrap, expect=RECORDS)
        assert got == acked, f"consumed {len(got)} of {RECORDS} acknowledged records, or different bytes"
        print(f"kelp broker: {RECORDS} keyed records produced (acks=all) in {produce_s * 1000:.0f} ms and read back")
        # The broker ran as the image's user and wrote to the volume as that user.
        owners = {(p.stat().st_uid, p.stat().st_gid) for p in volume_dir.rglob("*.log")}
        assert owners == {(KELP_UID, KELP_UID)}, f"segment files owned by {owners}, expected uid {KELP_UID}"

        # The StatefulSet replaces a deleted pod; the new one mounts the same volume.
        old_uid = pod.metadata.uid
        t2 = time.monotonic()
        core.delete_namespaced_pod("kelp-0", ns)
        pod = _wait_ready(core, kube_node, ns, "kelp-0", not_uid=old_uid,
                          what="a new kelp-0 Ready after deleting the old one")
        print(f"kelp broker: kelp-0 deleted -> recreated and Ready at {pod.status.pod_ip} "
              f"in {time.monotonic() - t2:.1f}s")
        assert core.read_namespaced_persistent_volume_claim("data-kelp-0", ns).spec.volume_name == pv_name
        again = _consume_all(f"{pod.status.pod_ip}:9092", expect=RECORDS)
        assert again == acked, (f"after the pod was replaced {len(again)} of {RECORDS} acknowledged "
                                "records came back, or different bytes")
    finally:
        try:
            apps.delete_namespaced_stateful_set("kelp", ns)
        except client.ApiException:
            pass
        for delete in (lambda: core.delete_persistent_volume(pv_name),
                       lambda: storage.delete_storage_class(storage_class)):
            try:
                delete()
            except client.ApiException:
                pass
