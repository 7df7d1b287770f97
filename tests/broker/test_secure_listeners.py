"""One broker, four listeners — PLAINTEXT, SSL with mutual TLS, SASL_PLAINTEXT, SASL_SSL — and Kafka's own clients.

confluent-kafka, kafka-python and aiokafka each produce (acks=all) and consume through a consumer group
over SASL_SSL with SCRAM-SHA-512, over SASL_PLAINTEXT with PLAIN, and over SSL with a client certificate,
whose subject becomes the principal through `ssl.principal.mapping.rules` (the broker logs each principal's
first connection on a listener). SCRAM users come through the admin API's `/admin/v1/users` routes, whose
contract (shapes, 400 for bad input, 404 for a credential that is not there) the operator is built against;
a deleted credential no longer authenticates.
Metadata gives each client the addresses of the listener it came in on, so a client never leaves its
listener. Certificates are made by trustme for the test; the broker is a real process on 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from kafka.protocol.metadata import MetadataRequest

from kelp.kafka_client import (
    AuthenticationFailed,
    BlockingConnection,
    ConnectionSecurity,
    SaslCredentials,
    connection_security,
)
from tests.support.broker_process import BrokerProcess
from tests.support.secure_clients import LIBRARIES, ClientAuth, round_trip
from tests.support.tls_files import PLAIN_JAAS, SCRAM_JAAS, Pki

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

MAPPING = "RULE:^CN=([^,]+),OU=clients,.*$/$1/,DEFAULT"


def secure_settings(pki: Pki) -> dict[str, object]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(pki.broker_file),
        "ssl.truststore.location": str(pki.ca_file),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": MAPPING,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "offsets.topic.num.partitions": 3,
        "group.initial.rebalance.delay.ms": 0,
    }


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("secure-broker"), settings=secure_settings(pki))
    bp.start()
    yield bp
    bp.kill()


def listener(broker: BrokerProcess, name: str) -> str:
    assert broker.ready_info is not None
    return str(broker.ready_info["listeners"][name])


@pytest.mark.parametrize("library", LIBRARIES)
def test_sasl_plaintext_with_plain(secure_broker: BrokerProcess, library: str) -> None:
    auth = ClientAuth("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")
    round_trip(library, listener(secure_broker, "SASL_PLAINTEXT"), f"plain-{library}", auth)
    secure_broker.wait_for_log("listener SASL_PLAINTEXT: connection from 127.0.0.1")


@pytest.mark.parametrize("library", LIBRARIES)
def test_ssl_with_mutual_tls_takes_the_principal_from_the_certificate(secure_broker: BrokerProcess, pki: Pki,
                                                                     library: str) -> None:
    name = f"client-{library}"
    cert, key = pki.client_certificate(name)
    round_trip(library, listener(secure_broker, "SSL"), f"mtls-{library}", ClientAuth("SSL", ca=pki.ca_file,
                                                                                      cert=cert, key=key))
    line = secure_broker.wait_for_log(f"authenticated as User:{name}")
    assert "listener SSL" in line


@pytest.mark.parametrize("library", ["confluent-kafka", "kafka-python"])
def test_sasl_ssl_with_plain(secure_broker: BrokerProcess, pki: Pki, library: str) -> None:
    auth = ClientAuth("SASL_SSL", "PLAIN", "alice", "alice-secret", ca=pki.ca_file)
    round_trip(library, listener(secure_broker, "SASL_SSL"), f"sasl-ssl-plain-{library}", auth, count=5)


def _metadata_ports(address: str, security: ConnectionSecurity) -> set[int]:
    host, port = address.rsplit(":", 1)
    with BlockingConnection(host, int(port), client_id="t", timeout_s=10, security=security) as conn:
        answer = conn.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9)
    return {b.port for b in answer.brokers}


def test_metadata_advertises_the_listener_the_request_came_in_on(secure_broker: BrokerProcess, pki: Pki) -> None:
    cert, key = pki.client_certificate("metadata-reader")
    tls = connection_security({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file),
                               "ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
    plain = SaslCredentials("PLAIN", "alice", "alice-secret")
    for name, security in (("PLAINTEXT", ConnectionSecurity()), ("SSL", tls),
                           ("SASL_PLAINTEXT", ConnectionSecurity(None, plain)),
                           ("SASL_SSL", ConnectionSecurity(tls.ssl_context, plain))):
        address = listener(secure_broker, name)
        assert _metadata_ports(address, security) == {int(address.rsplit(":", 1)[1])}, name


# -- SCRAM users: the admin API's contract, and SCRAM-SHA-512 over SASL_SSL ---------------------------------------
def http(broker: BrokerProcess, method: str, path: str, body: object = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    # The Kafka listeners authenticate, so HTTP does too (issue 33): the PLAIN user `admin`, as HTTP Basic.
    basic = base64.b64encode(b"admin:admin-secret").decode()
    req = urllib.request.Request(broker.http_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Authorization": f"Basic {basic}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def salted(password: str, mechanism: str = "SCRAM-SHA-512", iterations: int = 8192) -> dict[str, object]:
    """What an operator sends: the salt and salted password (Hi(password, salt, i)), never the password."""
    salt = os.urandom(24)
    digest = "sha512" if mechanism == "SCRAM-SHA-512" else "sha256"
    return {"mechanism": mechanism, "iterations": iterations, "salt": base64.b64encode(salt).decode(),
            "saltedPassword": base64.b64encode(hashlib.pbkdf2_hmac(digest, password.encode(), salt,
                                                                   iterations)).decode()}


@pytest.fixture(scope="module")
def scram_alice(secure_broker: BrokerProcess) -> None:
    status, body = http(secure_broker, "PUT", "/admin/v1/users/alice/scram-credentials", salted("alice-secret"))
    assert status == 200 and body == {"name": "alice", "credentials": [{"mechanism": "SCRAM-SHA-512",
                                                                       "iterations": 8192}]}


@pytest.mark.parametrize("library", LIBRARIES)
def test_sasl_ssl_with_scram_sha_512(secure_broker: BrokerProcess, pki: Pki, scram_alice: None, library: str) -> None:
    auth = ClientAuth("SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret", ca=pki.ca_file)
    round_trip(library, listener(secure_broker, "SASL_SSL"), f"scram-{library}", auth)
    secure_broker.wait_for_log("authenticated as User:alice (SASL/SCRAM-SHA-512)")


def test_the_users_routes_keep_their_contract(secure_broker: BrokerProcess, pki: Pki) -> None:
    both = {"name": "carol", "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096},
                                             {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}
    assert http(secure_broker, "PUT", "/admin/v1/users/carol/scram-credentials",
                salted("c-512"))[0] == 200
    assert http(secure_broker, "PUT", "/admin/v1/users/carol/scram-credentials",
                salted("c-256", "SCRAM-SHA-256", 4096)) == (200, both)
    status, listing = http(secure_broker, "GET", "/admin/v1/users")
    assert status == 200 and both in listing["users"]
    assert all(set(u) == {"name", "credentials"} for u in listing["users"])
    tls = connection_security({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file)}).ssl_context
    carol = ConnectionSecurity(tls, SaslCredentials("SCRAM-SHA-512", "carol", "c-512"))
    assert _metadata_ports(listener(secure_broker, "SASL_SSL"), carol)

    for body, named in ((dict(salted("x"), iterations=100), "Too few iterations"),
                        (dict(salted("x"), mechanism="SCRAM-SHA-1"), "Unknown SCRAM mechanism"),
                        (dict(salted("x"), salt="!!"), "'salt' is not valid base64"),
                        ({"mechanism": "SCRAM-SHA-512"}, "'iterations'")):
        status, error = http(secure_broker, "PUT", "/admin/v1/users/dan/scram-credentials", body)
        assert status == 400 and named in error["message"], error
    assert http(secure_broker, "DELETE", "/admin/v1/users/carol/scram-credentials?mechanism=SCRAM-SHA-512") == (
        200, {"name": "carol", "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]})
    status, error = http(secure_broker, "DELETE", "/admin/v1/users/carol/scram-credentials?mechanism=SCRAM-SHA-512")
    assert status == 404 and "does not exist" in error["message"]
    assert http(secure_broker, "DELETE", "/admin/v1/users/carol/scram-credentials")[0] == 400
    with pytest.raises(AuthenticationFailed, match="refused SASL/SCRAM-SHA-512 authentication as carol"):
        _metadata_ports(listener(secure_broker, "SASL_SSL"), carol)


def test_alter_and_describe_user_scram_credentials_answer_per_user(secure_broker: BrokerProcess) -> None:
    from kafka.protocol.admin import AlterUserScramCredentialsRequest as Alter
    from kafka.protocol.admin import DescribeUserScramCredentialsRequest as Describe

    host, port = listener(secure_broker, "PLAINTEXT").rsplit(":", 1)
    ok = salted("erin-secret", iterations=4096)
    upsert = Alter.ScramCredentialUpsertion
    with BlockingConnection(host, int(port), client_id="t", timeout_s=30) as conn:
        answer = conn.request(Alter(deletions=[Alter.ScramCredentialDeletion(name="nobody", mechanism=2)], upsertions=[
            upsert(name="erin", mechanism=2, iterations=4096, salt=base64.b64decode(ok["salt"]),
                   salted_password=base64.b64decode(ok["saltedPassword"])),
            upsert(name="fred", mechanism=2, iterations=100, salt=b"s", salted_password=b"p"),
            upsert(name="gina", mechanism=9, iterations=4096, salt=b"s", salted_password=b"p"),
            upsert(name="hal", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p"),
            upsert(name="hal", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p")]), 0)
        assert [(r.user, r.error_code) for r in answer.results] == [
            ("nobody", 91), ("erin", 0), ("fred", 93), ("gina", 33), ("hal", 92)]
        described = conn.request(Describe(users=[Describe.UserName(name=n) for n in ("erin", "fred", "erin")]), 0)
        assert [(r.user, r.error_code) for r in described.results] == [("erin", 92), ("fred", 91)]
        everyone = conn.request(Describe(users=None), 0)
        erin = next(r for r in everyone.results if r.user == "erin")
        assert [(c.mechanism, c.iterations) for c in erin.credential_infos] == [(2, 4096)]
        assert "fred" not in {r.user for r in everyone.results}
