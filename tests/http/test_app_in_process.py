"""The HTTP app on a real in-process `Broker`, through aiohttp's test client.

Covers what a separate process cannot show cheaply: readiness before and
after start, and that two brokers in one process keep their own log gauges.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from kelp.broker.app import Broker
from kelp.broker.http.app import build_http_app
from kelp.config.broker import BrokerConfig


def _broker(directory: Path) -> Broker:
    return Broker(BrokerConfig.load(env={}, overrides={"log.dirs": str(directory), "port": 0, "http.port": 0}))


async def test_readiness_follows_the_broker_lifecycle(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    async with TestClient(TestServer(build_http_app(broker))) as client:
        r = await client.get("/readyz")
        assert r.status == 503
        reasons = (await r.json())["reasons"]
        assert "logs not loaded" in reasons and "Kafka listener not bound" in reasons
        assert (await client.get("/healthz")).status == 200
        await broker.start()
        try:
            r = await client.get("/readyz")
            assert r.status == 200 and (await r.json())["status"] == "ready"
        finally:
            await broker.stop()


async def test_two_brokers_in_one_process_report_their_own_logs(tmp_path: Path) -> None:
    a, b = _broker(tmp_path / "a"), _broker(tmp_path / "b")
    await a.start()
    await b.start()
    try:
        async with TestClient(TestServer(build_http_app(a))) as ca, TestClient(TestServer(build_http_app(b))) as cb:
            r = await ca.post("/admin/v1/topics", json={"name": "only-on-a", "partitions": 2})
            assert r.status == 201
            r = await ca.post("/topics/only-on-a/partitions/1", json={"records": [{"value": 1}, {"value": 2}]})
            assert r.status == 200
            text_a = await (await ca.get("/metrics")).text()
            text_b = await (await cb.get("/metrics")).text()
            assert 'kelp_log_end_offset{partition="1",topic="only-on-a"} 2.0' in text_a
            assert "only-on-a" not in text_b.split("kelp_log_end_offset", 1)[1]
    finally:
        await a.stop()
        await b.stop()


async def test_a_topic_created_before_this_broker_applied_it_is_answered_created_not_missing(tmp_path: Path) -> None:
    """The controller committed the topic, but the broker that took the request has not applied it when the
    creation stops waiting (`routing.call` waits 5 s: thousands of partitions on a busy broker take longer).
    The answer was a 404 "does not exist" for the topic just created; it is a 201 with the controller's view."""
    broker = _broker(tmp_path)
    await broker.start()
    try:
        member = broker.cluster
        assert member is not None
        held = asyncio.Event()
        receive = member.metadata.receive

        async def late(push):  # this broker applies metadata only once the answer went out
            await held.wait()
            return await receive(push)

        async def gave_up(offset: int, timeout_s: float) -> bool:
            return False

        member.metadata.receive = late
        member.routing._wait_applied = gave_up
        async with TestClient(TestServer(build_http_app(broker))) as client:
            r = await client.post("/admin/v1/topics", json={"name": "big", "partitions": 3,
                                                            "configs": {"retention.ms": "1000"}})
            body = await r.json()
            assert r.status == 201, body
            assert [p["partition"] for p in body["partitions"]] == [0, 1, 2]
            assert all(p["high_watermark"] is None for p in body["partitions"])
            assert body["configs"] == {"retention.ms": {"value": "1000", "source": "topic"}}
            cid = (await (await client.get("/v3/clusters")).json())["data"][0]["cluster_id"]
            r = await client.post(f"/v3/clusters/{cid}/topics", json={"topic_name": "big3", "partitions_count": 2})
            body = await r.json()
            assert r.status == 201, body
            assert body["topic_name"] == "big3" and body["partitions_count"] == 2
            held.set()
    finally:
        await broker.stop()
