"""Partition health, leadership, groups, transactions and quotas for `/metrics`, read from a broker at scrape time.

Why a module of its own: `ClusterCollector` reads the broker's cluster metadata, its partitions, its group and
transaction coordinators and its quotas through narrow views (`ScrapedBroker` and the protocols here), never
through imports of those parts, and applies Kafka's counting rules (each broker reports the partitions it leads;
cluster-wide counts come from the active controller only, so a sum() over brokers never counts a partition
twice). `metrics.py` keeps the traffic counters and histograms the hot path updates; this module is what is
computed when Prometheus scrapes.

This module must never import networking code or block on I/O.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping, Protocol, Sized

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from kelp.config.broker import BrokerConfig

from .metadata.model import TopicState

__all__ = ["ClusterCollector", "ScrapedBroker", "MAX_PARTITION_SERIES", "MAX_GROUP_SERIES"]


class _MemberView(Protocol):
    @property
    def brokers(self) -> Mapping[int, object]: ...

    @property
    def controller_id(self) -> int: ...


class _Member(Protocol):
    @property
    def state(self) -> _MemberView: ...

    def metadata_problems(self) -> Mapping[str, int]: ...


class _Topics(Protocol):
    def list_topics(self) -> list[TopicState]: ...


class _Replica(Protocol):
    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...


class _ReplicationQuota(Protocol):
    @property
    def throttled_bytes(self) -> int: ...

    @property
    def skipped(self) -> int: ...


class _ReplicationQuotas(Protocol):
    @property
    def leader(self) -> _ReplicationQuota: ...

    @property
    def follower(self) -> _ReplicationQuota: ...


class _Replicas(Protocol):
    def get_partition(self, topic: str, partition: int) -> _Replica | None: ...

    @property
    def replication_quotas(self) -> _ReplicationQuotas: ...


class _Committed(Protocol):
    @property
    def offset(self) -> int: ...


class _Group(Protocol):
    @property
    def members(self) -> Sized: ...

    @property
    def offsets(self) -> Mapping[tuple[str, int], _Committed]: ...


class _Groups(Protocol):
    @property
    def groups(self) -> Mapping[str, _Group]: ...


class _TxnStats(Protocol):
    @property
    def started(self) -> int: ...

    @property
    def committed(self) -> int: ...

    @property
    def aborted(self) -> int: ...

    @property
    def timed_out(self) -> int: ...


class _Txn(Protocol):
    @property
    def state(self) -> object: ...


class _Transactions(Protocol):
    @property
    def stats(self) -> _TxnStats: ...

    @property
    def txns(self) -> Mapping[str, _Txn]: ...

    def check(self, transactional_id: str) -> int: ...


class ScrapedBroker(Protocol):
    """What `ClusterCollector` reads of a broker (`app.Broker`); a part not built yet is None."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def cluster(self) -> _Member | None: ...

    @property
    def topics(self) -> _Topics | None: ...

    @property
    def replicas(self) -> _Replicas | None: ...

    @property
    def groups(self) -> _Groups | None: ...

    @property
    def transactions(self) -> _Transactions | None: ...

    @property
    def quotas(self) -> _Quotas | None: ...


class _Quotas(Protocol):
    """What the scrape reads of `client_quota_manager.ClientQuotaManager`."""

    @property
    def throttled(self) -> Mapping[str, int]: ...

    @property
    def throttle_s(self) -> Mapping[str, float]: ...

    @property
    def exempt_s(self) -> float: ...


MAX_PARTITION_SERIES = 20_000
MAX_GROUP_SERIES = 20_000


