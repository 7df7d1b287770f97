"""Dynamic broker configs on a real broker: a Kafka admin client (librdkafka's) and the HTTP admin API.

What a user does: `kafka-configs --entity-type brokers --entity-default --alter --add-config
log.retention.ms=...` (IncrementalAlterConfigs on BROKER "") applies at once, without a restart, to every topic
that does not override it; `--describe` shows it with its source (DYNAMIC_DEFAULT_BROKER_CONFIG); a read-only key
(`log.dirs`) is refused by name; the values survive a restart (they live in the metadata log). The operator does
the same with `GET/PATCH /admin/v1/brokers/configs`.
"""

from __future__ import annotations

import pytest

from kelp.errors import ErrorCode
from tests.broker.helpers import create_topic_wire, produce
from tests.broker.test_admin_apis import DELETE, SET, describe, http, incremental
from tests.support.kafka_wire import WireClient, make_batch

pytestmark = pytest.mark.timeout(120)

TOPIC, BROKER = 2, 4
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 2, 3, 4, 5


def alter(admin, name: str, ops: list[tuple[str, str | None, str]]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType[op]) for key, value, op in ops])
    admin.incremental_alter_configs([resource])[resource].result(15)


def described(admin, kind: str, name: str) -> dict:
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType[kind], name)
    return admin.describe_configs([resource])[resource].result(15)


