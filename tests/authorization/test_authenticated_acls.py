"""ACLs with real authentication, end to end: a broker process with a SASL_PLAINTEXT listener, an authorizer and
HTTP Basic; clients authenticate as users over the wire, and each is allowed exactly what its ACLs say.

kafka-python as `alice` is refused (TOPIC_AUTHORIZATION_FAILED) until `admin` (a super user) grants her WRITE and
READ over the admin API with HTTP Basic; her valid credentials never open `/cluster/v1` (brokers only).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from kelp.config.keys import KAFKA_STANDARD_AUTHORIZER
from tests.support.broker_process import BrokerProcess
from tests.support.tls_files import PLAIN_JAAS

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-sasl-acls"), settings={
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": KAFKA_STANDARD_AUTHORIZER, "super.users": "User:admin",
        "http.authentication.methods": "basic",
        "offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
    })
    bp.start()
    yield bp
    bp.kill()


def sasl_bootstrap(bp: BrokerProcess) -> str:
    """The SASL_PLAINTEXT listener's address, from the broker's `listening` line."""
    assert bp.ready_info is not None
    return str(bp.ready_info["listeners"]["SASL_PLAINTEXT"])


def http(bp: BrokerProcess, path: str, user: str | None, body: object = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(bp.http_url + path, data=data, headers=headers,
                                     method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=15) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def client(user: str) -> dict[str, str]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": user,
            "sasl_plain_password": PASSWORDS[user]}


def test_a_user_gets_exactly_what_its_acls_allow(broker: BrokerProcess) -> None:
    bootstrap = sasl_bootstrap(broker)
    assert http(broker, "/admin/v1/topics", "admin", {"name": "orders", "partitions": 1})[0] == 201
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=10000, retries=0, **client("alice"))
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("orders", b"refused").get(timeout=15)
        grants = [{"resourceType": "TOPIC", "resourceName": "orders", "principal": "User:alice", "operation": op,
                   "permission": "ALLOW"} for op in ("WRITE", "READ")]
        grants.append({"resourceType": "GROUP", "resourceName": "app", "principal": "User:alice",
                       "operation": "READ", "permission": "ALLOW"})
        status, answer = http(broker, "/admin/v1/acls", "admin", {"acls": grants})
        assert status == 200 and all(r["error"] is None for r in answer["results"])
        status, _ = http(broker, "/admin/v1/acls", "alice", {"acls": grants})
        assert status == 403  # ALTER on the cluster is not hers
        producer.send("orders", b"allowed").get(timeout=15)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer("orders", bootstrap_servers=bootstrap, group_id="app", auto_offset_reset="earliest",
                             consumer_timeout_ms=15000, **client("alice"))
    try:
        assert [m.value for m in consumer][:1] == [b"allowed"]
    finally:
        consumer.close()


def test_valid_user_credentials_do_not_open_the_cluster_control_plane(broker: BrokerProcess) -> None:
    push = {"controller_id": 0, "controller_epoch": 0, "brokers": [], "end_offset": -1, "entries": []}
    status, body = http(broker, "/cluster/v1/metadata", "alice", push)
    assert status == 403 and "brokers only" in body["message"]
    assert http(broker, "/cluster/v1/metadata", None, push)[0] == 401
    assert http(broker, "/healthz", None)[0] == 200
