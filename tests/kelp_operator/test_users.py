"""KelpUser reconciliation against the admin contract (FakeAdmin) with the API server faked.

What a user relies on: a scram-sha-512 user gets a Secret with a password generated once and kept, its
JAAS line and a client.properties a Kafka client can use as is; the brokers get the credential salted,
never the password, and only when it changed or they lost it; a tls user gets a certificate from the
clients CA whose subject is its principal; the brokers' ACLs of the user's principal are exactly the
spec's (missing ones added, extra ones deleted, other principals' untouched); changing the
authentication type leaves nothing of the old identity behind; deleting the user removes its credential
and ACLs before the resource goes, and lets go when the Cluster is gone.
"""

from __future__ import annotations

import asyncio
import base64

import pytest

from kelp.operator.kube.events import Recorder
from kelp.operator.reconcile.cluster import reconcile_cluster
from kelp.operator.reconcile.runner import Runner
from kelp.operator.reconcile.users import finalize_user, reconcile_user
from kelp.operator.security.certificates import issued_by, read_cert, read_certs
from kelp.operator.security.user_builders import (
    FINGERPRINT_ANNOTATION,
    USER_FINALIZER,
    AclSpecError,
    acl_bindings,
    scram_upsert,
)
from kelp.security.scram import ScramMechanism, credential_from_salted_password
from kelp.security.scram_exchange import ScramServer
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, resource, statefulset

LISTENERS = [{"name": "plain", "port": 9092, "type": "internal", "tls": False},
             {"name": "scram", "port": 9093, "type": "internal", "tls": True,
              "authentication": {"type": "scram-sha-512"}},
             {"name": "mtls", "port": 9094, "type": "internal", "tls": True, "authentication": {"type": "tls"}}]
CLUSTER = resource("Cluster", "demo", {"brokers": 3, "listeners": {"kafka": LISTENERS},
                                       "authorization": {"type": "simple", "superUsers": ["admin"]}})
ACLS = [{"resource": {"type": "topic", "name": "orders", "patternType": "literal"}, "operations": ["Read", "Describe"],
         "host": "*", "type": "allow"},
        {"resource": {"type": "group", "name": "orders-", "patternType": "prefix"}, "operations": ["Read"]},
        {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"]}]


def user(name: str = "alice", auth: str = "scram-sha-512", acls: list | None = None, **extra: object) -> dict:
    spec: dict = {"cluster": "demo", "authentication": {"type": auth}}
    if acls is not None:
        spec["authorization"] = {"type": "simple", "acls": acls}
    return {**resource("KelpUser", name, {**spec, **extra})}


def secured_cluster(body: dict = CLUSTER) -> FakeKube:
    """A Cluster whose first pass has run: its CAs exist."""
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    asyncio.run(reconcile_cluster(body, kube, admin_of(FakeAdmin(brokers=[0, 1, 2]))))
    return kube


def run_user(kube: FakeKube, admin: FakeAdmin, name: str = "alice"):
    body = kube.objects[("KelpUser", "ns", name)]
    return asyncio.run(reconcile_user(body, kube, admin_of(admin), events=Recorder(kube)))


def secret(kube: FakeKube, name: str = "alice") -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in kube.objects[("Secret", "ns", name)]["data"].items()}


def ready(conds: list[dict]) -> dict:
    return next(c for c in conds if c["type"] == "Ready")


def test_a_scram_user_gets_its_secret_its_credential_and_its_acls() -> None:
    kube = secured_cluster()
    kube.put(user(acls=ACLS))
    admin = FakeAdmin(brokers=[0, 1, 2])
    status, conds = run_user(kube, admin)
    assert ready(conds)["status"] == "True" and ready(conds)["reason"] == "UserReady", conds
    assert status == {"observedGeneration": 1, "username": "alice", "principal": "User:alice", "secret": "alice"}
    values = secret(kube)
    password = values["password"].decode()
    assert len(password) == 32 and password.isalnum()
    assert values["sasl.jaas.config"].decode() == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
        f'password="{password}";')
    assert values["ca.crt"] == secret(kube, "demo-cluster-ca-cert")["ca.crt"]
    props = dict(line.split("=", 1) for line in values["client.properties"].decode().splitlines()
                 if line and not line.startswith("#"))
    assert props == {"bootstrap.servers": "demo.ns.svc:9093", "security.protocol": "SASL_SSL",
                     "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": values["sasl.jaas.config"].decode(),
                     "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/kelp-user/ca.crt"}
    assert "ssl.ca.location=/etc/kelp-user/ca.crt" in values["client.properties"].decode()  # the librdkafka hint
    meta = kube.objects[("Secret", "ns", "alice")]["metadata"]
    assert meta["ownerReferences"][0]["kind"] == "KelpUser" and meta["labels"]["kelp.dev/cluster"] == "demo"

    # The brokers got a salted credential that authenticates the password, and never the password.
    (put,) = [b for m, p, b in admin.requests if m == "PUT"]
    assert password not in str(admin.requests)
    salt, salted = base64.b64decode(put["salt"]), base64.b64decode(put["saltedPassword"])
    credential = credential_from_salted_password(ScramMechanism.SCRAM_SHA_512, salt, salted, put["iterations"])
    assert put["iterations"] == 8192 and _scram_login(credential, "alice", password)
    assert not _scram_login(credential, "alice", "not-the-password")

    assert sorted((a["resourceType"], a["resourceName"], a["patternType"], a["operation"]) for a in admin.acls) == [
        ("CLUSTER", "kafka-cluster", "LITERAL", "IDEMPOTENT_WRITE"), ("GROUP", "orders-", "PREFIXED", "READ"),
        ("TOPIC", "orders", "LITERAL", "DESCRIBE"), ("TOPIC", "orders", "LITERAL", "READ")]
    assert {(a["principal"], a["host"], a["permission"]) for a in admin.acls} == {("User:alice", "*", "ALLOW")}
    assert kube.objects[("KelpUser", "ns", "alice")]["metadata"]["finalizers"] == [USER_FINALIZER]
    assert {"ScramCredentialSet", "AclsCreated"} <= {e["reason"] for e in kube.events()}


