"""A secured Cluster's reconciliation with the API server faked and the clock moved by hand: its children, its
certificates in their Secrets, and what a renewal or a CA rotation does to the pods.

What a running cluster relies on: the pods mount one Secret holding each broker's keystore, the CA
bundles and the trusted set; the operator's client certificate is in its own Secret; a certificate
renewal changes the Secret and nothing else (no pod restarts: the brokers reload it); a CA rotation keeps
the old CA trusted until every certificate is issued again and a grace has passed, then restarts the pods
one at a time (the pod template's trust floor); a new CA follows a fence, so a deposed replica mints none;
with spec.tls.issuerRef, cert-manager Certificates instead, and a condition while cert-manager is away.
"""

from __future__ import annotations

import asyncio
import base64

import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from kelp.kube.api import KubeApiError
from kelp.operator.kube.leadership import LeadershipLost
from kelp.operator.manifests.builders import TRUST_FLOOR_ANNOTATION, cluster_children, config_map, external_service
from kelp.operator.manifests.spec import ClusterSpec
from kelp.operator.reconcile.cluster import reconcile_cluster
from kelp.operator.reconcile.cluster_tls import RENEW_ANNOTATION
from kelp.operator.security.certificates import DAY_MS, issued_by, read_cert, read_certs
from kelp.operator.security.pki import split_pem
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, deposed, resource, statefulset

T0 = 1_800_000_000_000
LISTENERS = [{"name": "plain", "port": 9092, "type": "internal", "tls": False,
              "authentication": {"type": "scram-sha-512"}},
             {"name": "tls", "port": 9093, "type": "internal", "tls": True, "authentication": {"type": "tls"}}]
SPEC = {"brokers": 3, "listeners": {"kafka": LISTENERS}, "authorization": {"type": "simple"},
        "tls": {"certificateValidityDays": 100, "renewalDays": 10}}


class Clock:
    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def secured_kube(spec: dict | None = None) -> tuple[dict, FakeKube]:
    body = resource("Cluster", "demo", spec or SPEC)
    return body, FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))


def reconcile(body: dict, kube: FakeKube, clock: Clock, admin: FakeAdmin | None = None):
    admin = admin or FakeAdmin(brokers=[0, 1, 2])
    current = kube.objects[("Cluster", "ns", "demo")]
    return asyncio.run(reconcile_cluster({**body, "status": current.get("status", {})}, kube, admin_of(admin),
                                         clock_ms=clock))


def secret(kube: FakeKube, name: str) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in kube.objects[("Secret", "ns", name)]["data"].items()}


def template_annotations(kube: FakeKube) -> dict[str, str]:
    return kube.objects[("StatefulSet", "ns", "demo")]["spec"]["template"]["metadata"]["annotations"]


def secret_writes(kube: FakeKube) -> list[str]:
    return [m["metadata"]["name"] for m in kube.applied if m["kind"] == "Secret"]


def test_every_child_of_a_secured_cluster_is_valid_for_kubernetes() -> None:
    spec = ClusterSpec.from_resource({**resource("Cluster", "demo", {
        **SPEC, "listeners": {"kafka": [*LISTENERS, {"name": "ext", "port": 9094, "type": "external", "tls": True,
                                                     "authentication": {"type": "scram-sha-512"}}],
                              "external": {"type": "NodePort"}}}), "metadata": {"name": "demo", "namespace": "ns"}})
    children = cluster_children(spec, trust_floor="cluster=0,clients=0", external={0: {"host": None, "port": 31000}})
    for manifest in [*children, external_service(spec, 0)]:
        kubernetes_validate.validate(manifest, "1.34", strict=True)
    kinds = {(m["kind"], m["metadata"]["name"]): m for m in children}
    sts = kinds[("StatefulSet", "demo")]
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert [p["name"] for p in container["ports"]] == ["tcp-replication", "tcp-plain", "tcp-tls", "tcp-ext", "http"]
    assert {"name": "tls", "secret": {"secretName": "demo-broker-certs", "defaultMode": 0o440}} in pod["volumes"]
    assert {"name": "tls", "mountPath": "/etc/kelp/tls", "readOnly": True} in container["volumeMounts"]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS" and "lifecycle" not in container
    assert container["args"] == ["broker", "--config", "/etc/kelp/$(POD_NAME).yaml"]
    env = {e["name"]: e.get("valueFrom", e.get("value")) for e in container["env"]}
    assert env["NODE_IP"] == {"fieldRef": {"fieldPath": "status.hostIP"}} and "KELP_ADVERTISED_HOST" not in env
    assert sts["spec"]["template"]["metadata"]["annotations"][TRUST_FLOOR_ANNOTATION] == "cluster=0,clients=0"
    assert [p["name"] for p in kinds[("Service", "demo-brokers")]["spec"]["ports"]] == [
        "tcp-replication", "tcp-plain", "tcp-tls", "tcp-ext", "http"]
    assert [p["name"] for p in kinds[("Service", "demo")]["spec"]["ports"]] == ["tcp-plain", "tcp-tls", "tcp-ext",
                                                                               "http"]
    assert external_service(spec, 0)["spec"]["ports"] == [{"name": "tcp-ext", "port": 9094, "targetPort": "tcp-ext",
                                                           "protocol": "TCP"}]
    own = yaml.safe_load(config_map(spec, {0: {"host": None, "port": 31000}})["data"]["demo-0.yaml"])
    assert own["advertised.listeners"].endswith(",EXT://${env:NODE_IP}:31000")


