"""The Kafka admin APIs Kafka's own tools need, on the wire, and their HTTP/CLI twins.

IncrementalAlterConfigs / AlterConfigs (through the one topic-config
validator the HTTP API uses; dynamic broker configs in
test_dynamic_broker_configs.py), DescribeConfigs synonyms, DeleteRecords,
DescribeLogDirs, ListOffsets v9 (-3/-4/-5), ListGroups v5, and a deleted
topic's committed offsets leaving every group durably. `tests/tools/` runs the
Java tools themselves against the same handlers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from kafka.protocol.admin import (
    AlterConfigsRequest,
    DeleteRecordsRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
)
from kafka.protocol.consumer import ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from kelp.errors import ErrorCode
from tests.broker.helpers import create_topic_wire, produce, raw_fetch
from tests.support.kafka_wire import WireClient, make_batch

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def http(broker, method: str, path: str, body: object = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(broker.http_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def incremental(w: WireClient, rtype: int, name: str, ops: list[tuple[str, int, str | None]], *,
                validate_only: bool = False) -> tuple[int, str | None]:
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    resp = w.request(IncrementalAlterConfigsRequest(resources=[R(resource_type=rtype, resource_name=name, configs=[
        C(name=n, config_operation=op, value=v) for n, op, v in ops])], validate_only=validate_only), 1)
    r = resp.responses[0]
    return r.error_code, r.error_message


def describe(w: WireClient, rtype: int, name: str, *, synonyms: bool = True) -> dict:
    R = DescribeConfigsRequest.DescribeConfigsResource
    resp = w.request(DescribeConfigsRequest(resources=[R(resource_type=rtype, resource_name=name,
                                                         configuration_keys=None)],
                                            include_synonyms=synonyms, include_documentation=False), 4)
    res = resp.results[0]
    assert res.error_code == 0, res
    return {c.name: c for c in res.configs}


def overrides(broker, topic: str) -> dict[str, str]:
    status, body = http(broker, "GET", f"/admin/v1/topics/{topic}/configs")
    assert status == 200, body
    return {k: v["value"] for k, v in body["configs"].items() if v["source"] == "topic"}


def list_offsets(w: WireClient, topic: str, timestamp: int, *, partition: int = 0, version: int = 9):
    T = ListOffsetsRequest.ListOffsetsTopic
    resp = w.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[T(name=topic, partitions=[
        T.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)])]), version)
    return resp.topics[0].partitions[0]


def delete_records(w: WireClient, topic: str, offsets: dict[int, int]):
    T = DeleteRecordsRequest.DeleteRecordsTopic
    resp = w.request(DeleteRecordsRequest(topics=[T(name=topic, partitions=[
        T.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets.items()])], timeout_ms=5000), 2)
    return {p.partition_index: (p.error_code, p.low_watermark) for p in resp.topics[0].partitions}


def fill(w: WireClient, topic: str, n: int, *, partition: int = 0, ts: int | None = None) -> None:
    for i in range(n):
        err, _ = produce(w, topic, make_batch([(b"k%d" % i, b"v%d" % i)], timestamp_ms=None if ts is None else ts + i),
                         partition=partition)
        assert err == 0


def test_incremental_alter_configs_sets_deletes_appends_and_refuses_bad_values(broker) -> None:
    assert create_topic_wire(broker.bootstrap, "cfg") == 0
    with WireClient(broker.bootstrap) as w:
        assert incremental(w, TOPIC, "cfg", [("retention.ms", SET, "60000"),
                                             ("max.message.bytes", SET, "2000")]) == (0, None)
        assert overrides(broker, "cfg") == {"retention.ms": "60000", "max.message.bytes": "2000"}  # the HTTP API's view

        assert incremental(w, TOPIC, "cfg", [("cleanup.policy", APPEND, "compact")])[0] == 0
        assert overrides(broker, "cfg")["cleanup.policy"] == "compact,delete"  # normalised by the validator
        assert incremental(w, TOPIC, "cfg", [("cleanup.policy", SUBTRACT, "delete")])[0] == 0
        assert overrides(broker, "cfg")["cleanup.policy"] == "compact"

        # The one validator: a bad value, an unknown key, APPEND on a non-list: INVALID_CONFIG naming it,
        # nothing changed.
        for ops, named in (([("retention.ms", SET, "banana"), ("segment.ms", SET, "1000")], "retention.ms"),
                           ([("retention.msx", SET, "1")], "retention.msx"),
                           ([("retention.ms", DELETE, None), ("no.such.config", DELETE, None)], "no.such.config"),
                           ([("retention.ms", APPEND, "5")], "retention.ms")):
            code, message = incremental(w, TOPIC, "cfg", ops)
            assert code == 40 and named in message, (ops, code, message)
        assert overrides(broker, "cfg") == {"retention.ms": "60000", "max.message.bytes": "2000",
                                            "cleanup.policy": "compact"}
        # The HTTP door refuses the same things with the same validator.
        status, body = http(broker, "PATCH", "/admin/v1/topics/cfg/configs", {"configs": {"retention.ms": "banana"}})
        assert status == 400 and body["error_code"] == 40 and "retention.ms" in body["message"], body
        status, body = http(broker, "PATCH", "/admin/v1/topics/cfg/configs", {"delete": ["no.such.config"]})
        assert status == 400 and "no.such.config" in body["message"], body

        assert incremental(w, TOPIC, "cfg", [("segment.ms", SET, "1000")], validate_only=True)[0] == 0
        assert "segment.ms" not in overrides(broker, "cfg")
        assert incremental(w, TOPIC, "cfg", [("retention.ms", DELETE, None), ("cleanup.policy", DELETE, None)])[0] == 0
        assert overrides(broker, "cfg") == {"max.message.bytes": "2000"}
        code, message = incremental(w, TOPIC, "nope", [("retention.ms", SET, "1")])
        assert code == 3 and "nope" in message  # UNKNOWN_TOPIC_OR_PARTITION

        # A read-only broker config (read at start): refused per resource with a message saying how to change it.
        # (The dynamic ones: tests/broker/test_dynamic_broker_configs.py.)
        code, message = incremental(w, BROKER, "0", [("num.partitions", SET, "3")])
        assert code == 40 and "num.partitions" in message and "restart" in message
        assert incremental(w, BROKER, "0", [])[0] == 0
        assert incremental(w, BROKER, "7", [("log.retention.hours", SET, "1")])[0] == 42  # another broker's

        # The legacy AlterConfigs replaces every override.
        R = AlterConfigsRequest.AlterConfigsResource
        resp = w.request(AlterConfigsRequest(resources=[R(resource_type=TOPIC, resource_name="cfg", configs=[
            R.AlterableConfig(name="retention.bytes", value="1048576")])], validate_only=False), 2)
        assert resp.responses[0].error_code == 0
        assert overrides(broker, "cfg") == {"retention.bytes": "1048576"}


def test_describe_configs_lists_synonyms_and_sources_as_kafka_does(broker_factory) -> None:
    broker = broker_factory(settings={"log.retention.ms": 3600000})
    assert create_topic_wire(broker.bootstrap, "syn", configs={"segment.bytes": 1048576}) == 0
    with WireClient(broker.bootstrap) as w:
        cfg = describe(w, TOPIC, "syn")
        seg = cfg["segment.bytes"]
        assert (seg.value, seg.config_source, seg.read_only) == ("1048576", 1, False)  # TOPIC_CONFIG
        assert [(s.name, s.value, s.source) for s in seg.synonyms] == [
            ("segment.bytes", "1048576", 1), ("log.segment.bytes", "1073741824", 5)]
        ret = cfg["retention.ms"]  # no override: its source is the broker's static setting
        assert (ret.value, ret.config_source) == ("3600000", 4)
        assert [(s.name, s.value, s.source) for s in ret.synonyms] == [
            ("log.retention.ms", "3600000", 4), ("log.retention.hours", "168", 5)]
        assert (cfg["cleanup.policy"].config_source == 5
                and cfg["cleanup.policy"].synonyms[0].name == "log.cleanup.policy")
        assert describe(w, TOPIC, "syn", synonyms=False)["segment.bytes"].synonyms == []
        b = describe(w, BROKER, "0")
        assert not b["log.retention.ms"].read_only and b["log.retention.ms"].config_source == 4  # dynamic, set at start
        assert b["num.partitions"].read_only and b["num.partitions"].config_source == 5


def test_delete_records_moves_the_log_start_durably_and_refuses_past_the_high_watermark(broker_factory) -> None:
    broker = broker_factory()
    assert create_topic_wire(broker.bootstrap, "dr", partitions=2) == 0
    assert create_topic_wire(broker.bootstrap, "dr-compact", configs={"cleanup.policy": "compact"}) == 0
    with WireClient(broker.bootstrap) as w:
        fill(w, "dr", 10)
        fill(w, "dr", 3, partition=1)
        produce(w, "dr-compact", make_batch([(b"k", b"v")]))
        assert delete_records(w, "dr", {0: 4, 1: -1}) == {0: (0, 4), 1: (0, 3)}  # -1: up to the high watermark
        assert delete_records(w, "dr", {0: 2}) == {0: (0, 4)}  # below the log start: nothing to do
        assert delete_records(w, "dr", {0: 11})[0][0] == ErrorCode.OFFSET_OUT_OF_RANGE  # beyond the high watermark
        assert delete_records(w, "dr", {5: 1})[5][0] == 3
        assert delete_records(w, "dr-compact", {0: 1})[0][0] == ErrorCode.POLICY_VIOLATION  # as Kafka
        assert list_offsets(w, "dr", -2).offset == 4
        assert raw_fetch(broker.bootstrap, "dr", 0, 0).responses[0].partitions[0].error_code == 1
    broker.restart()
    with WireClient(broker.bootstrap) as w:
        assert list_offsets(w, "dr", -2).offset == 4
        assert list_offsets(w, "dr", -2, partition=1).offset == 3
        assert list_offsets(w, "dr", -1).offset == 10


def test_delete_records_over_http_and_the_cli(broker, tmp_path) -> None:
    assert create_topic_wire(broker.bootstrap, "hdr", partitions=2) == 0
    with WireClient(broker.bootstrap) as w:
        fill(w, "hdr", 6)
        fill(w, "hdr", 6, partition=1)
    status, body = http(broker, "POST", "/admin/v1/topics/hdr/delete-records",
                        {"partitions": [{"partition": 0, "offset": 2}]})
    assert status == 200 and body["partitions"] == [{"partition": 0, "low_watermark": 2}], body
    status, body = http(broker, "POST", "/admin/v1/topics/hdr/delete-records",
                        {"partitions": [{"partition": 0, "offset": 99}]})
    assert status == 416 and body["error_code"] == 1 and "high watermark 6" in body["message"], body
    status, body = http(broker, "POST", "/admin/v1/topics/hdr/delete-records",
                        {"partitions": [{"partition": 9, "offset": 1}]})
    assert status == 404 and "partition 9" in body["message"], body
    status, body = http(broker, "POST", "/admin/v1/topics/hdr/delete-records", {"partitions": [{"partition": "0"}]})
    assert status == 400, body

    env = {**os.environ, "PYTHONSAFEPATH": "1", "KELP_HTTP": broker.http_url}
    cli = [sys.executable, "-m", "kelp.cli.main", "topics", "delete-records", "hdr"]
    done = subprocess.run(cli + ["--partition", "1", "--before-offset", "5", "--json"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["partitions"] == [{"partition": 1, "low_watermark": 5}]
    spec = tmp_path / "offsets.json"  # kafka-delete-records' file works here too
    spec.write_text(json.dumps({"partitions": [{"topic": "hdr", "partition": 0, "offset": 4}], "version": 1}))
    done = subprocess.run(cli + ["--offset-json-file", str(spec), "--json"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout)["partitions"] == [{"partition": 0, "low_watermark": 4}]
    done = subprocess.run(cli + ["--all-partitions", "--before-offset", "-1"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "LOW-WATERMARK" in done.stdout, done.stderr
    done = subprocess.run(cli + ["--partition", "0", "--before-offset", "50"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "high watermark 6" in done.stderr, done.stderr
    with WireClient(broker.bootstrap) as w:
        assert [list_offsets(w, "hdr", -2, partition=p).offset for p in (0, 1)] == [6, 6]


def test_list_offsets_v9_max_timestamp_earliest_local_and_latest_tiered(broker) -> None:
    assert create_topic_wire(broker.bootstrap, "lo") == 0
    with WireClient(broker.bootstrap) as w:
        assert list_offsets(w, "lo", -3).offset == -1  # empty: no max timestamp
        base = 1_700_000_000_000
        for ts in (base + 5, base + 90, base + 20):
            produce(w, "lo", make_batch([(None, b"x")], timestamp_ms=ts))
        delete_records(w, "lo", {0: 1})
        top = list_offsets(w, "lo", -3)
        assert (top.error_code, top.offset, top.timestamp) == (0, 1, base + 90)
        local = list_offsets(w, "lo", -4)
        assert (local.error_code, local.offset) == (0, 1)  # no tiering: the log start
        tiered = list_offsets(w, "lo", -5)
        assert (tiered.error_code, tiered.offset, tiered.leader_epoch) == (0, -1, -1)  # as Kafka without remote storage
        assert list_offsets(w, "lo", -3, version=7).offset == 1


def test_describe_log_dirs_lists_each_partition_with_its_size(broker) -> None:
    assert create_topic_wire(broker.bootstrap, "ld", partitions=2) == 0
    with WireClient(broker.bootstrap) as w:
        fill(w, "ld", 5)
        for version in (1, 4):
            resp = w.request(DescribeLogDirsRequest(topics=None), version)
            [result] = resp.results
            assert result.error_code == 0 and os.path.samefile(result.log_dir, broker.log_dir)
            parts = {(t.name, p.partition_index): p for t in result.topics for p in t.partitions}
            assert parts[("ld", 0)].partition_size > 0 and parts[("ld", 1)].partition_size == 0
            assert parts[("ld", 0)].offset_lag == 0
        T = DescribeLogDirsRequest.DescribableLogDirTopic
        resp = w.request(DescribeLogDirsRequest(topics=[T(topic="ld", partitions=[1])]), 4)
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.results[0].topics] == [("ld", [1])]
        assert resp.results[0].total_bytes > 0


def _commit(w: WireClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    by_topic: dict[str, list] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(P(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                            committed_metadata=""))
    resp = w.request(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                         group_instance_id=None,
                                         topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()]), 7)
    assert all(p.error_code == 0 for t in resp.topics for p in t.partitions), resp


def _committed(w: WireClient, group: str) -> dict[tuple[str, int], int]:
    resp = w.request(OffsetFetchRequest(group_id=group, topics=None, require_stable=False), 7)
    assert resp.error_code == 0, resp
    return {(t.name, p.partition_index): p.committed_offset for t in resp.topics for p in t.partitions}


def _find_coordinator(w: WireClient, group: str) -> None:
    deadline = time.monotonic() + 30
    while w.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4).coordinators[0].error_code:
        assert time.monotonic() < deadline, "no coordinator"
        time.sleep(0.1)


@pytest.mark.timeout(120)
def test_deleting_a_topic_drops_its_offsets_from_every_group_across_a_restart(broker) -> None:
    for name in ("gone", "kept"):
        assert create_topic_wire(broker.bootstrap, name, partitions=2) == 0
    with WireClient(broker.bootstrap) as w:
        _find_coordinator(w, "g-a")
        _commit(w, "g-a", {("gone", 0): 3, ("gone", 1): 4, ("kept", 0): 5})
        _commit(w, "g-b", {("gone", 1): 7})
        _commit(w, "g-c", {("kept", 1): 1})
    # The HTTP door; Kafka's DeleteTopics takes the same path.
    status, _ = http(broker, "DELETE", "/admin/v1/topics/gone")
    assert status == 200
    with WireClient(broker.bootstrap) as w:
        deadline = time.monotonic() + 15
        while _committed(w, "g-a") != {("kept", 0): 5}:
            assert time.monotonic() < deadline, _committed(w, "g-a")
            time.sleep(0.05)
        assert _committed(w, "g-b") == {}
        assert _committed(w, "g-c") == {("kept", 1): 1}
        listed = {g.group_id for g in w.request(ListGroupsRequest(states_filter=[], types_filter=[]), 5).groups}
        assert listed == {"g-a", "g-c"}  # g-b was Empty with only the deleted topic's offsets: gone, as in Kafka
    broker.restart()
    with WireClient(broker.bootstrap) as w:
        _find_coordinator(w, "g-a")
        deadline = time.monotonic() + 30
        while True:  # the coordinator answers COORDINATOR_LOAD_IN_PROGRESS until __consumer_offsets is replayed
            resp = w.request(OffsetFetchRequest(group_id="g-a", topics=None, require_stable=False), 7)
            if resp.error_code == 0:
                break
            assert time.monotonic() < deadline, resp
            time.sleep(0.1)
        assert _committed(w, "g-a") == {("kept", 0): 5}
        assert _committed(w, "g-b") == {}
    assert create_topic_wire(broker.bootstrap, "gone", partitions=2) == 0  # re-created: starts with no positions
    with WireClient(broker.bootstrap) as w:
        assert ("gone", 1) not in _committed(w, "g-a")


def test_list_groups_v5_says_classic_and_filters_by_type(broker) -> None:
    assert create_topic_wire(broker.bootstrap, "lg") == 0
    with WireClient(broker.bootstrap) as w:
        _find_coordinator(w, "typed")
        _commit(w, "typed", {("lg", 0): 1})
        resp = w.request(ListGroupsRequest(states_filter=[], types_filter=[]), 5)
        assert [(g.group_id, g.group_type, g.group_state) for g in resp.groups] == [("typed", "classic", "Empty")]
        classic = w.request(ListGroupsRequest(states_filter=[], types_filter=["Classic"]), 5).groups
        assert [g.group_id for g in classic] == ["typed"]
        assert w.request(ListGroupsRequest(states_filter=[], types_filter=["consumer"]), 5).groups == []
