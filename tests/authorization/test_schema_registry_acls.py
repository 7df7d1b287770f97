"""The Schema Registry's routes with an authorizer and HTTP authentication (docs/schema-registry.md,
"Authorization"): reading needs DESCRIBE on the cluster, registering (and every other write) ALTER on it; a
principal without them gets 403 with CLUSTER_AUTHORIZATION_FAILED (31) naming the operation, a super user may do
everything, and nobody unauthenticated gets past 401. ALTER allows DESCRIBE too, as in Kafka."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from kelp.broker.http.access.authentication import HttpAuthenticator
from kelp.broker.http.app import build_http_app
from kelp.security.principal import KafkaPrincipal
from tests.authorization.harness import InProcessBroker

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
SCHEMA = {"schema": '{"type":"record","name":"Order","fields":[{"name":"id","type":"string"}]}'}
CLUSTER_AUTHORIZATION_FAILED = 31


async def check_basic(user: str, password: str, address: str = "") -> KafkaPrincipal | None:
    return KafkaPrincipal.user(user) if PASSWORDS.get(user) == password else None


def basic(user: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {token}", **CT}


ADMIN, ALICE, BOB, CAROL = basic("admin"), basic("alice"), basic("bob"), basic("carol")


def cluster_acl(op: str, principal: str) -> dict[str, str]:
    return {"resourceType": "CLUSTER", "resourceName": "kafka-cluster", "principal": principal, "operation": op,
            "permission": "ALLOW"}


@pytest.fixture
async def client(tmp_path: Path):
    # one broker: _schemas with one replica, as a broker on its own would have it
    async with InProcessBroker(tmp_path, **{"offsets.topic.replication.factor": 1}) as b:  # super user: User:admin
        # alice may read the registry (DESCRIBE), carol may also write to it (ALTER); bob has no ACL
        await b.parts.acls.create([cluster_acl("DESCRIBE", "User:alice"), cluster_acl("ALTER", "User:carol")])
        authenticator = HttpAuthenticator(methods=("basic",), basic=check_basic)
        async with TestClient(TestServer(build_http_app(b.broker, authenticator=authenticator))) as c:
            yield c


async def _refused(response: ClientResponse, operation: str) -> None:
    assert response.status == 403, await response.text()
    body = await response.json()
    assert body["error_code"] == CLUSTER_AUTHORIZATION_FAILED
    assert f"not authorized to {operation} the cluster" in body["message"]


async def test_reading_needs_describe_and_registering_alter_on_the_cluster(client: TestClient) -> None:
    # no credentials: 401 before any ACL is looked at
    assert (await client.get("/subjects")).status == 401
    # bob: no DESCRIBE, so no read route; no ALTER, so no register route
    for path in ("/subjects", "/schemas/types", "/config", "/mode", "/schemas/ids/1"):
        await _refused(await client.get(path, headers=BOB), "DESCRIBE")
    await _refused(await client.post("/subjects/orders-value/versions", json=SCHEMA, headers=BOB), "ALTER")
    # alice: DESCRIBE reads (and checks) but does not register, nor change a level
    r = await client.get("/subjects", headers=ALICE)
    assert r.status == 200 and await r.json() == []
    await _refused(await client.post("/subjects/orders-value/versions", json=SCHEMA, headers=ALICE), "ALTER")
    await _refused(await client.put("/config", json={"compatibility": "FULL"}, headers=ALICE), "ALTER")
    # the super user registers, then alice reads what was registered
    r = await client.post("/subjects/orders-value/versions", json=SCHEMA, headers=ADMIN)
    assert r.status == 200, await r.text()
    schema_id = (await r.json())["id"]
    r = await client.get("/subjects/orders-value/versions/latest", headers=ALICE)
    assert r.status == 200 and (await r.json())["id"] == schema_id
    r = await client.post("/subjects/orders-value", json=SCHEMA, headers=ALICE)  # a lookup is a read
    assert r.status == 200 and (await r.json())["id"] == schema_id
    await _refused(await client.get(f"/schemas/ids/{schema_id}", headers=BOB), "DESCRIBE")
    await _refused(await client.delete("/subjects/orders-value", headers=ALICE), "ALTER")
    # carol: ALTER registers, and allows DESCRIBE as Kafka's ALTER does
    r = await client.post("/subjects/payments-value/versions", json=SCHEMA, headers=CAROL)
    assert r.status == 200 and (await r.json())["id"] == schema_id  # the same schema: the same id
    r = await client.get("/subjects", headers=CAROL)
    assert r.status == 200 and sorted(await r.json()) == ["orders-value", "payments-value"]
    # the super user may do everything, writes included
    assert (await client.put("/config", json={"compatibility": "FULL"}, headers=ADMIN)).status == 200
    assert (await client.get("/config", headers=ADMIN)).status == 200
