"""The HTTP listener's authentication (401 with a JSON body and a challenge) and authorization (403 with Kafka's
code on Kelp's own APIs, Confluent's 40301 on the REST Proxy's, the message naming operation and resource), route
by route with the Kafka listeners' ACLs: the admin API, the REST proxy, and `/cluster/v1`, which only brokers may
call. `/healthz` and `/metrics` stay public unless switched off.

HTTP Basic is checked here by a stand-in for the SASL users (the composition root gives the real check);
mutual TLS runs a real TLS listener that asks for client certificates.
"""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import aiohttp
import pytest
import trustme
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kelp.broker.http.access.authentication import HttpAuthenticator
from kelp.broker.http.access.route_access import UNLISTED, rule_for
from kelp.broker.http.app import build_http_app
from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError
from kelp.security.principal import KafkaPrincipal, SslPrincipalMapper, principal_from_certificate
from tests.authorization.harness import InProcessBroker

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "broker": "broker-secret"}


async def check_basic(user: str, password: str, address: str = "") -> KafkaPrincipal | None:
    return KafkaPrincipal.user(user) if PASSWORDS.get(user) == password else None


def basic(user: str, password: str | None = None) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password or PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


ADMIN, ALICE, BOB, BROKER = basic("admin"), basic("alice"), basic("bob"), basic("broker")


def acl(rtype: str, name: str, op: str, principal: str = "User:alice") -> dict[str, str]:
    return {"resourceType": rtype, "resourceName": name, "principal": principal, "operation": op,
            "permission": "ALLOW"}


@pytest.fixture
async def broker(tmp_path: Path):
    async with InProcessBroker(tmp_path) as b:  # super user: User:admin
        await b.parts.topics.create_topic("secret", 1, 1)
        await b.parts.acls.create([acl("CLUSTER", "kafka-cluster", "CLUSTER_ACTION", "User:broker")])
        yield b


@pytest.fixture
async def client(broker: InProcessBroker):
    authenticator = HttpAuthenticator(methods=("basic",), basic=check_basic)
    async with TestClient(TestServer(build_http_app(broker.broker, authenticator=authenticator))) as c:
        yield c


async def test_no_or_wrong_credentials_are_answered_401_with_why(client: TestClient) -> None:
    r = await client.get("/admin/v1/topics")
    assert r.status == 401 and r.headers["WWW-Authenticate"].startswith('Basic realm="kelp"')
    body = await r.json()
    assert body["error_code"] == 401 and "authentication required" in body["message"]
    r = await client.get("/admin/v1/topics", headers=basic("alice", "wrong"))
    assert r.status == 401 and "wrong user name or password" in (await r.json())["message"]
    r = await client.get("/admin/v1/topics", headers={"Authorization": "Basic !!!"})
    assert r.status == 401 and "malformed" in (await r.json())["message"]
    r = await client.get("/admin/v1/topics", headers={"Authorization": "Bearer abc"})
    assert r.status == 401 and "not accepted" in (await r.json())["message"]


async def test_health_and_metrics_need_no_credentials(client: TestClient) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    assert (await client.get("/metrics")).status == 200


async def test_health_and_metrics_can_be_closed(broker: InProcessBroker) -> None:
    config = BrokerConfig.load(env={}, overrides={"http.authentication.methods": "mtls", "http.health.public": False,
                                                  "http.metrics.public": False})
    authenticator = HttpAuthenticator.from_config(config)
    async with TestClient(TestServer(build_http_app(broker.broker, authenticator=authenticator))) as c:
        assert (await c.get("/healthz")).status == 401
        assert (await c.get("/metrics")).status == 401


def test_a_method_without_its_credential_check_refuses_to_start() -> None:
    config = BrokerConfig.load(env={}, overrides={"http.authentication.methods": "basic"})
    with pytest.raises(ConfigError, match="no credential check"):
        HttpAuthenticator.from_config(config)