class ClusterCollector(Collector):
    """Partition health, leadership and consumer lag, read from a broker at scrape time.

    `broker_source` returns the broker (or None while it starts). Everything
    read is plain in-memory state: the cluster metadata every broker holds
    (`broker.topics`, `broker.cluster`), this broker's partitions
    (`broker.replicas.get_partition`, which never creates one) and the groups
    its coordinator has loaded (`broker.groups.groups`). One scrape costs one
    pass over the partitions plus one over the committed offsets of the
    groups coordinated here, each capped (`MAX_*_SERIES`).
    """

    def __init__(self, broker_source: Callable[[], ScrapedBroker | None]) -> None:
        self._broker_source = broker_source

    def describe(self) -> Iterable[Metric]:
        return list(self._families().values())

    @staticmethod
    def _families() -> dict[str, GaugeMetricFamily]:
        tp, g = ["topic", "partition"], ["group", "topic", "partition"]
        return {
            "under": GaugeMetricFamily("kelp_under_replicated_partitions",
                                       "Partitions led by this broker whose ISR is smaller than their replica set"),
            "under_min": GaugeMetricFamily("kelp_under_min_isr_partitions",
                                           "Partitions led by this broker with fewer in-sync replicas than "
                                           "min.insync.replicas (acks=all writes fail)"),
            "offline": GaugeMetricFamily("kelp_offline_partitions",
                                         "Partitions without a live leader (reported by the active controller; "
                                         "0 elsewhere)"),
            "leaders": GaugeMetricFamily("kelp_leader_count", "Partitions this broker leads"),
            "replicas": GaugeMetricFamily("kelp_partition_count", "Partition replicas assigned to this broker"),
            "controller": GaugeMetricFamily("kelp_active_controller", "1 on the broker that is the controller"),
            "skew": GaugeMetricFamily("kelp_leader_skew",
                                      "Most partitions led by one live broker minus fewest (active controller only)"),
            "imbalance": GaugeMetricFamily("kelp_preferred_replica_imbalance",
                                           "Partitions not led by their preferred (first) replica (active "
                                           "controller only)"),
            "hw": GaugeMetricFamily("kelp_partition_high_watermark",
                                    "High watermark of each partition this broker leads", labels=tp),
            "lso_lag": GaugeMetricFamily("kelp_partition_lso_lag",
                                         "High watermark minus last stable offset of each partition this broker "
                                         "leads: records read_committed consumers wait for (open transactions)",
                                         labels=tp),
            "committed": GaugeMetricFamily("kelp_consumer_group_committed_offset",
                                           "Committed offset of each group coordinated by this broker", labels=g),
            "lag": GaugeMetricFamily("kelp_consumer_group_lag",
                                     "High watermark minus committed offset, for groups coordinated here and "
                                     "partitions this broker holds (as `kelp groups describe`)", labels=g),
            "members": GaugeMetricFamily("kelp_consumer_group_members",
                                         "Members of each group coordinated by this broker", labels=["group"]),
            "txn_ongoing": GaugeMetricFamily("kelp_transactions_ongoing",
                                             "Ongoing transactions of the transactional ids this broker coordinates"),
            "meta": GaugeMetricFamily("kelp_metadata_problems",
                                      "Problems with the cluster metadata as this broker sees it: deliveries refused "
                                      "as another history (diverged), broker leases that cannot be read "
                                      "(unreadable_leases), the newest snapshot unreadable at load "
                                      "(snapshot_fallback), its controller refusing a log that went back in time "
                                      "(history_refused)", labels=["kind"]),
            "dropped": GaugeMetricFamily("kelp_metrics_series_dropped",
                                         "Series left out of this scrape by its size bounds", labels=["family"]),
        }

    def collect(self) -> Iterator[Metric]:
        f = self._families()
        counters: list[Metric] = []
        broker = self._broker_source()
        try:
            if broker is not None and broker.cluster is not None:
                for kind, count in sorted(broker.cluster.metadata_problems().items()):
                    f["meta"].add_metric([kind], count)
            if broker is not None and broker.topics is not None:
                self._partitions(broker, broker.topics, f)
                self._groups(broker, f)
                counters = self._transactions(broker, f)
            if broker is not None:
                counters += self._quotas(broker)
                counters += self._replication_quotas(broker)
        except Exception:  # a scrape must never fail because state changed under it
            pass
        yield from f.values()
        yield from counters

    @staticmethod
    def _transactions(broker: ScrapedBroker, f: dict[str, GaugeMetricFamily]) -> list[Metric]:
        """The transaction coordinator's counters and its Ongoing transactions (ids it coordinates now)."""
        coordinator = broker.transactions
        if coordinator is None:
            return []
        ongoing = sum(1 for tid, meta in list(coordinator.txns.items())
                      if getattr(meta.state, "kafka_name", "") == "Ongoing" and coordinator.check(tid) == 0)
        f["txn_ongoing"].add_metric([], ongoing)
        stats = coordinator.stats
        out: list[Metric] = []
        for name, help_text, value in (
                ("kelp_transactions_started", "Transactions begun on this broker's coordinator", stats.started),
                ("kelp_transactions_committed", "Transactions committed (CompleteCommit written)", stats.committed),
                ("kelp_transactions_aborted", "Transactions aborted (CompleteAbort written), timeouts included",
                 stats.aborted),
                ("kelp_transactions_timed_out", "Transactions the coordinator aborted after transaction.timeout.ms",
                 stats.timed_out)):
            family = CounterMetricFamily(name, help_text)
            family.add_metric([], value)
            out.append(family)
        verifier = getattr(coordinator, "verifier", None)
        if verifier is not None:  # this broker as a partition leader asking coordinators (KIP-890)
            for name, help_text, value in (
                    ("kelp_txn_partition_verifications", "Partitions this leader asked a transaction coordinator "
                     "about before a transaction's first batch (KIP-890)", verifier.partitions_verified),
                    ("kelp_txn_partition_verification_failures", "Of those, partitions the coordinator did not "
                     "confirm: their batch was refused", verifier.partitions_refused)):
                family = CounterMetricFamily(name, help_text)
                family.add_metric([], value)
                out.append(family)
        return out

    @staticmethod
    def _quotas(broker: ScrapedBroker) -> list[Metric]:
        """Client quotas (KIP-13): answers that carried a throttle time, and the time, by quota key."""
        quotas = getattr(broker, "quotas", None)
        if quotas is None:
            return []
        count = CounterMetricFamily("kelp_client_quota_throttled_responses",
                                    "Answers that carried a throttle time (the client was over its quota and its "
                                    "connection muted for that long), by quota key", labels=["quota"])
        seconds = CounterMetricFamily("kelp_client_quota_throttle_seconds",
                                      "Throttle time given to clients over their quotas, by quota key",
                                      labels=["quota"])
        for key in sorted(quotas.throttled):
            count.add_metric([key], quotas.throttled[key])
            seconds.add_metric([key], quotas.throttle_s[key])
        exempt = CounterMetricFamily("kelp_client_quota_exempt_request_seconds",
                                     "Broker time of requests exempt from request_percentage quotas (followers' "
                                     "fetches, WriteTxnMarkers), counted while some entity sets the quota")
        exempt.add_metric([], quotas.exempt_s)
        return [count, seconds, exempt]

    @staticmethod
    def _replication_quotas(broker: ScrapedBroker) -> list[Metric]:
        """Replication quotas (KIP-73): throttled bytes moved, and partitions held back, by side."""
        replicas = broker.replicas
        if replicas is None:
            return []
        moved = CounterMetricFamily("kelp_replication_throttled_bytes",
                                    "Bytes of throttled replicas (out of the ISR, listed in *.replication.throttled."
                                    "replicas) moved, by side: leader answers, follower fetches", labels=["side"])
        held = CounterMetricFamily("kelp_replication_throttled_partitions_held",
                                   "Times a throttled partition was left out of a fetch because the side's "
                                   "replication quota was over its rate", labels=["side"])
        quotas = replicas.replication_quotas
        for side, quota in (("leader", quotas.leader), ("follower", quotas.follower)):
            moved.add_metric([side], quota.throttled_bytes)
            held.add_metric([side], quota.skipped)
        return [moved, held]

    @staticmethod
    def _partitions(broker: ScrapedBroker, topics: _Topics, f: dict[str, GaugeMetricFamily]) -> None:
        me = int(broker.config.broker_id)
        member = broker.cluster
        live = set(member.state.brokers) if member is not None else set()
        controller = member is not None and int(member.state.controller_id) == me
        default_min_isr = int(broker.config["min.insync.replicas"])
        replicas = broker.replicas
        under = under_min = offline = leaders = assigned = imbalance = hw_series = hw_dropped = 0
        led: dict[int, int] = {b: 0 for b in live}
        for t in topics.list_topics():
            min_isr = int(t.configs.get("min.insync.replicas", default_min_isr))
            for p, state in enumerate(t.partition_states):
                if me in state.replicas:
                    assigned += 1
                if state.leader in led:
                    led[state.leader] += 1
                if state.leader < 0 or state.leader not in live:
                    offline += 1
                elif state.replicas and state.leader != state.replicas[0]:
                    imbalance += 1
                if state.leader != me:
                    continue
                leaders += 1
                if len(state.isr) < len(state.replicas):
                    under += 1
                if len(state.isr) < min_isr:
                    under_min += 1
                part = replicas.get_partition(t.name, p) if replicas is not None else None
                if part is not None:
                    if hw_series < MAX_PARTITION_SERIES:
                        f["hw"].add_metric([t.name, str(p)], part.high_watermark)
                        f["lso_lag"].add_metric([t.name, str(p)], part.high_watermark - part.last_stable_offset)
                        hw_series += 1
                    else:
                        hw_dropped += 1
        f["under"].add_metric([], under)
        f["under_min"].add_metric([], under_min)
        f["offline"].add_metric([], offline if controller else 0)
        f["leaders"].add_metric([], leaders)
        f["replicas"].add_metric([], assigned)
        f["controller"].add_metric([], 1 if controller else 0)
        if controller:
            f["skew"].add_metric([], max(led.values()) - min(led.values()) if led else 0)
            f["imbalance"].add_metric([], imbalance)
        f["dropped"].add_metric(["kelp_partition_high_watermark"], hw_dropped)
        f["dropped"].add_metric(["kelp_partition_lso_lag"], hw_dropped)

    @staticmethod
    def _groups(broker: ScrapedBroker, f: dict[str, GaugeMetricFamily]) -> None:
        coordinator = broker.groups
        groups: Mapping[str, _Group] = (coordinator.groups if coordinator is not None else None) or {}
        replicas = broker.replicas
        series = dropped = 0
        for group_id, group in list(groups.items()):
            f["members"].add_metric([group_id], len(group.members))
            for (topic, p), committed in list(group.offsets.items()):
                if series >= MAX_GROUP_SERIES:
                    dropped += 1
                    continue
                series += 1
                labels = [group_id, topic, str(p)]
                f["committed"].add_metric(labels, committed.offset)
                part = replicas.get_partition(topic, p) if replicas is not None else None
                if part is not None:
                    f["lag"].add_metric(labels, max(part.high_watermark - committed.offset, 0))
        f["dropped"].add_metric(["kelp_consumer_group_committed_offset"], dropped)
