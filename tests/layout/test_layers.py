"""The layer rules of docs/internals.md, checked on every test run.

import-linter cannot see `kelp.broker` and `kelp.operator` (they are mapped
from `broker/` and `operator/`, which its graph builder does not follow), so
the rules are checked here from the source: each module's imports are read
with `ast` (import_graph.py) and followed transitively through Kelp's own modules.
"""

from __future__ import annotations

import pytest

from tests.layout.import_graph import FILES, imports, kelp_imports

NETWORKING = ("asyncio", "socket", "aiohttp", "kafka.net", "kafka.producer", "kafka.consumer", "http", "urllib")

# What the pure metadata model (kelp.broker.metadata) must never reach, directly or through what it imports.
METADATA_RUNTIME = (tuple(n for n in NETWORKING if n != "socket")
                    + ("threading", "selectors", "kubernetes", "kopf", "kelp.kube", "kelp.leases", "kelp.kafka_client",
                       "kelp.operator", "kelp.cli",
                       "kelp.broker.cluster", "kelp.broker.kafka", "kelp.broker.http", "kelp.broker.groups",
                       "kelp.broker.transactions", "kelp.broker.app", "kelp.broker.parts", "kelp.broker.partition",
                       "kelp.broker.replica_manager", "kelp.broker.topic_manager", "kelp.broker.metrics",
                       "kelp.broker.acl_manager", "kelp.broker.client_quota_manager", "kelp.broker.storage.log"))


def _closure(start: str) -> dict[str, str]:
    """Every module reachable from `start`, mapped to the Kelp module that imports it."""
    seen: dict[str, str] = {}
    stack = [m for m in FILES if m == start or m.startswith(start + ".")]
    visited: set[str] = set()
    while stack:
        current = stack.pop()
        if current in visited:
            continue
        visited.add(current)
        for imported in imports(current):
            seen.setdefault(imported, current)
            if imported in FILES and imported not in visited:
                stack.append(imported)
    return seen


