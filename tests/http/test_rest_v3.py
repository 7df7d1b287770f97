"""Confluent REST v3 on a broker process: every route Kelp serves, its answers validated against the
schemas of Confluent's published OpenAPI document (vendored in tests/http/confluent_v3, see its NOTICE).

OpenAPI 3.0's `nullable` is turned into JSON Schema's `null` type (and the one `type: int64` into
`integer`); every response of a route that the document describes with a JSON body is validated against
that body's schema (success and error answers alike), and the test fails if a v3 route of Kelp's is not
exercised or not in the document.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from kelp.broker.http.rest_v3 import acls as v3_acls
from kelp.broker.http.rest_v3 import cluster as v3_cluster
from kelp.broker.http.rest_v3 import configs as v3_configs
from kelp.broker.http.rest_v3 import groups as v3_groups
from kelp.broker.http.rest_v3 import records as v3_records
from kelp.broker.http.rest_v3 import replicas as v3_replicas
from kelp.config.keys import KELP_AUTHORIZER
from tests.support.broker_process import BrokerProcess

SPEC_FILE = Path(__file__).parent / "confluent_v3" / "openapi.yaml"
URN = "urn:confluent-kafka-rest-v3"
V2 = "application/vnd.kafka.v2+json"


def _nullable(node: Any) -> Any:
    if isinstance(node, list):
        return [_nullable(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items() if k != "nullable"}
    if out.get("type") == "int64":  # PartitionWithOffsetsData's offsets say `type: int64`, a format, not a type
        out["type"] = "integer"
    if node.get("nullable") is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        else:
            return {"anyOf": [out, {"type": "null"}]}
    return out


SPEC = yaml.safe_load(SPEC_FILE.read_text())
REGISTRY = Registry().with_resource(URN, Resource(contents=_nullable(copy.deepcopy(SPEC)), specification=DRAFT7))


def _template(path: str) -> str:
    """The document's path for a concrete `/v3/...` path: the one that matches with the most literal text."""
    rel = path.split("?")[0][len("/v3"):]
    best = None
    for template in SPEC["paths"]:
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, rel):
            literal = len(re.sub(r"\{[^}]+\}", "", template))
            if best is None or literal > best[0]:
                best = (literal, template)
    assert best is not None, f"{path} is not a path of Confluent's v3 document"
    return best[1]


