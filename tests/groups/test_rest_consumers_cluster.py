"""REST v2 consumers on a 3-broker cluster, through ONE HTTP address: ordinary group members.

Twelve groups, coordinated by all three brokers, each read exactly their own
records through broker 0's HTTP listener (and REST v3 there describes each
group through its coordinator, with zero lag after the commits); an instance keeps reading across a
SIGKILL of its group's coordinator (another broker than the one holding the
instance) and its commits survive the failover; a request for an instance
another broker holds is forwarded there (a generated id names its holder, a
name the client chose is looked up, and is refused on a second broker), and
once that broker is dead it is answered 404 with Confluent's 40403 saying so;
REST v3 there shows another broker's own configs.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from kelp.broker.groups.placement import partition_for_group
from tests.http.test_rest_v3 import check
from tests.support.cluster import Cluster

V2 = "application/vnd.kafka.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
OFFSETS_PARTITIONS = 6
SETTINGS = {
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    "offsets.topic.replication.factor": 3,
    "group.initial.rebalance.delay.ms": 200,
    "group.min.session.timeout.ms": 500,
}
GROUPS = 12


def call(method: str, url: str, body: Any = None, *, ctype: str = V2, timeout: float = 30) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


def until(what: str, predicate: Any, *, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def produce(base: str, topic: str, values: list[str]) -> None:
    records = [{"value": base64.b64encode(v.encode()).decode(), "partition": i % 2} for i, v in enumerate(values)]
    status, body = call("POST", f"{base}/topics/{topic}", {"records": records}, ctype=BINARY_V2)
    assert status == 200 and all("error" not in o or o["error"] is None for o in body["offsets"]), body


class Instance:
    def __init__(self, base: str, group: str, topic: str, **config: Any) -> None:
        status, body = call("POST", f"{base}/consumers/{group}", {"format": "binary", "auto.offset.reset": "earliest",
                                                                  "auto.commit.enable": "false", **config})
        assert status == 200, body
        self.id, self.uri, self.group = body["instance_id"], body["base_uri"], group
        status, body = call("POST", f"{self.uri}/subscription", {"topics": [topic]})
        assert status == 204, body
        self.seen: list[str] = []

    def poll(self) -> list[dict[str, Any]]:
        status, recs = call("GET", f"{self.uri}/records?timeout=200")
        assert status == 200, (self.group, recs)
        self.seen += [base64.b64decode(r["value"]).decode() for r in recs]
        return recs

    def commit(self) -> None:
        status, body = call("POST", f"{self.uri}/offsets")  # no body: everything read so far
        assert status == 200, body

    def committed(self, topic: str) -> dict[int, int]:
        status, body = call("GET", f"{self.uri}/offsets", {"partitions": [{"topic": topic, "partition": p}
                                                                        for p in (0, 1)]})
        assert status == 200, body
        return {o["partition"]: o["offset"] for o in body["offsets"]}


def coordinator_of(cluster: Cluster, group: str) -> int:
    d = cluster.topic("__consumer_offsets", via=cluster[0])
    return int(d["partitions"][partition_for_group(group, OFFSETS_PARTITIONS)]["leader"])


@pytest.mark.timeout(240)
def test_rest_consumers_of_twelve_groups_through_one_address_and_a_coordinator_failover(cluster_factory) -> None:
    cluster = cluster_factory(3, settings=SETTINGS)
    base = cluster.http_base(cluster[0])  # the ONE address every request below uses
    for i in range(GROUPS):
        status, body = call("POST", f"{base}/admin/v1/topics", {"name": f"t{i}", "partitions": 2,
                                                                 "replication_factor": 3}, ctype="application/json")
        assert status == 201, body
        cluster.wait_fully_replicated(f"t{i}")
        produce(base, f"t{i}", [f"t{i}-r{j}" for j in range(10)])

    instances = [Instance(base, f"g{i}", f"t{i}") for i in range(GROUPS)]
    assert all(inst.uri.startswith(base + "/consumers/") for inst in instances)

    def all_read() -> bool:
        for inst in instances:
            if len(inst.seen) < 10:
                inst.poll()
        return all(len(inst.seen) >= 10 for inst in instances)

    until("every group to read its ten records", all_read, timeout=90)
    for i, inst in enumerate(instances):
        assert sorted(inst.seen) == sorted(f"t{i}-r{j}" for j in range(10)), (inst.group, inst.seen)
        inst.commit()
        assert sum(inst.committed(f"t{i}").values()) == 10
    coordinators = {coordinator_of(cluster, f"g{i}") for i in range(GROUPS)}
    assert len(coordinators) >= 2, f"the groups should be coordinated by several brokers, got {coordinators}"
    # REST v3 through the same address sees every group, each described by its own coordinator.
    cid = call("GET", f"{base}/v3/clusters")[1]["data"][0]["cluster_id"]
    v3 = f"{base}/v3/clusters/{cid}/consumer-groups"
    status, listed = call("GET", v3, ctype="application/json")
    assert status == 200 and {f"g{i}" for i in range(GROUPS)} <= {g["consumer_group_id"] for g in listed["data"]}
    for i in range(GROUPS):
        status, group = call("GET", f"{v3}/g{i}", ctype="application/json")
        assert status == 200 and group["state"] == "STABLE", group
        assert group["coordinator"]["related"].endswith(f"/brokers/{coordinator_of(cluster, f'g{i}')}")
        status, summary = call("GET", f"{v3}/g{i}/lag-summary", ctype="application/json")
        assert status == 200 and summary["total_lag"] == 0, summary

    # A group another broker coordinates: that broker dies; the instance (held by broker 0) keeps reading.
    victim_group = next(i for i in range(GROUPS) if coordinator_of(cluster, f"g{i}") != 0)
    victim = coordinator_of(cluster, f"g{victim_group}")
    inst = instances[victim_group]
    # An instance held by the victim itself, reached through broker 0 (forwarded), until the victim dies.
    held = Instance(cluster.http_base(cluster[victim]), "elsewhere", f"t{victim_group}")
    assert held.uri.startswith(cluster.http_base(cluster[victim]))
    status, body = call("GET", f"{base}/consumers/elsewhere/instances/{held.id}/subscription")
    assert status == 200 and body == {"topics": [f"t{victim_group}"]}, body
    # A name the client chose: found on the victim and forwarded too; the name is the cluster's.
    chosen = Instance(cluster.http_base(cluster[victim]), "elsewhere", f"t{victim_group}", name="chosen")
    assert chosen.id == "chosen"
    status, body = call("GET", f"{base}/consumers/elsewhere/instances/chosen/subscription")
    assert status == 200 and body == {"topics": [f"t{victim_group}"]}, body
    status, body = call("POST", f"{base}/consumers/elsewhere", {"name": "chosen"})
    assert status == 409 and body["error_code"] == 40902 and f"on broker {victim}" in body["message"], body
    # REST v3 through the same address shows another broker's own configs (static ones read from it).
    status, configs = call("GET", f"{base}/v3/clusters/{cid}/brokers/{victim}/configs", ctype="application/json")
    check("GET", f"/v3/clusters/{cid}/brokers/{victim}/configs", status, configs)
    assert {d["name"]: d["value"] for d in configs["data"]}["broker.id"] == str(victim)

    cluster[victim].kill()
    cluster.wait_for(f"a new coordinator for g{victim_group}",
                     lambda: coordinator_of(cluster, f"g{victim_group}") not in (victim, -1), timeout=30)
    produce(base, f"t{victim_group}", [f"t{victim_group}-after{j}" for j in range(10)])

    def after_read() -> bool:
        inst.poll()
        return len(inst.seen) >= 20

    until("the instance to read the records produced after the failover", after_read, timeout=60)
    assert sorted(inst.seen) == sorted([f"t{victim_group}-r{j}" for j in range(10)]
                                       + [f"t{victim_group}-after{j}" for j in range(10)])
    inst.commit()

    status, body = call("GET", f"{base}/consumers/elsewhere/instances/{held.id}/subscription")
    assert status == 404 and body["error_code"] == 40403, body
    assert f"broker {victim}" in body["message"] and "died" in body["message"], body
    status, body = call("GET", f"{base}/consumers/elsewhere/instances/chosen/subscription")
    assert status == 404 and body["error_code"] == 40403, body

    # The commits survive: a new instance of the group sees them and reads nothing again.
    assert call("DELETE", inst.uri)[0] == 204
    again = Instance(base, f"g{victim_group}", f"t{victim_group}")
    assert sum(again.committed(f"t{victim_group}").values()) == 20
    until("the new instance to be assigned", lambda: call("GET", f"{again.uri}/assignments")[1]["partitions"],
          timeout=30)
    for _ in range(5):
        again.poll()
    assert again.seen == []
    # Another group's instance still reads after the failover.
    other = instances[(victim_group + 1) % GROUPS]
    produce(base, f"t{(victim_group + 1) % GROUPS}", ["late"])
    until("another group's instance to read a late record", lambda: other.poll() and "late" in other.seen, timeout=30)
