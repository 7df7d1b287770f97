"""Topics whose names differ only in '.' versus '_' cannot coexist (Kafka's "collides with existing topic").

Kafka refuses the second with INVALID_TOPIC_EXCEPTION (17) because both map to one metric name. Every door
refuses it: Kafka CreateTopics, the HTTP API, `kelp topics create`, auto-create on Metadata/Produce — and the
controller checks the cluster metadata, not one broker's cache.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from kelp.cli.main import main
from kelp.errors import InvalidTopicError
from tests.broker.helpers import create_topic_wire
from tests.replication.test_controller import Harness
from tests.support.kafka_wire import WireClient

INVALID_TOPIC = 17


async def test_the_controller_refuses_a_colliding_name_against_the_cluster_metadata() -> None:
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="orders.eu", partitions=1, replication_factor=1)
    with pytest.raises(InvalidTopicError, match="'orders_eu' collides with existing topic 'orders.eu'"):
        await c.topic_admin.create_topic(name="orders_eu", partitions=1, replication_factor=1)
    assert h.store.topic("orders_eu") is None
    await c.topic_admin.create_topic(name="orders-eu", partitions=1, replication_factor=1)  # '-' is its own character


def _http_create(url: str, name: str) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/admin/v1/topics", data=json.dumps({"name": name, "partitions": 1}).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_every_door_refuses_a_colliding_topic(broker, capsys, monkeypatch) -> None:
    from kafka.protocol.metadata import MetadataRequest

    assert create_topic_wire(broker.bootstrap, "a.b") == 0
    # Kafka protocol CreateTopics
    assert create_topic_wire(broker.bootstrap, "a_b") == INVALID_TOPIC
    # HTTP
    status, body = _http_create(broker.http_url, "a_b")
    assert status == 400 and "collides with existing topic 'a.b'" in body["message"], body
    # CLI
    monkeypatch.setenv("KELP_HTTP", broker.http_url)
    assert main(["topics", "create", "a_b"]) == 1
    assert "collides with existing topic 'a.b'" in capsys.readouterr().err
    # auto-create (Metadata with allow_auto_topic_creation)
    with WireClient(broker.bootstrap) as c:
        resp = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a_b")],
                                         allow_auto_topic_creation=True), 4)
    assert [(t.name, t.error_code) for t in resp.topics] == [("a_b", INVALID_TOPIC)]
    # the other way round too, and nothing was created by any attempt
    assert create_topic_wire(broker.bootstrap, "x_y") == 0
    assert create_topic_wire(broker.bootstrap, "x.y") == INVALID_TOPIC
    with urllib.request.urlopen(broker.http_url + "/admin/v1/topics", timeout=30) as resp:
        names = {t["name"] for t in json.loads(resp.read())["topics"]}
    assert {"a.b", "x_y"} <= names and not {"a_b", "x.y"} & names
