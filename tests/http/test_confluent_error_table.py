"""Every code of Confluent's error tables (`kelp.rest_errors.CONFLUENT_ERRORS`) that Kelp answers, triggered.

Issue 37's Build: the REST Proxy's (v2, v3) and the Schema Registry's codes in one table, and a test that sends
each documented error's trigger to a broker process and checks the HTTP status and `error_code` the table
gives. A code the table marks `untriggered` (Kelp never answers it, or only when the cluster fails) has no
trigger here, and says why in the table; a code without either fails `test_every_code_has_a_trigger_or_a_why`.
Authorization (40301) needs a broker with an authorizer: a second broker, where the same refusal on Kelp's own
`/admin/v1` keeps Kafka's code.
"""

from __future__ import annotations

import json
from typing import Callable, Iterator

import pytest

from kelp.config.keys import KELP_AUTHORIZER
from kelp.rest_errors import CONFLUENT_ERRORS, ConfluentError, RegistryErrorCode, RestErrorCode
from tests.http.httpcall import Reply, call, create_topic
from tests.support.broker_process import BrokerProcess

V2 = "application/vnd.kafka.v2+json"
AVRO_V2 = "application/vnd.kafka.avro.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
SR = "application/vnd.schemaregistry.v1+json"
MAX_INSTANCES = 4


@pytest.fixture(scope="module")
def kelp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-confluent-errors"), settings={
        "num.partitions": 1, "offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
        "http.consumer.max.instances": MAX_INSTANCES})
    bp.start()
    try:
        for topic in ("t", "keyless", "valueless", "mismatch"):  # one per produce in Avro: each its own subjects
            create_topic(bp.http_url, topic)
        yield bp
    finally:
        bp.kill()


def _record(*fields: tuple[str, str]) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": [{"name": n, "type": t} for n, t in fields]})


def _register(base: str, subject: str, schema: str, **extra: object) -> Reply:
    return call("POST", f"{base}/subjects/{subject}/versions", body={"schema": schema, **extra}, content_type=SR)


def _registered(base: str, subject: str, schema: str | None = None, **extra: object) -> None:
    reply = _register(base, subject, schema or _record(("a", "int")), **extra)
    assert reply.status == 200, reply


def _instance(base: str, group: str, name: str) -> str:
    reply = call("POST", f"{base}/consumers/{group}", body={"name": name, "format": "binary"}, content_type=V2)
    assert reply.status == 200, reply
    return str(reply.json()["base_uri"])


def _cluster(base: str) -> str:
    return f"{base}/v3/clusters/{call('GET', f'{base}/v3/clusters').json()['data'][0]['cluster_id']}"


def _format_mismatch(base: str) -> Reply:
    uri = _instance(base, "g-format", "c")
    try:
        assert call("POST", f"{uri}/subscription", body={"topics": ["t"]}, content_type=V2).status == 204
        return call("GET", f"{uri}/records?timeout=0", accept=JSON_V2)
    finally:
        call("DELETE", uri, content_type=V2)


def _already_exists(base: str) -> Reply:
    uri = _instance(base, "g-exists", "c")
    try:
        return call("POST", f"{base}/consumers/g-exists", body={"name": "c"}, content_type=V2)
    finally:
        call("DELETE", uri, content_type=V2)


def _illegal_state(base: str) -> Reply:
    uri = _instance(base, "g-state", "c")
    try:
        return call("POST", f"{uri}/positions", body={"offsets": [{"topic": "t", "partition": 0, "offset": 0}]},
                    content_type=V2)
    finally:
        call("DELETE", uri, content_type=V2)


def _too_many_instances(base: str) -> Reply:
    made = [_instance(base, "g-many", f"c{i}") for i in range(MAX_INSTANCES)]
    try:
        return call("POST", f"{base}/consumers/g-many", body={"name": "one-too-many"}, content_type=V2)
    finally:
        for uri in made:
            call("DELETE", uri, content_type=V2)


def _create_existing_topic(base: str) -> Reply:
    return call("POST", f"{_cluster(base)}/topics", body={"topic_name": "t", "partitions_count": 1})


def _shrink_topic(base: str) -> Reply:
    create_topic(base, "two", partitions=2)
    return call("PATCH", f"{_cluster(base)}/topics/two", body={"partitions_count": 1})


def _soft_deleted_twice(base: str) -> Reply:
    _registered(base, "soft")
    assert call("DELETE", f"{base}/subjects/soft").status == 200
    return call("DELETE", f"{base}/subjects/soft")


