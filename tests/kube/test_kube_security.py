"""A secured Cluster on the real kubelet: TLS+SCRAM, a KelpUser's Secret in a pod, certificates renewed under load.

Issue 20's acceptance line on the kube tier. With the operator installed by the chart (`secured_env`),
a Cluster of three brokers with one listener `tls: true, authentication: scram-sha-512` and
`authorization: simple` becomes Ready; a KelpUser with ACLs (write and read topics `orders*`, read
groups `orders-*`) gets its Secret; then

1. a pod of Kelp's image mounts that Secret and, with nothing but its `client.properties` (SASL_SSL,
   SCRAM-SHA-512, its `ca.crt`; host names checked against the brokers' certificates) and the brokers'
   pod IPs, produces acks=all and reads every record back through a consumer group;
2. while an idempotent acks=all producer and a consumer group run as that user from the host, the
   operator is asked to renew the certificates (`kelp.dev/renew-certificates` on the Cluster); the test
   waits until every broker *serves* its new certificate (TLS handshakes on the Kafka and the HTTPS
   port: the serial number in the Secret), with no pod restarted, then stops the load and reads the
   topic back: no acknowledged record lost, duplicates reported;
3. a second KelpUser without ACLs is refused (TOPIC_AUTHORIZATION_FAILED), and the first user's valid
   credentials get 403 on the brokers' `/cluster/v1` control plane.

Network rule: the host reaches brokers only at their pod IPs on the node's bridge.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.kube.churn_check import check_records
from tests.kube.churn_workload import Workload, WorkloadSettings
from tests.kube.kube_waits import wait_for
from tests.kube.secured_env import (  # noqa: F401 (pytest fixture)
    BROKERS,
    CLUSTER,
    HTTP_PORT,
    LISTENER_PORT,
    SecuredEnv,
    secured_env,
    served_certificate,
)

pytestmark = [pytest.mark.kube, pytest.mark.clients, pytest.mark.timeout(900)]

# The kubelet refreshes a pod's mounted Secrets when it syncs the pod: every minute by default. A renewed
# certificate should reach the brokers within seconds here.
KUBELET_CONFIG = {"syncFrequency": "5s"}

USER = "orders-app"
INTRUDER = "intruder"
TOPIC = "orders"
ROTATION_TOPIC = "orders-rotation"
PARTITIONS = 3
POD_RECORDS = 300
RENEW_ANNOTATION = "kelp.dev/renew-certificates"


def _topic(env: SecuredEnv, name: str) -> None:
    env.create("topics", {"kind": "Topic", "metadata": {"name": name},
                          "spec": {"cluster": CLUSTER, "partitions": PARTITIONS, "replicationFactor": 3,
                                   "config": {"min.insync.replicas": "2"}}})


def _user(env: SecuredEnv, name: str, acls: list[dict] | None) -> None:
    spec: dict = {"cluster": CLUSTER, "authentication": {"type": "scram-sha-512"}}
    if acls is not None:
        spec["authorization"] = {"type": "simple", "acls": acls}
    env.create("kelpusers", {"kind": "KelpUser", "metadata": {"name": name}, "spec": spec})


@pytest.fixture(scope="module")
def stage(secured_env: SecuredEnv) -> SecuredEnv:  # noqa: F811 (pytest fixture)
    """The Cluster Ready, topics `orders` and `orders-rotation` Ready, KelpUsers `orders-app` and `intruder`."""
    env = secured_env
    _topic(env, TOPIC)
    _topic(env, ROTATION_TOPIC)
    _user(env, USER, [
        {"resource": {"type": "topic", "name": "orders", "patternType": "prefix"},
         "operations": ["Describe", "Read", "Write"]},
        {"resource": {"type": "group", "name": "orders-", "patternType": "prefix"}, "operations": ["Read"]},
        {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"]}])
    _user(env, INTRUDER, None)
    t0 = time.monotonic()
    for plural, name in (("topics", TOPIC), ("topics", ROTATION_TOPIC), ("kelpusers", USER),
                         ("kelpusers", INTRUDER)):
        env.wait_resource_ready(plural, name, timeout=120)
    print(f"secured: topics and KelpUsers Ready in {time.monotonic() - t0:.1f}s")
    return env


def _client_pod(env: SecuredEnv) -> dict:
    """Run tests/kube/secured_client.py in a pod with the user's Secret mounted; its summary (termination message)."""
    from kubernetes import client

    script = (Path(__file__).parent / "secured_client.py").read_text()
    env.core.create_namespaced_config_map(env.ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="secured-client"), data={"client.py": script}))
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orders-client"},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001},
            "containers": [{
                "name": "client", "image": "docker.io/library/kelp:0.1.0", "imagePullPolicy": "Never",
                "command": ["/usr/bin/tini", "--", "/opt/kelp/bin/python", "/client/client.py"],
                "env": [{"name": "BOOTSTRAP", "value": env.bootstrap()}, {"name": "TOPIC", "value": TOPIC},
                        {"name": "GROUP", "value": "orders-pod"}, {"name": "COUNT", "value": str(POD_RECORDS)}],
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "kafka-user", "mountPath": "/etc/kelp-user", "readOnly": True},
                                 {"name": "client", "mountPath": "/client", "readOnly": True}]}],
            "volumes": [{"name": "kafka-user", "secret": {"secretName": USER}},
                        {"name": "client", "configMap": {"name": "secured-client"}}]}}
    env.core.create_namespaced_pod(env.ns, pod)

    def finished():
        p = env.core.read_namespaced_pod("orders-client", env.ns)
        return p if p.status.phase in ("Succeeded", "Failed") else None
    try:
        p = wait_for(finished, timeout=240, interval=1, what="the client pod finished")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.node.container_log(env.ns, 'orders-client', 'client', lines=40)}\n"
                             f"{env.diagnose()}") from None
    state = p.status.container_statuses[0].state.terminated
    log = env.node.container_log(env.ns, "orders-client", "client", lines=40)
    assert state is not None and state.exit_code == 0, f"client pod {p.status.phase}: {state}\n{log}"
    return json.loads(state.message)


