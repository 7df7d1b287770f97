"""`/admin/v1/acls` (the contract the operator is built against) and `kelp acls list|add|remove` over it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from kelp.broker.http.app import build_http_app
from kelp.cli.main import main
from tests.authorization.harness import InProcessBroker


def binding(name: str = "orders", **kw: str) -> dict[str, str]:
    return {"resourceType": "TOPIC", "resourceName": name, "patternType": "LITERAL", "principal": "User:alice",
            "host": "*", "operation": "READ", "permission": "ALLOW", **kw}


@pytest.fixture
async def broker(tmp_path: Path):
    # super.users names the HTTP listener's principal: no authentication is configured, so it is User:ANONYMOUS
    async with InProcessBroker(tmp_path, **{"super.users": "User:ANONYMOUS"}) as b:
        yield b


@pytest.fixture
async def client(broker: InProcessBroker):
    async with TestClient(TestServer(build_http_app(broker.broker))) as c:
        yield c


async def test_create_list_delete(client: TestClient) -> None:
    r = await client.post("/admin/v1/acls", json={"acls": [
        binding(), binding("pay-", patternType="PREFIXED", operation="WRITE"), binding(),
        binding(resourceType="CLUSTER", operation="ALTER"), binding(principal="alice"), {"resourceType": "TOPIC"}]})
    assert r.status == 200
    assert (await r.json())["results"] == [
        {"error": None}, {"error": None}, {"error": None},
        {"error": "The only valid name for the CLUSTER resource is kafka-cluster"},
        {"error": "Could not parse principal from `alice` (no colon is present separating the principal type from "
                  "the principal name)"},
        {"error": "ACL field 'resourceName' is required (a string)"}]
    listed = await (await client.get("/admin/v1/acls")).json()
    assert listed == {"acls": [binding(), binding("pay-", patternType="PREFIXED", operation="WRITE")]}
    matched = await (await client.get("/admin/v1/acls", params={"resourceType": "TOPIC", "resourceName": "pay-42",
                                                                "patternType": "MATCH"})).json()
    assert [b["resourceName"] for b in matched["acls"]] == ["pay-"]
    by_op = await (await client.get("/admin/v1/acls", params={"operation": "Write"})).json()
    assert [b["resourceName"] for b in by_op["acls"]] == ["pay-"]
    r = await client.post("/admin/v1/acls/delete", json={"filters": [{"resourceName": "orders"},
                                                                     {"operation": "NOPE"}]})
    results = (await r.json())["results"]
    assert results[0] == {"error": None, "deleted": [binding()]}
    assert results[1]["deleted"] == [] and "NOPE" in results[1]["error"]
    assert [b["resourceName"] for b in (await (await client.get("/admin/v1/acls")).json())["acls"]] == ["pay-"]


async def test_bad_requests_name_what_is_wrong(client: TestClient) -> None:
    r = await client.get("/admin/v1/acls", params={"topic": "x"})
    assert r.status == 400 and "unknown ACL filter parameter(s) topic" in (await r.json())["message"]
    r = await client.get("/admin/v1/acls", params={"resourceType": "BOGUS"})
    assert r.status == 400 and "BOGUS" in (await r.json())["message"]
    r = await client.post("/admin/v1/acls", json={"bindings": []})
    assert r.status == 400 and '{"acls": [...]}' in (await r.json())["message"]


async def test_without_an_authorizer_acls_are_refused_as_kafka_does(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path, **{"authorizer.class.name": ""}) as b, \
            TestClient(TestServer(build_http_app(b.broker))) as c:
        r = await c.get("/admin/v1/acls")
        assert r.status == 409 and (await r.json())["error_code"] == 54
        created = await (await c.post("/admin/v1/acls", json={"acls": [binding()]})).json()
        assert "No Authorizer is configured" in created["results"][0]["error"]


async def test_kelp_acls_add_list_remove(broker: InProcessBroker, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{broker.broker.http_port}"

    async def kelp(*argv: str) -> tuple[int, str]:
        code = await asyncio.to_thread(main, ["--http", url, "acls", *argv])
        return code, capsys.readouterr().out

    code, out = await kelp("add", "--allow-principal", "User:alice", "--allow-principal", "User:bob",
                           "--operation", "Read", "--operation", "Describe", "--topic", "orders", "--json")
    assert code == 0 and len(json.loads(out)) == 4 and all(b["error"] is None for b in json.loads(out))
    code, out = await kelp("add", "--deny-principal", "User:mallory", "--operation", "All", "--group", "app-",
                           "--resource-pattern-type", "prefixed")
    assert code == 0 and "1 ACL(s) in place" in out
    code, out = await kelp("list", "--topic", "orders", "--json")
    assert code == 0 and {(b["principal"], b["operation"]) for b in json.loads(out)} == {
        ("User:alice", "READ"), ("User:alice", "DESCRIBE"), ("User:bob", "READ"), ("User:bob", "DESCRIBE")}
    code, out = await kelp("list")
    assert code == 0 and "User:mallory" in out and "PREFIXED" in out and "DENY" in out
    code, out = await kelp("remove", "--topic", "orders", "--allow-principal", "User:bob")
    assert code == 0 and "2 ACL(s) removed" in out
    code, out = await kelp("list", "--principal", "User:bob", "--json")
    assert json.loads(out) == []
    code = await asyncio.to_thread(main, ["--http", url, "acls", "add", "--allow-principal", "alice",
                                          "--operation", "Read", "--topic", "t"])
    assert code == 1 and "no colon" in capsys.readouterr().err