async def test_403_with_kafkas_code_and_nothing_learnt_of_undescribable_topics(client: TestClient) -> None:
    secret = await client.get("/admin/v1/topics/secret", headers=ALICE)
    ghost = await client.get("/admin/v1/topics/ghost", headers=ALICE)
    assert secret.status == ghost.status == 403
    s, g = await secret.json(), await ghost.json()
    assert s["error_code"] == g["error_code"] == 29
    assert s["message"].replace("secret", "?") == g["message"].replace("ghost", "?")
    assert (await (await client.get("/admin/v1/topics", headers=ALICE)).json())["topics"] == []
    assert await (await client.get("/topics", headers=ALICE)).json() == []
    admin_view = await (await client.get("/admin/v1/topics", headers=ADMIN)).json()
    assert "secret" in [t["name"] for t in admin_view["topics"]]
    assert (await client.get("/admin/v1/topics/secret", headers=ADMIN)).status == 200


async def test_routes_need_what_the_kafka_apis_need(client: TestClient, broker: InProcessBroker) -> None:
    produce = {"records": [{"value": "x"}]}
    r = await client.post("/topics/secret", json=produce, headers=ALICE)
    assert r.status == 403, await r.text()
    answer = await r.json()  # the REST Proxy's: Confluent's KAFKA_AUTHORIZATION, naming operation and resource
    assert answer["error_code"] == 40301 and "WRITE topic 'secret'" in answer["message"], answer
    r = await client.post("/admin/v1/topics", json={"name": "mine"}, headers=ALICE)
    assert r.status == 403 and (await r.json())["error_code"] == 29
    r = await client.get("/admin/v1/acls", headers=ALICE)
    assert r.status == 403 and (await r.json())["error_code"] == 31
    r = await client.get("/admin/v1/groups/g1", headers=ALICE)
    assert r.status == 403 and (await r.json())["error_code"] == 30
    await broker.parts.acls.create([acl("TOPIC", "secret", "WRITE"), acl("TOPIC", "mine", "CREATE"),
                                    acl("TOPIC", "secret", "DESCRIBE")])
    assert (await client.post("/topics/secret", json=produce, headers=ALICE)).status == 200
    assert (await client.post("/admin/v1/topics", json={"name": "mine"}, headers=ALICE)).status == 201
    assert [t["name"] for t in (await (await client.get("/admin/v1/topics", headers=ALICE)).json())["topics"]] == [
        "secret"]
    # reading needs READ, not WRITE or DESCRIBE
    assert (await client.get("/topics/secret/partitions/0/records", headers=ALICE)).status == 403
    # a produce to a topic that does not exist creates it only with CREATE
    await broker.parts.acls.create([acl("TOPIC", "nope", "WRITE")])
    assert (await client.post("/topics/nope", json=produce, headers=ALICE)).status == 404
    assert not broker.parts.topics.exists("nope")


async def test_v3_routes_need_what_the_kafka_apis_need(client: TestClient, broker: InProcessBroker) -> None:
    cid = (await (await client.get("/v3/clusters", headers=ALICE)).json())["data"][0]["cluster_id"]
    c = f"/v3/clusters/{cid}"
    assert (await (await client.get(f"{c}/topics", headers=ALICE)).json())["data"] == []
    # Confluent's KafkaExceptionMapper answers every AuthorizationException 403/40301; the message names what
    for method, path, body, refused in (
            ("GET", f"{c}/topics/secret", None, "DESCRIBE topic 'secret'"),
            ("POST", f"{c}/topics/secret/records", {"value": {"type": "STRING", "data": "x"}}, "WRITE topic 'secret'"),
            ("POST", f"{c}/topics", {"topic_name": "mine"}, "CREATE topic 'mine'"),
            ("GET", f"{c}/acls", None, "DESCRIBE the cluster"),
            ("GET", f"{c}/consumer-groups/g1", None, "DESCRIBE group 'g1'")):
        r = await client.request(method, path, json=body, headers=ALICE)
        answer = await r.json()
        assert r.status == 403 and answer["error_code"] == 40301 and refused in answer["message"], (path, answer)
    await broker.parts.acls.create([acl("TOPIC", "secret", "DESCRIBE"), acl("TOPIC", "secret", "WRITE")])
    assert [t["topic_name"] for t in (await (await client.get(f"{c}/topics", headers=ALICE)).json())["data"]] == [
        "secret"]
    r = await client.post(f"{c}/topics/secret/records", json={"value": {"type": "STRING", "data": "x"}},
                          headers=ALICE)
    assert r.status == 200 and (await r.json())["error_code"] == 200
    assert (await client.get(f"{c}/acls", headers=ADMIN)).status == 200


