"""Kelp's HTTP listener: the admin API, the brokers' control plane, Confluent REST v2 and v3, health, metrics.

`app.build_http_app(broker)` assembles one aiohttp application from a `RouteTableDef` per role:

- `admin/`: `/admin/v1`, what the CLI and the operator steer a cluster with (topics and brokers,
  groups, transactions, SCRAM users, ACLs);
- `cluster/`: `/cluster/v1`, the brokers' own control plane (metadata deliveries, controller
  operations, the replication admin they drive) and who may call it;
- `rest_v2/`: Confluent REST Proxy v2 (`/topics`, `/consumers`: produce, partition reads, consumer
  instances); `rest_v3/`: Confluent REST v3 (`/v3/clusters/...`);
- `access/`: who a request comes from (401) and what it may do, route by route (403);
- here, what every route shares: the app's keys (`keys.py`), JSON errors (`problems.py`), JSON bodies
  (`json_body.py`), the starting gate (`serving.py`), topic views (`topic_views.py`) and produce in a
  schema's format (`rest_schemas.py`); and `/healthz`, `/readyz` (`health.py`), `/metrics`
  (`metrics_routes.py`), the Schema Registry's API (`schema_registry_routes.py`).
"""