def _resolve(ref: str) -> Any:
    node: Any = SPEC
    for part in ref.lstrip("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


validated: set[tuple[str, str]] = set()  # (method, document path) of every answer checked


def check(method: str, path: str, status: int, body: Any) -> None:
    template = _template(path)
    operation = SPEC["paths"][template][method.lower()]
    responses = operation["responses"]
    answer = responses.get(str(status)) or responses.get(f"{str(status)[0]}XX")
    if answer is None and status >= 400:  # an error the operation does not list: Confluent's error body
        answer = {"content": {"application/json": {"schema": {"$ref": f"{URN}#/components/schemas/Error"}}}}
    assert answer is not None, f"{method} {template} answered {status}, which the document does not list"
    ref = answer.get("$ref")
    answer = _resolve(ref) if ref else answer
    content = (answer.get("content") or {}).get("application/json")
    if content is None:
        assert body in (None, b"", ""), f"{method} {template} {status}: the document gives no body, got {body!r}"
    else:
        where = (ref + "/content/application~1json/schema") if ref else None
        schema = {"$ref": f"{URN}{where}"} if where else content["schema"]
        jsonschema.Draft7Validator(schema, registry=REGISTRY).validate(body)
    validated.add((method, template))


def call(base: str, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
         ctype: str = "application/json", expect: int | None = None, validate: bool = True) -> Any:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, text = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read()
    parsed = None
    if text:
        docs = [json.loads(line) for line in text.decode().splitlines() if line.strip()]
        parsed = docs[0] if len(docs) == 1 else docs
    if expect is not None:
        assert status == expect, (method, path, status, parsed)
    if validate and path.startswith("/v3/"):
        for doc in (parsed if isinstance(parsed, list) and path.endswith("/records") else [parsed]):
            check(method, path, status, doc)
    return parsed


@pytest.mark.timeout(120)
def test_every_v3_route_answers_in_confluents_shapes(kelp) -> None:
    base = kelp.http_url
    clusters = call(base, "GET", "/v3/clusters", expect=200)
    cid = clusters["data"][0]["cluster_id"]
    c = f"/v3/clusters/{cid}"
    assert clusters["data"][0]["metadata"]["self"] == f"{base}{c}"
    call(base, "GET", c, expect=200)
    brokers = call(base, "GET", f"{c}/brokers", expect=200)["data"]
    call(base, "GET", f"{c}/brokers/{brokers[0]['broker_id']}", expect=200)
    call(base, "GET", f"{c}/brokers/99", expect=404)
    assert call(base, "GET", "/v3/clusters/not-this-one/topics", expect=404)["error_code"] == 404

    # topics
    created = call(base, "POST", f"{c}/topics", {"topic_name": "v3t", "partitions_count": 2, "replication_factor": 1,
                                                 "configs": [{"name": "retention.ms", "value": "100000"}]},
                   expect=201)
    assert created["partitions_count"] == 2 and created["kind"] == "KafkaTopic"
    bad = call(base, "POST", f"{c}/topics", {"partitions_count": 2}, expect=400)
    assert "topic_name" in bad["message"]
    again = call(base, "POST", f"{c}/topics", {"topic_name": "v3t", "partitions_count": 2}, expect=400)
    assert again["error_code"] == 40002 and "v3t" in again["message"]  # Confluent: TopicExists is a bad request
    assert "v3t" in [t["topic_name"] for t in call(base, "GET", f"{c}/topics", expect=200)["data"]]
    call(base, "GET", f"{c}/topics/v3t", expect=200)
    missing = call(base, "GET", f"{c}/topics/nope", expect=404)
    assert "nope" in missing["message"]

    # configs
    configs = {d["name"]: d for d in call(base, "GET", f"{c}/topics/v3t/configs", expect=200)["data"]}
    assert configs["retention.ms"]["value"] == "100000" and not configs["retention.ms"]["is_default"]
    call(base, "PUT", f"{c}/topics/v3t/configs/retention.ms", {"value": "200000"}, expect=204)
    one = call(base, "GET", f"{c}/topics/v3t/configs/retention.ms", expect=200)
    assert one["value"] == "200000" and one["source"] == "DYNAMIC_TOPIC_CONFIG"
    call(base, "DELETE", f"{c}/topics/v3t/configs/retention.ms", expect=204)
    assert call(base, "GET", f"{c}/topics/v3t/configs/retention.ms", expect=200)["is_default"] is True
    call(base, "GET", f"{c}/topics/v3t/configs/no.such.config", expect=404)
    call(base, "POST", f"{c}/topics/v3t/configs:alter",
         {"data": [{"name": "cleanup.policy", "value": "delete"}, {"name": "retention.ms", "operation": "DELETE"}]},
         expect=204)
    bad = call(base, "POST", f"{c}/topics/v3t/configs:alter", {"data": [{"name": 5}]}, expect=400)
    assert "data[0]" in bad["message"]

    # partitions
    parts = call(base, "GET", f"{c}/topics/v3t/partitions", expect=200)["data"]
    assert [p["partition_id"] for p in parts] == [0, 1]
    call(base, "GET", f"{c}/topics/v3t/partitions/1", expect=200)
    call(base, "GET", f"{c}/topics/v3t/partitions/7", expect=404)
    shrink = call(base, "PATCH", f"{c}/topics/v3t", {"partitions_count": 1}, expect=400)
    assert "shrink" in shrink["message"] and shrink["error_code"] == 40002  # Confluent's KAFKA_BAD_REQUEST
    assert "partitions_count" in call(base, "PATCH", f"{c}/topics/v3t", {}, expect=400)["message"]

    # records: one object, then a stream of three with a bad one in the middle
    report = call(base, "POST", f"{c}/topics/v3t/records",
                  {"partition_id": 0, "key": {"type": "STRING", "data": "k"},
                   "value": {"type": "JSON", "data": {"a": 1}}}, expect=200)
    assert report["error_code"] == 200 and report["partition_id"] == 0 and report["offset"] == 0
    stream = b"".join(json.dumps(d).encode() + b"\n" for d in [
        {"value": {"type": "BINARY", "data": base64.b64encode(b"raw").decode()}, "partition_id": 1},
        {"value": {"type": "AVRO", "data": {}}},
        {"value": {"type": "STRING", "data": "s"}, "partition_id": 0, "headers": [{"name": "h", "value": "aGk="}],
         "timestamp": "2026-01-01T00:00:00Z"}])
    reports = call(base, "POST", f"{c}/topics/v3t/records", raw=stream, expect=200)
    assert [r["error_code"] for r in reports] == [200, 404, 200], reports  # no schema under v3t-value
    assert "'v3t-value' not found" in reports[1]["message"] and reports[2]["offset"] == 1
    assert reports[2]["timestamp"].startswith("2026-01-01T00:00:00")
    broken = call(base, "POST", f"{c}/topics/v3t/records", raw=b'{"value": {"type": "JSON", "data": ', expect=400)
    assert "record 0 is not valid JSON" in broken["message"]
    # issue 37, item 6: an unknown field was produced as a record with a null key and value; Confluent refuses it
    wrapped = call(base, "POST", f"{c}/topics/v3t/records",
                   {"records": [{"value": {"type": "STRING", "data": "lost"}}]}, expect=200)
    assert wrapped["error_code"] == 400 and "Unrecognized field 'records'" in wrapped["message"], wrapped
    misspelled = call(base, "POST", f"{c}/topics/v3t/records", {"value": {"type": "STRING", "dta": "x"}}, expect=200)
    assert misspelled["error_code"] == 400 and "Unrecognized field 'dta'" in misspelled["message"], misspelled
    # nothing was written for the refused ones: the group below reads exactly the three records produced above

    # a consumer group (a REST v2 consumer reads and commits), described by v3
    inst = call(base, "POST", "/consumers/v3g", {"format": "binary", "auto.offset.reset": "earliest"}, ctype=V2,
                expect=200)
    uri = inst["base_uri"]
    call(uri, "POST", "/subscription", {"topics": ["v3t"]}, ctype=V2, expect=204)
    seen: list[Any] = []
    deadline = time.monotonic() + 30
    while len(seen) < 3 and time.monotonic() < deadline:
        seen += call(uri, "GET", "/records?timeout=500", ctype=V2, expect=200)
    assert len(seen) == 3
    call(uri, "POST", "/offsets", {"offsets": [{"topic": "v3t", "partition": 0, "offset": 1}]}, ctype=V2,
         expect=200)
    groups = call(base, "GET", f"{c}/consumer-groups", expect=200)["data"]
    assert "v3g" in [g["consumer_group_id"] for g in groups]
    group = call(base, "GET", f"{c}/consumer-groups/v3g", expect=200)
    assert group["state"] == "STABLE" and group["partition_assignor"] == "range"
    consumers = call(base, "GET", f"{c}/consumer-groups/v3g/consumers", expect=200)["data"]
    assert len(consumers) == 1 and consumers[0]["client_id"].startswith("rest-proxy-")
    lags = call(base, "GET", f"{c}/consumer-groups/v3g/lags", expect=200)["data"]
    assert [(lag["partition_id"], lag["current_offset"], lag["log_end_offset"], lag["lag"]) for lag in lags] == [
        (0, 1, 2, 1)]
    summary = call(base, "GET", f"{c}/consumer-groups/v3g/lag-summary", expect=200)
    assert summary["total_lag"] == 1 and summary["max_lag_topic_name"] == "v3t"
    one_lag = call(base, "GET", f"{c}/consumer-groups/v3g/lags/v3t/partitions/0", expect=200)
    assert (one_lag["current_offset"], one_lag["lag"]) == (1, 1)
    assert "partition 1" in call(base, "GET", f"{c}/consumer-groups/v3g/lags/v3t/partitions/1", expect=404)["message"]
    member = consumers[0]["consumer_id"]
    assert call(base, "GET", f"{c}/consumer-groups/v3g/consumers/{member}", expect=200)["consumer_id"] == member
    call(base, "GET", f"{c}/consumer-groups/v3g/consumers/nobody", expect=404)
    assigned = call(base, "GET", f"{c}/consumer-groups/v3g/consumers/{member}/assignments", expect=200)["data"]
    assert [(a["topic_name"], a["partition_id"]) for a in assigned] == [("v3t", 0), ("v3t", 1)]
    call(base, "GET", f"{c}/consumer-groups/v3g/consumers/{member}/assignments/v3t/partitions/1", expect=200)
    call(base, "GET", f"{c}/consumer-groups/v3g/consumers/{member}/assignments/v3t/partitions/5", expect=404)
    call(base, "GET", f"{c}/consumer-groups/nobody", expect=404)
    call(uri, "DELETE", "", ctype=V2, expect=204)

    call(base, "DELETE", f"{c}/topics/v3t", expect=204)
    call(base, "DELETE", f"{c}/topics/v3t", expect=404)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with Kelp's authorizer, every (anonymous) HTTP caller a super user: ACLs are stored."""
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-v3-acls"), settings={
        "authorizer.class.name": KELP_AUTHORIZER, "super.users": "User:ANONYMOUS"})
    bp.start()
    try:
        yield bp
    finally:
        bp.kill()


