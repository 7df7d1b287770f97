"""A broker accepts Kafka connections only once it has read the cluster metadata.

Found by the churn and chaos suites: a broker restarted after SIGKILL waits
for its old lease to expire before it registers, and meanwhile answered
Metadata with no topics — clients then auto-created the topic, got
TOPIC_ALREADY_EXISTS (not retriable) and dropped records. Kafka's broker
opens its client listeners only after its metadata caught up; so does Kelp's:
the port is bound at once (it is advertised), connections are accepted once
the metadata is applied.
"""

from __future__ import annotations

import asyncio
import socket

from kelp.broker.app import Broker
from kelp.broker.cluster import member as member_module
from kelp.config.broker import BrokerConfig


def _connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


async def test_no_kafka_connection_is_accepted_before_the_metadata_is_read(tmp_path, monkeypatch) -> None:
    gate = asyncio.Event()
    real_register = member_module.MemberLeases.register

    async def held_register(self) -> None:
        await gate.wait()  # as a restarted broker waiting for its previous process's lease to expire
        await real_register(self)

    monkeypatch.setattr(member_module.MemberLeases, "register", held_register)
    broker = Broker(BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path), "port": 0, "http.port": 0}))
    starting = asyncio.create_task(broker.start())
    try:
        for _ in range(200):
            if broker.kafka_server is not None and broker.kafka_server.port:
                break
            await asyncio.sleep(0.02)
        port = broker.kafka_server.port
        assert port and not await asyncio.to_thread(_connects, port)  # bound, not serving
        gate.set()
        await asyncio.wait_for(starting, 30)
        assert await asyncio.to_thread(_connects, port)
    finally:
        gate.set()
        if not starting.done():
            starting.cancel()
        await broker.stop()