def test_secured_cluster_user_secret_in_a_pod_and_certificate_renewal_under_load(stage: SecuredEnv) -> None:
    env = stage
    # -- the KelpUser's Secret, as a pod mounts it ------------------------------------------------
    data = env.secret(USER)
    assert data is not None
    props = data["client.properties"].decode()
    assert f"bootstrap.servers={CLUSTER}.{env.ns}.svc:{LISTENER_PORT}" in props, props
    assert "security.protocol=SASL_SSL" in props and "sasl.mechanism=SCRAM-SHA-512" in props, props
    assert data["ca.crt"] == env.secret(f"{CLUSTER}-cluster-ca-cert")["ca.crt"]
    t0 = time.monotonic()
    summary = _client_pod(env)
    print(f"secured: client pod {summary} ({time.monotonic() - t0:.1f}s from create to finished)")
    assert summary["protocol"] == "SASL_SSL" and summary["user"] == USER
    assert summary["acked"] == POD_RECORDS and summary["consumed"] == POD_RECORDS and summary["missing"] == 0

    # -- certificates renewed under acks=all load --------------------------------------------------
    config = env.client_config(USER)
    wait_for(lambda: env.in_sync(ROTATION_TOPIC) is None, timeout=60, interval=1,
             what=f"{ROTATION_TOPIC} fully in sync before the load")
    pods_before = {name: p.metadata.uid for name, p in env.pods().items()}
    ips = env.broker_ips()
    keystores = env.secret(f"{CLUSTER}-broker-certs")
    assert keystores is not None
    before = {n: _serial(keystores[f"{CLUSTER}-{n}.pem"]) for n in range(BROKERS)}
    for n, ip in ips.items():
        served = served_certificate(ip, LISTENER_PORT)
        assert served is not None and served[0] == before[n], f"broker {n} serves {served}, its Secret {before[n]}"
    work = Workload(bootstrap=env.bootstrap(), topic=ROTATION_TOPIC, group=f"{ROTATION_TOPIC}-readers",
                    settings=WorkloadSettings(producers=1, consumers=1, rate_per_producer=50,
                                              client_config=tuple(config.items()))).start()
    try:
        work.wait_acked(100, timeout=120, what="before the renewal")
        acked_at_renewal = work.acked_count()
        t_renew = time.monotonic()
        env.annotate_cluster({RENEW_ANNOTATION: "true"})

        def renewed() -> dict[int, int] | None:
            got = env.secret(f"{CLUSTER}-broker-certs") or {}
            serials = {n: _serial(got[f"{CLUSTER}-{n}.pem"]) for n in range(BROKERS) if f"{CLUSTER}-{n}.pem" in got}
            return serials if len(serials) == BROKERS and all(serials[n] != before[n] for n in serials) else None
        after = env_wait(env, renewed, timeout=60, what="new broker certificates in their Secret")
        issued_s = time.monotonic() - t_renew
        served_at: dict[tuple[int, int], float] = {}

        def all_served() -> bool:
            for n, ip in ips.items():
                for port in (LISTENER_PORT, HTTP_PORT):
                    if (n, port) not in served_at:
                        got = served_certificate(ip, port)
                        if got is not None and got[0] == after[n]:
                            served_at[(n, port)] = time.monotonic() - t_renew
            return len(served_at) == 2 * len(ips)
        env_wait(env, all_served, timeout=180, interval=0.5,
                 what=f"every broker serving its new certificate (served so far: {served_at})")
        served_s = max(served_at.values())
        acked_during = work.acked_count() - acked_at_renewal
        ann = (env.cluster()["metadata"].get("annotations") or {})
        work.wait_acked(50, timeout=120, what="after every broker serves its new certificate")
        ca_s = _new_cluster_ca_trusted_live(env)
        work.wait_acked(50, timeout=120, what="after the brokers trust the new cluster CA")
    finally:
        work.stop()
    assert RENEW_ANNOTATION not in ann, f"the operator kept {RENEW_ANNOTATION} after acting on it: {ann}"
    assert not work.stuck, f"workload threads outlived their bounds: {work.stuck}"
    verdict = check_records(acked=work.acked, log=env.read_log(ROTATION_TOPIC, PARTITIONS, config),
                            consumed=work.consumed)
    pods_after = {name: p.metadata.uid for name, p in env.pods().items()}
    print(f"secured: renewal — Secret updated {issued_s:.1f}s after the annotation, every broker served its new "
          f"certificate {served_s:.1f}s after it (per broker/port: "
          f"{ {f'{n}:{p}': round(s, 1) for (n, p), s in sorted(served_at.items())} }); "
          f"records acked during the renewal {acked_during}, in all {len(work.acked)}, lost {len(verdict.lost)}, "
          f"duplicates {len(verdict.duplicated)}, longest produce stall {work.longest_stall():.1f}s, "
          f"client errors {len(work.errors())}; a new cluster CA trusted by every broker {ca_s:.1f}s after its "
          f"annotation")
    assert verdict.ok, f"acknowledged or served records were not kept:\n{verdict.failures()}"
    assert not work.errors(), f"clients failed: {work.errors()[:5]}"
    assert pods_after == pods_before, f"a certificate renewal restarted pods: {pods_before} -> {pods_after}"

    # The operator reaches the brokers with its renewed certificate: a new Topic becomes Ready.
    _topic(env, "orders-later")
    env.wait_resource_ready("topics", "orders-later", timeout=60)

    # -- authorization: no ACL, no access; users never reach the control plane ----------------------
    _assert_intruder_refused(env)
    _assert_control_plane_forbidden(env, config["sasl.password"])