@pytest.mark.timeout(60)
def test_v3_acls_search_create_delete(secured) -> None:
    base = secured.http_url
    c = f"/v3/clusters/{call(base, 'GET', '/v3/clusters', expect=200)['data'][0]['cluster_id']}"
    acl = {"resource_type": "TOPIC", "resource_name": "v3t", "pattern_type": "LITERAL", "principal": "User:alice",
           "host": "*", "operation": "READ", "permission": "ALLOW"}
    call(base, "POST", f"{c}/acls", acl, expect=201)
    batch = [{**acl, "resource_name": "v3b"}, {**acl, "resource_name": "v3b", "operation": "WRITE"}]
    call(base, "POST", f"{c}/acls:batch", {"data": batch}, expect=201)
    bad = call(base, "POST", f"{c}/acls:batch", {"data": [batch[0], {**acl, "permission": "MAYBE"}]}, expect=400)
    assert "data[1]" in bad["message"] and "permission" in bad["message"].lower()
    assert len(call(base, "GET", f"{c}/acls?resource_name=v3b", expect=200)["data"]) == 2
    bad = call(base, "POST", f"{c}/acls", {**acl, "operation": "FLY"}, expect=400)
    assert "operation" in bad["message"].lower()
    found = call(base, "GET", f"{c}/acls?principal=User%3Aalice", expect=200)["data"]
    assert sorted((a["resource_name"], a["operation"]) for a in found) == [("v3b", "READ"), ("v3b", "WRITE"),
                                                                           ("v3t", "READ")]
    query = urllib.parse.urlencode({k: v for k, v in acl.items()})
    deleted = call(base, "DELETE", f"{c}/acls?{query}", expect=200)["data"]
    assert len(deleted) == 1 and deleted[0]["principal"] == "User:alice"
    assert len(call(base, "DELETE", f"{c}/acls?resource_name=v3b", expect=200)["data"]) == 2
    assert call(base, "GET", f"{c}/acls?principal=User%3Aalice", expect=200)["data"] == []