def _scram_login(credential, user: str, password: str) -> bool:
    """A SCRAM-SHA-512 exchange against the security core's server with the stored credential."""
    from kelp.security.scram_exchange import ScramClient

    server = ScramServer(ScramMechanism.SCRAM_SHA_512, lambda name: credential if name == user else None)
    client = ScramClient(ScramMechanism.SCRAM_SHA_512, user, password)
    try:
        first = server.evaluate(client.first_message())
        final = server.evaluate(client.final_message(first))
        client.verify_server_final(final)
    except Exception:
        return False
    return True


def test_the_password_is_kept_and_pushed_again_only_when_needed() -> None:
    kube = secured_cluster()
    kube.put(user())
    admin = FakeAdmin(brokers=[0, 1, 2])
    run_user(kube, admin)
    password = secret(kube)["password"]
    fingerprint = kube.objects[("Secret", "ns", "alice")]["metadata"]["annotations"][FINGERPRINT_ANNOTATION]
    admin.requests.clear()
    run_user(kube, admin)
    assert secret(kube)["password"] == password
    assert admin.writes() == [], "nothing changed: nothing is written to the brokers"
    # The brokers lost it (a restored metadata store): pushed again, same password.
    admin.scram.clear()
    run_user(kube, admin)
    assert [m for m, _p in admin.writes()] == ["PUT"] and secret(kube)["password"] == password
    assert kube.objects[("Secret", "ns", "alice")]["metadata"]["annotations"][FINGERPRINT_ANNOTATION] == fingerprint
    # Someone deleted the Secret: a new password, pushed.
    del kube.objects[("Secret", "ns", "alice")]
    admin.requests.clear()
    run_user(kube, admin)
    assert secret(kube)["password"] != password and [m for m, _p in admin.writes()] == ["PUT"]


def test_acls_are_made_exactly_the_specs_and_other_principals_are_untouched() -> None:
    kube = secured_cluster()
    kube.put(user(acls=ACLS[:1]))
    admin = FakeAdmin(brokers=[0, 1, 2])
    bob = {"resourceType": "TOPIC", "resourceName": "orders", "patternType": "LITERAL", "principal": "User:bob",
           "host": "*", "operation": "WRITE", "permission": "ALLOW"}
    stray = {**bob, "principal": "User:alice", "operation": "DELETE"}
    admin.acls = [dict(bob), dict(stray)]
    run_user(kube, admin)
    assert bob in admin.acls and stray not in admin.acls
    assert sorted(a["operation"] for a in admin.acls if a["principal"] == "User:alice") == ["DESCRIBE", "READ"]
    assert kube.events("AclsDeleted")
    # The spec loses a rule: its ACLs go.
    kube.objects[("KelpUser", "ns", "alice")]["spec"]["authorization"]["acls"] = []
    run_user(kube, admin)
    assert [a for a in admin.acls if a["principal"] == "User:alice"] == [] and bob in admin.acls


