"""Group configs as Kafka 4 serves them (issue 36): DescribeConfigs / IncrementalAlterConfigs / AlterConfigs on
GROUP resources (type 32), the keys Kafka's GroupConfig takes, checked within the broker's bounds.

Attacked: a value out of bounds or an unknown key beside a valid one answers INVALID_CONFIG naming the key and
applies nothing of the resource; a value that is not of its type, a negative duration. What a group's configs
do: `share.auto.offset.reset=earliest` starts a new share group at the log start (the default starts at the log
end), the group's lock duration and heartbeat intervals are what share and consumer members are told; all of it
after a broker restart (the configs are in the metadata log, not in the coordinator). The rules alone (parsing
ISO-8601 durations, the bounds, the metadata image's replay and snapshot) are tested without a broker.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from kafka.protocol.admin import AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest

from kelp.broker.kafka.messages import ConsumerGroupHeartbeatRequest
from kelp.broker.metadata.group_configs import (
    ResetStrategy,
    check_bounds,
    checked_group_configs,
    effective,
    group_config_record,
    parse_reset,
)
from kelp.broker.metadata.image import (
    MetadataCorrupt,
    MetadataImage,
    apply_records,
    image_from_snapshot,
    snapshot_to_json,
)
from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError, ErrorCode
from tests.broker.helpers import create_topic_wire, produce
from tests.support.broker_process import BrokerProcess
from tests.support.kafka_wire import WireClient, make_batch

from .share_wire import ShareMember, acquired_offsets

GROUP_RESOURCE = 32
SETTINGS = {"offsets.topic.num.partitions": 1, "share.coordinator.state.topic.num.partitions": 3}
SET, DELETE = 0, 1


# -- the rules alone -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("earliest", ResetStrategy("earliest")), ("LATEST", ResetStrategy("latest")),
    ("by_duration:PT1H", ResetStrategy("by_duration", 3_600_000)),
    ("by_duration:P1DT2M", ResetStrategy("by_duration", 86_400_000 + 120_000)),
    ("by_duration:PT0.5S", ResetStrategy("by_duration", 500)),
    ("by_duration:pt10m", ResetStrategy("by_duration", 600_000)),
])
def test_share_auto_offset_reset_values_kafka_takes(text: str, expected: ResetStrategy) -> None:
    assert parse_reset(text) == expected


@pytest.mark.parametrize("text", ["soonest", "", "by_duration:", "by_duration:PT", "by_duration:P1DT",
                                  "by_duration:1H", "by_duration:-PT1H", "by_duration:PT-5S", "by_duration: PT1H x"])
def test_share_auto_offset_reset_values_kafka_refuses(text: str) -> None:
    with pytest.raises(ConfigError, match="share.auto.offset.reset"):
        parse_reset(text)


def test_names_types_and_floors_are_checked_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="Unknown group config name: share.isolation.level"):
        checked_group_configs({"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"})
    with pytest.raises(ConfigError, match="share.delivery.count.limit: Not a number of type INT"):
        checked_group_configs({"share.delivery.count.limit": "five"})
    with pytest.raises(ConfigError, match="share.record.lock.duration.ms: Value must be at least 1000"):
        checked_group_configs({"share.record.lock.duration.ms": "999"})
    assert checked_group_configs({"share.delivery.count.limit": " 04 ", "consumer.session.timeout.ms": None}) == {
        "share.delivery.count.limit": "4", "consumer.session.timeout.ms": None}


def test_bounds_are_the_brokers_and_a_session_outlasts_its_heartbeat(tmp_path: Any) -> None:
    cfg = BrokerConfig.load(env={}, overrides={
        "log.dirs": str(tmp_path), "group.share.max.delivery.count.limit": 6,
        "group.consumer.min.session.timeout.ms": 1000, "group.consumer.min.heartbeat.interval.ms": 900,
        "group.consumer.heartbeat.interval.ms": 2000, "group.consumer.session.timeout.ms": 3000})
    check_bounds({"share.delivery.count.limit": "6"}, cfg)
    with pytest.raises(ConfigError, match=r"^share.delivery.count.limit must be in the range 2 to 6 inclusive.$"):
        check_bounds({"share.delivery.count.limit": "7"}, cfg)
    with pytest.raises(ConfigError, match="share.record.lock.duration.ms must be in the range 15000 to 60000"):
        check_bounds({"share.record.lock.duration.ms": "1000"}, cfg)
    # the other half of the pair is the broker's when the group has none (heartbeat 2000 here)
    with pytest.raises(ConfigError, match="consumer.session.timeout.ms must be greater than "
                                          "consumer.heartbeat.interval.ms"):
        check_bounds({"consumer.session.timeout.ms": "1500"}, cfg)
    check_bounds({"consumer.session.timeout.ms": "1500", "consumer.heartbeat.interval.ms": "1000"}, cfg)
    # what a group uses: its own value clamped to bounds that moved since, else the broker's
    assert effective({"share.delivery.count.limit": "9"}, "share.delivery.count.limit", cfg) == 6
    assert effective({}, "consumer.session.timeout.ms", cfg) == 3000


def test_the_image_replays_and_snapshots_group_configs() -> None:
    image, _ = apply_records(MetadataImage(), [
        group_config_record("g1", {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "4"}),
        group_config_record("g2", {"consumer.session.timeout.ms": "50000"})], epoch=0, offset=0)
    image, _ = apply_records(image, [group_config_record("g2", {"consumer.session.timeout.ms": None}),
                                     group_config_record("g1", {"share.delivery.count.limit": "3"})], epoch=0, offset=1)
    assert image.group_configs == {"g1": {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "3"}}
    assert image_from_snapshot(snapshot_to_json(image)).group_configs == image.group_configs
    with pytest.raises(MetadataCorrupt, match="Unknown group config name: nope"):
        apply_records(image, [group_config_record("g1", {"nope": "1"})], epoch=0, offset=2)
    with pytest.raises(MetadataCorrupt, match="Group name must not be empty"):
        apply_records(image, [group_config_record("", {"share.delivery.count.limit": "3"})], epoch=0, offset=2)


# -- on the wire -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-group-configs"), settings=SETTINGS)
    bp.start()
    yield bp
    bp.kill()


def alter(bp: BrokerProcess, group: str, changes: dict[str, str | None], *, validate_only: bool = False) -> Any:
    """IncrementalAlterConfigs of one GROUP resource (None: DELETE); its one result."""
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    with WireClient(bp.bootstrap) as c:
        return c.request(IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[R(
            resource_type=GROUP_RESOURCE, resource_name=group, configs=[
                C(name=k, config_operation=DELETE if v is None else SET, value=v) for k, v in changes.items()])]),
            1).responses[0]


def describe(bp: BrokerProcess, group: str) -> dict[str, tuple[str, int]]:
    """DescribeConfigs of a GROUP resource: key -> (value, ConfigSource)."""
    R = DescribeConfigsRequest.DescribeConfigsResource
    with WireClient(bp.bootstrap) as c:
        res = c.request(DescribeConfigsRequest(resources=[R(resource_type=GROUP_RESOURCE, resource_name=group,
                                                            configuration_keys=None)], include_synonyms=True), 4)
    result = res.results[0]
    assert result.error_code == 0, result
    return {e.name: (e.value, e.config_source) for e in result.configs}


def test_a_groups_configs_are_set_described_and_deleted(broker: BrokerProcess) -> None:
    before = describe(broker, "gc-plain")  # a group that does not exist is described as Kafka does: defaults
    assert before == {"consumer.heartbeat.interval.ms": ("5000", 5), "consumer.session.timeout.ms": ("45000", 5),
                      "share.auto.offset.reset": ("latest", 5), "share.delivery.count.limit": ("5", 5),
                      "share.heartbeat.interval.ms": ("5000", 5), "share.record.lock.duration.ms": ("30000", 5),
                      "share.session.timeout.ms": ("45000", 5)}
    assert alter(broker, "gc-plain", {"share.record.lock.duration.ms": "20000"}, validate_only=True).error_code == 0
    assert describe(broker, "gc-plain") == before  # validate_only changes nothing
    r = alter(broker, "gc-plain", {"share.record.lock.duration.ms": "20000", "share.auto.offset.reset": "earliest"})
    assert r.error_code == 0, r
    after = describe(broker, "gc-plain")
    assert after["share.record.lock.duration.ms"] == ("20000", 8)
    assert after["share.auto.offset.reset"] == ("earliest", 8)
    assert after["share.delivery.count.limit"] == ("5", 5)
    assert alter(broker, "gc-plain", {"share.record.lock.duration.ms": None}).error_code == 0
    assert describe(broker, "gc-plain")["share.record.lock.duration.ms"] == ("30000", 5)


@pytest.mark.parametrize("changes, named", [
    ({"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "999999"},
     "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
    ({"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "1"}, "share.delivery.count.limit"),
    ({"share.auto.offset.reset": "earliest", "share.isolation.levels": "read_committed"},
     "Unknown group config name: share.isolation.levels"),
    ({"share.auto.offset.reset": "by_duration:-PT1H"}, "Negative duration"),
    ({"share.auto.offset.reset": "earliest", "consumer.session.timeout.ms": "abc"},
     "consumer.session.timeout.ms: Not a number of type INT"),
])
def test_a_bad_key_or_value_is_invalid_config_naming_it_and_nothing_is_applied(
        broker: BrokerProcess, changes: dict[str, str], named: str) -> None:
    r = alter(broker, "gc-bad", changes)
    assert (r.error_code, named in (r.error_message or "")) == (ErrorCode.INVALID_CONFIG, True), r
    assert {v[1] for v in describe(broker, "gc-bad").values()} == {5}  # every key still the broker's default


def test_legacy_alter_configs_replaces_a_groups_configs(broker: BrokerProcess) -> None:
    assert alter(broker, "gc-legacy", {"share.delivery.count.limit": "3", "share.auto.offset.reset": "earliest"}
                 ).error_code == 0
    LR = AlterConfigsRequest.AlterConfigsResource
    with WireClient(broker.bootstrap) as c:
        r = c.request(AlterConfigsRequest(validate_only=False, resources=[LR(
            resource_type=GROUP_RESOURCE, resource_name="gc-legacy",
            configs=[LR.AlterableConfig(name="share.delivery.count.limit", value="4")])]), 2).responses[0]
    assert r.error_code == 0, r
    got = describe(broker, "gc-legacy")
    assert got["share.delivery.count.limit"] == ("4", 8) and got["share.auto.offset.reset"] == ("latest", 5)


def _write(bp: BrokerProcess, topic: str, count: int) -> None:
    with WireClient(bp.bootstrap) as c:
        for i in range(count):
            assert produce(c, topic, make_batch([(None, f"v{i}".encode())]), acks=-1)[0] == 0


def _first_fetch(bp: BrokerProcess, group: str, topic: str) -> tuple[list[int], Any]:
    m = ShareMember(bp.bootstrap, group, "m", topic)
    try:
        resp = m.fetch(max_wait_ms=300)
        assert resp.error_code == 0, resp
        m.fetch(epoch=-1)
        return acquired_offsets(resp), resp
    finally:
        m.close()


def test_earliest_starts_a_new_share_group_at_the_log_start_and_holds_after_a_restart(broker: BrokerProcess) -> None:
    assert create_topic_wire(broker.bootstrap, "gc-earliest") == 0
    _write(broker, "gc-earliest", 5)
    assert alter(broker, "gc-early", {"share.auto.offset.reset": "earliest",
                                      "share.record.lock.duration.ms": "16000"}).error_code == 0
    got, resp = _first_fetch(broker, "gc-early", "gc-earliest")
    assert got == [0, 1, 2, 3, 4]
    assert resp.acquisition_lock_timeout_ms == 16000  # the group's lock duration, not the broker's 30000
    assert _first_fetch(broker, "gc-late", "gc-earliest")[0] == []  # no config: latest, the log end
    broker.restart(kill=True)
    assert describe(broker, "gc-early")["share.auto.offset.reset"] == ("earliest", 8)
    assert _first_fetch(broker, "gc-early-2", "gc-earliest")[0] == []
    assert alter(broker, "gc-early-2", {"share.auto.offset.reset": "earliest"}).error_code == 0
    assert _first_fetch(broker, "gc-early-2", "gc-earliest")[0] == []  # an existing share-partition keeps its start
    assert alter(broker, "gc-early-3", {"share.auto.offset.reset": "by_duration:PT1H"}).error_code == 0
    assert _first_fetch(broker, "gc-early-3", "gc-earliest")[0] == [0, 1, 2, 3, 4]  # written within the hour


def test_members_are_told_their_groups_heartbeat_interval(broker: BrokerProcess) -> None:
    assert create_topic_wire(broker.bootstrap, "gc-beat") == 0
    assert alter(broker, "gc-share-beat", {"share.heartbeat.interval.ms": "7000"}).error_code == 0
    assert alter(broker, "gc-consumer-beat", {"consumer.heartbeat.interval.ms": "6000"}).error_code == 0
    m = ShareMember(broker.bootstrap, "gc-share-beat", "m", "gc-beat")
    try:
        m.find_coordinator()
        hb = m.heartbeat()
        assert (hb.error_code, hb.heartbeat_interval_ms) == (0, 7000), hb
        assert m.heartbeat(epoch=-1).error_code == 0
    finally:
        m.close()
    with WireClient(broker.bootstrap) as c:
        hb = c.request(ConsumerGroupHeartbeatRequest(
            group_id="gc-consumer-beat", member_id="m1", member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=["gc-beat"], topic_partitions=[]), 1)
        assert (hb.error_code, hb.heartbeat_interval_ms) == (0, 6000), hb