@pytest.mark.timeout(60)
def test_v3_configs_replicas_offsets_and_batch_produce(kelp) -> None:
    """Broker configs (one broker's, every broker's, the cluster-wide dynamic defaults), every topic's configs,
    replicas, reassignments (none running on one broker), a partition's offsets and `records:batch`."""
    base = kelp.http_url
    cid = call(base, "GET", "/v3/clusters", expect=200)["data"][0]["cluster_id"]
    c = f"/v3/clusters/{cid}"
    call(base, "POST", f"{c}/topics", {"topic_name": "v3c", "partitions_count": 2,
                                       "configs": [{"name": "retention.ms", "value": "100000"}]}, expect=201)
    every = call(base, "GET", f"{c}/topics/-/configs", expect=200)["data"]
    assert {"v3c"} <= {d["topic_name"] for d in every}
    mine = {d["name"]: d for d in every if d["topic_name"] == "v3c"}
    assert mine["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG" and mine["segment.bytes"]["is_default"]
    bad = call(base, "POST", f"{c}/topics/v3c/configs:alter", {"data": [{"name": "retention.ms", "value": "x"}]},
               expect=400)
    assert "retention.ms" in bad["message"] and bad["error_code"] == 40002
    call(base, "POST", f"{c}/topics/v3c/configs:alter",
         {"data": [{"name": "retention.ms", "value": "5"}], "validate_only": True}, expect=204)
    assert call(base, "GET", f"{c}/topics/v3c/configs/retention.ms", expect=200)["value"] == "100000"

    # broker configs: this broker's (static and dynamic, read-only marked), then dynamic changes
    broker_id = call(base, "GET", f"{c}/brokers", expect=200)["data"][0]["broker_id"]
    configs = {d["name"]: d for d in call(base, "GET", f"{c}/brokers/{broker_id}/configs", expect=200)["data"]}
    assert configs["num.partitions"]["value"] == "1" and configs["num.partitions"]["source"] == "STATIC_BROKER_CONFIG"
    assert configs["num.partitions"]["is_read_only"] and not configs["log.segment.bytes"]["is_read_only"]
    call(base, "PUT", f"{c}/brokers/{broker_id}/configs/log.retention.ms", {"value": "3600000"}, expect=204)
    one = call(base, "GET", f"{c}/brokers/{broker_id}/configs/log.retention.ms", expect=200)
    assert one["value"] == "3600000" and one["source"] == "DYNAMIC_BROKER_CONFIG"
    assert [s["source"] for s in one["synonyms"]][0] == "DYNAMIC_BROKER_CONFIG"
    call(base, "DELETE", f"{c}/brokers/{broker_id}/configs/log.retention.ms", expect=204)
    ro = call(base, "PUT", f"{c}/brokers/{broker_id}/configs/num.partitions", {"value": "3"}, expect=400)
    assert "num.partitions" in ro["message"] and ro["error_code"] == 40002
    call(base, "POST", f"{c}/brokers/{broker_id}/configs:alter",
         {"data": [{"name": "log.segment.bytes", "value": "2000000"}, {"name": "log.retention.ms",
                                                                      "operation": "DELETE"}]}, expect=204)
    assert call(base, "GET", f"{c}/brokers/{broker_id}/configs/log.segment.bytes", expect=200)["value"] == "2000000"
    dup = call(base, "POST", f"{c}/brokers/{broker_id}/configs:alter",
               {"data": [{"name": "log.segment.bytes", "value": "1"}, {"name": "log.segment.bytes"}]}, expect=400)
    assert "more than once" in dup["message"]
    call(base, "GET", f"{c}/brokers/99/configs", expect=404)
    call(base, "GET", f"{c}/brokers/{broker_id}/configs/no.such.key", expect=404)
    assert {d["broker_id"] for d in call(base, "GET", f"{c}/brokers/-/configs", expect=200)["data"]} == {broker_id}

    # the cluster-wide dynamic defaults
    assert call(base, "GET", f"{c}/broker-configs", expect=200)["data"] == []
    call(base, "PUT", f"{c}/broker-configs/log.retention.ms", {"value": "7200000"}, expect=204)
    default = call(base, "GET", f"{c}/broker-configs/log.retention.ms", expect=200)
    assert default["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG" and default["config_type"] == "BROKER"
    call(base, "POST", f"{c}/broker-configs:alter", {"data": [{"name": "log.retention.ms", "operation": "DELETE"},
                                                              {"name": "log.segment.bytes", "value": "3000000"}]},
         expect=204)
    assert [d["name"] for d in call(base, "GET", f"{c}/broker-configs", expect=200)["data"]] == ["log.segment.bytes"]
    call(base, "DELETE", f"{c}/broker-configs/log.segment.bytes", expect=204)
    call(base, "GET", f"{c}/broker-configs/log.segment.bytes", expect=404)
    unknown = call(base, "PUT", f"{c}/broker-configs/no.such.key", {"value": "1"}, expect=400)
    assert "no.such.key" in unknown["message"]
    assert "value" in call(base, "PUT", f"{c}/broker-configs/log.retention.ms", {"value": 5}, expect=400)["message"]
    assert "data" in call(base, "POST", f"{c}/broker-configs:alter", {"data": []}, expect=400)["message"]

    # replicas, reassignments, offsets
    replicas = call(base, "GET", f"{c}/topics/v3c/partitions/1/replicas", expect=200)["data"]
    assert [(r["broker_id"], r["is_leader"], r["is_in_sync"]) for r in replicas] == [(broker_id, True, True)]
    call(base, "GET", f"{c}/topics/v3c/partitions/1/replicas/{broker_id}", expect=200)
    call(base, "GET", f"{c}/topics/v3c/partitions/1/replicas/42", expect=404)
    held = call(base, "GET", f"{c}/brokers/{broker_id}/partition-replicas", expect=200)["data"]
    assert {("v3c", 0), ("v3c", 1)} <= {(r["topic_name"], r["partition_id"]) for r in held}
    assert call(base, "GET", f"{c}/topics/-/partitions/-/reassignment", expect=200)["data"] == []
    assert call(base, "GET", f"{c}/topics/v3c/partitions/-/reassignment", expect=200)["data"] == []
    none = call(base, "GET", f"{c}/topics/v3c/partitions/0/reassignment", expect=404)
    assert none["error_code"] == 85 and "partition 0" in none["message"]
    call(base, "GET", f"{c}/topics/v3c/partitions/9/replicas", expect=404)

    # records:batch: successes and failures apart, 207
    done = call(base, "POST", f"{c}/topics/v3c/records:batch", {"entries": [
        {"id": "a", "partition_id": 1, "value": {"type": "STRING", "data": "one"}},
        {"id": "b", "value": {"type": "BINARY", "data": "not base64!"}},
        {"id": "c", "partition_id": 1, "key": {"type": "JSON", "data": {"k": 1}}, "value": {"data": [1]}}]},
        expect=207)
    assert [(s["id"], s["partition_id"], s["offset"]) for s in done["successes"]] == [("a", 1, 0), ("c", 1, 1)]
    assert [f["id"] for f in done["failures"]] == ["b"] and "base64" in done["failures"][0]["message"]
    dup = call(base, "POST", f"{c}/topics/v3c/records:batch", {"entries": [{"id": "x"}, {"id": "x"}]}, expect=400)
    assert "'x'" in dup["message"]
    assert "id" in call(base, "POST", f"{c}/topics/v3c/records:batch", {"entries": [{"value": {}}]},
                        expect=400)["message"]
    assert call(base, "PATCH", f"{c}/topics/v3c", {"partitions_count": 3}, expect=200)["partitions_count"] == 3
    offsets = call(base, "GET", f"{c}/topics/v3c/partitions/1/offset", expect=200)
    assert (offsets["earliest_offset"], offsets["latest_offset"]) == (0, 2)
    call(base, "DELETE", f"{c}/topics/v3c", expect=204)


async def test_v3_produce_streams_reports_as_records_arrive(kelp) -> None:
    """One long-lived request: each record's report arrives before the next record is sent."""
    import asyncio

    import aiohttp

    base = kelp.http_url
    cid = call(base, "GET", "/v3/clusters", expect=200)["data"][0]["cluster_id"]
    call(base, "POST", f"/v3/clusters/{cid}/topics", {"topic_name": "v3stream", "partitions_count": 1}, expect=201)
    got_report = asyncio.Event()

    async def body():  # type: ignore[no-untyped-def]  # an async generator aiohttp streams as chunks
        for i in range(3):
            got_report.clear()
            yield json.dumps({"value": {"type": "STRING", "data": f"s{i}"}}).encode()
            await asyncio.wait_for(got_report.wait(), 10)  # the server answered before it saw the next record

    reports = []
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/v3/clusters/{cid}/topics/v3stream/records", data=body(),
                                headers={"Content-Type": "application/json"},
                                timeout=aiohttp.ClientTimeout(total=30)) as resp:
            assert resp.status == 200
            while len(reports) < 3:
                line = await asyncio.wait_for(resp.content.readline(), 10)
                assert line, f"the stream ended after {reports}"
                reports.append(json.loads(line))
                check("POST", f"/v3/clusters/{cid}/topics/v3stream/records", 200, reports[-1])
                got_report.set()
    assert [(r["error_code"], r["offset"]) for r in reports] == [(200, 0), (200, 1), (200, 2)]
    call(base, "DELETE", f"/v3/clusters/{cid}/topics/v3stream", expect=204)


def test_zz_every_v3_route_was_validated() -> None:
    """Runs after the tests above (file order): every v3 route Kelp serves was exercised and its answers were
    validated against Confluent's document."""
    if len(validated) < 10:
        pytest.skip("run with the tests above (the whole module): they exercise the routes")
    served = {(r.method, _template(r.path.replace("{", "x").replace("}", "x")))  # type: ignore[attr-defined]  # RouteDef has .path
              for module in (v3_cluster, v3_configs, v3_replicas, v3_groups, v3_records, v3_acls)
              for r in module.routes}
    assert served <= validated, f"v3 routes never validated: {sorted(served - validated)}"

