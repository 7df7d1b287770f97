"""Prometheus metrics of one broker: traffic counters, request latency, log sizes.

Why: operators scrape `/metrics` to see throughput per topic, latency per API
and how far each partition's log reaches. Every metric object lives in a
`CollectorRegistry` owned by a `BrokerMetrics` instance — never in
prometheus_client's global registry — so tests can run many brokers in one
process without "Duplicated timeseries" errors.

The per-partition gauges (log start/end offset, size) are not updated on the
hot path: `LogCollector` reads the `LogManager` at scrape time, so produce and
fetch pay nothing for them. Likewise `metrics_cluster.ClusterCollector` reads
the broker's cluster metadata, partitions, coordinators and quotas at scrape
time (partition health, leadership, lag, transactions, quotas).

One `BrokerMetrics` per broker, built by the broker (`kelp.broker.app`) and handed to the parts that count
(the Kafka listeners, the replica manager, the HTTP app): passed in, never found. A part built without one (a
test of that part alone) makes its own.

The collectors read the broker through narrow views (`LogSource`,
`ListenerStats` here, `ScrapedBroker` in `metrics_cluster`): what they may read, no
more, and no import of the parts they read (the replica manager imports
this module for its counters).

This module must never import networking code or block on I/O.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from .metrics_cluster import ClusterCollector, ScrapedBroker
from .storage import Log

__all__ = [
    "BrokerMetrics",
    "LogCollector",
    "ClusterCollector",
    "ListenerCollector",
    "CONTENT_TYPE",
    "LogSource",
    "ListenerStats",
    "ScrapedBroker",
]

# Text exposition format 0.0.4, what every Prometheus server scrapes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Request latencies span sub-millisecond produces to long-polled fetches.
LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)

# Event-loop delay (loop_monitor.py): fine from 1 ms to 200 ms, where the tail-latency goals are (issue 23).
LOOP_LAG_BUCKETS_S = (
    0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0,
)
# Garbage-collection pauses: a young collection takes microseconds, a full one of a large heap 100 ms and more.
GC_PAUSE_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


class LogSource(Protocol):
    """What `LogCollector` reads of the `LogManager`."""

    def partitions(self) -> Iterable[tuple[str, int]]: ...

    def get(self, topic: str, partition: int) -> Log | None: ...


class _Pool(Protocol):
    @property
    def used(self) -> int: ...

    @property
    def over(self) -> int: ...

    @property
    def limit(self) -> int | None: ...


class _Quota(Protocol):
    @property
    def total(self) -> int: ...


class ListenerStats(Protocol):
    """What `ListenerCollector` reads of the Kafka listener: its request memory pool and connection count."""

    @property
    def pool(self) -> _Pool: ...

    @property
    def quota(self) -> _Quota: ...


class LogCollector(Collector):
    """Per-partition log gauges read from a `LogManager` at scrape time.

    `logs_source` is a zero-argument callable returning the LogManager (or
    None while the broker is still starting), so the collector can be
    registered before storage is opened.
    """

    def __init__(self, logs_source: Callable[[], LogSource | None]) -> None:
        self._logs_source = logs_source

    def describe(self) -> Iterable[Metric]:
        # Metric names are fixed; describing them lets the registry reject a
        # second collector of the same names in the same registry.
        return list(self._families())

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        labels = ["topic", "partition"]
        return (
            GaugeMetricFamily("kelp_log_end_offset", "Next offset to be assigned in the partition log", labels=labels),
            GaugeMetricFamily("kelp_log_start_offset", "First offset still stored in the partition log", labels=labels),
            GaugeMetricFamily("kelp_log_size_bytes", "Bytes on disk of the partition log's segments", labels=labels),
            GaugeMetricFamily("kelp_log_segments", "Number of segments of the partition log", labels=labels),
        )

    def collect(self) -> Iterator[Metric]:
        end, start, size, segments = self._families()
        logs = self._logs_source()
        if logs is not None:
            try:
                keys = list(logs.partitions())
            except Exception:  # a scrape must never fail because of storage
                keys = []
            for topic, partition in keys:
                try:
                    lg = logs.get(topic, partition)
                    if lg is None:
                        continue
                    labels = [topic, str(partition)]
                    end.add_metric(labels, lg.log_end_offset)
                    start.add_metric(labels, lg.log_start_offset)
                    size.add_metric(labels, lg.size_bytes)
                    segments.add_metric(labels, len(lg.segments))
                except Exception:  # a log deleted or closed mid-scrape
                    continue
        yield end
        yield start
        yield size
        yield segments


class ListenerCollector(Collector):
    """The Kafka listener's request memory pool and connection count, read at scrape time."""

    def __init__(self, listener_source: Callable[[], ListenerStats | None]) -> None:
        self._listener_source = listener_source

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily("kelp_kafka_request_pool_used_bytes",
                              "Bytes of Kafka requests being received or awaiting their response"),
            GaugeMetricFamily("kelp_kafka_request_pool_limit_bytes",
                              "queued.max.request.bytes (absent when unbounded)"),
            GaugeMetricFamily("kelp_kafka_connections", "Open Kafka-protocol client connections"),
        )

    def collect(self) -> Iterator[Metric]:
        used, limit, connections = self._families()
        server = self._listener_source()
        if server is not None:
            used.add_metric([], server.pool.used + server.pool.over)
            if server.pool.limit is not None:
                limit.add_metric([], server.pool.limit)
            connections.add_metric([], server.quota.total)
        yield used
        yield limit
        yield connections