def _version_soft_deleted_twice(base: str) -> Reply:
    _registered(base, "vsoft")
    assert call("DELETE", f"{base}/subjects/vsoft/versions/1").status == 200
    return call("DELETE", f"{base}/subjects/vsoft/versions/1")


def _incompatible(base: str) -> Reply:
    _registered(base, "compat")
    return _register(base, "compat", _record(("a", "string")))  # BACKWARD: int -> string cannot read old data


def _read_only_write(base: str) -> Reply:
    assert call("PUT", f"{base}/mode/frozen", body={"mode": "READONLY"}, content_type=SR).status == 200
    return _register(base, "frozen", _record(("a", "int")))


def _referenced(base: str) -> Reply:
    _registered(base, "money", json.dumps({"type": "record", "name": "Money", "fields": [
        {"name": "cents", "type": "long"}]}))
    _registered(base, "invoice", _record(("total", "Money")),
                references=[{"name": "Money", "subject": "money", "version": 1}])
    return call("DELETE", f"{base}/subjects/money/versions/1")


def _import_taken_id(base: str) -> Reply:
    _registered(base, "first", _record(("x", "int")))
    taken = _register(base, "first", _record(("x", "int"))).json()["id"]
    assert call("PUT", f"{base}/mode/imported", body={"mode": "IMPORT"}, content_type=SR).status == 200
    return _register(base, "imported", _record(("y", "string")), id=taken, version=1)


Trigger = Callable[[str], Reply]
# (api, code) -> a request (or several) that Confluent answers with that code; `api` tells 40403's two meanings apart
TRIGGERS: dict[tuple[str, int], Trigger | tuple[Trigger, ...]] = {
    ("v2 v3", RestErrorCode.KAFKA_BAD_REQUEST): (_create_existing_topic, _shrink_topic),
    ("v2", RestErrorCode.TOPIC_NOT_FOUND): lambda b: call("GET", f"{b}/topics/nope"),
    ("v2", RestErrorCode.PARTITION_NOT_FOUND): lambda b: call("GET", f"{b}/topics/t/partitions/7"),
    ("v2", RestErrorCode.CONSUMER_INSTANCE_NOT_FOUND):
        lambda b: call("GET", f"{b}/consumers/g/instances/nope/subscription"),
    ("v3", RestErrorCode.KAFKA_UNKNOWN_TOPIC_PARTITION): lambda b: call("GET", f"{_cluster(b)}/topics/nope"),
    ("v2", RestErrorCode.CONSUMER_FORMAT_MISMATCH): _format_mismatch,
    ("v2", RestErrorCode.CONSUMER_ALREADY_EXISTS): _already_exists,
    ("v2", RestErrorCode.ILLEGAL_STATE): _illegal_state,
    ("v2 v3", RestErrorCode.CONSTRAINT_VIOLATION): lambda b: call("POST", f"{b}/topics/t", data=b"",
                                                                            content_type=BINARY_V2),
    ("v2", RestErrorCode.KEY_SCHEMA_MISSING): lambda b: call(
        "POST", f"{b}/topics/keyless", body={"value_schema": '"string"', "records": [{"key": "k", "value": "v"}]},
        content_type=AVRO_V2),
    ("v2", RestErrorCode.VALUE_SCHEMA_MISSING): lambda b: call(
        "POST", f"{b}/topics/valueless", body={"key_schema": '"string"', "records": [{"key": "k", "value": "v"}]},
        content_type=AVRO_V2),
    ("v2", RestErrorCode.JSON_CONVERSION): lambda b: call(
        "POST", f"{b}/topics/mismatch", body={"value_schema": '"int"', "records": [{"value": "not an int"}]},
        content_type=AVRO_V2),
    ("v2", RestErrorCode.INVALID_CONSUMER_CONFIG): lambda b: call(
        "POST", f"{b}/consumers/g", body={"name": "bad", "auto.offset.reset": "sideways"}, content_type=V2),
    ("v2 v3", RestErrorCode.TOO_MANY_REQUESTS): _too_many_instances,
    ("registry", RegistryErrorCode.SUBJECT_NOT_FOUND): lambda b: call("GET", f"{b}/subjects/nope/versions"),
    ("registry", RegistryErrorCode.VERSION_NOT_FOUND):
        lambda b: (_registered(b, "one"), call("GET", f"{b}/subjects/one/versions/99"))[1],
    ("registry", RegistryErrorCode.SCHEMA_NOT_FOUND): lambda b: call("GET", f"{b}/schemas/ids/99999"),
    ("registry", RegistryErrorCode.SUBJECT_SOFT_DELETED): _soft_deleted_twice,
    ("registry", RegistryErrorCode.SUBJECT_NOT_SOFT_DELETED):
        lambda b: (_registered(b, "live"), call("DELETE", f"{b}/subjects/live?permanent=true"))[1],
    ("registry", RegistryErrorCode.SCHEMAVERSION_SOFT_DELETED): _version_soft_deleted_twice,
    ("registry", RegistryErrorCode.SCHEMAVERSION_NOT_SOFT_DELETED):
        lambda b: (_registered(b, "vlive"), call("DELETE", f"{b}/subjects/vlive/versions/1?permanent=true"))[1],
    ("registry", RegistryErrorCode.SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED):
        lambda b: call("GET", f"{b}/config/unconfigured"),
    ("registry", RegistryErrorCode.SUBJECT_LEVEL_MODE_NOT_CONFIGURED): lambda b: call("GET", f"{b}/mode/unconfigured"),
    ("registry", RegistryErrorCode.INCOMPATIBLE_SCHEMA): _incompatible,
    ("registry", RegistryErrorCode.INVALID_SCHEMA): lambda b: _register(b, "broken", "{not json"),
    ("registry", RegistryErrorCode.INVALID_VERSION): lambda b: call("GET", f"{b}/subjects/one/versions/first"),
    ("registry", RegistryErrorCode.INVALID_COMPATIBILITY_LEVEL):
        lambda b: call("PUT", f"{b}/config", body={"compatibility": "SIDEWAYS"}, content_type=SR),
    ("registry", RegistryErrorCode.INVALID_MODE):
        lambda b: call("PUT", f"{b}/mode", body={"mode": "SIDEWAYS"}, content_type=SR),
    ("registry", RegistryErrorCode.OPERATION_NOT_PERMITTED): _read_only_write,
    ("registry", RegistryErrorCode.REFERENCE_EXISTS): _referenced,
    ("registry", RegistryErrorCode.ID_DOES_NOT_MATCH): _import_taken_id,
    ("registry", RegistryErrorCode.INVALID_SUBJECT): lambda b: _register(b, "bad%01subject", _record(("a", "int"))),
}
# Triggered on a second broker, with an authorizer (below)
ON_A_SECURED_BROKER = {("v2 v3", RestErrorCode.KAFKA_AUTHORIZATION)}


