"""`/metrics`: the broker's Prometheus registry in the text exposition format.

Why: Prometheus scrapes each broker pod. The traffic counters and latency
histogram come from `kelp.broker.metrics`; the per-partition log gauges are
collected from this broker's LogManager at scrape time.

This module must never create metric objects in prometheus_client's global registry.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import generate_latest

from ..metrics import CONTENT_TYPE
from .keys import LOG_REGISTRY, METRICS

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].render() + generate_latest(request.app[LOG_REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