def test_load_balancer_file_advertises_its_address() -> None:
    spec = ClusterSpec.from_resource(resource("Cluster", "demo", {
        "listeners": {"kafka": [*LISTENERS, {"name": "ext", "port": 9094, "type": "external", "tls": True}],
                      "external": {"type": "LoadBalancer"}}}))
    own = yaml.safe_load(config_map(spec, {1: {"host": "203.0.113.11", "port": 9094}})["data"]["demo-1.yaml"])
    assert own["advertised.listeners"] == (
        "REPLICATION://${env:POD_NAME}.demo-brokers.ns.svc:9091,PLAIN://${env:POD_NAME}.demo-brokers.ns.svc:9092,"
        "TLS://${env:POD_NAME}.demo-brokers.ns.svc:9093,EXT://203.0.113.11:9094")


def test_first_pass_creates_the_cas_and_every_certificate() -> None:
    body, kube = secured_kube()
    clock = Clock()
    status, _conds = reconcile(body, kube, clock)
    cluster_ca = read_certs(secret(kube, "demo-cluster-ca-cert")["ca.crt"])
    clients_ca = read_certs(secret(kube, "demo-clients-ca-cert")["ca.crt"])
    assert [c.subject for c in cluster_ca] == ["CN=demo-cluster-ca v0,O=kelp.dev"]
    assert [c.subject for c in clients_ca] == ["CN=demo-clients-ca v0,O=kelp.dev"]
    brokers = secret(kube, "demo-broker-certs")
    assert set(brokers) == {"demo-0.pem", "demo-1.pem", "demo-2.pem", "cluster-ca.crt", "clients-ca.crt",
                            "trusted-ca.crt"}
    for n in range(3):
        leaf = split_pem(brokers[f"demo-{n}.pem"])
        assert leaf is not None and issued_by(leaf.cert_pem, cluster_ca[0].pem)
        assert f"demo-{n}.demo-brokers.ns.svc" in read_cert(leaf.cert_pem).dns_names
    assert brokers["trusted-ca.crt"] == cluster_ca[0].pem + clients_ca[0].pem
    operator = secret(kube, "demo-operator-tls")
    assert read_cert(operator["tls.crt"]).subject == "CN=kelp-operator,O=kelp.dev"
    assert operator["ca.crt"] == cluster_ca[0].pem
    assert template_annotations(kube)[TRUST_FLOOR_ANNOTATION] == "cluster=0,clients=0"
    assert {"CertificateAuthorityCreated", "CertificatesIssued"} <= {e["reason"] for e in kube.events()}
    assert kube.fences >= 2  # each new CA followed a fence
    assert status["listeners"][0] == {"name": "plain", "type": "internal", "securityProtocol": "SASL_PLAINTEXT",
                                      "bootstrapServers": "demo.ns.svc:9092"}
    assert status["bootstrap"] == "demo.ns.svc:9092"
    # Owned by the Cluster: deleting it removes them.
    for name in ("demo-cluster-ca", "demo-broker-certs", "demo-operator-tls"):
        assert kube.objects[("Secret", "ns", name)]["metadata"]["ownerReferences"][0]["kind"] == "Cluster"

    kube.applied.clear()
    reconcile(body, kube, Clock(T0 + DAY_MS))
    assert secret_writes(kube) == [], "an unchanged pass writes no Secret"


