"""`build_http_app(broker)`: the one aiohttp application of a broker's HTTP listener.

Why: the composition root (`kelp.broker.app.Broker`) calls this and runs the
result; everything HTTP is assembled here from a `RouteTableDef` per role —
the admin API (`admin/`: `/admin/v1` topics and brokers, groups, transactions and
partitions' producers, SCRAM users, ACLs), the brokers' control plane (`cluster/routes.py`:
`/cluster/v1`, and the replication admin it drives), Confluent REST Proxy v2 (`rest_v2/`:
`/topics...`, `/consumers...`), Confluent REST v3 (`rest_v3/`: `/v3/clusters...`), health and
metrics — with its middlewares: JSON errors for every failure, a request-latency
histogram labelled by route, authentication and authorization
(`access/route_access.py`: 401/403 with a JSON body), and the starting gate. The Schema
Registry's routes (`schema_registry_routes.py`, over `kelp.broker.schema_registry`) mount themselves (`install`).

The REST Proxy (v2 and v3) and the Schema Registry are switched by `http.rest.proxy.enable` and
`http.schema.registry.enable` (default true): a service switched off is not mounted at all (no route, no
`_schemas` topic), and a request for one of its paths is answered 404 with a JSON body naming the key
(`DisabledService`), after authentication, so a client learns why rather than "no such endpoint".

This module must never hold state outside the application's `AppKey`s.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client.registry import CollectorRegistry

from kelp.partitioner import RoundRobin

from ..metrics import LogCollector
from . import health, metrics_routes, schema_registry_routes
from .access.authentication import HttpAuthenticator
from .access.route_access import AUTHENTICATOR, CLUSTER_TRUST, security_middleware
from .admin import acls as admin_acls
from .admin import groups as admin_groups
from .admin import topics as admin_topics
from .admin import transactions as admin_transactions
from .admin import users as admin_users
from .cluster import routes as cluster_routes
from .cluster import share_state as share_state_routes
from .cluster.trust import ClusterTrust
from .keys import (
    BROKER,
    LOG_REGISTRY,
    MAX_BODY,
    METRICS,
    OFF_LOOP_SLOTS,
    ROUND_ROBIN,
    HttpBroker,
    bool_setting,
    int_setting,
)
from .problems import HttpProblem, error_middleware
from .rest_v2 import consumers as v2_consumers
from .rest_v2 import forwarding as v2_forwarding
from .rest_v2 import topics as v2_topics
from .rest_v3 import acls as v3_acls
from .rest_v3 import cluster as v3_cluster
from .rest_v3 import configs as v3_configs
from .rest_v3 import groups as v3_groups
from .rest_v3 import records as v3_records
from .rest_v3 import replicas as v3_replicas
from .serving import still_starting

__all__ = ["build_http_app", "DisabledService", "REST_PROXY", "SCHEMA_REGISTRY"]


@web.middleware
async def _latency_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    start = time.perf_counter()
    try:
        return await handler(request)
    finally:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        try:
            request.app[METRICS].request_latency.labels(api=f"HTTP {request.method} {route}").observe(
                time.perf_counter() - start
            )
        except Exception:  # metrics must never fail a request
            pass


_ALWAYS_SERVED = ("/healthz", "/readyz", "/metrics")
# A starting broker is registered by the controller through its metadata deliveries: they must get through.
_SERVED_WHILE_JOINING = ("/cluster/v1/metadata",)


@web.middleware
async def _starting_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """While logs recover and the broker joins its cluster, only health and metrics answer."""
    broker = request.app[BROKER]
    if broker.started_at is None and not request.path.startswith(_ALWAYS_SERVED) \
            and request.path not in _SERVED_WHILE_JOINING:
        raise still_starting(broker.config.broker_id)
    return await handler(request)


@dataclass(frozen=True)
class DisabledService:
    """A service of the HTTP port that a broker key may switch off: the paths it owns (a path is the service's
    when it equals a prefix or continues it with `/`), and the key."""

    name: str
    key: str
    prefixes: tuple[str, ...]

    def owns(self, path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in self.prefixes)


REST_PROXY = DisabledService("the REST Proxy (Confluent REST v2 and v3)", "http.rest.proxy.enable",
                             ("/topics", "/consumers", "/v3"))
SCHEMA_REGISTRY = DisabledService("the Schema Registry", "http.schema.registry.enable", (
    "/subjects", "/schemas", "/config", "/mode", "/compatibility", "/cluster/v1/schema-registry"))
DISABLED: web.AppKey[tuple[DisabledService, ...]] = web.AppKey("kelp_disabled_services")


@web.middleware
async def _disabled_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A path no route matched that belongs to a switched-off service: 404 naming the service and its key."""
    if request.match_info.route.resource is None:
        for service in request.app[DISABLED]:
            if service.owns(request.path):
                raise HttpProblem(404, f"{service.name} is disabled on this broker ({service.key}=false): "
                                       f"{request.method} {request.path} is not served",
                                  details={"service_disabled": service.key})
    return await handler(request)


def build_http_app(broker: HttpBroker, *, authenticator: HttpAuthenticator | None = None,
                   trust: ClusterTrust | None = None) -> web.Application:
    """The app; `authenticator` is how HTTP clients prove who they are (by default from `http.authentication.*`,
    with no credential checks: the composition root gives the SASL ones); `trust` who may call `/cluster/v1`
    (by default the identities `broker.config` gives its brokers)."""
    # Bodies are read whole before they are parsed: this bounds what one request may hold (413 beyond).
    max_body = int_setting(broker.config, "http.request.max.bytes")
    app = web.Application(client_max_size=max_body, middlewares=[
        _latency_middleware, error_middleware, security_middleware, _disabled_middleware, _starting_middleware])
    app[AUTHENTICATOR] = authenticator or HttpAuthenticator.from_config(broker.config)
    app[CLUSTER_TRUST] = trust or ClusterTrust.from_config(broker.config)
    app[MAX_BODY] = max_body
    app[OFF_LOOP_SLOTS] = asyncio.Semaphore(2)
    app[BROKER] = broker
    app[METRICS] = broker.metrics
    logs_registry = CollectorRegistry(auto_describe=True)
    logs_registry.register(LogCollector(lambda: broker.logs))
    app[LOG_REGISTRY] = logs_registry
    app[ROUND_ROBIN] = RoundRobin()
    for module in (health, metrics_routes, admin_topics, admin_acls, cluster_routes, share_state_routes, admin_groups,
                   admin_transactions, admin_users):
        app.add_routes(module.routes)
    disabled: list[DisabledService] = []
    if bool_setting(broker.config, REST_PROXY.key):
        for module in (v2_topics, v2_consumers, v2_forwarding, v3_cluster, v3_configs, v3_replicas, v3_groups,
                       v3_records, v3_acls):
            app.add_routes(module.routes)
    else:
        disabled.append(REST_PROXY)
    if bool_setting(broker.config, SCHEMA_REGISTRY.key):
        schema_registry_routes.install(app)  # Confluent's Schema Registry API (kelp.broker.schema_registry)
    else:
        disabled.append(SCHEMA_REGISTRY)
    app[DISABLED] = tuple(disabled)
    return app