def _key(row: ConfluentError) -> tuple[str, int]:
    return row.api, int(row.code)


TRIGGERED = [row for row in CONFLUENT_ERRORS if not row.untriggered and _key(row) not in ON_A_SECURED_BROKER]


def test_every_code_has_a_trigger_or_a_why() -> None:
    for row in CONFLUENT_ERRORS:
        has_trigger = _key(row) in TRIGGERS or _key(row) in ON_A_SECURED_BROKER
        assert has_trigger != bool(row.untriggered), (row, "needs a trigger here or a why in the table, not both")


@pytest.mark.parametrize("row", TRIGGERED, ids=lambda r: f"{r.api.replace(' ', '+')}-{int(r.code)}")
def test_each_documented_error_is_answered_with_its_status_and_code(kelp: BrokerProcess, row: ConfluentError) -> None:
    triggers = TRIGGERS[_key(row)]
    for trigger in triggers if isinstance(triggers, tuple) else (triggers,):
        reply = trigger(kelp.http_url)
        body = reply.json()
        assert (reply.status, body.get("error_code")) == (row.status, row.code), (row.meaning, trigger, reply)
        assert body.get("message"), reply


def test_an_authorization_failure_is_40301_on_the_rest_proxy_and_kafkas_on_kelps_own_api(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Confluent's KafkaExceptionMapper answers any AuthorizationException 403/40301; Kelp's /admin/v1 keeps
    Kafka's TOPIC_AUTHORIZATION_FAILED (29). Either message names the principal, the operation and the topic."""
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-confluent-errors-acl"), settings={
        "authorizer.class.name": KELP_AUTHORIZER, "super.users": "User:nobody"})
    bp.start()
    try:
        base = bp.http_url
        for url, code in ((f"{base}/topics/secret", RestErrorCode.KAFKA_AUTHORIZATION),
                          (f"{_cluster(base)}/topics/secret", RestErrorCode.KAFKA_AUTHORIZATION),
                          (f"{base}/admin/v1/topics/secret", 29)):
            reply = call("GET", url)
            body = reply.json()
            assert (reply.status, body["error_code"]) == (403, code), reply
            assert "User:ANONYMOUS" in body["message"] and "DESCRIBE topic 'secret'" in body["message"], body
    finally:
        bp.kill()
