"""Three brokers: every broker serves the registry (read-after-write through another broker, a write
forwarded to the leader of `_schemas`), and it keeps serving — reads and a new registration — after the
broker leading `_schemas` is killed; a write refused meanwhile carries Confluent's 500/5000x."""

from __future__ import annotations

import json
import time

import pytest

from .conftest import call

pytestmark = [pytest.mark.clients, pytest.mark.timeout(150)]


def _schema(*fields: str) -> str:
    return json.dumps({"type": "record", "name": "F", "fields": [{"name": f, "type": "int", "default": 0}
                                                                 for f in fields]}, separators=(",", ":"))


def _until(what: str, attempt, timeout: float = 45.0, *, refusals: set[tuple[int, int]] | None = None):
    """Until `attempt` answers 200 (bounded); each refusal on the way, when `refusals` is given, one of them."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = attempt()
        if last[0] == 200:
            return last
        code = last[1].get("error_code") if isinstance(last[1], dict) else None
        assert refusals is None or (last[0], code) in refusals, f"{what}: refused {last[:2]}, not as Confluent's"
        time.sleep(0.3)
    raise AssertionError(f"{what}: not answered 200 within {timeout}s; last {last}")


def test_registry_survives_the_loss_of_its_leader(cluster_factory) -> None:
    cluster = cluster_factory(3)
    first, *others = cluster.brokers
    status, body, _ = _until("first registration", lambda: call(first.http_url, "/subjects/f-value/versions",
                                                                 "POST", {"schema": _schema("a")}))
    first_id = body["id"]
    # read-after-write on the other brokers; a registration through each is forwarded to the leader
    for b in others:
        assert call(b.http_url, "/subjects/f-value/versions/latest")[1]["id"] == first_id
    second = call(others[0].http_url, "/subjects/f-value/versions", "POST", {"schema": _schema("a", "b")})[1]
    assert second["version"] == 2 and second["id"] != first_id
    assert call(others[1].http_url, "/subjects/f-value/versions")[1] == [1, 2]
    topic = cluster.topic("_schemas")
    assert len(topic["partitions"][0]["replicas"]) == 3, topic

    leader_id = topic["partitions"][0]["leader"]
    cluster[leader_id].kill()
    survivors = [b for b in cluster.brokers if b.broker_id != leader_id]
    for b in survivors:
        got = _until(f"broker {b.broker_id} reading after the leader died",
                     lambda b=b: call(b.http_url, "/subjects/f-value/versions/2"))[1]
        assert got["id"] == second["id"]
        assert call(b.http_url, f"/schemas/ids/{first_id}")[1] == {"schema": _schema("a")}
    # while a new leader is elected, a write is refused as Confluent's registry refuses it: 500 with 50003
    # (forwarding failed) or 50004 (no leader known), or its store's 50001/50002 — never Kafka's code or 503
    third = _until("a registration after the leader died", lambda: call(
        survivors[0].http_url, "/subjects/f-value/versions", "POST", {"schema": _schema("a", "b", "c")}),
        refusals={(500, code) for code in (50001, 50002, 50003, 50004)})[1]
    assert third["version"] == 3 and third["id"] not in (first_id, second["id"])
    # the same schema again, through the other survivor: the same id (ids survive the failover)
    assert call(survivors[1].http_url, "/subjects/other-value/versions", "POST",
                {"schema": _schema("a")})[1]["id"] == first_id
    assert call(survivors[1].http_url, "/subjects/f-value/versions")[1] == [1, 2, 3]
