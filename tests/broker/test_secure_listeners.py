"""One broker, four listeners — PLAINTEXT, SSL with mutual TLS, SASL_PLAINTEXT, SASL_SSL — and Kafka's own clients.

confluent-kafka, kafka-python and aiokafka each produce (acks=all) and consume through a consumer group
over SASL_PLAINTEXT with PLAIN, and over SSL with a client certificate, whose subject becomes the principal
through `ssl.principal.mapping.rules` (the broker logs each principal's first connection on a listener).
Metadata gives each client the addresses of the listener it came in on, so a client never leaves its
listener. Certificates are made by trustme for the test; the broker is a real process on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka.protocol.metadata import MetadataRequest

from kelp.kafka_client import BlockingConnection, ConnectionSecurity, SaslCredentials, connection_security
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
