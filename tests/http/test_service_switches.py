"""`http.rest.proxy.enable` and `http.schema.registry.enable`: a service switched off is not mounted, its paths
answer 404 with a JSON body naming the key, and the Schema Registry then never creates `_schemas`; the admin
API, health and metrics stay served. On an in-process `Broker` through aiohttp's test client."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from kelp.broker.app import Broker
from kelp.broker.http.app import build_http_app
from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError

SR_CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
SCHEMA = '{"type":"record","name":"Order","fields":[{"name":"id","type":"string"}]}'


def _broker(directory: Path, **switches: str) -> Broker:
    return Broker(BrokerConfig.load(env={}, overrides={"log.dirs": str(directory), "port": 0, "http.port": 0,
                                                       **switches}))


def test_the_switches_default_to_on_and_are_validated() -> None:
    config = BrokerConfig.load(env={}, overrides={})
    assert config["http.rest.proxy.enable"] is True and config["http.schema.registry.enable"] is True
    off = BrokerConfig.load(env={}, overrides={"http.rest.proxy.enable": "false", "http.schema.registry.enable": "0"})
    assert off["http.rest.proxy.enable"] is False and off["http.schema.registry.enable"] is False
    with pytest.raises(ConfigError, match="http.schema.registry.enable"):
        BrokerConfig.load(env={}, overrides={"http.schema.registry.enable": "maybe"})


async def test_both_services_off(tmp_path: Path) -> None:
    broker = _broker(tmp_path, **{"http.rest.proxy.enable": "false", "http.schema.registry.enable": "false"})
    await broker.start()
    try:
        async with TestClient(TestServer(build_http_app(broker))) as client:
            for method, path, key in (
                    ("GET", "/topics", "http.rest.proxy.enable"),
                    ("POST", "/topics/orders", "http.rest.proxy.enable"),
                    ("POST", "/consumers/g", "http.rest.proxy.enable"),
                    ("GET", "/v3/clusters", "http.rest.proxy.enable"),
                    ("GET", "/subjects", "http.schema.registry.enable"),
                    ("POST", "/subjects/orders-value/versions", "http.schema.registry.enable"),
                    ("GET", "/schemas/ids/1", "http.schema.registry.enable"),
                    ("GET", "/config", "http.schema.registry.enable"),
                    ("GET", "/mode", "http.schema.registry.enable"),
                    ("GET", "/cluster/v1/schema-registry/records", "http.schema.registry.enable")):
                r = await client.request(method, path, json={"schema": SCHEMA, "records": [{"value": 1}]})
                body = await r.json()
                assert r.status == 404, (method, path, body)
                assert body["error_code"] == 404 and body["service_disabled"] == key
                assert f"{key}=false" in body["message"] and "disabled" in body["message"]
            # another unknown path is still "no such endpoint"; the admin API, health and metrics are served
            r = await client.get("/topicsx")
            assert r.status == 404 and "no such endpoint" in (await r.json())["message"]
            assert (await client.get("/healthz")).status == 200
            assert (await client.get("/metrics")).status == 200
            r = await client.get("/admin/v1/topics")
            assert r.status == 200
            assert "_schemas" not in [t["name"] for t in (await r.json())["topics"]]
        assert broker.parts is not None and not broker.parts.topics.exists("_schemas")
    finally:
        await broker.stop()


async def test_rest_proxy_off_schema_registry_on(tmp_path: Path) -> None:
    broker = _broker(tmp_path, **{"http.rest.proxy.enable": "false", "num.partitions": "1",
                                  "offsets.topic.replication.factor": "1"})
    await broker.start()
    try:
        async with TestClient(TestServer(build_http_app(broker))) as client:
            r = await client.post("/subjects/orders-value/versions", json={"schema": SCHEMA}, headers=SR_CT)
            assert r.status == 200, await r.text()
            assert (await r.json())["id"] >= 1
            r = await client.get("/v3/clusters")
            assert r.status == 404 and (await r.json())["service_disabled"] == "http.rest.proxy.enable"
        assert broker.parts is not None and broker.parts.topics.exists("_schemas")
    finally:
        await broker.stop()


async def test_schema_registry_off_rest_proxy_on(tmp_path: Path) -> None:
    broker = _broker(tmp_path, **{"http.schema.registry.enable": "false"})
    await broker.start()
    try:
        async with TestClient(TestServer(build_http_app(broker))) as client:
            r = await client.post("/topics/orders", json={"records": [{"value": {"id": "a"}}]})
            assert r.status == 200, await r.text()
            r = await client.get("/subjects")
            assert r.status == 404 and (await r.json())["service_disabled"] == "http.schema.registry.enable"
        assert broker.parts is not None and not broker.parts.topics.exists("_schemas")
    finally:
        await broker.stop()
