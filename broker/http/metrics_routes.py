"""`/metrics`: the broker's Prometheus registry in the text exposition format.

Why: Prometheus scrapes each broker pod. The traffic counters and latency
histogram come from `kelp.broker.metrics`; the per-partition log gauges are
collected from this broker's LogManager, and the partition-health, leadership
and consumer-lag gauges (`ClusterCollector`) from its cluster metadata and
group coordinator, at scrape time.

This module must never create metric objects in prometheus_client's global registry.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from ..metrics import CONTENT_TYPE, ClusterCollector
from .keys import BROKER, LOG_REGISTRY, METRICS

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    health = CollectorRegistry(auto_describe=False)
    broker = request.app[BROKER]
    health.register(ClusterCollector(lambda: broker.parts))  # nothing to report before every part is built
    body = request.app[METRICS].render() + generate_latest(request.app[LOG_REGISTRY]) + generate_latest(health)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
