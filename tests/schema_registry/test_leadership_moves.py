"""A registry write whose broker stops leading `_schemas` while the write waits answers Confluent's 500 with
50004 (UNKNOWN_LEADER), which Confluent's clients retry as a failover — not Kafka's code and status (before:
the Kafka error escaped, 404 with UNKNOWN_TOPIC_OR_PARTITION, or 503 with NOT_LEADER_OR_FOLLOWER).

The adversary: another write holds the registry's writer (its lock) while `_schemas` goes from under the
broker — deleted here, as a reassignment moving it off the broker drops the replica — then lets go.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from kelp.broker.app import Broker
from kelp.broker.http.app import build_http_app
from kelp.broker.http.schema_registry_routes import REGISTRY
from kelp.config.broker import BrokerConfig
from kelp.rest_errors import RegistryErrorCode


async def test_a_write_whose_broker_stops_leading_schemas_is_500_with_50004(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path), "port": 0, "http.port": 0}))
    await broker.start()
    try:
        app = build_http_app(broker)
        async with TestClient(TestServer(app)) as client:
            first = await client.post("/subjects/a-value/versions", json={"schema": '"string"'})
            assert first.status == 200, await first.text()
            assert broker.parts is not None
            registry = app[REGISTRY].get(broker.parts)
            async with registry._write_lock:  # a write in progress holds the registry's writer
                second = asyncio.create_task(client.post("/subjects/b-value/versions", json={"schema": '"int"'}))
                for _ in range(2000):  # bounded: until the second write waits for the writer
                    if registry._write_lock.locked() and getattr(registry._write_lock, "_waiters", None):
                        break
                    await asyncio.sleep(0.005)
                else:
                    raise AssertionError("the second write never reached the registry's writer")
                await broker.parts.topics.delete_topic("_schemas")
            reply = await asyncio.wait_for(second, 30)
            body = await reply.json()
            assert (reply.status, body["error_code"]) == (500, RegistryErrorCode.UNKNOWN_LEADER), body
            assert "_schemas" in body["message"] and "retry" in body["message"], body
    finally:
        await broker.stop()
