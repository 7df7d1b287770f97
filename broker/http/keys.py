"""Typed `web.AppKey`s for the state the HTTP handlers share.

Why: aiohttp keeps shared state on the application; typed keys make each
lookup checked and greppable, and there are no module-level singletons, so
one process can serve several brokers (tests do).

This module must never hold values itself: state lives on the app.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from kelp.partitioner import RoundRobin

from ..metrics import BrokerMetrics

__all__ = ["BROKER", "METRICS", "LOG_REGISTRY", "ROUND_ROBIN", "MAX_BODY", "OFF_LOOP_SLOTS", "broker_setting"]

# The `kelp.broker.app.Broker` this listener serves (typed loosely: the HTTP
# layer must not import the composition root that imports it).
BROKER: web.AppKey[Any] = web.AppKey("kelp_broker")
METRICS = web.AppKey("kelp_metrics", BrokerMetrics)
# Per-broker registry holding the scrape-time log gauges of this broker's LogManager.
LOG_REGISTRY = web.AppKey("kelp_log_registry", CollectorRegistry)
ROUND_ROBIN = web.AppKey("kelp_round_robin", RoundRobin)
# `http.request.max.bytes`: aiohttp's client_max_size, named in the 413 answer.
MAX_BODY = web.AppKey("kelp_max_body", int)
# Bounds the worker threads parsing large bodies at once (`json_body.off_loop`).
OFF_LOOP_SLOTS = web.AppKey("kelp_off_loop_slots", asyncio.Semaphore)


def broker_setting(broker: Any, key: str) -> Any:
    """`broker.config[key]`, or the key's default where the broker's config lacks it (test doubles)."""
    from ..config import BROKER_KEYS

    getter = getattr(broker.config, "get", None)
    value = getter(key) if callable(getter) else None
    return BROKER_KEYS[key][1] if value is None else value
