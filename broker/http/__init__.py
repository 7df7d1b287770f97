"""Kelp's HTTP listener: admin API, Confluent REST Proxy v2, health, metrics.

`app.build_http_app(broker)` assembles one aiohttp application from a
`RouteTableDef` per role (`admin`, `rest_proxy`, `health`, `metrics_routes`).
"""
