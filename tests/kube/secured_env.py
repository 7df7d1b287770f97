"""A secured Kelp Cluster run by the chart-installed operator on the kube tier's real node (issue 20).

Why this exists: the secured layout (TLS listeners, SCRAM, ACLs, the operator's own CAs, HTTPS admin
calls with client certificates) is the operator/broker integration that only real pods prove: the
operator's Secrets mounted by the kubelet, `${env:POD_NAME}` resolved in the brokers' config, the
operator reaching HTTPS brokers with its cluster-CA certificate, a KelpUser's Secret used by a client.
`SecuredEnv` builds that stage once per module — the image imported, local PersistentVolumes, the
API server reachable from pods, the operator as `helm install` makes it (one replica: the node's two
cores run everything), a Cluster `secure` of three brokers with one `tls: true, scram-sha-512`
listener and `authorization: simple` — and offers the probes the test needs: KelpUser Secrets,
client configs from them, the certificate each broker serves, the admin API as the operator sees it.

Network rule: the host talks only to pod IPs on the node's own bridge, and pods reach the API server
through 10.0.0.1 on that bridge (api_forwarder).

What it must never do: wait without a bound, leave a helm release, namespace, PersistentVolume or
StorageClass behind (`teardown` runs on every path), or hide why something did not become Ready
(timeouts carry the last observation and `diagnose()`).
"""

from __future__ import annotations

import json
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.kube.api_forwarder import ApiForwarder
from tests.kube.churn_env import PodLogArchive, condition_of
from tests.kube.kube_waits import wait_for
from tests.kube.node_fixture import KubeNode, local_volume
from tests.kube.operator_chart import ChartOperators
from tests.kube.test_kube_crd import GROUP, VERSION, install_crds

__all__ = ["SecuredEnv", "secured_env", "CLUSTER", "BROKERS", "LISTENER_PORT", "HTTP_PORT", "served_certificate"]

CLUSTER = "secure"
BROKERS = 3
LISTENER_PORT = 9093
HTTP_PORT = 8080
OPERATOR_VALUES = {
    "replicaCount": "1",  # one operator pod: the node's two cores run every broker, client and the control plane
    "image.pullPolicy": "Never",
    "brokerAddress": "pod-ip",  # the tier has no cluster DNS
    "resources.requests.cpu": "50m",
    "leaseDurationSeconds": "6",
    "resyncSeconds": "2",
}
SELECTOR = f"app.kubernetes.io/instance={CLUSTER},app.kubernetes.io/component=broker"


def served_certificate(host: str, port: int, *, timeout: float = 5.0) -> tuple[int, float] | None:
    """(serial number, notBefore as epoch seconds) of the certificate `host:port` serves, or None."""
    from cryptography import x509

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                ctx.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    except OSError:
        return None
    if not der:
        return None
    cert = x509.load_der_x509_certificate(der)
    return cert.serial_number, cert.not_valid_before_utc.timestamp()


def _pod_ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


