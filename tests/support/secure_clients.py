"""Kafka's client libraries over TLS and SASL, configured the way each one is: one description, three clients.

Why: the security tests prove the same thing with confluent-kafka (librdkafka), kafka-python and aiokafka:
a client that authenticates produces and consumes through a consumer group. `ClientAuth` says how to connect
(protocol, mechanism, user, password, CA and client certificate files); `round_trip(library, bootstrap,
topic, auth)` produces `count` records with acks=all and consumes them back in a group; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ClientAuth", "round_trip", "LIBRARIES", "produce", "consume"]

LIBRARIES = ("confluent-kafka", "kafka-python", "aiokafka")
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ClientAuth:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    def confluent(self) -> dict[str, Any]:
        out: dict[str, Any] = {"security.protocol": self.protocol}
        if self.mechanism:
            out.update({"sasl.mechanisms": self.mechanism, "sasl.username": self.username,
                        "sasl.password": self.password})
        if self.ca:
            out["ssl.ca.location"] = str(self.ca)
        if self.cert:
            out.update({"ssl.certificate.location": str(self.cert), "ssl.key.location": str(self.key)})
        return out

    def kafka_python(self) -> dict[str, Any]:
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.mechanism:
            out.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                        "sasl_plain_password": self.password})
        if self.ca:
            out["ssl_cafile"] = str(self.ca)
        if self.cert:
            out.update({"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)})
        return out

    def aiokafka(self) -> dict[str, Any]:
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.mechanism:
            out.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                        "sasl_plain_password": self.password})
        if self.protocol.endswith("SSL"):
            from aiokafka.helpers import create_ssl_context

            out["ssl_context"] = create_ssl_context(
                cafile=str(self.ca) if self.ca else None, certfile=str(self.cert) if self.cert else None,
                keyfile=str(self.key) if self.key else None)
        return out


def _values(topic: str, count: int, tag: str) -> list[bytes]:
    return [f"{topic}-{tag}-{i}".encode() for i in range(count)]


def round_trip(library: str, bootstrap: str, topic: str, auth: ClientAuth, *, count: int = 20) -> list[bytes]:
    """Produce `count` records with `library` (acks=all), consume them back in a fresh group; the values read."""
    sent = produce(library, bootstrap, topic, auth, _values(topic, count, library))
    got = consume(library, bootstrap, topic, auth, count)
    assert sorted(got) == sorted(sent), f"{library}: sent {len(sent)}, read {len(got)}"
    return got


def produce(library: str, bootstrap: str, topic: str, auth: ClientAuth, values: list[bytes]) -> list[bytes]:
    if library == "confluent-kafka":
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **auth.confluent()})
        errors: list[object] = []
        for value in values:
            producer.produce(topic, value, on_delivery=lambda err, msg: errors.append(err) if err else None)
        assert producer.flush(TIMEOUT_S) == 0 and not errors, errors
        return values
    if library == "kafka-python":
        from kafka import KafkaProducer

        kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **auth.kafka_python())
        try:
            for future in [kp.send(topic, value) for value in values]:
                future.get(TIMEOUT_S)
        finally:
            kp.close(5)
        return values

    async def aio() -> None:
        from aiokafka import AIOKafkaProducer

        ap = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **auth.aiokafka())
        await ap.start()
        try:
            for value in values:
                await ap.send_and_wait(topic, value)
        finally:
            await ap.stop()

    asyncio.run(asyncio.wait_for(aio(), TIMEOUT_S))
    return values


def consume(library: str, bootstrap: str, topic: str, auth: ClientAuth, count: int) -> list[bytes]:
    group = f"g-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + TIMEOUT_S
    got: list[bytes] = []
    if library == "confluent-kafka":
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             **auth.confluent()})
        consumer.subscribe([topic])
        try:
            while len(got) < count and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
        finally:
            consumer.close()
        return got
    if library == "kafka-python":
        from kafka import KafkaConsumer

        kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                           **auth.kafka_python())
        try:
            while len(got) < count and time.monotonic() < deadline:
                for records in kc.poll(timeout_ms=1000).values():
                    got.extend(r.value for r in records)
        finally:
            kc.close()
        return got

    async def aio() -> None:
        from aiokafka import AIOKafkaConsumer

        ac = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                              **auth.aiokafka())
        await ac.start()
        try:
            while len(got) < count:
                batch = await ac.getmany(timeout_ms=1000)
                got.extend(r.value for records in batch.values() for r in records)
        finally:
            await ac.stop()

    asyncio.run(asyncio.wait_for(aio(), TIMEOUT_S))
    return got
