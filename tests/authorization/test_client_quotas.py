"""Client quotas in the metadata (issue 33, KIP-546): AlterClientQuotas records them through the controller,
DescribeClientQuotas finds them with Kafka's filters, a snapshot keeps them, bad input is INVALID_REQUEST.

What a user relies on: `kafka-configs --entity-type users|clients|ips --alter --add-config producer_byte_rate=...`
sets a quota every broker sees (it is in the metadata image, replayed from the log and kept by snapshots);
an entry Kafka refuses is answered INVALID_REQUEST with why and changes nothing while the other entries of the
request apply; validate_only changes nothing; `--describe` finds exactly what Kafka's ClientQuotasImage finds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from kelp.broker.metadata.client_quotas import InvalidQuota, checked_entity, describe_quotas, table_from_records
from kelp.broker.metadata.image import (
    MetadataCorrupt,
    MetadataImage,
    apply_records,
    image_from_snapshot,
    snapshot_to_json,
)
from kelp.errors import ErrorCode
from kelp.security.principal import KafkaPrincipal
from tests.authorization.harness import InProcessBroker

A = AlterClientQuotasRequest.EntryData
D = DescribeClientQuotasRequest.ComponentData
EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def entry(entity: dict[str, str | None], *ops: tuple[str, float | None]) -> A:
    return A(entity=[A.EntityData(entity_type=k, entity_name=v) for k, v in entity.items()],
             ops=[A.OpData(key=k, value=v if v is not None else 0.0, remove=v is None) for k, v in ops])


def alter(*entries: A, validate_only: bool = False) -> AlterClientQuotasRequest:
    return AlterClientQuotasRequest(entries=list(entries), validate_only=validate_only)


def describe(*components: tuple[str, int, str | None], strict: bool = False) -> DescribeClientQuotasRequest:
    return DescribeClientQuotasRequest(components=[D(entity_type=t, match_type=m, match=n) for t, m, n in components],
                                       strict=strict)


def found(answer) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert answer.error_code == 0, answer.error_message
    return {tuple(sorted((e.entity_type, e.entity_name) for e in item.entity)): {v.key: v.value for v in item.values}
            for item in answer.entries}


@pytest.fixture
async def b(tmp_path: Path):
    async with InProcessBroker(tmp_path) as broker:
        yield broker


async def test_set_described_changed_and_removed(b: InProcessBroker) -> None:
    answer = await b.call(alter(entry({"user": "alice"}, ("producer_byte_rate", 1048576.0)),
                                entry({"user": "alice", "client-id": "app"}, ("consumer_byte_rate", 2048.0),
                                      ("request_percentage", 12.5)),
                                entry({"user": None}, ("producer_byte_rate", 4096.0)),
                                entry({"client-id": None}, ("controller_mutation_rate", 3.5)),
                                entry({"ip": "10.0.0.1"}, ("connection_creation_rate", 20.0))), 1)
    assert [(e.error_code, e.error_message) for e in answer.entries] == [(0, None)] * 5
    everything = found(await b.call(describe(), 1))
    assert everything == {
        (("user", "alice"),): {"producer_byte_rate": 1048576.0},
        (("client-id", "app"), ("user", "alice")): {"consumer_byte_rate": 2048.0, "request_percentage": 12.5},
        (("user", None),): {"producer_byte_rate": 4096.0},
        (("client-id", None),): {"controller_mutation_rate": 3.5},
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 20.0},
    }
    # kafka-configs --entity-type users --entity-name alice --describe: exact, strict
    assert found(await b.call(describe(("user", EXACT, "alice"), strict=True), 1)) == {
        (("user", "alice"),): {"producer_byte_rate": 1048576.0}}
    assert set(found(await b.call(describe(("user", EXACT, "alice")), 1))) == {
        (("user", "alice"),), (("client-id", "app"), ("user", "alice"))}
    assert set(found(await b.call(describe(("user", DEFAULT, None)), 0))) == {(("user", None),)}
    assert set(found(await b.call(describe(("user", SPECIFIED, None)), 1))) == {
        (("user", "alice"),), (("client-id", "app"), ("user", "alice"))}
    # change one key, remove another: only what is named changes
    answer = await b.call(alter(entry({"user": "alice", "client-id": "app"}, ("consumer_byte_rate", 4096.0),
                                      ("request_percentage", None))), 1)
    assert answer.entries[0].error_code == 0
    assert b.parts.cluster.state.image.client_quotas[(("client-id", "app"), ("user", "alice"))] == {
        "consumer_byte_rate": 4096.0}
    await b.call(alter(entry({"user": "alice", "client-id": "app"}, ("consumer_byte_rate", None))), 1)
    assert (("client-id", "app"), ("user", "alice")) not in b.parts.cluster.state.image.client_quotas


@pytest.mark.parametrize("bad, why", [
    (entry({"user": "a", "ip": "10.0.0.1"}, ("producer_byte_rate", 1.0)), "IP tuple must not include"),
    (entry({"group": "g"}, ("producer_byte_rate", 1.0)), "Unhandled client quota entity type"),
    (entry({}, ("producer_byte_rate", 1.0)), "Invalid empty client quota entity"),
    (entry({"ip": "not-an-address"}, ("connection_creation_rate", 1.0)), "is not a valid IP"),
    (entry({"user": "a"}, ("connection_creation_rate", 1.0)), "Invalid configuration key connection_creation_rate"),
    (entry({"ip": None}, ("producer_byte_rate", 1.0)), "Invalid configuration key producer_byte_rate"),
    (entry({"user": "a"}, ("producer_byte_rate", 1.5)), "must be a Long value"),
    (entry({"user": "a"}, ("request_percentage", -1.0)), "must not be negative"),
    (entry({"user": "a"}, ("request_percentage", float("nan"))), "a finite number is required"),
    (entry({"user": "a"}, ("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)), "Duplicate quota key"),
])
async def test_a_refused_entry_changes_nothing_and_the_others_apply(b: InProcessBroker, bad: A, why: str) -> None:
    before = b.parts.cluster.state.image.offset
    answer = await b.call(alter(bad, entry({"client-id": "ok"}, ("producer_byte_rate", 100.0))), 1)
    (code, message), (ok_code, _) = [(e.error_code, e.error_message) for e in answer.entries]
    assert code == ErrorCode.INVALID_REQUEST and why in message and ok_code == 0
    assert b.parts.cluster.state.image.client_quotas == {(("client-id", "ok"),): {"producer_byte_rate": 100.0}}
    assert b.parts.cluster.state.image.offset == before + 1


async def test_validate_only_and_an_unchanged_value_write_nothing(b: InProcessBroker) -> None:
    before = b.parts.cluster.state.image.offset
    answer = await b.call(alter(entry({"user": "x"}, ("producer_byte_rate", 10.0)), validate_only=True), 1)
    assert answer.entries[0].error_code == 0 and not b.parts.cluster.state.image.client_quotas
    await b.call(alter(entry({"user": "x"}, ("producer_byte_rate", 10.0))), 1)
    await b.call(alter(entry({"user": "x"}, ("producer_byte_rate", 10.0)),
                       entry({"user": "y"}, ("request_percentage", None))), 1)
    assert b.parts.cluster.state.image.offset == before + 1  # the second alter changed nothing: no entry


@pytest.mark.parametrize("components, why", [
    ((("user", EXACT, "a"), ("user", DEFAULT, None)), "cannot appear more than once"),
    ((("ip", SPECIFIED, None), ("client-id", DEFAULT, None)), "IP filter component should not be used"),
    ((("topic", EXACT, "t"),), "Unknown entity type"),
    ((("user", 7, None),), "Unknown match type"),
])
async def test_bad_filters_are_invalid_request(b: InProcessBroker, components, why: str) -> None:
    answer = await b.call(describe(*components), 1)
    assert answer.error_code == ErrorCode.INVALID_REQUEST and why in answer.error_message


async def test_only_principals_with_the_cluster_acls_see_or_set_quotas(b: InProcessBroker) -> None:
    """Kafka: AlterClientQuotas needs ALTER_CONFIGS on the cluster, DescribeClientQuotas DESCRIBE_CONFIGS (which
    ALTER_CONFIGS implies); a client may not lift its own quota."""
    mallory = KafkaPrincipal.user("mallory")
    raise_own = alter(entry({"user": "mallory"}, ("producer_byte_rate", 1e12)))
    refused = await b.call(raise_own, 1, principal=mallory)
    assert refused.entries[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "mallory" in refused.entries[0].error_message
    assert not b.parts.cluster.state.image.client_quotas
    assert (await b.call(describe(), 1, principal=mallory)).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    for op in ("ALTER", "DESCRIBE"):  # the SCRAM APIs' operations are not the quota APIs'
        await grant(b, op, mallory)
    still = await b.call(raise_own, 1, principal=mallory)
    assert still.entries[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    await grant(b, "ALTER_CONFIGS", mallory)
    assert (await b.call(raise_own, 1, principal=mallory)).entries[0].error_code == 0
    mine = found(await b.call(describe(), 1, principal=mallory))
    assert mine == {(("user", "mallory"),): {"producer_byte_rate": 1e12}}


async def grant(b: InProcessBroker, operation: str, who: KafkaPrincipal) -> None:
    answer = await b.parts.acls.create([{"resourceType": "CLUSTER", "resourceName": "kafka-cluster",
                                         "patternType": "LITERAL", "principal": str(who), "host": "*",
                                         "operation": operation, "permission": "ALLOW"}])
    assert answer["results"] == [None]


def test_snapshots_keep_quotas_and_a_bad_record_is_corrupt() -> None:
    records = [{"type": "client_quota", "entity": [{"entity_type": "user", "entity_name": None}],
                "key": "producer_byte_rate", "value": 5.0},
               {"type": "client_quota", "entity": [{"entity_type": "ip", "entity_name": "::1"}],
                "key": "connection_creation_rate", "value": 9.0}]
    image, _ = apply_records(MetadataImage(), records, epoch=1, offset=0)  # type: ignore[arg-type]
    assert image.client_quotas == table_from_records(records)
    again = image_from_snapshot(snapshot_to_json(image))
    assert again.client_quotas == image.client_quotas
    with pytest.raises(MetadataCorrupt, match="Invalid configuration key"):
        apply_records(image, [{"type": "client_quota", "entity": [{"entity_type": "ip", "entity_name": None}],
                               "key": "producer_byte_rate", "value": 1.0}], epoch=1, offset=1)  # type: ignore[list-item]


def test_describe_strict_and_non_strict_as_kafka() -> None:
    table = {checked_entity([("user", "u")]): {"producer_byte_rate": 1.0},
             checked_entity([("user", "u"), ("client-id", "c")]): {"producer_byte_rate": 2.0},
             checked_entity([("client-id", None)]): {"producer_byte_rate": 3.0}}
    strict = describe_quotas(table, [("user", EXACT, "u")], True)
    assert [dict(e) for e, _ in strict] == [{"user": "u"}]
    loose = describe_quotas(table, [("user", EXACT, "u")], False)
    assert sorted(len(e) for e, _ in loose) == [1, 2]
    assert [dict(e) for e, _ in describe_quotas(table, [("client-id", DEFAULT, None)], False)] == [{"client-id": None}]
    assert len(describe_quotas(table, [], False)) == 3 and describe_quotas(table, [], True) == []
    with pytest.raises(InvalidQuota):
        describe_quotas(table, [("user", EXACT, None)], False)


def test_a_broker_that_is_not_the_controller_can_forward_the_change() -> None:
    """A broker forwards AlterClientQuotas to the controller over /cluster/v1 (`routing.call`); the route serves only
    the operations it lists, each with exactly the controller method's keywords."""
    import inspect

    from kelp.broker.cluster.controller import Controller, ControllerSettings
    from kelp.broker.http.cluster.routes import CONTROLLER_OPS
    from kelp.config.broker import BrokerConfig
    from tests.support.memory_metadata_log import MemoryMetadataLog

    async def nobody() -> dict:
        return {}

    async def unsent(broker: object, payload: object) -> int:
        raise AssertionError("nothing is delivered")

    controller = Controller(broker_id=0, settings=ControllerSettings(BrokerConfig.load(env={}, overrides={
        "log.dirs": "/tmp/unused"})), log=MemoryMetadataLog(), live_brokers=nobody, send=unsent,
        lease_fresh=lambda: False)
    assert "alter_client_quotas" in CONTROLLER_OPS
    for op, allowed in CONTROLLER_OPS.items():
        params = set(inspect.signature(controller.operation(op)).parameters)
        assert params == allowed, op


