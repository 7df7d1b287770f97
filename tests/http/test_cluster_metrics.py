"""`/metrics` partition health, leadership and consumer lag on a real 3-broker cluster (issue 18, observability).

What an operator's dashboard relies on: summed over the brokers, the gauges
count every partition once (each broker reports the partitions it leads;
offline partitions, leader skew and preferred-leader imbalance come from the
active controller only); a dead broker shows as under-replicated partitions
on the others and offline partitions on the controller; a group's lag is
what `kelp groups describe` says.
"""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.clients


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def total(scrapes: list[dict], name: str) -> float:
    return sum(v for s in scrapes for (n, _), v in s.items() if n == name)


def test_partition_health_leadership_and_lag_from_every_broker(cluster_factory) -> None:
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    cluster = cluster_factory(3, settings={"offsets.topic.num.partitions": 1, "offsets.topic.replication.factor": 3,
                                           "replica.lag.time.max.ms": 2000, "min.insync.replicas": 2})
    cluster.admin("/admin/v1/topics", "POST", {"name": "orders", "partitions": 6, "replication_factor": 3})
    cluster.admin("/admin/v1/topics", "POST", {"name": "solo", "partitions": 3, "replication_factor": 1})
    cluster.wait_fully_replicated("orders")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(60):
        producer.send("orders", value=b"v%d" % i, partition=i % 6)
    producer.flush()
    producer.close()
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id="audit", enable_auto_commit=False)
    consumer.commit({TopicPartition("orders", p): OffsetAndMetadata(4, "", -1) for p in range(6)})
    consumer.close()

    scrapes = [scrape(b.http_url) for b in cluster.brokers]
    partitions = 6 + 3 + 1  # orders, solo, __consumer_offsets
    assert total(scrapes, "kelp_leader_count") == partitions
    assert total(scrapes, "kelp_partition_count") == 6 * 3 + 3 + 3
    assert total(scrapes, "kelp_active_controller") == 1
    assert total(scrapes, "kelp_under_replicated_partitions") == 0
    assert total(scrapes, "kelp_under_min_isr_partitions") == 3  # solo: RF 1 below min.insync.replicas 2
    assert total(scrapes, "kelp_offline_partitions") == 0
    assert total(scrapes, "kelp_leader_skew") <= 1  # created spread evenly
    hw = {dict(labels)["partition"]: v for s in scrapes for (n, labels), v in s.items()
          if n == "kelp_partition_high_watermark" and dict(labels)["topic"] == "orders"}
    assert hw == {str(p): 10.0 for p in range(6)}


    def lags():
        # The coordinator reads each partition's high watermark from its own replica (a follower's catches
        # up on its next fetch), exactly as `kelp groups describe` does; wait until both say 10 - 4.
        metric = {dict(labels)["partition"]: v for b in cluster.brokers for (n, labels), v in scrape(b.http_url).items()
                  if n == "kelp_consumer_group_lag" and dict(labels)["group"] == "audit"}
        described = {str(o["partition"]): float(o["lag"]) for o in cluster.admin("/admin/v1/groups/audit")["offsets"]}
        return (metric, described) if metric == described == {str(p): 6.0 for p in range(6)} else None
    cluster.wait_for("the lag metric and kelp groups describe agree", lags, timeout=20)
    committed = {dict(labels)["partition"]: v for s in scrapes for (n, labels), v in s.items()
                 if n == "kelp_consumer_group_committed_offset" and dict(labels)["group"] == "audit"}
    assert committed == {str(p): 4.0 for p in range(6)}

    # A broker dies: the others report under-replicated partitions, the controller offline ones.
    victim = next(b for b in cluster.brokers if b.broker_id != cluster.controller())
    victim.kill()
    rest = [b for b in cluster.brokers if b is not victim]
    solo_on_victim = sum(1 for p in cluster.topic("solo", via=rest[0])["partitions"]
                         if p["replicas"] == [victim.broker_id])

    def degraded():
        s = [scrape(b.http_url) for b in rest]
        return s if total(s, "kelp_under_replicated_partitions") >= 6 and \
            total(s, "kelp_offline_partitions") == solo_on_victim else None
    scrapes = cluster.wait_for("under-replicated and offline partitions reported", degraded, timeout=60)
    assert total(scrapes, "kelp_active_controller") == 1
    # orders (RF 3, one down) keeps 2 in sync = min.insync; solo (RF 1 < min.insync 2) never has enough.
    assert total(scrapes, "kelp_under_min_isr_partitions") == 3 - solo_on_victim