def test_a_renewed_certificate_reaches_the_secret_and_restarts_no_pod() -> None:
    body, kube = secured_kube({**SPEC, "tls": {"certificateValidityDays": 100, "renewalDays": 10}})
    reconcile(body, kube, Clock())
    before = secret(kube, "demo-broker-certs")
    sts_template = kube.objects[("StatefulSet", "ns", "demo")]["spec"]["template"]
    # A scale-up's new broker and a brand-new certificate for broker 0 (a pod restarted with advertise: podIP
    # would be the same: its names changed): only the Secret changes.
    kube.objects[("Secret", "ns", "demo-broker-certs")]["data"].pop("demo-0.pem")
    kube.applied.clear()
    reconcile(body, kube, Clock(T0 + 30 * DAY_MS))
    after = secret(kube, "demo-broker-certs")
    assert after["demo-1.pem"] == before["demo-1.pem"] and after["demo-0.pem"] != before["demo-0.pem"]
    assert secret_writes(kube) == ["demo-broker-certs"]
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["template"] == sts_template
    assert not [d for d in kube.deleted if d[0] == "Pod"], "a certificate renewal restarts no pod"


def test_a_ca_rotation_trusts_first_signs_next_retires_last_and_only_then_restarts_the_pods() -> None:
    body, kube = secured_kube()
    reconcile(body, kube, Clock())
    ca0 = read_certs(secret(kube, "demo-cluster-ca-cert")["ca.crt"])[0]
    renew_at = ca0.not_after_ms - 10 * DAY_MS
    grace = 24 * 3_600_000
    brokers_before = secret(kube, "demo-broker-certs")

    # The window opens: a new CA is trusted (every bundle the brokers, the operator and clients read has both),
    # nothing is signed by it yet, so no certificate changes and no pod restarts.
    reconcile(body, kube, Clock(renew_at))
    bundle = read_certs(secret(kube, "demo-cluster-ca-cert")["ca.crt"])
    assert [c.generation for c in bundle] == [0, 1]
    assert set(secret(kube, "demo-cluster-ca")) == {"ca.key", "next-ca.key"}
    brokers = secret(kube, "demo-broker-certs")
    assert brokers["cluster-ca.crt"] == secret(kube, "demo-cluster-ca-cert")["ca.crt"]
    assert secret(kube, "demo-operator-tls")["ca.crt"] == brokers["cluster-ca.crt"]
    assert all(brokers[f"demo-{n}.pem"] == brokers_before[f"demo-{n}.pem"] for n in range(3))
    assert template_annotations(kube)[TRUST_FLOOR_ANNOTATION] == "cluster=0,clients=0"
    assert kube.events("CertificateAuthorityRenewed")

    # A grace later it signs: every certificate is issued again by it; both stay trusted; no pod restarts.
    reconcile(body, kube, Clock(renew_at + grace))
    bundle = read_certs(secret(kube, "demo-cluster-ca-cert")["ca.crt"])
    assert [c.generation for c in bundle] == [1, 0]
    for n in range(3):
        leaf = split_pem(secret(kube, "demo-broker-certs")[f"demo-{n}.pem"])
        assert leaf is not None and issued_by(leaf.cert_pem, bundle[0].pem)
    assert issued_by(secret(kube, "demo-operator-tls")["tls.crt"], bundle[0].pem)
    assert template_annotations(kube)[TRUST_FLOOR_ANNOTATION] == "cluster=0,clients=0"
    assert kube.events("CertificateAuthorityActivated")

    # A grace after the last certificate, the old CA leaves; the floor rises, so the pods restart one at a time.
    reconcile(body, kube, Clock(renew_at + 2 * grace))
    assert [c.generation for c in read_certs(secret(kube, "demo-cluster-ca-cert")["ca.crt"])] == [1]
    assert template_annotations(kube)[TRUST_FLOOR_ANNOTATION].startswith("cluster=1,")
    assert kube.events("CertificateAuthorityRetired")
    assert not [d for d in kube.deleted if d[0] == "Pod"], "the pods are outdated now; the roll restarts them"


def test_broken_ca_secrets_are_a_condition_never_replaced() -> None:
    body, kube = secured_kube()
    reconcile(body, kube, Clock())
    floor = template_annotations(kube)[TRUST_FLOOR_ANNOTATION]
    key = kube.objects[("Secret", "ns", "demo-clients-ca")]
    del kube.objects[("Secret", "ns", "demo-clients-ca-cert")]
    _, conds = reconcile(body, kube, Clock(T0 + DAY_MS))
    progressing = next(c for c in conds if c["type"] == "Progressing")
    assert progressing["reason"] == "CertificateAuthorityInvalid" and "demo-clients-ca-cert" in progressing["message"]
    assert kube.objects[("Secret", "ns", "demo-clients-ca")] == key
    assert template_annotations(kube)[TRUST_FLOOR_ANNOTATION] == floor, "no roll for a CA the operator could not read"