async def test_controller_mutation_rate_refuses_topics_beyond_it_from_v6_and_throttles_older(tmp_path: Path) -> None:
    """KIP-599: 0.1 partition mutations a second, a bucket of 11 windows (1.1): a CreateTopics v7 of ten 1-partition
    topics creates two (the second overdraws the bucket) and answers the other eight THROTTLING_QUOTA_EXCEEDED
    with the time the bucket needs to refill; v5 creates all ten and is throttled for their time; a client
    without the quota is not limited."""
    from kafka.protocol.admin import CreateTopicsRequest

    T = CreateTopicsRequest.CreatableTopic

    def create(prefix: str) -> CreateTopicsRequest:
        return CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            T(name=f"{prefix}-{i}", num_partitions=1, replication_factor=1, assignments=[], configs=[])
            for i in range(10)])

    async with InProcessBroker(tmp_path) as b:
        await b.call(alter(entry({"user": "admin"}, ("controller_mutation_rate", 0.1))), 1)
        strict = await b.call(create("strict"), 7)
        codes = [t.error_code for t in strict.topics]
        assert codes == [0] * 2 + [ErrorCode.THROTTLING_QUOTA_EXCEEDED] * 8, codes
        assert strict.topics[2].error_message == "The throttling quota has been exceeded."
        assert 5000 < strict.throttle_time_ms <= 9000  # 0.9 missing at 0.1/s, less what refilled meanwhile
        assert not b.parts.topics.exists("strict-2")
        older = await b.call(create("older"), 5)
        assert [t.error_code for t in older.topics] == [0] * 10 and older.throttle_time_ms > 90_000
        # DeleteTopics v5+ and CreatePartitions v3+ are refused alike; older versions are served and counted
        from kafka.protocol.admin import CreatePartitionsRequest, DeleteTopicsRequest

        refused = await b.call(DeleteTopicsRequest(topic_names=["older-0"], timeout_ms=5000), 5)
        assert refused.responses[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        assert b.parts.topics.exists("older-0")
        grow = CreatePartitionsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name="older-1", count=2, assignments=None)])
        assert (await b.call(grow, 3)).results[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        deleted = await b.call(DeleteTopicsRequest(topic_names=["older-0"], timeout_ms=5000), 4)
        assert deleted.responses[0].error_code == 0 and not b.parts.topics.exists("older-0")
        assert deleted.throttle_time_ms > older.throttle_time_ms + 5000  # its partition counted: ~10 s more
        await grant(b, "CREATE", KafkaPrincipal.user("other"))
        other = await b.call(create("other"), 7, principal=KafkaPrincipal.user("other"))
        assert [t.error_code for t in other.topics] == [0] * 10 and other.throttle_time_ms == 0