def _new_cluster_ca_trusted_live(env: SecuredEnv) -> float:
    """`kelp.dev/renew-certificates=cluster-ca`: a new cluster CA (generation 1) joins every bundle — the CA's
    Secret, the brokers' mounted truststores, the KelpUser's ca.crt — and every broker loads it into its live
    replication truststore (its log says so); returns seconds from the annotation to the last broker."""
    from cryptography import x509

    t0 = time.monotonic()
    env.annotate_cluster({RENEW_ANNOTATION: "cluster-ca"})

    def bundle() -> bytes | None:
        got = (env.secret(f"{CLUSTER}-cluster-ca-cert") or {}).get("ca.crt", b"")
        return got if got.count(b"BEGIN CERTIFICATE") == 2 else None
    both = env_wait(env, bundle, timeout=60, what="a second CA in the cluster CA bundle")
    names = [x509.load_pem_x509_certificate(b"-----BEGIN CERTIFICATE-----" + block).subject.rfc4514_string()
             for block in both.split(b"-----BEGIN CERTIFICATE-----")[1:]]
    assert names == [f"O=kelp.dev,CN={CLUSTER}-cluster-ca v0", f"O=kelp.dev,CN={CLUSTER}-cluster-ca v1"] or \
        names == [f"CN={CLUSTER}-cluster-ca v0,O=kelp.dev", f"CN={CLUSTER}-cluster-ca v1,O=kelp.dev"], names
    env_wait(env, lambda: (env.secret(USER) or {}).get("ca.crt") == both, timeout=60,
             what=f"the new cluster CA in KelpUser {USER}'s ca.crt")
    wanted = "cluster-ca.crt reloaded (2 CA certificates)"

    def every_broker() -> bool:
        return all(wanted in env.node.container_log(env.ns, f"{CLUSTER}-{n}", "broker", lines=400)
                   for n in range(BROKERS))
    env_wait(env, every_broker, timeout=120, interval=1, what=f"every broker log saying '{wanted}'")
    ann = env.cluster()["metadata"].get("annotations") or {}
    assert RENEW_ANNOTATION not in ann, f"the operator kept {RENEW_ANNOTATION} after acting on it: {ann}"
    return time.monotonic() - t0


