"""HTTP follows the Kafka listeners' security, and `/cluster/v1` takes brokers only (issue 33, items 3 and 4).

The attacks, on a broker whose only Kafka listener is SASL_PLAINTEXT, with no authorizer and the HTTP settings
left at their defaults: an anonymous `POST /admin/v1/topics` created a topic (item 4), and a valid non-broker
user's `POST /cluster/v1/metadata` with `controller_epoch` 2147483647 and no brokers was applied: every
partition lost its leader (item 3). Both are refused now; the broker's own inter-broker user still gets through.
The unit tests cover the rules: which methods HTTP takes when left unset, the opt-out, and who counts as a broker.
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kelp.broker.acl_manager import Access, AclManager
from kelp.broker.http.access.authentication import HttpAuthenticator, resolve_methods
from kelp.broker.http.cluster.trust import ClusterTrust
from kelp.config.broker import BrokerConfig
from kelp.config.keys import KELP_AUTHORIZER
from kelp.errors import ConfigError
from kelp.security.principal import ANONYMOUS, KafkaPrincipal
from tests.support.broker_process import BrokerProcess
from tests.support.tls_files import PLAIN_JAAS, Pki, plain_jaas

pytestmark = [pytest.mark.timeout(180)]

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
EVIL_PUSH = {"controller_epoch": 2147483647, "brokers": [], "entries": []}
SASL_ONLY = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,  # the brokers are `admin`
    "offsets.topic.num.partitions": 1,
}


def http(bp: BrokerProcess, method: str, path: str, user: str | None = None, body: object = None
         ) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(bp.http_url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=15) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-sasl-http-defaults"), settings=SASL_ONLY)
    bp.start()
    yield bp
    bp.kill()


def test_http_authenticates_when_the_kafka_listener_does(sasl_broker: BrokerProcess) -> None:
    status, body = http(sasl_broker, "POST", "/admin/v1/topics", body={"name": "anon", "partitions": 1})
    assert status == 401, body
    assert http(sasl_broker, "GET", "/admin/v1/topics")[0] == 401
    assert http(sasl_broker, "GET", "/healthz")[0] == 200  # probes stay open
    # the same users as the Kafka listener, by HTTP Basic; no authorizer: any authenticated user may
    assert http(sasl_broker, "POST", "/admin/v1/topics", "alice", {"name": "alices", "partitions": 1})[0] == 201


def test_a_valid_user_cannot_push_metadata_without_an_authorizer(sasl_broker: BrokerProcess) -> None:
    assert http(sasl_broker, "POST", "/admin/v1/topics", "alice", {"name": "kept", "partitions": 1})[0] in (201, 409)
    status, body = http(sasl_broker, "POST", "/cluster/v1/metadata", "alice", EVIL_PUSH)
    assert status == 403 and "brokers only" in body["message"], body
    assert http(sasl_broker, "POST", "/cluster/v1/controller/delete_topic", "alice", {"name": "kept"})[0] == 403
    assert http(sasl_broker, "POST", "/cluster/v1/metadata", None, EVIL_PUSH)[0] == 401
    status, topic = http(sasl_broker, "GET", "/admin/v1/topics/kept", "alice")
    assert status == 200 and [p["leader"] for p in topic["partitions"]] == [0], topic  # the controller stands
    # the brokers' own inter-broker user is a broker: its (stale, harmless) push is answered, not refused
    status, body = http(sasl_broker, "POST", "/cluster/v1/metadata", "admin", EVIL_PUSH | {"controller_epoch": 0})
    assert status not in (401, 403), body


def test_the_explicit_opt_out_leaves_http_open_and_warns(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, settings=SASL_ONLY | {"http.authentication.methods": "none"}) as bp:
        assert http(bp, "POST", "/admin/v1/topics", body={"name": "anon", "partitions": 1})[0] == 201
        bp.wait_for_log("HTTP authentication is off (http.authentication.methods=none)")
        # the control plane still takes brokers only: its callers are identified whatever the methods say
        assert http(bp, "POST", "/cluster/v1/metadata", "alice", EVIL_PUSH)[0] == 403
        assert http(bp, "POST", "/cluster/v1/metadata", None, EVIL_PUSH)[0] == 403


# -- the rules -------------------------------------------------------------------------------------------------
def load(**settings: object) -> BrokerConfig:
    return BrokerConfig.load(env={}, overrides={"log.dirs": "/tmp/unused", **settings})


def test_methods_follow_the_kafka_listeners_when_unset() -> None:
    assert resolve_methods(load()) == ()  # PLAINTEXT: nothing to follow
    assert resolve_methods(load(**SASL_ONLY)) == ("basic",)
    assert resolve_methods(load(**SASL_ONLY, **{"http.authentication.methods": "none"})) == ()
    assert resolve_methods(load(**SASL_ONLY, **{"http.authentication.methods": "mtls"})) == ("mtls",)
    scram = SASL_ONLY | {"sasl.enabled.mechanisms": "SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol":
                         "SCRAM-SHA-512", "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
                         "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"b\" "
                         "password=\"p\";"}
    assert resolve_methods(load(**scram)) == ("basic",)
    mtls_http = {"ssl.keystore.location": "/k.pem", "ssl.truststore.location": "/ca.pem", "http.ssl.enabled": True,
                 "http.ssl.client.auth": "requested"}
    assert resolve_methods(load(**SASL_ONLY, **mtls_http)) == ("mtls", "basic")
    with pytest.raises(ConfigError, match="cannot be combined"):
        load(**{"http.authentication.methods": "none,basic"})


def test_a_listener_http_cannot_follow_refuses_to_start() -> None:
    mtls_kafka = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/k.pem",
                  "ssl.truststore.location": "/ca.pem", "ssl.client.auth": "required"}
    with pytest.raises(ConfigError, match="must too") as refused:
        resolve_methods(load(**mtls_kafka))
    assert "http.authentication.methods=none" in str(refused.value)  # names the opt-out
    assert resolve_methods(load(**mtls_kafka, **{"http.authentication.methods": "none"})) == ()


def test_the_opt_out_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kelp.broker.http"):
        HttpAuthenticator.from_config(load(**SASL_ONLY, **{"http.authentication.methods": "none"}))
    assert any("SASL_PLAINTEXT" in r.getMessage() and "ANONYMOUS" in r.getMessage() for r in caplog.records)


def _access(config: BrokerConfig, principal: KafkaPrincipal) -> Access:
    return Access(AclManager(config), principal, "*")


def test_who_is_a_broker(tmp_path: Path) -> None:
    plain = load()
    nobody = ClusterTrust.from_config(plain)
    assert nobody.brokers == frozenset()
    assert nobody.refusal(_access(plain, ANONYMOUS), "127.0.0.1", "/cluster/v1/metadata") is None  # make run
    assert nobody.refusal(_access(plain, ANONYMOUS), "::1", "/cluster/v1/metadata") is None
    refused = nobody.refusal(_access(plain, ANONYMOUS), "10.1.2.3", "/cluster/v1/metadata")
    assert refused is not None and "http.control.plane.open" in refused
    assert nobody.refusal(_access(plain, KafkaPrincipal.user("alice")), "127.0.0.1", "/cluster/v1/x") is not None
    opened = ClusterTrust.from_config(load(**{"http.control.plane.open": True}))
    assert opened.refusal(_access(plain, ANONYMOUS), "10.1.2.3", "/cluster/v1/metadata") is None

    sasl = load(**SASL_ONLY)
    trust = ClusterTrust.from_config(sasl)
    assert trust.brokers == {KafkaPrincipal.user("admin")}
    assert trust.refusal(_access(sasl, KafkaPrincipal.user("admin")), "10.1.2.3", "/cluster/v1/metadata") is None
    for who, where in ((ANONYMOUS, "127.0.0.1"), (KafkaPrincipal.user("alice"), "127.0.0.1")):
        assert "brokers only" in (trust.refusal(_access(sasl, who), where, "/cluster/v1/metadata") or "")
    supers = load(**SASL_ONLY, **{"super.users": "User:ops"})
    assert trust.refusal(_access(supers, KafkaPrincipal.user("ops")), "10.1.2.3", "/cluster/v1/metadata") is None

    # brokers presenting their HTTP certificates: the certificate's subject is theirs, mapped as clients' are
    pki = Pki(tmp_path)
    certs = load(**{"http.ssl.enabled": True, "http.ssl.keystore.location": str(pki.broker_file),
                    "http.ssl.truststore.location": str(pki.ca_file), "http.ssl.client.auth": "requested"})
    by_certificate = ClusterTrust.from_config(certs)
    (broker,) = by_certificate.brokers
    assert broker.name.startswith("CN=kelp-broker") and "OU=brokers" in broker.name
    assert by_certificate.refusal(_access(certs, ANONYMOUS), "127.0.0.1", "/cluster/v1/metadata") is not None

    # with an authorizer, CLUSTER_ACTION is a broker's permission; loopback is no identity there
    authorized = load(**{"authorizer.class.name": KELP_AUTHORIZER})
    assert nobody.refusal(_access(authorized, ANONYMOUS), "127.0.0.1", "/cluster/v1/metadata") is not None


def test_jaas_users_without_the_inter_broker_user_in_clear_text_are_no_identity() -> None:
    # SASL_SSL between brokers over plain HTTP: the credentials never go out in clear, so they prove nothing here
    clear = load(**{"listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": "/k.pem",
                    "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
                    "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas({"b": "p"}, username="b",
                                                                                 password="p")})
    assert ClusterTrust.from_config(clear).brokers == frozenset()