class SecuredEnv:
    """The stage; `start()` builds it, `teardown()` removes everything it made."""

    def __init__(self, *, kube_api, control_plane, node: KubeNode, tmp: Path) -> None:
        from kubernetes import client

        self.api, self.cp, self.node, self.tmp = kube_api, control_plane, node, tmp
        self.core, self.apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
        self.custom, self.storage = client.CustomObjectsApi(kube_api), client.StorageV1Api(kube_api)
        self.ns = f"secure-{uuid.uuid4().hex[:8]}"
        self.storage_class = f"kelp-local-{self.ns}"
        self.pvs: list[str] = []
        self.operators: ChartOperators | None = None
        self.logs: PodLogArchive | None = None
        self.ready_in_s = 0.0
        self._namespace_made = False

    # -- building and removing --------------------------------------------------------------
    def start(self) -> None:
        from kubernetes import client

        t0 = time.monotonic()
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.ns)))
        self._namespace_made = True
        self.logs = PodLogArchive(source=self.node.base / "pod-logs", dest=self.tmp / "pod-logs", namespace=self.ns)
        self.storage.create_storage_class(client.V1StorageClass(
            metadata=client.V1ObjectMeta(name=self.storage_class), provisioner="kubernetes.io/no-provisioner",
            volume_binding_mode="WaitForFirstConsumer"))
        for i in range(BROKERS):
            path = self.node.base / f"volumes/{self.ns}-{i}"
            path.mkdir(parents=True)
            name = f"{self.ns}-pv-{i}"
            self.core.create_persistent_volume(local_volume(name=name, storage_class=self.storage_class, path=path,
                                                            node=self.node.name, capacity="1Gi"))
            self.pvs.append(name)
        self.operators = ChartOperators(kube_api=self.api, kubeconfig=self.cp.kubeconfig, namespace=self.ns,
                                        home=self.tmp / "helm-home", values=OPERATOR_VALUES)
        self.operators.install()
        self.create("clusters", {
            "kind": "Cluster", "metadata": {"name": CLUSTER},
            "spec": {"brokers": BROKERS,
                     "storage": {"size": "1Gi", "storageClassName": self.storage_class},
                     "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                     "config": {"default.replication.factor": "3", "min.insync.replicas": "2",
                                "offsets.topic.replication.factor": "3",
                                # A renewed certificate file is looked at within seconds, not a minute.
                                "ssl.reload.interval.ms": "4000"},
                     "listeners": {"advertise": "podIP", "httpPort": HTTP_PORT, "kafka": [
                         {"name": "tls", "port": LISTENER_PORT, "type": "internal", "tls": True,
                          "authentication": {"type": "scram-sha-512"}}]},
                     "authorization": {"type": "simple"}}})
        self.wait_ready(timeout=300, what=f"Cluster {CLUSTER} Ready", since=t0)
        self.ready_in_s = time.monotonic() - t0
        print(f"\nsecured: Cluster {self.ns}/{CLUSTER} of {BROKERS} brokers Ready in {self.ready_in_s:.1f}s")

    def teardown(self) -> None:
        from kubernetes import client

        if self.operators is not None and self._namespace_made:
            # KelpUsers and Topics carry the operator's finalizers: delete them while it still runs.
            self._delete_kelp_resources()
        if self.operators is not None:
            failed = self.operators.uninstall()
            if failed:
                print(f"secured: {failed}")
            self.operators = None
        if self.logs is not None:
            self.logs.stop()
            self.logs = None
        if self._namespace_made:
            try:
                self.core.delete_namespace(self.ns)
            except client.ApiException:
                pass
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
                print(f"secured: {exc}")
        for pv in self.pvs:
            try:
                self.core.delete_persistent_volume(pv)
            except client.ApiException:
                pass
        try:
            self.storage.delete_storage_class(self.storage_class)
        except client.ApiException:
            pass

    def _delete_kelp_resources(self, timeout: float = 60) -> None:
        """Delete KelpUsers, Topics, then the Cluster, and wait (bounded) until the operator let them go."""
        from kubernetes import client

        for plurals in (("kelpusers", "topics"), ("clusters",)):
            for plural in plurals:
                for item in self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, plural)["items"]:
                    try:
                        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, plural,
                                                                    item["metadata"]["name"])
                    except client.ApiException:
                        pass

            def gone(plurals=plurals) -> bool:
                return not any(self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, p)["items"]
                               for p in plurals)
            try:
                wait_for(gone, timeout=timeout, interval=0.5, what=f"{', '.join(plurals)} deleted by the operator")
            except AssertionError as exc:
                print(f"secured: {exc}")

    # -- resources --------------------------------------------------------------------------
    def create(self, plural: str, body: dict) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, plural,
                                                    {"apiVersion": f"{GROUP}/{VERSION}", **body})

    def get(self, plural: str, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, plural, name)

    def cluster(self) -> dict:
        return self.get("clusters", CLUSTER)

    def annotate_cluster(self, annotations: dict[str, str | None]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, "clusters", CLUSTER,
                                                   {"metadata": {"annotations": annotations}})

    def secret(self, name: str) -> dict[str, bytes] | None:
        import base64

        from kubernetes import client

        try:
            got = self.core.read_namespaced_secret(name, self.ns)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return {k: base64.b64decode(v) for k, v in (got.data or {}).items()}

    def pods(self) -> dict[str, Any]:
        return {p.metadata.name: p for p in self.core.list_namespaced_pod(self.ns, label_selector=SELECTOR).items}

    def broker_ips(self) -> dict[int, str]:
        """Ordinal -> pod IP of every Ready broker pod."""
        return {int(name.rsplit("-", 1)[1]): p.status.pod_ip for name, p in self.pods().items()
                if _pod_ready(p) and p.status.pod_ip and p.metadata.deletion_timestamp is None}

    def bootstrap(self) -> str:
        return ",".join(f"{ip}:{LISTENER_PORT}" for _, ip in sorted(self.broker_ips().items()))

    def unready(self) -> str | None:
        """Why the Cluster is not Ready as the operator reports it and as its pods show, or None."""
        c = self.cluster()
        st, gen = c.get("status") or {}, c["metadata"].get("generation")
        if st.get("observedGeneration") != gen:
            return f"Cluster status is for generation {st.get('observedGeneration')}, spec is {gen}"
        for type_, want in (("Ready", "True"), ("Progressing", "False"), ("Degraded", "False")):
            got = condition_of(c, type_)
            if got.get("status") != want:
                return f"Cluster {type_}={got.get('status')} ({got.get('reason')}: {got.get('message')})"
        ips = self.broker_ips()
        if sorted(ips) != list(range(BROKERS)):
            return f"Ready broker pods {sorted(ips)}"
        return None

    def wait_ready(self, *, timeout: float, what: str, since: float) -> float:
        deadline = time.monotonic() + timeout
        last: str | None = "not looked yet"
        timeline: list[str] = []
        while time.monotonic() < deadline:
            now = self.unready()
            if now != last or not timeline:
                timeline.append(f"  +{time.monotonic() - since:6.1f}s {now or 'Ready'}")
            last = now
            if now is None:
                print(f"secured: {what}:\n" + "\n".join(timeline))
                return time.monotonic() - since
            time.sleep(1)
        raise AssertionError(f"{what}: not Ready within {timeout:.0f}s (last: {last})\n" + "\n".join(timeline[-40:])
                             + f"\n{self.diagnose()}")

    def wait_resource_ready(self, plural: str, name: str, *, timeout: float) -> dict:
        def ready() -> dict | None:
            got = self.get(plural, name)
            return got if condition_of(got, "Ready").get("status") == "True" else None
        try:
            return wait_for(ready, timeout=timeout, interval=0.5, what=f"{plural}/{name} Ready")
        except AssertionError as exc:
            got = self.get(plural, name)
            raise AssertionError(f"{exc}; its status: {json.dumps(got.get('status'))}\n{self.diagnose()}") from None

    # -- clients ----------------------------------------------------------------------------
    def ca_file(self, user: str) -> Path:
        """The user's Secret's ca.crt (the cluster CA bundle) as a file for a host client."""
        data = self.secret(user)
        assert data is not None and data.get("ca.crt"), f"Secret {user} has no ca.crt"
        path = self.tmp / f"{user}-ca.crt"
        path.write_bytes(data["ca.crt"])
        return path

    def client_config(self, user: str) -> dict[str, str]:
        """librdkafka settings for KelpUser `user` from its Secret (the names client.properties' comment gives)."""
        data = self.secret(user)
        assert data is not None, f"no Secret {user}"
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": data["password"].decode(), "ssl.ca.location": str(self.ca_file(user))}

    def operator_admin(self, path: str) -> Any:
        """GET the brokers' HTTPS admin API with the operator's client certificate (Secret <cluster>-operator-tls)."""
        data = self.secret(f"{CLUSTER}-operator-tls")
        assert data is not None, "no operator certificate Secret"
        d = Path(tempfile.mkdtemp(dir=self.tmp))
        (d / "tls.crt").write_bytes(data["tls.crt"])
        (d / "tls.key").write_bytes(data["tls.key"])
        ctx = ssl.create_default_context(cadata=data["ca.crt"].decode())
        ctx.check_hostname = False  # pod IPs; the certificate names them, but this is only a probe
        ctx.load_cert_chain(d / "tls.crt", d / "tls.key")
        last = "no ready broker pod"
        for _, ip in sorted(self.broker_ips().items()):
            try:
                with urllib.request.urlopen(f"https://{ip}:{HTTP_PORT}{path}", timeout=5, context=ctx) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                last = f"{ip}: HTTP {exc.code} {exc.read()[:200]!r}"
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = f"{ip}: {exc}"
        raise AssertionError(f"admin GET {path}: no broker answered ({last})")

    def in_sync(self, topic: str) -> str | None:
        """Why some partition of `topic` has not its whole replica set in sync, or None."""
        described = self.operator_admin(f"/admin/v1/topics/{topic}")
        for p in described["partitions"]:
            if sorted(p["isr"]) != sorted(p["replicas"]) or p["leader"] not in p["isr"]:
                return f"{topic}-{p['partition']}: leader {p['leader']}, replicas {p['replicas']}, ISR {p['isr']}"
        return None

    def read_log(self, topic: str, partitions: int, config: dict[str, str], *,
                 timeout: float = 120) -> dict[int, list[tuple[int, bytes]]]:
        """Every record of `topic` as a client reads it, from each partition's start to its high watermark."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap(), "group.id": f"{topic}-check-{uuid.uuid4().hex[:6]}",
                      "enable.auto.commit": False, "log_level": 3, **config})
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        try:
            ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
            c.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
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

    # -- when something went wrong ------------------------------------------------------------
    def diagnose(self) -> str:
        from kubernetes import client

        lines = []
        try:
            c = self.cluster()
            lines.append(f"Cluster status: {json.dumps(c.get('status'))[:2500]}")
            for name, p in sorted((x.metadata.name, x) for x in self.core.list_namespaced_pod(self.ns).items):
                restarts = [s.restart_count for s in p.status.container_statuses or []]
                waits = [(s.name, s.state.waiting.reason) for s in p.status.container_statuses or []
                         if s.state and s.state.waiting]
                lines.append(f"pod {name}: {p.status.phase} ip={p.status.pod_ip} restarts={restarts} {waits}")
            for e in self.core.list_namespaced_event(self.ns).items[-25:]:
                lines.append(f"event {e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}")
        except (client.ApiException, OSError) as exc:
            lines.append(f"(diagnosis incomplete: {exc})")
        if self.operators is not None:
            lines.append(f"operators: {self.operators.describe()}")
        if self.logs is not None:
            self.logs.sync()
            lines.append("broker logs:\n" + self.logs.tails("broker", files=3, lines=20))
            lines.append("operator logs:\n" + self.logs.tails("operator", files=2, lines=40))
        return "\n".join(lines)


@pytest.fixture(scope="module")
def secured_env(kube_api, kube_control_plane, kube_node: KubeNode, kelp_image: Path,
                tmp_path_factory) -> Iterator[SecuredEnv]:
    install_crds(kube_api)
    print(f"\nkelp image: imported in {kube_node.import_current_image(kelp_image):.1f}s")
    port = int(kube_control_plane.server.rsplit(":", 1)[1])
    forwarder = ApiForwarder(name=f"kapi{kube_node.bridge[4:]}", api_port=port,
                           service_ip=kube_control_plane.service_ip)
    env = SecuredEnv(kube_api=kube_api, control_plane=kube_control_plane, node=kube_node,
                     tmp=tmp_path_factory.mktemp("secured"))
    try:
        env.start()
        yield env
    finally:
        env.teardown()
        forwarder.stop()
