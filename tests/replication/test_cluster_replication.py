"""A three-broker cluster as a Kafka user sees it: placement, ISR, acks=all, failover, truncation.

Real broker processes share a cluster directory (file leases and metadata
store); real clients (kafka-python admin, confluent-kafka) talk to them.
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.clients


def _produce(bootstrap: str, topic: str, values: list[bytes], *, acks: str = "all", key: bytes | None = None,
             partition: int | None = None, timeout: float = 30.0) -> list[tuple[int, int, bytes]]:
    """Produce with confluent-kafka; returns (partition, offset, value) of every acknowledged record."""
    from confluent_kafka import Producer

    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []

    def report(err, msg) -> None:
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                  "linger.ms": 5, "message.timeout.ms": int(timeout * 1000)})
    for v in values:
        kwargs = {"partition": partition} if partition is not None else {}
        p.produce(topic, v, key=key, on_delivery=report, **kwargs)
        p.poll(0)
    left = p.flush(timeout + 5)
    assert left == 0 and not errors, f"{left} unflushed, errors {errors[:5]}"
    return acked


def _consume_all(bootstrap: str, topic: str, partitions: int, *,
                 expect: int, timeout: float = 30.0) -> dict[int, list[tuple[int, bytes]]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    n = 0
    deadline = time.monotonic() + timeout
    try:
        while n < expect and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            got[msg.partition()].append((msg.offset(), msg.value()))
            n += 1
    finally:
        c.close()
    assert n >= expect, f"consumed {n} of {expect}"
    return got


def test_three_brokers_replicate_with_acks_all_and_clients_see_the_cluster(cluster_factory) -> None:
    cluster = cluster_factory(3)
    created = cluster.admin("/admin/v1/topics", "POST", {"name": "orders", "partitions": 6, "replication_factor": 3,
                                                         "configs": {"min.insync.replicas": "2"}})
    leaders = [p["leader"] for p in created["partitions"]]
    assert sorted(leaders) == [0, 0, 1, 1, 2, 2]  # leadership spread evenly
    assert all(sorted(p["replicas"]) == [0, 1, 2] for p in created["partitions"])
    # The answer means the controller committed the topic; each broker learns it from the metadata log a moment
    # later (as in KRaft), and kafka-python's admin asks whichever broker it likes. Seen at load 27: a describe
    # answered by a broker 0.2 s behind came back with no partitions.
    cluster.wait_for("every broker to know topic orders", lambda: all(
        len(cluster.topic("orders", via=b)["partitions"]) == 6 for b in cluster.brokers))

    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster[0].bootstrap, request_timeout_ms=10000)
    try:
        brokers = admin.describe_cluster()["brokers"]
        assert sorted(b["broker_id"] for b in brokers) == [0, 1, 2]
        (desc,) = admin.describe_topics(["orders"])
        assert sorted(p["leader_id"] for p in desc["partitions"]) == [0, 0, 1, 1, 2, 2]
        assert all(sorted(p["replica_nodes"]) == [0, 1, 2] for p in desc["partitions"])
    finally:
        admin.close()

    import json
    import shutil
    import subprocess

    if shutil.which("kcat"):  # installed by `make test`'s bootstrap; Kafka's own tooling sees the cluster
        meta = json.loads(subprocess.run(["kcat", "-L", "-J", "-b", cluster[2].bootstrap, "-t", "orders"],
                                         capture_output=True, text=True, timeout=30, check=True).stdout)
        assert sorted(b["id"] for b in meta["brokers"]) == [0, 1, 2]
        (topic,) = meta["topics"]
        assert sorted(p["leader"] for p in topic["partitions"]) == [0, 0, 1, 1, 2, 2]
        assert all(sorted(r["id"] for r in p["replicas"]) == [0, 1, 2] and len(p["isrs"]) == 3
                   for p in topic["partitions"])

    acked = _produce(cluster.bootstrap, "orders", [f"v{i}".encode() for i in range(600)])
    assert len(acked) == 600
    d = cluster.wait_fully_replicated("orders")
    assert sum(p["high_watermark"] for p in d["partitions"]) == 600
    got = _consume_all(cluster[1].bootstrap, "orders", 6, expect=600)
    assert sorted(v for vs in got.values() for _, v in vs) == sorted(v for _, _, v in acked)


def test_leader_killed_a_new_leader_serves_within_seconds_and_nothing_acknowledged_is_lost(cluster_factory) -> None:
    cluster = cluster_factory(3)
    cluster.admin("/admin/v1/topics", "POST", {"name": "t", "partitions": 1, "replication_factor": 3,
                                               "configs": {"min.insync.replicas": "2"}})
    before = _produce(cluster.bootstrap, "t", [f"a{i}".encode() for i in range(200)])
    old = cluster.topic("t")["partitions"][0]["leader"]
    cluster[old].kill()
    killed_at = time.monotonic()

    def new_leader():
        p = cluster.topic("t")["partitions"][0]
        return p["leader"] if p["leader"] not in (-1, old) else None

    leader = cluster.wait_for("a new leader", new_leader, timeout=15)
    after = _produce(cluster.bootstrap, "t", [f"b{i}".encode() for i in range(200)])
    took = time.monotonic() - killed_at
    assert took < 15, took
    got = _consume_all(cluster[leader].bootstrap, "t", 1, expect=400)
    values = [v for _, v in got[0]]
    assert values == [v for _, _, v in before + after]  # order kept, nothing lost, nothing twice
    part = cluster.topic("t")["partitions"][0]
    assert old not in part["isr"]


def test_controller_killed_another_takes_over_and_topics_still_change(cluster_factory) -> None:
    cluster = cluster_factory(3)
    first = cluster.controller()
    cluster[first].kill()
    cluster.wait_for("a new controller", lambda: (lambda c: c if c not in (first, -1) else None)(cluster.controller()),
                     timeout=10)
    # A new controller can take over before the dead broker's own lease has run out (both were renewed at about the
    # same time): until then it is a live broker, as Kafka places on a broker until its session times out.
    cluster.wait_for("the dead broker seen gone", lambda: first not in {
        b["id"] for b in cluster.admin("/admin/v1/brokers")["brokers"]}, timeout=10)
    created = cluster.admin("/admin/v1/topics", "POST", {"name": "after", "partitions": 2, "replication_factor": 2})
    assert all(first not in p["replicas"] for p in created["partitions"])


def test_paused_controller_is_fenced_when_it_wakes(cluster_factory) -> None:
    cluster = cluster_factory(3)
    first = cluster.controller()
    cluster.stop_process(cluster[first])
    try:
        new = cluster.wait_for("a new controller", lambda: (lambda c: c if c != first else None)(
            cluster.controller(via=next(b for b in cluster.running))), timeout=15)
        cluster.admin("/admin/v1/topics", "POST", {"name": "fenced", "partitions": 1, "replication_factor": 2})
    finally:
        cluster.continue_process(cluster[first])
    # The woken broker steps down and follows the new controller; it made no change of its own.
    cluster.wait_for("the old controller to follow the new one",
                     lambda: cluster.controller(via=cluster[first]) == new, timeout=15)
    log = cluster[first].log_text()
    assert "stops being the controller" in log or "stepping down" in log
    # It catches up with what the new controller decided while it slept.
    cluster.wait_for("the woken broker to know the new topic",
                     lambda: cluster.topic("fenced", via=cluster[first])["partitions"][0]["leader"] >= 0, timeout=15)


def test_a_deposed_leader_truncates_what_it_never_replicated(cluster_factory) -> None:
    cluster = cluster_factory(3, settings={"replica.lag.time.max.ms": 60000}, start=False)
    cluster[2].start()  # broker 2 starts alone and becomes the controller
    cluster.wait_for("broker 2 as controller", lambda: cluster.controller(via=cluster[2]) == 2)
    cluster[0].start()
    cluster[1].start()
    cluster.wait_for("three brokers", lambda: len(cluster.admin("/admin/v1/brokers")["brokers"]) == 3)
    cluster.admin("/admin/v1/topics", "POST", {"name": "div", "assignments": {"0": [0, 1]},
                                               "configs": {"min.insync.replicas": "1"}})
    cluster.wait_for("0 leading div with ISR [0,1]",
                     lambda: (lambda p: p["leader"] == 0 and sorted(p["isr"]) == [0, 1])(
        cluster.topic("div")["partitions"][0]))
    common = _produce(cluster[0].bootstrap, "div", [f"c{i}".encode() for i in range(50)])
    cluster.wait_fully_replicated("div")
    cluster.stop_process(cluster[1])  # the follower pauses: what 0 writes now stays on 0
    # Its last fetch may still be parked at the leader (up to replica.fetch.wait.max.ms = 200 ms); once
    # that is answered, nothing reaches the paused follower. A paused process gives no event to wait on.
    time.sleep(0.6)
    lonely = _produce(cluster[0].bootstrap, "div", [f"x{i}".encode() for i in range(30)], acks="1")
    assert len(lonely) == 30
    cluster.stop_process(cluster[0])  # the leader pauses too; its lease expires
    cluster.continue_process(cluster[1])
    cluster.wait_for("1 to lead div", lambda: cluster.topic("div", via=cluster[2])["partitions"][0]["leader"] == 1,
                     timeout=20)
    newer = _produce(cluster[1].bootstrap, "div", [f"y{i}".encode() for i in range(20)], acks="1")
    cluster.continue_process(cluster[0])  # the deposed leader wakes up with 30 records nobody else has

    def converged():
        p = cluster.topic("div", via=cluster[2])["partitions"][0]
        return sorted(p["isr"]) == [0, 1] and p["high_watermark"] == 70
    cluster.wait_for("0 back in sync", converged, timeout=30)
    got = _consume_all(cluster[1].bootstrap, "div", 1, expect=70)
    assert [v for _, v in got[0]] == [v for _, _, v in common + newer]
    cluster[0].terminate()
    cluster[1].terminate()
    a = b"".join(f.read_bytes() for f in sorted((cluster.root / "broker-0" / "div-0").glob("*.log")))
    b = b"".join(f.read_bytes() for f in sorted((cluster.root / "broker-1" / "div-0").glob("*.log")))
    assert a == b and len(a) > 0  # byte for byte the new leader's log


def test_reassignment_to_a_fourth_broker_while_producing_loses_and_reorders_nothing(cluster_factory) -> None:
    import threading

    cluster = cluster_factory(4)
    cluster.admin("/admin/v1/topics", "POST", {"name": "move", "assignments": {"0": [0, 1, 2]},
                                               "configs": {"min.insync.replicas": "2"}})
    acked: list[tuple[int, int, bytes]] = []
    stop = threading.Event()
    failures: list[str] = []

    def produce() -> None:
        try:
            i = 0
            while not stop.is_set() and i < 100_000:
                acked.extend(_produce(cluster.bootstrap, "move", [f"m{i + j}".encode() for j in range(200)], key=b"k"))
                i += 200
        except AssertionError as exc:
            failures.append(str(exc))

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    cluster.wait_for("some records", lambda: len(acked) >= 400)
    cluster.admin("/admin/v1/partitions/reassign", "POST",
                  {"partitions": [{"topic": "move", "partition": 0, "replicas": [3, 1, 2]}]})
    moving = cluster.admin("/admin/v1/partitions/reassignments")["reassignments"]
    done = cluster.wait_for(
        "the move to finish",
        lambda: (lambda p: p if sorted(p["replicas"]) == [1, 2, 3] and "adding" not in p else None)(
            cluster.topic("move")["partitions"][0]), timeout=40)
    cluster.wait_for("more records after the move", lambda: len(acked) >= 400 + 600, timeout=30)
    stop.set()
    t.join(60)
    assert not failures, failures
    assert done["leader"] == 3 and sorted(done["isr"]) == [1, 2, 3]
    assert moving == [] or moving[0]["adding"] == [3]
    assert not (cluster.root / "broker-0" / "move-0").exists() or not any(
        (cluster.root / "broker-0" / "move-0").glob("*.log"))  # the old replica is gone
    got = _consume_all(cluster[3].bootstrap, "move", 1, expect=len(acked))
    values = [v for _, v in got[0]]
    assert values == [v for _, _, v in sorted(acked, key=lambda a: a[1])]  # every acked record, in offset order
    assert [o for o, _ in got[0]] == sorted(o for _, o, _ in acked)


async def test_aiokafka_produces_and_consumes_across_a_leader_change(cluster_factory) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    cluster = cluster_factory(3)
    cluster.admin("/admin/v1/topics", "POST", {"name": "aio", "partitions": 1, "replication_factor": 3,
                                               "configs": {"min.insync.replicas": "2"}})
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True,
                                request_timeout_ms=30000, retry_backoff_ms=100, metadata_max_age_ms=1000)
    await producer.start()
    try:
        sent = [await producer.send_and_wait("aio", f"a{i}".encode(), partition=0) for i in range(100)]
        leader = cluster.topic("aio")["partitions"][0]["leader"]
        cluster[leader].kill()
        sent += [await asyncio.wait_for(producer.send_and_wait("aio", f"b{i}".encode(), partition=0), 60)
                 for i in range(100)]
    finally:
        await producer.stop()
    assert [m.offset for m in sent] == list(range(200))
    consumer = AIOKafkaConsumer(bootstrap_servers=",".join(b.bootstrap for b in cluster.running),
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition("aio", 0)])
        got: list[bytes] = []
        async with asyncio.timeout(30):
            while len(got) < 200:
                batch = await consumer.getmany(timeout_ms=500)
                got += [m.value for msgs in batch.values() for m in msgs]
    finally:
        await consumer.stop()
    assert got == [f"a{i}".encode() for i in range(100)] + [f"b{i}".encode() for i in range(100)]


def test_rest_proxy_produce_through_any_broker_reaches_each_partitions_leader(cluster_factory) -> None:
    cluster = cluster_factory(3)
    created = cluster.admin("/admin/v1/topics", "POST", {"name": "rest", "partitions": 3, "replication_factor": 2})
    assert len({p["leader"] for p in created["partitions"]}) == 3
    # Each leader learns the topic from the metadata log a moment after the controller committed it (as in KRaft):
    # a record forwarded to a leader that has not applied it yet is refused (cc13 at load 4: partition 2's).
    cluster.wait_for("every broker to know topic rest", lambda: all(
        len(cluster.topic("rest", via=b)["partitions"]) == 3 for b in cluster.brokers))
    from tests.support.cluster import http_json

    body = {"records": [{"value": {"n": i}, "partition": i % 3} for i in range(30)]}
    answer = http_json(f"{cluster[0].http_url}/topics/rest", "POST", body)
    assert all(o["error_code"] is None for o in answer["offsets"]), answer
    assert sorted(o["offset"] for o in answer["offsets"] if o["partition"] == 2) == list(range(10))
    d = cluster.topic("rest")
    assert [p["log_end_offset"] for p in d["partitions"]] == [10, 10, 10]


def test_groups_cli_finds_each_groups_coordinator(cluster_factory) -> None:
    import os
    import subprocess
    import sys

    from confluent_kafka import Consumer

    cluster = cluster_factory(3)
    cluster.admin("/admin/v1/topics", "POST", {"name": "g", "partitions": 2, "replication_factor": 3})
    _produce(cluster.bootstrap, "g", [b"x"] * 20)
    for name in ("alpha", "beta", "gamma", "delta"):
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": name, "auto.offset.reset": "earliest"})
        c.subscribe(["g"])
        got = 0
        deadline = time.monotonic() + 30
        while got < 20 and time.monotonic() < deadline:
            msg = c.poll(0.5)
            got += msg is not None and msg.error() is None
        c.commit(asynchronous=False)
        c.close()
    kelp = os.path.join(os.path.dirname(sys.executable), "kelp")
    env = dict(os.environ, KELP_HTTP=cluster[0].http_url)
    listed = subprocess.run([kelp, "groups", "list", "--json"], capture_output=True, text=True, env=env, timeout=60)
    import json

    listed_ids = sorted(g["group_id"] for g in json.loads(listed.stdout))
    assert listed_ids == ["alpha", "beta", "delta", "gamma"], listed.stderr
    for name in ("alpha", "beta", "gamma", "delta"):  # whichever broker coordinates it
        d = subprocess.run([kelp, "groups", "describe", name, "--json"], capture_output=True, text=True, env=env,
                           timeout=60)
        assert d.returncode == 0, d.stderr
        assert json.loads(d.stdout)["total_lag"] == 0
