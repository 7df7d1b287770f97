"""The certificates the operator mints (operator/security/certificates.py, operator/manifests/tls_builders.py),
checked with `cryptography`'s own path validation and a real TLS handshake in both directions.

What clients and brokers rely on: a broker certificate verifies to the cluster CA for every name a client
uses (per-pod DNS, the Services' short and full names, the external address, the pod IP with podIP), it is
usable for server and client authentication, its subject is the brokers' principal; the operator's and
users' certificates are client certificates whose subjects map to the principals `super.users` and ACLs
name; a leaf never outlives its CA; Python's `ssl` (the broker's and the operator's TLS stack) accepts them.
"""

from __future__ import annotations

import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.x509 import verification
from cryptography.x509.oid import ExtendedKeyUsageOID

from kelp.operator.manifests.spec import ClusterSpec
from kelp.operator.manifests.tls_builders import OPERATOR_REQUEST, broker_request, keystore_pem, user_request
from kelp.operator.reconcile.brokers import operator_tls_context
from kelp.operator.security.certificates import (
    BACKDATE_MS,
    CLIENT_ONLY,
    DAY_MS,
    SERVER_AND_CLIENT,
    issued_by,
    key_matches,
    make_ca,
    make_leaf,
    read_cert,
)
from kelp.operator.security.listener_security import OPERATOR_DN, broker_dn
from kelp.security.principal import dn_from_der_certificate

NOW = 1_800_000_000_000  # 2027-01-15, wall-clock ms


def spec(**listeners: object) -> ClusterSpec:
    return ClusterSpec.from_resource({"kind": "Cluster",
                                      "metadata": {"name": "demo", "namespace": "team-a", "uid": "u"},
                                      "spec": {"listeners": {"kafka": [{"name": "tls", "port": 9093, "tls": True}],
                                                             **listeners}}})