async def test_only_brokers_may_call_the_cluster_control_plane(client: TestClient) -> None:
    push = {"controller_id": 0, "controller_epoch": 0, "brokers": [], "end_offset": -1, "entries": []}
    r = await client.post("/cluster/v1/metadata", json=push, headers=ALICE)
    assert r.status == 403
    body = await r.json()
    assert body["error_code"] == 31 and "for brokers only" in body["message"]
    r = await client.post("/cluster/v1/controller/create_topic", json={"name": "x"}, headers=ALICE)
    assert r.status == 403
    assert (await client.post("/cluster/v1/metadata", json=push, headers=BROKER)).status == 200
    assert (await client.post("/cluster/v1/metadata", json=push, headers=ADMIN)).status == 200  # a super user


async def test_a_caller_refused_its_identity_waits_the_failed_authentication_delay_and_is_disconnected(
        broker: InProcessBroker) -> None:
    """Issue 33's attack bench: a non-broker flooding `/cluster/v1` (403) or a caller without credentials (401) on
    keep-alive connections cost the loop one request's parsing each, five times the honest clients' p99. As a
    Kafka listener answers a failed authentication, each is now answered after
    `connection.failed.authentication.delay.ms` on a connection then closed; a broker's calls keep theirs."""
    import time

    delay_s = 0.2
    authenticator = HttpAuthenticator(methods=("basic",), basic=check_basic, failed_delay_s=delay_s)
    push = {"controller_id": 0, "controller_epoch": 0, "brokers": [], "end_offset": -1, "entries": []}
    async with TestClient(TestServer(build_http_app(broker.broker, authenticator=authenticator))) as client:
        start = time.monotonic()
        for headers, status in ((ALICE, 403), ({}, 401), (basic("alice", "wrong"), 401), (ALICE, 403)):
            r = await client.post("/cluster/v1/metadata", json=push, headers=headers)
            assert r.status == status, await r.text()
            assert r.headers.get("Connection", "").lower() == "close", r.headers
        assert time.monotonic() - start >= 4 * delay_s  # at most one refusal a delay, whatever the connection
        r = await client.post("/cluster/v1/metadata", json=push, headers=BROKER)
        assert r.status == 200 and r.headers.get("Connection", "").lower() != "close", r.headers
        r = await client.get("/admin/v1/acls", headers=ALICE)  # an ACL refusal is not an identity's: kept alive
        assert r.status == 403 and r.headers.get("Connection", "").lower() != "close", r.headers


async def test_a_rest_consumer_instance_is_its_creators(client: TestClient, broker: InProcessBroker) -> None:
    await broker.parts.acls.create([acl("GROUP", "g", "READ"), acl("TOPIC", "secret", "READ"),
                                    acl("GROUP", "g", "READ", "User:bob"), acl("TOPIC", "secret", "READ", "User:bob")])
    r = await client.post("/consumers/g", json={"name": "c1", "auto.offset.reset": "earliest"}, headers=ALICE)
    assert r.status == 200, await r.text()
    base = "/consumers/g/instances/c1"
    subscription = {"topics": ["secret"]}
    assert (await client.post(f"{base}/subscription", json=subscription, headers=ALICE)).status == 204
    for who in (BOB, ADMIN):  # READ on the group and topic, or a super user: still not theirs
        for method, path, body in (("POST", "/subscription", subscription), ("GET", "/subscription", None),
                                   ("GET", "/records?timeout=0", None), ("POST", "/offsets", None),
                                   ("GET", "/assignments", None), ("DELETE", "", None)):
            r = await client.request(method, base + path, json=body, headers=who)
            assert r.status == 403, (method, path, r.status)
            answer = await r.json()
            assert answer["error_code"] == 40301 and "was created by another principal" in answer["message"]
    assert await (await client.get(f"{base}/subscription", headers=ALICE)).json() == subscription
    # bob makes his own, in the same group
    assert (await client.post("/consumers/g", json={"name": "c2"}, headers=BOB)).status == 200
    assert (await client.get("/consumers/g/instances/c2/subscription", headers=BOB)).status == 200
    assert (await client.get("/consumers/g/instances/c2/subscription", headers=ALICE)).status == 403
    assert (await client.delete(base, headers=ALICE)).status == 204
    assert (await client.delete("/consumers/g/instances/c2", headers=BOB)).status == 204