def _violations(start: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{importer} imports {imported}"
        for imported, importer in _closure(start).items()
        if any(imported == f or imported.startswith(f + ".") for f in forbidden)
    )


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("kelp.broker.storage", NETWORKING + ("kelp.broker.kafka", "kelp.broker.http", "kelp.broker.groups",
                                              "kelp.operator", "kelp.cli", "kelp.kafka_client")),
        ("kelp.records", NETWORKING + ("kelp.broker",)),
        # The metadata model is pure: no event loop, no sockets of its own, no Kubernetes, nothing of the runtime that
        # stores, delivers or acts on it (the broker config validator it checks dynamic configs with reads host
        # names through `socket`, as the operator's builders note below; nothing here calls it).
        ("kelp.broker.metadata", METADATA_RUNTIME),
        # The Schema Registry is a client of the broker with a model of its own; its HTTP routes are the HTTP
        # layer's (`kelp.broker.http.schema_registry_routes`), which calls into it, never the other way round.
        ("kelp.broker.schema_registry", ("kelp.broker.http",)),
        # The cluster layer is called by the request handlers, never the other way round.
        ("kelp.broker.cluster", ("kelp.broker.kafka", "kelp.broker.http", "kelp.broker.groups", "kelp.operator",
                                 "kelp.cli")),
        # Replication's per-partition rules are state and futures only: no sockets, no HTTP, no cluster calls.
        ("kelp.broker.replica.partition", tuple(n for n in NETWORKING if n != "asyncio")
         + ("kelp.broker.kafka", "kelp.broker.http", "kelp.broker.cluster.member")),
        # The operator's types and status shaping, its security rules (issue 20: the listeners' keys, the
        # certificates and their rotation, KelpUsers' parts), its spec reader and builders, and its plans are
        # pure: no Kubernetes, no kopf, no I/O, nothing of the layers that act (the broker config validator
        # they share reads the host name through `socket`, nothing more).
        *[(m, tuple(n for n in NETWORKING if n != "socket")
           + ("kubernetes", "kopf", "kelp.kube", "kelp.operator.kube", "kelp.operator.reconcile",
              "kelp.operator.handlers", "kelp.operator.run", "kelp.broker.cluster"))
          for m in ("kelp.operator.model", "kelp.operator.security", "kelp.operator.manifests",
                    "kelp.operator.plans")],
        # Each pure role imports only the roles beneath it: model, then security, then manifests; plans
        # stand on the model alone.
        ("kelp.operator.model", ("kelp.operator.security", "kelp.operator.manifests", "kelp.operator.plans")),
        ("kelp.operator.security", ("kelp.operator.manifests", "kelp.operator.plans")),
        ("kelp.operator.manifests", ("kelp.operator.plans",)),
        ("kelp.operator.plans", ("kelp.operator.security", "kelp.operator.manifests")),
        # The operator's Kubernetes door stands on the model only: it never decides.
        ("kelp.operator.kube", ("kelp.operator.security", "kelp.operator.manifests", "kelp.operator.plans",
                                "kelp.operator.reconcile", "kelp.operator.handlers", "kelp.operator.run")),
        # Kubernetes access (issue 35) serves the broker's backends and the operator alike, so it imports neither;
        # the lease model and election under both backends is pure: no Kubernetes, no sockets, no event loop.
        ("kelp.kube", ("kelp.broker", "kelp.operator", "kelp.cli", "kelp.spark")),
        ("kelp.leases", NETWORKING + ("kubernetes", "kelp.kube", "kelp.broker", "kelp.operator", "kelp.cli")),
        # The operator reaches Kubernetes through kelp.kube and leases through kelp.leases, and checks a Cluster or
        # KelpUser with the shared config and security rules (kelp.config, kelp.security): it imports nothing of
        # kelp.broker, directly or through what it imports (issue 35).
        ("kelp.operator", ("kelp.broker", "kelp.cli")),
        # The Kafka-protocol client core serves the broker and the Spark source alike, so it imports neither
        # (nor the operator or the CLI), and it is the networking: no client library's connections.
        ("kelp.kafka_client", ("kelp.broker", "kelp.operator", "kelp.cli", "kelp.spark", "pyspark", "aiohttp",
                               "http", "urllib", "kafka.net", "kafka.producer", "kafka.consumer", "kafka.admin",
                               "kafka.coordinator", "kafka.cluster", "aiokafka", "confluent_kafka")),
        # Its protocol core (sans-I/O, under both connections), framing, SASL exchange, metadata, retry rules and
        # errors are pure: no sockets, no event loop, no threads, no clock.
        *[(f"kelp.kafka_client.{m}", NETWORKING + ("threading", "selectors", "time"))
          for m in ("protocol", "framing", "sasl", "metadata", "retry", "errors")],
        # The blocking side never touches an event loop (Spark's Python workers have none).
        *[(f"kelp.kafka_client.{m}", ("asyncio", "kelp.kafka_client.async_connection",
                                       "kelp.kafka_client.async_client"))
          for m in ("blocking_connection", "blocking_client")],
        # The Spark data source is a client: it speaks the Kafka protocol and never reaches into the broker.
        ("kelp.spark", ("kelp.broker", "kelp.operator", "kelp.cli")),
        # The security core (issue 20) is asked by the listeners and the operator and never reaches back: no sockets,
        # no event loop, no HTTP, and nothing above it; only its TLS module has the standard library's `ssl`.
        ("kelp.security", NETWORKING + ("kelp.broker", "kelp.operator", "kelp.cli", "kelp.kafka_client", "kelp.spark",
                                        "kelp.kube", "kelp.leases")),
        # The config (issue 35) is shared the same way: the brokers load it, the operator validates with it; it reads
        # the host name through `socket` (`host`'s default) and nothing else of the network.
        ("kelp.config", tuple(n for n in NETWORKING if n != "socket")
         + ("kelp.broker", "kelp.operator", "kelp.cli", "kelp.kafka_client", "kelp.spark", "kelp.kube", "kelp.leases")),
        *[(f"kelp.security.{m}", ("ssl",))
          for m in ("principal", "sasl", "plain", "jaas", "scram", "oauthbearer", "acl", "acl_json")],
        # Its option rules and column codec run anywhere: no sockets, no Spark.
        *[(m, NETWORKING + ("pyspark", "kelp.spark.wire", "kelp.kafka_client"))
          for m in ("kelp.spark.codec", "kelp.spark.options")],
    ],
)
def test_layer_imports_only_downwards(layer: str, forbidden: tuple[str, ...]) -> None:
    assert any(m == layer or m.startswith(layer + ".") for m in FILES), f"{layer} has no modules"
    assert _violations(layer, forbidden) == []