def test_kafka_clients_change_the_cluster_wide_defaults_at_once_and_they_survive_a_restart(broker_factory) -> None:
    """The default entity (resource name "") with kafka-python's request classes: neither Python admin client
    can name it (both refuse a broker resource that is not a number; Java's kafka-configs can, tests/tools);
    one broker's entity with confluent-kafka's admin client."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    broker = broker_factory(settings={"log.retention.hours": 2})
    assert create_topic_wire(broker.bootstrap, "plain") == 0
    assert create_topic_wire(broker.bootstrap, "pinned", configs={"retention.ms": 60000}) == 0
    with WireClient(broker.bootstrap) as w:
        assert incremental(w, BROKER, "", [("log.retention.ms", SET, "3600000"),
                                           ("min.insync.replicas", SET, "2")]) == (0, None)
        defaults = describe(w, BROKER, "")  # `--entity-default --describe`: the dynamic defaults only
        assert {n: (e.value, e.config_source, e.read_only) for n, e in defaults.items()} == {
            "log.retention.ms": ("3600000", DYNAMIC_DEFAULT_BROKER_CONFIG, False),
            "min.insync.replicas": ("2", DYNAMIC_DEFAULT_BROKER_CONFIG, False)}

        # the topic's default changed, the dynamic layer first among its synonyms; an override is left alone
        ret = describe(w, TOPIC, "plain")["retention.ms"]
        assert (ret.value, ret.config_source) == ("3600000", DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert [(s.name, s.value, s.source) for s in ret.synonyms] == [
            ("log.retention.ms", "3600000", DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("log.retention.hours", "2", STATIC_BROKER_CONFIG), ("log.retention.hours", "168", DEFAULT_CONFIG)]
        assert describe(w, TOPIC, "pinned")["retention.ms"].value == "60000"
        # min.insync.replicas=2 on a one-broker cluster: acks=all writes are refused at once
        assert produce(w, "plain", make_batch([(None, b"v")]), acks=-1)[0] == ErrorCode.NOT_ENOUGH_REPLICAS
        assert produce(w, "plain", make_batch([(None, b"v")]), acks=1)[0] == 0

        # a read-only key is refused, naming it and saying how to change it; nothing of the request applies
        code, message = incremental(w, BROKER, "", [("log.dirs", SET, "/elsewhere"), ("log.retention.ms", SET, "1")])
        assert code == 40 and "Cannot update these configs dynamically: log.dirs" in message and "restart" in message
        assert describe(w, BROKER, "")["log.retention.ms"].value == "3600000"

    # this broker's own entity, with an admin client: it beats the default, read back with its source
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    alter(admin, "0", [("min.insync.replicas", "1", "SET")])
    own = described(admin, "BROKER", "0")
    assert (own["min.insync.replicas"].value, own["min.insync.replicas"].source) == ("1", DYNAMIC_BROKER_CONFIG)
    assert (own["log.retention.ms"].value, own["log.retention.ms"].source) == ("3600000", DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert not own["log.retention.ms"].is_read_only and own["log.dirs"].is_read_only
    with pytest.raises(KafkaException, match="log.dirs"):
        alter(admin, "0", [("log.dirs", "/elsewhere", "SET")])

    broker.restart()  # they live in the metadata log
    with WireClient(broker.bootstrap) as w:
        assert describe(w, TOPIC, "plain")["retention.ms"].value == "3600000"
        assert produce(w, "plain", make_batch([(None, b"v")]), acks=-1)[0] == 0  # broker 0's own 1 beats 2
        assert incremental(w, BROKER, "", [("log.retention.ms", DELETE, None)]) == (0, None)
        ret = describe(w, TOPIC, "plain")["retention.ms"]
        assert (ret.value, ret.config_source) == (str(2 * 3_600_000), STATIC_BROKER_CONFIG)


def test_http_broker_configs_round_trip_and_refuse_read_only_keys(broker_factory) -> None:
    broker = broker_factory()
    assert http(broker, "GET", "/admin/v1/brokers/configs") == (200, {"broker": None, "configs": {}})
    status, body = http(broker, "PATCH", "/admin/v1/brokers/configs",
                        {"configs": {"log.retention.ms": 3600000, "log.cleanup.policy": "compact,delete"}})
    assert (status, body) == (200, {"broker": None, "configs": {"log.cleanup.policy": "compact,delete",
                                                                "log.retention.ms": "3600000"}})
    assert http(broker, "GET", "/admin/v1/brokers/configs")[1] == body
    status, body = http(broker, "PATCH", "/admin/v1/brokers/configs", {"configs": {"log.cleanup.policy": None}})
    assert body == {"broker": None, "configs": {"log.retention.ms": "3600000"}}
    # one broker's own: it beats the default here
    status, body = http(broker, "PATCH", "/admin/v1/brokers/0/configs", {"configs": {"log.retention.ms": "60000"}})
    assert (status, body) == (200, {"broker": 0, "configs": {"log.retention.ms": "60000"}})
    assert http(broker, "GET", "/admin/v1/brokers/0/configs")[1] == body
    assert create_topic_wire(broker.bootstrap, "t") == 0
    assert http(broker, "GET", "/admin/v1/topics/t/configs")[1]["configs"]["retention.ms"] == {
        "value": "60000", "source": "default"}

    # 422 naming the key, with the Kafka door's message; 400 for a malformed body
    status, body = http(broker, "PATCH", "/admin/v1/brokers/configs", {"configs": {"log.dirs": "/elsewhere"}})
    assert status == 422 and body["error_code"] == 40, body
    assert "Cannot update these configs dynamically: log.dirs" in body["message"] and "restart" in body["message"]
    status, body = http(broker, "PATCH", "/admin/v1/brokers/configs", {"configs": {"log.retention.ms": "soon"}})
    assert status == 422 and "log.retention.ms" in body["message"], body
    status, body = http(broker, "PATCH", "/admin/v1/brokers/configs", {"configs": {"log.retentoin.ms": "1"}})
    assert status == 422 and "did you mean 'log.retention.ms'" in body["message"], body
    for bad in ({"log.retention.ms": "1"}, {"configs": ["log.retention.ms"]}, {"configs": {"log.retention.ms": [1]}}):
        assert http(broker, "PATCH", "/admin/v1/brokers/configs", bad)[0] == 400, bad
    assert http(broker, "GET", "/admin/v1/brokers/x/configs")[0] == 400
    assert http(broker, "GET", "/admin/v1/brokers/configs")[1] == {"broker": None,
                                                                   "configs": {"log.retention.ms": "3600000"}}