def _serial(keystore: bytes) -> int:
    from cryptography import x509

    start = keystore.index(b"-----BEGIN CERTIFICATE-----")
    return x509.load_pem_x509_certificate(keystore[start:]).serial_number


def env_wait(env: SecuredEnv, probe, *, timeout: float, what: str, interval: float = 0.5):
    try:
        return wait_for(probe, timeout=timeout, interval=interval, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnose()}") from None


def _assert_intruder_refused(env: SecuredEnv) -> None:
    from confluent_kafka import KafkaError, Producer

    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": env.bootstrap(), "acks": "all", "message.timeout.ms": 20000,
                  "log_level": 3, **env.client_config(INTRUDER)})
    p.produce(TOPIC, b"not allowed", on_delivery=lambda err, _msg: errors.append(err))
    left = p.flush(30)
    assert left == 0 and len(errors) == 1, f"the intruder's record was not answered: {left} left, {errors}"
    assert errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, \
        f"the intruder (no ACLs) was not refused with TOPIC_AUTHORIZATION_FAILED: {errors[0]}"


def _assert_control_plane_forbidden(env: SecuredEnv, password: str) -> None:
    ip = next(iter(sorted(env.broker_ips().items())))[1]
    ctx = ssl.create_default_context(cafile=str(env.ca_file(USER)))  # host name: the broker certificate's pod IP
    token = base64.b64encode(f"{USER}:{password}".encode()).decode()
    req = urllib.request.Request(f"https://{ip}:{HTTP_PORT}/cluster/v1/partitions/{TOPIC}/0/replicas",
                                 headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            raise AssertionError(f"a user's credentials reached the control plane: HTTP {resp.status}")
    except urllib.error.HTTPError as exc:
        assert exc.code == 403, f"/cluster/v1 with {USER}'s credentials: HTTP {exc.code} {exc.read()[:200]!r}"