def test_the_checker_sees_a_violation() -> None:
    """Guards the guard: the HTTP layer does import aiohttp, so the checker must say so."""
    if not any(m.startswith("kelp.broker.http.") for m in FILES):
        pytest.skip("kelp.broker.http has no modules yet")
    assert _violations("kelp.broker.http", ("aiohttp",))


# The Kelp modules the security core may use besides its own: the error table and the clock types.
SECURITY_MAY_IMPORT = ("kelp.security", "kelp.errors", "kelp.clock")


def test_security_core_imports_only_itself_and_kelp_basics() -> None:
    """kelp.security sits under every listener: of Kelp, it imports only itself, kelp.errors and kelp.clock."""
    found = sorted(
        f"{module} imports {imported}"
        for module in FILES if module == "kelp.security" or module.startswith("kelp.security.")
        for imported in kelp_imports(module)
        if not any(imported == m or imported.startswith(m + ".") for m in SECURITY_MAY_IMPORT)
    )
    assert found == []


def test_operator_imports_nothing_of_the_broker() -> None:
    """The operator checks a Cluster or KelpUser with the very rules the brokers apply (one config validator, one
    principal mapping, one ACL and SCRAM codec), found in the shared kelp.config and kelp.security, and reaches
    Kubernetes through kelp.kube and leases through kelp.leases: no import of kelp.broker at all (issue 35)."""
    found = sorted(
        f"{module} imports {imported}"
        for module in FILES if module == "kelp.operator" or module.startswith("kelp.operator.")
        for imported in kelp_imports(module)
        if imported == "kelp.broker" or imported.startswith("kelp.broker.")
    )
    assert found == []


# The Kelp modules the metadata model may import besides its own: the error table, the JSON types, the shared security
# core's ACL and SCRAM values and the shared config's validator of dynamic broker configs (`broker_config` records
# are checked with it on replay). Nothing of kelp.broker outside kelp.broker.metadata.
METADATA_MAY_IMPORT = ("kelp.broker.metadata", "kelp.errors", "kelp.json_types", "kelp.security", "kelp.config")


def test_metadata_model_imports_only_itself_and_leaves() -> None:
    """kelp.broker.metadata is the pure model the runtime acts on: of Kelp it imports only METADATA_MAY_IMPORT."""
    found = sorted(
        f"{module} imports {imported}"
        for module in FILES if module == "kelp.broker.metadata" or module.startswith("kelp.broker.metadata.")
        for imported in kelp_imports(module)
        if not any(imported == m or imported.startswith(m + ".") for m in METADATA_MAY_IMPORT)
    )
    assert found == []


def test_metadata_model_reaches_no_broker_runtime() -> None:
    """Not even through what it imports: every kelp.broker module that kelp.broker.metadata reaches is its own."""
    found = sorted(
        f"{importer} imports {imported}"
        for imported, importer in _closure("kelp.broker.metadata").items()
        if imported.startswith("kelp.broker") and not (imported == "kelp.broker.metadata"
                                                       or imported.startswith("kelp.broker.metadata."))
    )
    assert found == []