def when(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


def cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_a_ca_certificate_is_a_ca_and_says_its_generation() -> None:
    ca = make_ca(common_name="demo-cluster-ca v3", organization="kelp.dev", now_ms=NOW, validity_days=365)
    c = cert(ca.cert_pem)
    assert c.extensions.get_extension_for_class(x509.BasicConstraints).critical
    assert c.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = c.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    info = read_cert(ca.cert_pem)
    assert info.is_ca and info.generation == 3 and info.subject == "CN=demo-cluster-ca v3,O=kelp.dev"
    assert info.not_before_ms == NOW - BACKDATE_MS and info.not_after_ms == NOW + 365 * DAY_MS
    assert key_matches(ca.key_pem, ca.cert_pem) and ca.key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")


def test_a_broker_certificate_verifies_for_every_name_clients_use() -> None:
    s = spec(advertise="podIP")
    ca = make_ca(common_name="demo-cluster-ca v0", organization="kelp.dev", now_ms=NOW, validity_days=365)
    request = broker_request(s, 1, pod_ip="10.1.0.2", external_host="kafka-1.example.com")
    leaf = make_leaf(ca, common_name=request.common_name, organization=request.organization,
                     dns_names=request.dns_names, ip_addresses=request.ip_addresses, usages=request.usages,
                     now_ms=NOW, validity_days=90)
    assert set(request.dns_names) == {
        "demo-1.demo-brokers.team-a.svc", "demo-1.demo-brokers.team-a.svc.cluster.local",
        "demo", "demo.team-a", "demo.team-a.svc", "demo.team-a.svc.cluster.local",
        "demo-brokers.team-a.svc", "demo-brokers.team-a.svc.cluster.local", "kafka-1.example.com",
        "demo-http", "demo-http.team-a", "demo-http.team-a.svc", "demo-http.team-a.svc.cluster.local"}
    store = verification.Store([cert(ca.cert_pem)])
    for name in request.dns_names:
        verifier = verification.PolicyBuilder().store(store).time(when(NOW)).build_server_verifier(
            verification.DNSName(name))
        chain = verifier.verify(cert(leaf.cert_pem), [])
        assert chain[-1] == cert(ca.cert_pem)
    import ipaddress
    verification.PolicyBuilder().store(store).time(when(NOW)).build_server_verifier(
        verification.IPAddress(ipaddress.ip_address("10.1.0.2"))).verify(cert(leaf.cert_pem), [])
    with pytest.raises(verification.VerificationError):
        verification.PolicyBuilder().store(store).time(when(NOW)).build_server_verifier(
            verification.DNSName("demo-2.demo-brokers.team-a.svc")).verify(cert(leaf.cert_pem), [])
    eku = cert(leaf.cert_pem).extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    usage = cert(leaf.cert_pem).extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature and not usage.value.key_cert_sign
    assert not cert(leaf.cert_pem).extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    # The subject, as Java renders it for Kafka's principal, is the brokers' super user.
    assert dn_from_der_certificate(cert(leaf.cert_pem).public_bytes(_der())) == broker_dn("demo")


def _der() -> object:
    from cryptography.hazmat.primitives.serialization import Encoding

    return Encoding.DER


def test_without_pod_ip_advertising_no_ip_is_named() -> None:
    request = broker_request(spec(), 0, pod_ip="10.1.0.1")
    assert request.ip_addresses == ()
    assert broker_request(spec(), 0, external_host="203.0.113.7").ip_addresses == ("203.0.113.7",)


def test_client_certificates_are_for_clients_only_and_map_to_their_principals() -> None:
    cluster_ca = make_ca(common_name="demo-cluster-ca v0", organization="kelp.dev", now_ms=NOW, validity_days=365)
    clients_ca = make_ca(common_name="demo-clients-ca v0", organization="kelp.dev", now_ms=NOW, validity_days=365)
    operator = make_leaf(cluster_ca, common_name=OPERATOR_REQUEST.common_name,
                         organization=OPERATOR_REQUEST.organization, usages=OPERATOR_REQUEST.usages, now_ms=NOW,
                         validity_days=90)
    alice = user_request("alice")
    user = make_leaf(clients_ca, common_name=alice.common_name, organization=alice.organization, usages=alice.usages,
                     now_ms=NOW, validity_days=90)
    for leaf, ca, dn in ((operator, cluster_ca, OPERATOR_DN), (user, clients_ca, "CN=alice")):
        c = cert(leaf.cert_pem)
        assert list(c.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
            ExtendedKeyUsageOID.CLIENT_AUTH]
        assert dn_from_der_certificate(c.public_bytes(_der())) == dn
        # (cryptography's client verifier wants a subject alternative name, as the Web PKI does; Kafka and
        # OpenSSL take the subject: the handshake test below proves OpenSSL accepts them.)
        assert not c.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        assert issued_by(leaf.cert_pem, ca.cert_pem)
    assert not issued_by(user.cert_pem, cluster_ca.cert_pem)  # a user can never pass for the operator
    assert CLIENT_ONLY == ("clientAuth",) and SERVER_AND_CLIENT == ("serverAuth", "clientAuth")


def test_a_leaf_never_outlives_its_ca() -> None:
    ca = make_ca(common_name="demo-cluster-ca v0", organization="kelp.dev", now_ms=NOW, validity_days=10)
    leaf = make_leaf(ca, common_name="x", organization=None, usages=CLIENT_ONLY, now_ms=NOW + DAY_MS, validity_days=365)
    assert read_cert(leaf.cert_pem).not_after_ms == read_cert(ca.cert_pem).not_after_ms


def test_pythons_tls_accepts_them_in_both_directions() -> None:
    """A handshake over memory BIOs: the broker's server context requires the operator's client certificate, the
    operator's context (operator_tls_context, what BrokerAdmin uses) checks the broker's name against the CA."""
    ca = make_ca(common_name="demo-cluster-ca v0", organization="kelp.dev", now_ms=_now_ms(), validity_days=30)
    request = broker_request(spec(), 0)
    broker = make_leaf(ca, common_name=request.common_name, organization=request.organization,
                       dns_names=request.dns_names, usages=request.usages, now_ms=_now_ms(), validity_days=30)
    operator = make_leaf(ca, common_name="kelp-operator", organization="kelp.dev", usages=CLIENT_ONLY,
                         now_ms=_now_ms(), validity_days=30)
    server = _server_context(keystore_pem(broker, ca.cert_pem), ca.cert_pem)
    client = operator_tls_context({"tls.crt": operator.cert_pem + ca.cert_pem, "tls.key": operator.key_pem,
                                   "ca.crt": ca.cert_pem}, check_hostname=True)
    assert client is not None
    peer = _handshake(server, client, "demo.team-a.svc")
    assert dn_from_der_certificate(peer) == OPERATOR_DN
    # A user of the clients CA on a listener that trusts it (ssl.client.auth=required, truststore clients-ca.crt).
    clients_ca = make_ca(common_name="demo-clients-ca v0", organization="kelp.dev", now_ms=_now_ms(), validity_days=30)
    alice = make_leaf(clients_ca, common_name="alice", organization=None, usages=CLIENT_ONLY, now_ms=_now_ms(),
                      validity_days=30)
    user_client = operator_tls_context({"tls.crt": alice.cert_pem, "tls.key": alice.key_pem, "ca.crt": ca.cert_pem},
                                       check_hostname=True)
    assert user_client is not None
    listener = _server_context(keystore_pem(broker, ca.cert_pem), clients_ca.cert_pem)
    assert dn_from_der_certificate(_handshake(listener, user_client, "demo-0.demo-brokers.team-a.svc")) == "CN=alice"
    with pytest.raises(ssl.SSLError):  # the replication listener trusts the cluster CA only: a user is refused
        _handshake(server, user_client, "demo.team-a.svc")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(server, client, "somewhere-else.example.com")
    assert operator_tls_context({"tls.crt": operator.cert_pem}, check_hostname=True) is None


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


def _server_context(keystore: bytes, trust: bytes) -> ssl.SSLContext:
    import os
    import tempfile

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=trust.decode())
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "broker.pem")
        with open(path, "wb") as out:
            out.write(keystore)
        context.load_cert_chain(path)  # Kafka's PEM keystore: key then chain, one file
    return context


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str) -> bytes:
    """Drive a TLS handshake through memory BIOs; returns the client certificate the server saw (DER)."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done_c = done_s = False
    for _ in range(20):
        for side, done_flag in ((c, "c"), (s, "s")):
            if (done_flag == "c" and done_c) or (done_flag == "s" and done_s):
                continue
            try:
                side.do_handshake()
                if done_flag == "c":
                    done_c = True
                else:
                    done_s = True
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if done_c and done_s:
            peer = s.getpeercert(binary_form=True)
            assert peer is not None
            return peer
    raise AssertionError("the handshake did not finish")
