"""`/metrics` partition health, leadership and consumer lag on a real 3-broker cluster (issue 18, observability).

What an operator's dashboard relies on: summed over the brokers, the gauges
count every partition once (each broker reports the partitions it leads;
offline partitions, leader skew and preferred-leader imbalance come from the
active controller only); a dead broker shows as under-replicated partitions
on the others and offline partitions on the controller; leader skew and
preferred-replica imbalance are what the admin API's view of the leaders
gives (exactly, also after a broker's leaderships moved away from their
preferred replicas); a group's lag is what `kelp groups describe` says.
The counting rules themselves are also checked on scripted broker state.
"""

from __future__ import annotations

import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kelp.broker.metrics import ClusterCollector


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


def leadership(cluster, *, via=None) -> tuple[int, int]:
    """(leader skew, preferred-replica imbalance) computed from the admin API's view, as Kafka defines them."""
    live = {int(b["id"]) for b in cluster.admin("/admin/v1/cluster", via=via)["brokers"]}
    led, imbalance = dict.fromkeys(live, 0), 0
    for t in cluster.admin("/admin/v1/topics", via=via)["topics"]:
        for p in cluster.topic(t["name"], via=via)["partitions"]:
            if p["leader"] in live:
                led[p["leader"]] += 1
                imbalance += p["leader"] != p["replicas"][0]
    return max(led.values()) - min(led.values()), imbalance


@pytest.mark.clients
def test_partition_health_leadership_and_lag_from_every_broker(cluster_factory) -> None:
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    cluster = cluster_factory(3, settings={"offsets.topic.num.partitions": 1, "offsets.topic.replication.factor": 3,
                                           "replica.lag.time.max.ms": 2000, "min.insync.replicas": 2})
    cluster.admin("/admin/v1/topics", "POST", {"name": "orders", "partitions": 6, "replication_factor": 3})
    cluster.admin("/admin/v1/topics", "POST", {"name": "solo", "partitions": 3, "replication_factor": 1})
    ids = sorted(b.broker_id for b in cluster.brokers)
    # Every partition of "leaning" prefers the same broker: leadership piles up there, as after a roll.
    cluster.admin("/admin/v1/topics", "POST", {"name": "leaning",
                                               "assignments": {str(p): [ids[0], ids[1]] for p in range(4)}})
    cluster.wait_fully_replicated("orders")
    cluster.wait_fully_replicated("leaning")
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
    partitions = 6 + 3 + 4 + 1  # orders, solo, leaning, __consumer_offsets
    assert total(scrapes, "kelp_leader_count") == partitions
    assert total(scrapes, "kelp_partition_count") == 6 * 3 + 3 + 4 * 2 + 3
    assert total(scrapes, "kelp_active_controller") == 1
    assert total(scrapes, "kelp_under_replicated_partitions") == 0
    assert total(scrapes, "kelp_under_min_isr_partitions") == 3  # solo: RF 1 below min.insync.replicas 2
    assert total(scrapes, "kelp_offline_partitions") == 0
    skew, imbalance = leadership(cluster)
    assert skew >= 4 and imbalance == 0, (skew, imbalance)  # "leaning" adds 4 to one broker; every leader preferred
    assert total(scrapes, "kelp_leader_skew") == skew
    assert total(scrapes, "kelp_preferred_replica_imbalance") == 0
    assert sum(1 for s in scrapes for (n, _) in s if n == "kelp_leader_skew") == 1, "the controller's alone"
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
        return s if total(s, "kelp_under_replicated_partitions") >= 6 + 4 * (victim.broker_id in ids[:2]) and \
            total(s, "kelp_offline_partitions") == solo_on_victim else None
    scrapes = cluster.wait_for("under-replicated and offline partitions reported", degraded, timeout=60)
    assert total(scrapes, "kelp_active_controller") == 1
    # orders (RF 3, one down) keeps 2 in sync = min.insync; solo (RF 1 < min.insync 2) never has enough; leaning
    # (RF 2) falls below it when the victim was one of its two replicas.
    assert total(scrapes, "kelp_under_min_isr_partitions") == 3 - solo_on_victim + 4 * (victim.broker_id in ids[:2])

    # The victim's leaderships moved to replicas that are not preferred: the controller reports exactly that.
    def leadership_reported():
        s = [scrape(b.http_url) for b in rest]
        got = (total(s, "kelp_leader_skew"), total(s, "kelp_preferred_replica_imbalance"))
        want = leadership(cluster, via=rest[0])
        return (got, want) if got == want and want[1] > 0 else None
    cluster.wait_for("leader skew and preferred-replica imbalance as the admin API shows them", leadership_reported,
                     timeout=30)


def _broker(me: int, *, controller: int, live: set[int], partitions: list[tuple[list[int], int]]) -> SimpleNamespace:
    """The broker state ClusterCollector reads: cluster membership and one topic's (replicas, leader) states."""
    states = [SimpleNamespace(replicas=replicas, leader=leader, isr=[r for r in replicas if r in live])
              for replicas, leader in partitions]
    topic = SimpleNamespace(name="orders", configs={}, partition_states=states)

    class Config(dict):
        broker_id = me
    config = Config({"min.insync.replicas": 1})
    member = SimpleNamespace(state=SimpleNamespace(brokers=dict.fromkeys(live), controller_id=controller),
                             metadata_problems=dict)
    return SimpleNamespace(config=config, cluster=member, topics=SimpleNamespace(list_topics=lambda: [topic]),
                           replicas=None, groups=None)


def collected(broker) -> dict[str, list[float]]:
    return {f.name: [s.value for s in f.samples] for f in ClusterCollector(lambda: broker).collect()}


def test_leader_skew_and_preferred_imbalance_are_computed_as_kafka_does() -> None:
    live = {0, 1, 2}
    partitions = [
        ([0, 1, 2], 0),   # led by its preferred replica
        ([1, 0, 2], 0),   # not: imbalance
        ([2, 0, 1], 0),   # not: imbalance
        ([0, 2, 1], 0),
        ([1, 2, 0], 1),
        ([3, 0, 1], -1),  # offline: neither led nor "imbalanced" (an election cannot fix it)
        ([3, 1, 2], 3),   # led by a broker that is gone: offline too
    ]
    on_controller = collected(_broker(1, controller=1, live=live, partitions=partitions))
    # Live brokers lead 4, 1 and 0 partitions.
    assert on_controller["kelp_leader_skew"] == [4]
    assert on_controller["kelp_preferred_replica_imbalance"] == [2]
    assert on_controller["kelp_offline_partitions"] == [2]
    elsewhere = collected(_broker(0, controller=1, live=live, partitions=partitions))
    assert elsewhere["kelp_leader_skew"] == [] and elsewhere["kelp_preferred_replica_imbalance"] == []
    assert elsewhere["kelp_leader_count"] == [4]
    even = collected(_broker(1, controller=1, live=live, partitions=[([0, 1], 0), ([1, 2], 1), ([2, 0], 2)]))
    assert (even["kelp_leader_skew"], even["kelp_preferred_replica_imbalance"]) == ([0], [0])