def test_a_deposed_operator_mints_no_ca(tmp_path) -> None:
    async def scenario() -> None:
        body, kube = secured_kube()
        kube.guard = await deposed(tmp_path)
        with pytest.raises(LeadershipLost):
            await reconcile_cluster(body, kube, admin_of(FakeAdmin(brokers=[0, 1, 2])), clock_ms=Clock())
        assert not [k for k in kube.objects if k[0] == "Secret"]
    asyncio.run(scenario())


def test_cert_manager_certificates_and_their_wait() -> None:
    body, kube = secured_kube({**SPEC, "tls": {"issuerRef": {"name": "kafka-issuer", "kind": "ClusterIssuer"}},
                               "listeners": {"kafka": LISTENERS, "advertise": "podIP"}})
    _, conds = reconcile(body, kube, Clock())
    broker = kube.objects[("Certificate", "ns", "demo-broker")]
    assert broker["spec"]["secretName"] == "demo-broker-tls"
    assert broker["spec"]["issuerRef"] == {"name": "kafka-issuer", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert broker["spec"]["additionalOutputFormats"] == [{"type": "CombinedPEM"}]
    assert "*.demo-brokers.ns.svc" in broker["spec"]["dnsNames"] and "demo.ns.svc" in broker["spec"]["dnsNames"]
    assert broker["spec"]["ipAddresses"] == ["10.1.0.1", "10.1.0.2", "10.1.0.3"]  # advertise: podIP
    assert broker["spec"]["duration"] == "8760h" and broker["spec"]["renewBefore"] == "720h"
    assert broker["spec"]["subject"] == {"organizations": ["kelp.dev"]}
    assert broker["spec"]["commonName"] == "demo-broker"
    operator = kube.objects[("Certificate", "ns", "demo-operator")]
    assert operator["spec"]["secretName"] == "demo-operator-tls" and operator["spec"]["usages"] == [
        "digital signature", "client auth"]
    assert not [k for k in kube.objects if k[0] == "Secret"], "no CA of the operator's with an issuer"
    progressing = next(c for c in conds if c["type"] == "Progressing")
    assert progressing["reason"] == "CertificatesPending" and "demo-broker-tls" in progressing["message"]
    sts = kube.objects[("StatefulSet", "ns", "demo")]["spec"]["template"]
    assert TRUST_FLOOR_ANNOTATION not in sts["metadata"]["annotations"]
    assert {"name": "tls", "secret": {"secretName": "demo-broker-tls", "defaultMode": 0o440}} in sts["spec"]["volumes"]


def test_cert_manager_missing_is_a_condition() -> None:
    body, kube = secured_kube({**SPEC, "tls": {"issuerRef": {"name": "kafka-issuer"}}})

    async def no_cert_manager(manifest: dict) -> None:
        raise KubeApiError(404, "the server could not find the requested resource")
    kube.hooks[("apply", "Certificate")] = no_cert_manager
    _, conds = reconcile(body, kube, Clock())
    progressing = next(c for c in conds if c["type"] == "Progressing")
    assert progressing["reason"] == "CertManagerMissing" and progressing["status"] == "False"


def test_certificates_name_the_external_address() -> None:
    body, kube = secured_kube({**SPEC, "listeners": {"kafka": [*LISTENERS, {
        "name": "ext", "port": 9094, "type": "external", "tls": True}], "external": {"type": "LoadBalancer"}}})
    for n in range(3):
        kube.put({"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"demo-external-{n}", "namespace": "ns"},
                  "spec": {}, "status": {"loadBalancer": {"ingress": [{"hostname": f"kafka-{n}.example.com"}]}}})
    reconcile(body, kube, Clock())
    leaf = split_pem(secret(kube, "demo-broker-certs")["demo-2.pem"])
    assert leaf is not None and "kafka-2.example.com" in read_cert(leaf.cert_pem).dns_names
    assert "kafka-1.example.com" not in read_cert(leaf.cert_pem).dns_names
    san = x509.load_pem_x509_certificate(leaf.cert_pem).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert "demo.ns.svc.cluster.local" in san.get_values_for_type(x509.DNSName)


def annotated(body: dict, kube: FakeKube, value: str) -> dict:
    """The Cluster with `kelp.dev/renew-certificates=<value>`, as a user's `kubectl annotate` leaves it."""
    kube.objects[("Cluster", "ns", "demo")]["metadata"].setdefault("annotations", {})[RENEW_ANNOTATION] = value
    return {**body, "metadata": {**body["metadata"], "annotations": {RENEW_ANNOTATION: value}}}


def cluster_annotations(kube: FakeKube) -> dict[str, str]:
    return {k: v for k, v in (kube.objects[("Cluster", "ns", "demo")]["metadata"].get("annotations") or {}).items()
            if v is not None}


def test_the_renewal_annotation_issues_every_certificate_again_and_restarts_no_pod() -> None:
    body, kube = secured_kube()
    reconcile(body, kube, Clock())
    brokers, operator = secret(kube, "demo-broker-certs"), secret(kube, "demo-operator-tls")
    ca = secret(kube, "demo-cluster-ca-cert")["ca.crt"]
    sts_template = kube.objects[("StatefulSet", "ns", "demo")]["spec"]["template"]
    _, conds = reconcile(annotated(body, kube, "true"), kube, Clock(T0 + 60_000))
    after = secret(kube, "demo-broker-certs")
    for n in range(3):
        old, new = split_pem(brokers[f"demo-{n}.pem"]), split_pem(after[f"demo-{n}.pem"])
        assert old is not None and new is not None
        assert new.cert_pem != old.cert_pem and new.key_pem != old.key_pem, f"broker {n} kept its certificate"
        assert read_cert(new.cert_pem).dns_names == read_cert(old.cert_pem).dns_names
        assert issued_by(new.cert_pem, ca)
    assert secret(kube, "demo-operator-tls")["tls.crt"] != operator["tls.crt"]
    assert secret(kube, "demo-cluster-ca-cert")["ca.crt"] == ca, "the same CA signs them"
    assert RENEW_ANNOTATION not in cluster_annotations(kube), "acted on: the annotation is removed"
    assert "kelp.dev/renew-certificates=true" in kube.events("CertificatesIssued")[-1]["message"]
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["template"] == sts_template
    assert not [d for d in kube.deleted if d[0] == "Pod"], "a certificate renewal restarts no pod"
    assert next(c for c in conds if c["type"] == "Progressing")["reason"] != "RenewalAnnotationInvalid"
    # The next pass, without the annotation, keeps them.
    kube.applied.clear()
    reconcile(body, kube, Clock(T0 + 120_000))
    assert secret_writes(kube) == []


def test_the_renewal_annotation_starts_a_ca_rotation_now() -> None:
    body, kube = secured_kube()
    reconcile(body, kube, Clock())
    brokers = secret(kube, "demo-broker-certs")
    reconcile(annotated(body, kube, "cluster-ca"), kube, Clock(T0 + 60_000))
    assert [c.generation for c in read_certs(secret(kube, "demo-cluster-ca-cert")["ca.crt"])] == [0, 1]
    assert set(secret(kube, "demo-cluster-ca")) == {"ca.key", "next-ca.key"}
    assert [c.generation for c in read_certs(secret(kube, "demo-clients-ca-cert")["ca.crt"])] == [0]
    after = secret(kube, "demo-broker-certs")
    assert all(after[f"demo-{n}.pem"] == brokers[f"demo-{n}.pem"] for n in range(3)), "trusted first, signs later"
    assert after["cluster-ca.crt"] == secret(kube, "demo-cluster-ca-cert")["ca.crt"]
    assert kube.events("CertificateAuthorityRenewed") and RENEW_ANNOTATION not in cluster_annotations(kube)
    assert template_annotations(kube)[TRUST_FLOOR_ANNOTATION] == "cluster=0,clients=0", "no roll"


def test_an_unknown_renewal_value_is_a_warning_and_changes_nothing() -> None:
    body, kube = secured_kube()
    reconcile(body, kube, Clock())
    kube.applied.clear()
    reconcile(annotated(body, kube, "everything"), kube, Clock(T0 + 60_000))
    assert secret_writes(kube) == []
    event = kube.events("RenewalAnnotationInvalid")[-1]
    assert event["type"] == "Warning" and "cluster-ca" in event["message"]
    assert RENEW_ANNOTATION not in cluster_annotations(kube)
