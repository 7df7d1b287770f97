"""Kafka's `kafka-reassign-partitions --throttle` against a Kelp cluster: the move runs at the rate, then
`--verify` takes the throttles off.

Why: the tool is how Kafka users move replicas without starving producers (KIP-73). It sets
`leader.replication.throttled.replicas` / `follower.replication.throttled.replicas` on the topic and the two
`*.replication.throttled.rate` configs on the brokers, and `--verify` removes them once the move is done. If
Kelp refused one of those keys, or took them and throttled nothing, the tool would look fine and the move would
still take the whole disk: so this test times the move against the rate, from below.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request

import pytest

from kelp import kafka_tools
from tests.support.cluster import Cluster
from tests.tools.conftest import Tools

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
CONFIGS = "kafka.admin.ConfigCommand"
RATE = 400_000  # bytes per second
VALUE = 10_000
RECORDS = 400  # 4 MB: 10 s at the rate


def _fill(cluster: Cluster, topic: str) -> int:
    """Produce RECORDS values of VALUE bytes (acks=all); returns the bytes the partition's log holds."""
    from confluent_kafka import Producer

    errors: list[str] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                  "compression.type": "none", "message.timeout.ms": 60000})
    for i in range(RECORDS):
        p.produce(topic, bytes([i % 251]) * VALUE, on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors[:3]
    return RECORDS * VALUE


def _sample(scraped: str, series: str) -> float:
    line = next((ln for ln in scraped.splitlines() if ln.startswith(series + " ")), None)
    assert line is not None, f"{series} is not in /metrics"
    return float(line.rsplit(" ", 1)[1])


def _copied(cluster: Cluster) -> int:
    """Bytes broker 1's new replica holds so far (the move's progress), from the controller's reassignments."""
    moves = cluster.admin("/admin/v1/partitions/reassignments")["reassignments"]
    ends = [int((m.get("log_end_offsets") or {}).get("1") or 0) for m in moves]
    return (ends[0] if ends else RECORDS) * VALUE


def _configs(tools: Tools, kind: str, name: str) -> str:
    return tools.run(CONFIGS, "--describe", "--entity-type", kind, "--entity-name", name).ok().stdout


def test_reassign_with_a_throttle_moves_at_the_rate_and_verify_removes_the_throttles(cluster_factory,
                                                                                        tmp_path) -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka's Java tools cannot run")
    kafka_tools.fetch()
    cluster = cluster_factory(2)
    cluster.admin("/admin/v1/topics", "POST", {"name": "moving", "assignments": {"0": [0]}})
    size = _fill(cluster, "moving")
    tools = Tools(cluster[0].bootstrap)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "moving", "partition": 0,
                                                              "replicas": [0, 1]}]}))
    out = tools.run(REASSIGN, "--execute", "--reassignment-json-file", str(plan), "--throttle", str(RATE)).ok().stdout
    assert "throttle" in out.lower(), out
    # The tool set the throttles before it submitted the move; time the rest of the move from the follower's
    # progress (the tool's own JVM start is seconds on a loaded machine: not part of the move).
    started, copied = time.monotonic(), _copied(cluster)
    topic = _configs(tools, "topics", "moving")
    assert "leader.replication.throttled.replicas=0:0" in topic and "follower.replication.throttled.replicas=0:1" \
        in topic, topic
    assert f"follower.replication.throttled.rate={RATE}" in _configs(tools, "brokers", "1")

    def moved() -> bool:
        p = cluster.topic("moving")["partitions"][0]
        return sorted(p["isr"]) == [0, 1]

    cluster.wait_for("broker 1 in sync", moved, timeout=120, interval=0.2)
    took = time.monotonic() - started
    left = size - copied
    # Unthrottled, what was left moves in about a second; throttled, at RATE per second.
    assert left > size / 2, f"only {left} of {size} bytes were left to move when the tool returned"
    assert took >= 0.7 * left / RATE, f"{left} bytes moved in {took:.1f}s: faster than {RATE} bytes/s"
    print(f"{left} bytes moved in {took:.1f}s at a throttle of {RATE} bytes/s")
    # Both sides counted what they moved under the quota; the follower, asking only what its quota allows, held
    # the partition back (so the leader, at the same rate, never had to).
    for broker, side in ((cluster[0], "leader"), (cluster[1], "follower")):
        with urllib.request.urlopen(broker.http_url + "/metrics", timeout=15) as resp:
            scraped = resp.read().decode()
        moved_bytes = _sample(scraped, f'kelp_replication_throttled_bytes_total{{side="{side}"}}')
        held = _sample(scraped, f'kelp_replication_throttled_partitions_held_total{{side="{side}"}}')
        assert moved_bytes >= 0.5 * left and (held > 0 or side == "leader"), (side, moved_bytes, held)

    verify = tools.run(REASSIGN, "--verify", "--reassignment-json-file", str(plan)).ok().stdout
    assert "Reassignment of partition moving-0 is completed" in verify, verify
    assert "Clearing broker-level throttles on brokers 0,1" in verify, verify
    assert "Clearing topic-level throttles on topic moving" in verify, verify
    topic = _configs(tools, "topics", "moving")
    assert "replication.throttled.replicas" not in topic, topic
    assert "replication.throttled.rate" not in _configs(tools, "brokers", "1")
