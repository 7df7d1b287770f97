"""`/metrics`: the broker's Prometheus registry in the text exposition format.

Why: Prometheus scrapes each broker pod. The traffic counters and latency
histogram come from `kelp.broker.metrics`; the per-partition log gauges are
collected from this broker's LogManager, and the partition-health, leadership
and consumer-lag gauges (`ClusterCollector`) from its cluster metadata and
group coordinator, at scrape time. A scrape walks every partition and every
committed offset (tens of milliseconds at a hundred topics, growing with them),
so it runs on the CPU pool (`cpu_work.run_cpu`), not on the event loop: the
collectors read plain in-memory state through snapshots (`list(...)` of the
dicts they walk) and drop a part that changed under them rather than fail.

This module must never create metric objects in prometheus_client's global registry.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from ..cpu_work import run_cpu
from ..metrics import CONTENT_TYPE, BrokerMetrics, ClusterCollector
from .keys import BROKER, LOG_REGISTRY, METRICS

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    health = CollectorRegistry(auto_describe=False)
    broker = request.app[BROKER]
    health.register(ClusterCollector(lambda: broker.parts))  # nothing to report before every part is built
    body = await run_cpu(_render, request.app[METRICS], request.app[LOG_REGISTRY], health)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


def _render(traffic: BrokerMetrics, logs: CollectorRegistry, health: CollectorRegistry) -> bytes:
    return traffic.render() + generate_latest(logs) + generate_latest(health)
