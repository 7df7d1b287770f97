"""`/healthz` (the process answers) and `/readyz` (logs loaded, listeners bound).

Why: Kubernetes restarts a broker whose liveness probe fails and routes
traffic only to ready ones. Liveness must stay cheap and never depend on
storage; readiness says which part is not ready yet.

This module must never block or touch disk.
"""

from __future__ import annotations

from aiohttp import web

from kelp.clock import monotonic

from .keys import BROKER
from .problems import json_response

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "alive"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    missing = []
    if broker.logs is None:
        missing.append("logs not loaded")
    ks = broker.kafka_server
    if ks is None or not ks.port:
        missing.append("Kafka listener not bound")
    cluster = broker.cluster
    if cluster is None or not cluster.state.started:
        missing.append("not joined to its cluster yet")
    started_at = broker.started_at
    if started_at is None:
        missing.append("broker still starting")
    if broker.stopping:
        missing.append("broker stopping")
    if missing or ks is None or started_at is None:
        return json_response({"status": "not ready", "reasons": missing}, status=503)
    return json_response(
        {
            "status": "ready",
            "broker_id": broker.config.broker_id,
            "kafka": f"{ks.advertised_host}:{ks.port}",
            "uptime_s": round(monotonic() - started_at, 3),
        }
    )
