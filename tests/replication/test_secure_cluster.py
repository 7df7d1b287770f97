"""Three brokers whose only Kafka listeners are SASL_SSL: they replicate, fail over and serve a consumer group.

The cluster's first user (`admin`, the brokers' own identity) is seeded with `kelp storage format --add-scram`
into the shared metadata store before the first start; every broker's one listener is SASL_SSL with
SCRAM-SHA-512, so replica fetching can only work by authenticating to the leader over TLS
(`inter.broker.listener.name`, `sasl.mechanism.inter.broker.protocol`, the listener's JAAS username and
password). Clients are confluent-kafka (acks=all, idempotent) and kafka-python (a consumer group) as user
alice, created through the admin API and granted her ACLs there (the authorizer is on; HTTP is HTTPS with
Basic against the same SCRAM users). The leader of the topic is killed with SIGKILL mid-stream: a new one
takes over and nothing acknowledged is lost. alice's valid credentials get 403 on `/cluster/v1`.

A second cluster runs its HTTP control plane over HTTPS with client certificates required: the brokers
deliver metadata and reach the controller over mutual TLS. A third takes certificates on Kafka and HTTP with
an authorizer on: a user's valid certificate gets 403 on every `/cluster/v1` route, the brokers' certificates
are let through, and a user's REST consumer instance is reached through another broker as that user.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.broker_process import REPO, BrokerProcess
from tests.support.cluster import http_json
from tests.support.secure_clients import ClientAuth, consume
from tests.support.tls_files import Pki, scram_jaas

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]


def secure_settings(pki: Pki) -> dict[str, object]:
    return {
        "listeners": "SASL_SSL://127.0.0.1:0",
        # HTTPS, HTTP Basic against the same SCRAM users, Kafka's ACLs: admin is the brokers' own user
        "http.ssl.enabled": "true", "http.authentication.methods": "basic",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "super.users": "User:admin",
        "ssl.keystore.location": str(pki.broker_file),
        "ssl.truststore.location": str(pki.ca_file),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram_jaas("admin", "admin-secret"),
        "offsets.topic.num.partitions": 3, "offsets.topic.replication.factor": 3,
        "group.initial.rebalance.delay.ms": 0,
    }


def format_store(cluster_dir: Path, settings: dict[str, object]) -> None:
    command = [sys.executable, "-m", "kelp.cli.main", "storage", "format", "--set", f"cluster.dir={cluster_dir}",
               "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]"]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert done.returncode == 0, done.stderr


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def add_user(cluster, name: str, password: str) -> None:
    salt = os.urandom(16)
    body = {"mechanism": "SCRAM-SHA-512", "iterations": 4096, "salt": base64.b64encode(salt).decode(),
            "saltedPassword": base64.b64encode(hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 4096)).decode()}
    assert cluster.admin(f"/admin/v1/users/{name}/scram-credentials", "PUT", body)["name"] == name


def produce(bootstrap: str, topic: str, auth: ClientAuth, values: list[bytes]) -> list[bytes]:
    """confluent-kafka, idempotent, acks=all; the values acknowledged."""
    from confluent_kafka import Producer

    acked: list[bytes] = []
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000, **auth.confluent()})
    for value in values:
        p.produce(topic, value, on_delivery=lambda err, msg: errors.append(str(err)) if err else acked.append(
            msg.value()))
        p.poll(0)
    assert p.flush(70) == 0 and not errors, errors[:5]
    return acked


def test_a_sasl_ssl_only_cluster_replicates_fails_over_and_serves_a_group(cluster_factory,
                                                                         tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    settings = secure_settings(pki)
    cluster = cluster_factory(3, settings=settings, start=False)
    cluster.http_context = ssl.create_default_context(cafile=str(pki.ca_file))
    cluster.http_headers = basic("admin", "admin-secret")
    format_store(cluster.root / "cluster", settings)
    for b in cluster.brokers:
        b.start()
    cluster.wait_for("3 brokers", lambda: len(cluster.admin("/admin/v1/brokers")["brokers"]) == 3, timeout=30)
    add_user(cluster, "alice", "alice-secret")
    cluster.admin("/admin/v1/topics", "POST", {"name": "orders", "partitions": 1, "replication_factor": 3,
                                               "configs": {"min.insync.replicas": "2"}})
    grants = [{"resourceType": "TOPIC", "resourceName": "orders", "principal": "User:alice", "operation": op,
               "permission": "ALLOW"} for op in ("WRITE", "READ")]
    grants.append({"resourceType": "GROUP", "resourceName": "*", "principal": "User:alice", "operation": "READ",
                   "permission": "ALLOW"})
    assert all(r["error"] is None for r in cluster.admin("/admin/v1/acls", "POST", {"acls": grants})["results"])
    auth = ClientAuth("SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret", ca=pki.ca_file)
    before = produce(cluster.bootstrap, "orders", auth, [f"a{i}".encode() for i in range(300)])
    cluster.wait_fully_replicated("orders")  # the followers fetched over SASL_SSL: the only listener there is
    leader = cluster.topic("orders")["partitions"][0]["leader"]
    follower = next(b for b in cluster.brokers if b.broker_id != leader)
    cluster[leader].wait_for_log("authenticated as User:admin (SASL/SCRAM-SHA-512)")
    # A consumer group, while all three run (its __consumer_offsets gets replication factor 3)
    assert sorted(consume("kafka-python", cluster.bootstrap, "orders", auth, 300)) == sorted(before)

    cluster[leader].kill()

    def new_leader() -> int | None:
        state = cluster.topic("orders", via=follower)["partitions"][0]
        return state["leader"] if state["leader"] not in (-1, leader) else None

    cluster.wait_for("a new leader", new_leader, timeout=20)
    after = produce(cluster.bootstrap, "orders", auth, [f"b{i}".encode() for i in range(300)])
    got = consume("confluent-kafka", cluster.bootstrap, "orders", auth, 600)  # another group, after the failover
    assert sorted(got) == sorted(before + after)  # nothing acknowledged is lost
    assert len(got) == len(set(got)) == 600  # nor read twice

    # alice's valid credentials open the admin API she is allowed, never the brokers' own control plane
    push = {"controller_id": 0, "controller_epoch": 0, "brokers": [], "end_offset": -1, "entries": []}
    alice = basic("alice", "alice-secret")
    with pytest.raises(urllib.error.HTTPError) as refused:
        http_json(cluster.any_http() + "/cluster/v1/metadata", "POST", push, context=cluster.http_context,
                  headers=alice)
    assert refused.value.code == 403 and "brokers only" in json.loads(refused.value.read())["message"]
    described = http_json(cluster.any_http() + "/admin/v1/topics/orders", context=cluster.http_context, headers=alice)
    assert described["name"] == "orders"
    assert "Traceback" not in "".join(b.log_text() for b in cluster.running)


def https_settings(pki: Pki) -> dict[str, object]:
    return {
        "http.ssl.enabled": "true", "ssl.keystore.location": str(pki.broker_file),
        "ssl.truststore.location": str(pki.ca_file), "http.ssl.client.auth": "required",
        "offsets.topic.num.partitions": 1, "lease.duration.ms": 2000, "lease.renew.interval.ms": 500,
    }


def https_json(url: str, pki: Pki, cert: tuple[Path, Path] | None) -> dict:
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    with urllib.request.urlopen(url, timeout=15, context=context) as resp:
        return dict(json.loads(resp.read()))


def test_brokers_speak_https_with_client_certificates_to_each_other(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    settings = {**https_settings(pki), "cluster.dir": str(tmp_path / "cluster")}
    brokers = [BrokerProcess(tmp_path / f"b{i}", settings=settings, broker_id=i) for i in range(2)]
    try:
        for b in brokers:  # each is ready only once the controller delivered it its registration: over HTTPS
            b.start()
        cert = pki.client_certificate("operator")
        url = f"https://127.0.0.1:{brokers[1].http_port}/admin/v1/cluster"
        deadline = time.monotonic() + 20
        while len(https_json(url, pki, cert)["brokers"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        described = https_json(url, pki, cert)
        assert {b["http_scheme"] for b in described["brokers"]} == {"https"} and len(described["brokers"]) == 2
        with pytest.raises(OSError):  # no client certificate: the TLS handshake fails
            https_json(url, pki, None)
        with pytest.raises(OSError):  # plain HTTP on the HTTPS port gets nothing
            urllib.request.urlopen(f"http://127.0.0.1:{brokers[1].http_port}/healthz", timeout=5)
    finally:
        for b in brokers:
            b.kill()


def https_call(url: str, pki: Pki, cert: tuple[Path, Path], body: object = None) -> tuple[int, dict]:
    """(status, JSON body) of a GET, or a POST of `body`, with a client certificate; errors included."""
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    context.load_cert_chain(str(cert[0]), str(cert[1]))
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=15, context=context) as resp:
            return resp.status, dict(json.loads(resp.read() or b"{}"))
    except urllib.error.HTTPError as exc:
        return exc.code, dict(json.loads(exc.read() or b"{}"))


BROKER_PRINCIPAL = "User:CN=kelp-broker,OU=brokers,O=Kelp"  # Pki.server_certificate's subject, Kafka's DEFAULT rule


def test_an_authorized_mtls_cluster_takes_brokers_only_on_its_control_plane(tmp_path: Path) -> None:
    """Three brokers whose only Kafka listener is SSL with client certificates and whose HTTP port is HTTPS with
    `http.authentication.methods=mtls`, an authorizer on: the brokers (their certificates' principal a super
    user) register, deliver metadata and replicate; a user with a valid certificate from the same CA and an ACL
    to write a topic produces, but is refused on every `/cluster/v1` route (403, brokers only) and on a topic
    it has no ACL for."""
    from confluent_kafka import KafkaError, Producer

    pki = Pki(tmp_path / "pki")
    settings = {**https_settings(pki), "cluster.dir": str(tmp_path / "cluster"),
                "listeners": "SSL://127.0.0.1:0", "ssl.client.auth": "required",
                "http.authentication.methods": "mtls",
                "authorizer.class.name": "kelp.broker.security.authorizer.Authorizer",
                "super.users": f"{BROKER_PRINCIPAL};User:CN=operator,OU=clients,O=Kelp"}
    brokers = [BrokerProcess(tmp_path / f"b{i}", settings=settings, broker_id=i) for i in range(3)]
    operator, alice = pki.client_certificate("operator"), pki.client_certificate("alice")
    try:
        for b in brokers:  # each is ready only once the controller delivered it its registration: over mTLS
            b.start()
        base = f"https://127.0.0.1:{brokers[0].http_port}"
        deadline = time.monotonic() + 30
        while len(https_call(f"{base}/admin/v1/cluster", pki, operator)[1].get("brokers", [])) < 3:
            assert time.monotonic() < deadline, "the brokers did not all register over the mTLS control plane"
            time.sleep(0.2)
        for name in ("orders", "secret"):
            status, body = https_call(f"{base}/admin/v1/topics", pki, operator,
                                      {"name": name, "partitions": 1, "replication_factor": 3})
            assert status == 201, body
        acl = {"resourceType": "TOPIC", "resourceName": "orders", "patternType": "LITERAL",
               "principal": "User:CN=alice,OU=clients,O=Kelp", "host": "*", "operation": "WRITE",
               "permission": "ALLOW"}
        status, body = https_call(f"{base}/admin/v1/acls", pki, operator, {"acls": [acl]})
        assert status == 200 and body["results"] == [{"error": None}], body

        assert brokers[0].ready_info is not None
        bootstrap = str(brokers[0].ready_info["listeners"]["SSL"])
        auth = ClientAuth("SSL", ca=pki.ca_file, cert=alice[0], key=alice[1])
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000,
                             **auth.confluent()})
        outcomes: dict[str, list[object]] = {"orders": [], "secret": []}
        for topic in outcomes:
            for i in range(50):
                producer.produce(topic, f"{topic}-{i}".encode(),
                                 on_delivery=lambda err, msg, t=topic: outcomes[t].append(err or msg.offset()))
        assert producer.flush(40) == 0
        assert outcomes["orders"] == list(range(50))  # acks=all: the followers fetched over mutual TLS
        refused = [e.name() if isinstance(e, KafkaError) else e for e in outcomes["secret"]]
        assert refused == ["TOPIC_AUTHORIZATION_FAILED"] * 50

        push = {"controller_id": 0, "controller_epoch": 0, "brokers": [], "end_offset": -1, "entries": []}
        status, body = https_call(f"{base}/cluster/v1/metadata", pki, alice, push)
        assert status == 403 and "brokers only" in body["message"], body
        assert https_call(f"{base}/admin/v1/cluster", pki, alice)[0] == 200  # any authenticated principal

        # alice's REST consumer instance on broker 1, reached through broker 0: forwarded with her principal,
        # which only a broker may name; the operator (a super user, not its creator) is refused there too.
        reads = [{**acl, "resourceType": kind, "resourceName": name, "operation": "READ"}
                 for kind, name in (("GROUP", "mg"), ("TOPIC", "orders"))]
        assert https_call(f"{base}/admin/v1/acls", pki, operator, {"acls": reads})[0] == 200
        holder = f"https://127.0.0.1:{brokers[1].http_port}"
        for name in ("mine", None):
            status, body = https_call(f"{holder}/consumers/mg", pki, alice, {"name": name} if name else {})
            assert status == 200 and body["base_uri"].startswith(holder), body
            through = f"{base}/consumers/mg/instances/{body['instance_id']}"
            status, body = https_call(f"{through}/subscription", pki, alice, {"topics": ["orders"]})
            assert status == 204, body
            status, body = https_call(f"{through}/subscription", pki, alice)
            assert status == 200 and body == {"topics": ["orders"]}, body
            status, body = https_call(f"{through}/subscription", pki, operator)
            assert status == 403 and body["error_code"] == 40301, body  # Confluent's KAFKA_AUTHORIZATION on REST routes
        assert all("Traceback" not in b.log_text() for b in brokers)
    finally:
        for b in brokers:
            b.kill()