# Bounds a scrape's cost and size: per-partition and per-group series beyond these are dropped (and counted).
class BrokerMetrics:
    """All metric objects of one broker, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.bytes_in = Counter(
            "kelp_topic_bytes_in", "Record batch bytes appended to the topic's logs", ["topic"], registry=r
        )
        self.bytes_out = Counter(
            "kelp_topic_bytes_out", "Record batch bytes served to consumers and followers", ["topic"], registry=r
        )
        self.records_in = Counter(
            "kelp_topic_records_in", "Records appended to the topic's logs", ["topic"], registry=r
        )
        self.records_out = Counter(
            "kelp_topic_records_out", "Records served by fetches (counted per batch header)", ["topic"], registry=r
        )
        self.request_latency = Histogram(
            "kelp_request_latency_seconds",
            "Time from a request's arrival to its response, by Kafka API name or HTTP route",
            ["api"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.connections_refused = Counter(
            "kelp_kafka_connections_refused",
            "Kafka connections closed right after accept, by the limit reached (max.connections, "
            "max.connections.per.ip)",
            ["reason"], registry=r,
        )
        self.connections_closed = Counter(
            "kelp_kafka_connections_closed_by_limit",
            "Kafka connections closed by a listener bound (connections.max.idle.ms, socket.request.max.bytes)",
            ["reason"], registry=r,
        )
        self.loop_lag = Histogram(
            "kelp_event_loop_lag_seconds",
            "How late the broker's event-loop timer fired (every 10 ms): time the loop was held by other work",
            buckets=LOOP_LAG_BUCKETS_S, registry=r,
        )
        self.loop_lag_max = Gauge(
            "kelp_event_loop_lag_max_seconds", "Largest event-loop delay seen since the broker started", registry=r,
        )
        self.gc_pauses = Histogram(
            "kelp_gc_pause_seconds", "Python garbage-collection pauses of the broker process, by generation",
            ["generation"], buckets=GC_PAUSE_BUCKETS_S, registry=r,
        )
        # KIP-227 (replica/fetch_sessions.py): Kafka's FetchSessionCache gauges and evictions meter.
        self.fetch_sessions = Gauge(
            "kelp_fetch_sessions", "Incremental fetch sessions cached (Kafka's NumIncrementalFetchSessions)",
            registry=r)
        self.fetch_session_partitions = Gauge(
            "kelp_fetch_session_partitions",
            "Partitions held by the cached fetch sessions (Kafka's NumIncrementalFetchPartitionsCached)", registry=r)
        self.fetch_session_evictions = Gauge(
            "kelp_fetch_session_evictions", "Fetch sessions evicted since the broker started", registry=r)
        self._listener: ListenerStats | None = None
        r.register(ListenerCollector(lambda: self._listener))

    def watch_listener(self, server: ListenerStats) -> None:
        """Report this Kafka server's pool and connections (the last one started wins)."""
        self._listener = server

    def render(self) -> bytes:
        from prometheus_client.exposition import generate_latest  # its HTTP servers' modules: at the first scrape

        return generate_latest(self.registry)
