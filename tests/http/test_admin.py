"""The admin API `/admin/v1`: topic lifecycle, configs, brokers, JSON errors."""

from __future__ import annotations

from tests.http.httpcall import call, create_topic


def test_topic_lifecycle(kelp) -> None:
    base = f"{kelp.http_url}/admin/v1"
    d = create_topic(kelp.http_url, "orders", partitions=2, **{"retention.ms": "60000"})
    assert d["name"] == "orders" and d["partitions_count"] == 2 and d["replication_factor"] == 1
    p0 = d["partitions"][0]
    assert p0 == {"partition": 0, "leader": 0, "leader_epoch": 0, "replicas": [0], "isr": [0], "offline_replicas": [],
                  "log_start_offset": 0, "log_end_offset": 0, "high_watermark": 0, "size_bytes": 0}
    assert d["configs"]["retention.ms"] == {"value": "60000", "source": "topic"}
    assert d["configs"]["segment.bytes"]["source"] == "default"

    listed = call("GET", f"{base}/topics").json()["topics"]
    orders = [t for t in listed if t["name"] == "orders"]
    assert len(orders) == 1 and len(orders[0].pop("topic_id")) == 32  # the topic's id (KIP-516), 128 bits in hex
    assert orders[0] == {"name": "orders", "partitions": 2, "replication_factor": 1, "internal": False,
                         "configs": {"retention.ms": "60000"}}

    call("POST", f"{kelp.http_url}/topics/orders/partitions/1", body={"records": [{"value": 1}]})
    d = call("GET", f"{base}/topics/orders").json()
    p1 = d["partitions"][1]
    assert p1["log_end_offset"] == 1 and p1["high_watermark"] == 1 and p1["size_bytes"] > 0

    grown = call("POST", f"{base}/topics/orders/partitions", body={"partitions": 4})
    assert grown.status == 200 and grown.json()["partitions_count"] == 4
    shrink = call("POST", f"{base}/topics/orders/partitions", body={"partitions": 3})
    assert shrink.status == 400 and shrink.json()["error_code"] == 37

    patched = call("PATCH", f"{base}/topics/orders/configs",
                   body={"configs": {"segment.bytes": 1048576, "retention.ms": None}})
    assert patched.status == 200, patched
    cfg = patched.json()["configs"]
    assert cfg["segment.bytes"] == {"value": "1048576", "source": "topic"}
    assert cfg["retention.ms"]["source"] == "default"

    replaced = call("PUT", f"{base}/topics/orders/configs", body={"configs": {"cleanup.policy": "compact"}})
    cfg = replaced.json()["configs"]
    assert cfg["cleanup.policy"]["value"] == "compact" and cfg["segment.bytes"]["source"] == "default"
    assert call("GET", f"{base}/topics/orders/configs").json()["configs"] == cfg

    deleted = call("DELETE", f"{base}/topics/orders")
    assert deleted.status == 200 and deleted.json() == {"name": "orders", "deleted": True}
    gone = call("GET", f"{base}/topics/orders")
    assert gone.status == 404 and gone.json()["error_code"] == 3 and "orders" in gone.json()["message"]


def test_admin_errors_are_json_naming_the_problem(kelp) -> None:
    base = f"{kelp.http_url}/admin/v1"
    create_topic(kelp.http_url, "dup")
    r = call("POST", f"{base}/topics", body={"name": "dup"})
    assert r.status == 409 and r.json()["error_code"] == 36 and "dup" in r.json()["message"]
    r = call("POST", f"{base}/topics", body={"name": "bad name!"})
    assert r.status == 400 and r.json()["error_code"] == 17 and "illegal character" in r.json()["message"]
    r = call("POST", f"{base}/topics", body={"name": "cfg", "configs": {"retention.ms": "soon"}})
    assert r.status == 400 and r.json()["error_code"] == 40 and "retention.ms" in r.json()["message"]
    r = call("POST", f"{base}/topics", body={"partitions": 3})
    assert r.status == 400 and "'name'" in r.json()["message"]
    r = call("POST", f"{base}/topics", body={"name": "p", "partitions": "three"})
    assert r.status == 400 and "'partitions'" in r.json()["message"]
    r = call("POST", f"{base}/topics", data=b"{nope", content_type="application/json")
    assert r.status == 400 and "not valid JSON" in r.json()["message"]
    r = call("PATCH", f"{base}/topics/dup/configs", body={"configs": {"no.such.config": "1"}})
    assert r.status == 400 and "no.such.config" in r.json()["message"]
    r = call("DELETE", f"{base}/topics/never-was")
    assert r.status == 404 and "never-was" in r.json()["message"]
    r = call("GET", f"{base}/nothing-here")
    assert r.status == 404 and r.json()["error_code"] == 404
    r = call("PUT", f"{base}/topics")
    assert r.status == 405 and "PUT" in r.json()["message"]


def test_brokers(kelp) -> None:
    (b,) = call("GET", f"{kelp.http_url}/admin/v1/brokers").json()["brokers"]
    assert b["id"] == 0 and f"{b['host']}:{b['port']}" == kelp.bootstrap
    assert b["http_port"] == kelp.http_port