def test_a_tls_user_gets_a_certificate_from_the_clients_ca() -> None:
    kube = secured_cluster()
    kube.put(user(auth="tls", acls=ACLS[:1]))
    admin = FakeAdmin(brokers=[0, 1, 2])
    status, conds = run_user(kube, admin)
    assert ready(conds)["status"] == "True", conds
    assert (status["username"], status["principal"]) == ("CN=alice", "User:CN=alice")
    values = secret(kube)
    clients_ca = read_certs(secret(kube, "demo-clients-ca-cert")["ca.crt"])[0]
    assert issued_by(values["user.crt"], clients_ca.pem) and read_cert(values["user.crt"]).subject == "CN=alice"
    assert values["user.pem"] == values["user.key"] + values["user.crt"] + clients_ca.pem
    assert "ssl.keystore.location=/etc/kelp-user/user.pem" in values["client.properties"].decode()
    assert "bootstrap.servers=demo.ns.svc:9094" in values["client.properties"].decode()
    assert {a["principal"] for a in admin.acls} == {"User:CN=alice"}
    assert kube.objects[("Secret", "ns", "alice")]["metadata"]["labels"]["kelp.dev/user-credentials"] == "tls"
    assert [m for m, _p in admin.writes()] == ["POST"], "no SCRAM credential for a tls user"
    cert = values["user.crt"]
    run_user(kube, admin)
    assert secret(kube)["user.crt"] == cert, "kept while valid"


def test_switching_authentication_leaves_nothing_of_the_old_identity() -> None:
    kube = secured_cluster()
    kube.put(user(acls=ACLS[:1]))
    admin = FakeAdmin(brokers=[0, 1, 2])
    status, _ = run_user(kube, admin)
    body = kube.objects[("KelpUser", "ns", "alice")]
    body["status"] = dict(status)
    body["spec"]["authentication"] = {"type": "tls"}
    status, conds = run_user(kube, admin)
    assert ready(conds)["status"] == "True"
    assert "alice" not in admin.scram or not admin.scram["alice"], "the SCRAM credential is removed"
    assert {a["principal"] for a in admin.acls} == {"User:CN=alice"}, "the old principal's ACLs are removed"
    assert "password" not in secret(kube)


def test_what_cannot_be_done_is_a_condition() -> None:
    plain = resource("Cluster", "demo", {"brokers": 1})
    kube = FakeKube(plain, user())
    assert ready(run_user(kube, FakeAdmin(brokers=[0]))[1])["reason"] == "ClusterNotSecured"

    no_authorization = resource("Cluster", "demo", {"brokers": 3, "listeners": {"kafka": LISTENERS}})
    kube = secured_cluster(no_authorization)
    kube.put(user(acls=ACLS))
    admin = FakeAdmin(brokers=[0, 1, 2])
    conds = run_user(kube, admin)[1]
    assert ready(conds)["reason"] == "AuthorizationDisabled" and admin.acls == []
    assert "alice" in admin.scram, "the credential is still set"

    kube = secured_cluster()
    kube.put(user(acls=[{"resource": {"type": "cluster"}, "operations": ["Read"]}]))
    conds = run_user(kube, FakeAdmin(brokers=[0, 1, 2]))[1]
    assert ready(conds)["reason"] == "InvalidAcl" and "means nothing on a cluster resource" in ready(conds)["message"]

    only_plain = resource("Cluster", "demo", {"brokers": 3, "listeners": {"kafka": LISTENERS[:1]}})
    kube = secured_cluster(only_plain)
    kube.put(user())
    conds = run_user(kube, FakeAdmin(brokers=[0, 1, 2]))[1]
    assert ready(conds)["reason"] == "NoListenerForAuthentication"
    assert "password" in secret(kube)

    kube = secured_cluster()
    kube.put(user())
    conds = run_user(kube, _unreachable())[1]
    assert ready(conds)["reason"] == "BrokersUnreachable"