async def test_committed_offsets_of_a_topic_the_caller_may_not_describe_are_refused(client: TestClient,
                                                                                     broker: InProcessBroker) -> None:
    """Issue 33, item 8: a REST consumer's `GET .../offsets` answered the committed offsets (and metadata) of any
    topic named in the body; Kafka's OffsetFetch answers TOPIC_AUTHORIZATION_FAILED without DESCRIBE on it."""
    await broker.parts.topics.create_topic("payroll", 1, 1)
    await broker.parts.acls.create([acl("GROUP", "g", "READ"), acl("TOPIC", "secret", "READ")])
    assert (await client.post("/consumers/g", json={"name": "c1"}, headers=ALICE)).status == 200
    base = "/consumers/g/instances/c1/offsets"
    r = await client.get(base, json={"partitions": [{"topic": "payroll", "partition": 0}]}, headers=ALICE)
    assert r.status == 403
    answer = await r.json()
    assert answer["error_code"] == 40301 and "DESCRIBE topic 'payroll'" in answer["message"]  # Kafka's 29
    r = await client.get(base, json={"partitions": [{"topic": "secret", "partition": 0}]}, headers=ALICE)
    assert r.status != 403 and (await r.json()).get("error_code") != 40301  # READ implies DESCRIBE: not refused
    assert (await client.delete("/consumers/g/instances/c1", headers=ALICE)).status == 204


async def test_only_a_broker_may_name_the_principal_of_a_forwarded_request(client: TestClient,
                                                                           broker: InProcessBroker) -> None:
    """A broker forwarding a certificate-authenticated client's request names its principal; the holder takes
    that from a broker (CLUSTER_ACTION, as on /cluster/v1) only, on a forwarded consumer route only."""
    await broker.parts.acls.create([acl("GROUP", "g", "READ")])
    assert (await client.post("/consumers/g", json={"name": "fw"}, headers=ALICE)).status == 200
    path = "/consumers/g/instances/fw/subscription"
    forwarded = {"X-Kelp-Forwarded-By": "1", "X-Kelp-Forwarded-Principal": "User%3Aalice"}
    r = await client.get(path, headers={**BROKER, **forwarded})
    assert r.status == 200 and await r.json() == {"topics": []}
    r = await client.get(path, headers={**BOB, **forwarded})  # a client may not claim to be alice
    body = await r.json()
    assert r.status == 403 and body["error_code"] == 40301 and "only brokers may" in body["message"], body
    r = await client.get(path, headers={**BROKER, **forwarded, "X-Kelp-Forwarded-Principal": "User%3Abob"})
    assert r.status == 403 and (await r.json())["error_code"] == 40301  # bob's READ on g: not his instance
    r = await client.get(path, headers={**BROKER, "X-Kelp-Forwarded-Principal": "User%3Aalice"})
    assert r.status == 403 and "forwarded" in (await r.json())["message"]  # not marked forwarded
    r = await client.get("/admin/v1/topics", headers={**BROKER, **forwarded})
    assert r.status == 403 and "REST consumer" in (await r.json())["message"]  # not a consumer route
    r = await client.get(path, headers={**BROKER, **forwarded, "X-Kelp-Forwarded-Principal": "alice"})
    assert r.status == 400 and "principalType:principalName" in (await r.json())["message"]
    assert (await client.delete("/consumers/g/instances/fw", headers=ALICE)).status == 204


async def test_a_chosen_instance_name_shaped_like_a_generated_one_is_refused(client: TestClient,
                                                                            broker: InProcessBroker) -> None:
    await broker.parts.acls.create([acl("GROUP", "g", "READ")])
    r = await client.post("/consumers/g", json={"name": "rest-consumer-b7-1-2"}, headers=ALICE)
    body = await r.json()
    assert r.status == 422 and body["error_code"] == 42204 and "rest-consumer-b" in body["message"], body


