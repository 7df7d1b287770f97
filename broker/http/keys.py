"""Typed `web.AppKey`s for the state the HTTP handlers share, and the broker as the HTTP listener sees it.

Why: aiohttp keeps shared state on the application; typed keys make each
lookup checked and greppable, and there are no module-level singletons, so
one process can serve several brokers (tests do).

The HTTP listener starts before the broker's parts exist (`/healthz` answers
while logs recover), so it holds the broker itself, as `HttpBroker` says: what
health, metrics and the controller's metadata deliveries read while it starts,
and `parts` (`kelp.broker.parts.BrokerParts`) once every part is built, which
the routes behind the starting gate read through `serving.serving(request)`.

This module must never hold values itself: state lives on the app.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from aiohttp import web
from prometheus_client.registry import CollectorRegistry

from kelp.config.broker import BrokerConfig
from kelp.config.keys import BROKER_KEYS, parse_bool
from kelp.partitioner import RoundRobin

from ..acl_manager import AclManager
from ..cluster.member import ClusterMember
from ..metrics import BrokerMetrics
from ..parts import BrokerParts
from ..storage import LogManager

__all__ = ["BROKER", "METRICS", "LOG_REGISTRY", "ROUND_ROBIN", "MAX_BODY", "OFF_LOOP_SLOTS", "HttpBroker",
           "KafkaAddress", "int_setting", "bool_setting"]


class KafkaAddress(Protocol):
    """Where the broker's Kafka listener is reached (`kelp.broker.kafka.server.KafkaServer`)."""

    @property
    def advertised_host(self) -> str: ...

    @property
    def port(self) -> int: ...  # 0 until bound


class HttpBroker(Protocol):
    """The broker as its HTTP listener sees it (`kelp.broker.app.Broker`); each part None until it is built."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def metrics(self) -> BrokerMetrics: ...  # the broker's registry (kelp.broker.app makes it)

    @property
    def started_at(self) -> float | None: ...  # monotonic seconds once started; None while starting

    @property
    def stopping(self) -> bool: ...

    @property
    def logs(self) -> LogManager | None: ...  # open once recovery is done

    @property
    def kafka_server(self) -> KafkaAddress | None: ...

    @property
    def cluster(self) -> ClusterMember | None: ...  # takes metadata deliveries once `started`

    @property
    def acls(self) -> AclManager | None: ...  # the ACLs, from before the cluster member loads the metadata

    @property
    def parts(self) -> BrokerParts | None: ...  # every part, once all are built


# The `kelp.broker.app.Broker` this listener serves.
BROKER: web.AppKey[HttpBroker] = web.AppKey("kelp_broker")
METRICS = web.AppKey("kelp_metrics", BrokerMetrics)
# Per-broker registry holding the scrape-time log gauges of this broker's LogManager.
LOG_REGISTRY = web.AppKey("kelp_log_registry", CollectorRegistry)
ROUND_ROBIN = web.AppKey("kelp_round_robin", RoundRobin)
# `http.request.max.bytes`: aiohttp's client_max_size, named in the 413 answer.
MAX_BODY = web.AppKey("kelp_max_body", int)
# Bounds the worker threads parsing large bodies at once (`json_body.off_loop`).
OFF_LOOP_SLOTS = web.AppKey("kelp_off_loop_slots", asyncio.Semaphore)


def int_setting(config: BrokerConfig, key: str) -> int:
    """`config[key]` of an integer broker key, or the key's default where `config` lacks it (test doubles)."""
    getter = getattr(config, "get", None)
    value = getter(key) if callable(getter) else None
    raw = BROKER_KEYS[key][1] if value is None else value
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise TypeError(f"broker key {key} is not an integer setting: {raw!r}")
    return int(raw)


def bool_setting(config: BrokerConfig, key: str) -> bool:
    """`config[key]` of a boolean broker key, or the key's default where `config` lacks it (test doubles)."""
    getter = getattr(config, "get", None)
    value = getter(key) if callable(getter) else None
    return parse_bool(BROKER_KEYS[key][1] if value is None else value)