def _unreachable() -> FakeAdmin:
    admin = FakeAdmin(brokers=[0, 1, 2])
    admin.unreachable = True
    return admin


def test_acl_rules_become_kafka_bindings() -> None:
    bindings = acl_bindings([{"resource": {"type": "transactionalId", "name": "tx-", "patternType": "prefix"},
                              "operations": ["Write", "Describe"], "host": "10.0.0.1", "type": "deny"}], "User:alice")
    assert bindings == [
        {"resourceType": "TRANSACTIONAL_ID", "resourceName": "tx-", "patternType": "PREFIXED",
         "principal": "User:alice", "host": "10.0.0.1", "operation": op, "permission": "DENY"}
        for op in ("WRITE", "DESCRIBE")]
    with pytest.raises(AclSpecError, match="resource.name is required"):
        acl_bindings([{"resource": {"type": "topic"}, "operations": ["Read"]}], "User:alice")


def test_the_upsert_is_salted_by_the_security_core() -> None:
    upsert = scram_upsert("s3cret")
    salt = base64.b64decode(upsert["salt"])
    assert salt.isalnum() and upsert["mechanism"] == "SCRAM-SHA-512"  # Kafka's base-36 salt shape
    assert "s3cret" not in str(upsert)


def test_deleting_a_user_removes_its_credential_and_acls_then_lets_go() -> None:
    kube = secured_cluster()
    kube.put(user(acls=ACLS))
    admin = FakeAdmin(brokers=[0, 1, 2])
    status, _ = run_user(kube, admin)
    bob = {"resourceType": "TOPIC", "resourceName": "x", "patternType": "LITERAL", "principal": "User:bob",
           "host": "*", "operation": "READ", "permission": "ALLOW"}
    admin.acls.append(dict(bob))
    body = kube.objects[("KelpUser", "ns", "alice")]
    body["status"] = dict(status)
    body["metadata"]["deletionTimestamp"] = "2026-11-02T00:00:00Z"
    done = asyncio.run(Runner(kube, admin_of(admin)).finalize("KelpUser", "ns", "alice"))
    assert done is not None and "User:alice" in done
    assert admin.scram.get("alice") == {} and admin.acls == [bob]
    assert kube.objects[("KelpUser", "ns", "alice")]["metadata"]["finalizers"] == []
    assert kube.events("UserDeleted")


def test_deletion_lets_go_when_the_cluster_is_gone_and_waits_for_unreachable_brokers() -> None:
    kube = secured_cluster()
    kube.put(user())
    admin = FakeAdmin(brokers=[0, 1, 2])
    run_user(kube, admin)
    body = kube.objects[("KelpUser", "ns", "alice")]
    body["metadata"]["deletionTimestamp"] = "2026-11-02T00:00:00Z"
    # Brokers unreachable: the finalizer stays, a Warning says why, the next pass retries.
    assert asyncio.run(Runner(kube, admin_of(_unreachable())).finalize("KelpUser", "ns", "alice")) is None
    assert body["metadata"]["finalizers"] == [USER_FINALIZER] and kube.events("UserCleanupWaiting")
    # The Cluster is gone: nothing to remove it from, the finalizer goes.
    del kube.objects[("Cluster", "ns", "demo")]
    done = asyncio.run(finalize_user(body, kube, admin_of(admin)))
    assert "nothing to remove" in done and kube.objects[("KelpUser", "ns", "alice")]["metadata"]["finalizers"] == []


def test_status_keeps_the_identity_the_brokers_have_until_the_new_one_is_applied() -> None:
    kube = secured_cluster()
    kube.put(user(acls=ACLS[:1]))
    admin = FakeAdmin(brokers=[0, 1, 2])
    status, _ = run_user(kube, admin)
    body = kube.objects[("KelpUser", "ns", "alice")]
    body["status"] = dict(status)
    body["spec"]["authentication"] = {"type": "tls"}
    failed, conds = run_user(kube, _unreachable())
    assert ready(conds)["reason"] == "BrokersUnreachable"
    assert failed["principal"] == "User:alice", "the old principal's ACLs are still to be removed"
    body["status"] = dict(failed)
    status, _ = run_user(kube, admin)
    assert status["principal"] == "User:CN=alice" and {a["principal"] for a in admin.acls} == {"User:CN=alice"}