async def test_a_schema_given_inline_to_rest_produce_needs_alter_on_the_cluster(client: TestClient,
                                                                              broker: InProcessBroker) -> None:
    """Producing in a schema's format needs WRITE on the topic; registering the schema given on the way needs
    what registering it directly needs (ALTER on the cluster)."""
    await broker.parts.acls.create([acl("TOPIC", "secret", "WRITE")])
    body = {"value_schema": '{"type": "string"}', "records": [{"value": "x"}]}
    r = await client.post("/topics/secret", json=body, headers={**ALICE, "Content-Type":
                                                                "application/vnd.kafka.avro.v2+json"})
    answer = await r.json()
    assert r.status == 403 and answer["error_code"] == 40301 and "ALTER the cluster" in answer["message"], answer


def test_every_route_says_what_it_needs(broker: InProcessBroker) -> None:
    app = build_http_app(broker.broker)
    unlisted = sorted(f"{r.method} {r.resource.canonical}" for r in app.router.routes()
                      if r.resource is not None and rule_for(r.method, r.resource.canonical) is UNLISTED)
    assert unlisted == []


# -- mutual TLS -------------------------------------------------------------------------------------------------
async def test_a_client_certificate_is_the_principal(broker: InProcessBroker, tmp_path: Path) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    ca.configure_trust(server_context)
    server_context.verify_mode = ssl.CERT_REQUIRED
    alice_cert = ca.issue_cert("alice@example.com", common_name="alice")
    alice = principal_from_certificate(_der(alice_cert), SslPrincipalMapper())
    await broker.parts.acls.create([acl("TOPIC", "secret", "DESCRIBE", str(alice))])
    authenticator = HttpAuthenticator(methods=("mtls",))
    runner = web.AppRunner(build_http_app(broker.broker, authenticator=authenticator))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
    await site.start()
    port = runner.addresses[0][1]
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    alice_cert.configure_cert(client_context)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"https://127.0.0.1:{port}/admin/v1/topics/secret", ssl=client_context) as r:
                assert r.status == 200
            async with session.get(f"https://127.0.0.1:{port}/admin/v1/acls", ssl=client_context) as r:
                assert r.status == 403 and str(alice) in (await r.json())["message"]
    finally:
        await runner.cleanup()


def _der(cert: trustme.LeafCert) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).public_bytes(Encoding.DER)


# -- HTTP Basic against the broker's SASL users, as the broker wires it -------------------------------------------
async def test_basic_is_checked_against_the_plain_and_scram_users(tmp_path: Path) -> None:
    from kelp.broker.cluster.scram_users import SaltedUpsertion, alter_user_scram_credentials
    from kelp.security.scram import ScramMechanism, salted_password
    from tests.support.tls_files import PLAIN_JAAS

    settings = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                "http.authentication.methods": "basic", "super.users": "User:admin"}
    async with InProcessBroker(tmp_path, **settings) as b:
        salt = b"0123456789abcdef"
        salted = salted_password("carol-secret", salt, 4096, ScramMechanism.SCRAM_SHA_512)
        await alter_user_scram_credentials(b.parts.cluster, upsertions=[
            SaltedUpsertion("carol", "SCRAM-SHA-512", 4096, salt, salted)])
        url = f"http://127.0.0.1:{b.broker.http_port}/admin/v1/acls"

        async def status(user: str | None, password: str = "") -> tuple[int, str]:
            headers = basic(user, password) if user is not None else {}
            async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as r:
                return r.status, (await r.json())["message"] if r.status >= 400 else ""

        assert (await status(None))[0] == 401
        assert await status("admin", "admin-secret") == (200, "")  # PLAIN user, a super user
        code, message = await status("alice", "alice-secret")  # PLAIN user without ACLs
        assert code == 403 and "User:alice" in message
        assert (await status("alice", "wrong"))[0] == 401
        code, message = await status("carol", "carol-secret")  # SCRAM user from the metadata log
        assert code == 403 and "User:carol" in message
        assert (await status("carol", "carol-secret"))[0] == 403  # remembered, still the same answer
        assert (await status("carol", "nope"))[0] == 401
        assert (await status("nobody", "x"))[0] == 401
