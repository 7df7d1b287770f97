"""Dynamic broker configs (`kafka-configs --entity-type brokers`): in the metadata log, decided by the controller,
applied on every broker without a restart (docs/metadata.md, docs/configuration.md "Dynamic broker configs").

The image folds `broker_config` records (-1: the cluster-wide default entity; null deletes), keeps them in
snapshots and refuses a record naming a read-only, unknown or invalid key. The controller writes one entry per
change, refuses a read-only key by name and writes nothing for validate_only. A broker's effective value is its
own dynamic config > the cluster-wide default > static > default: a change reconfigures the logs of the topics
that do not override it, and a restarted broker gets them back from the log once it is registered. Driven by
hand: the real controller (in-memory log) decides, the real topic and replica managers apply on real logs.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kelp.broker.cluster.member import ClusterMember
from kelp.broker.metadata.image import (
    MetadataCorrupt,
    MetadataImage,
    apply_entry,
    broker_config_record,
    diff_images,
    image_from_log,
    snapshot_to_json,
)
from kelp.broker.replica.manager import ReplicaManager
from kelp.broker.topic_manager import TopicManager
from kelp.config.broker import BrokerConfig
from kelp.config.keys import DYNAMIC_BROKER_KEYS
from kelp.errors import ConfigError
from tests.replication.test_controller import Harness, ep
from tests.replication.test_metadata_log_order import entries_of, payload

HOUR_MS = 3_600_000


# -- the image ------------------------------------------------------------------------------
def test_only_the_topic_defaults_and_the_replication_quotas_kelp_reads_at_use_time_are_dynamic() -> None:
    assert DYNAMIC_BROKER_KEYS == {
        "log.retention.ms", "log.retention.minutes", "log.retention.hours", "log.retention.bytes",
        "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.index.interval.bytes", "log.cleanup.policy",
        "log.cleaner.delete.retention.ms", "log.cleaner.min.cleanable.ratio", "message.max.bytes",
        "min.insync.replicas", "log.message.timestamp.type", "log.flush.interval.messages",
        "log.flush.interval.ms", "unclean.leader.election.enable", "compression.type",
        "leader.replication.throttled.rate", "follower.replication.throttled.rate"}


def entry(offset: int, *records: dict) -> dict:
    return {"offset": offset, "epoch": 1, "records": list(records)}


def test_broker_config_records_fold_delete_and_survive_a_snapshot() -> None:
    image, delta = apply_entry(MetadataImage(), entry(0, broker_config_record(-1, {"log.retention.ms": "60000",
                                                                                    "min.insync.replicas": "2"})))
    assert image.broker_configs == {-1: {"log.retention.ms": "60000", "min.insync.replicas": "2"}}
    assert delta.broker_configs == image.broker_configs  # brokers learn what changed
    image, delta = apply_entry(image, entry(1, broker_config_record(3, {"log.retention.ms": "1000"}),
                                            broker_config_record(-1, {"min.insync.replicas": None})))
    assert image.broker_configs == {-1: {"log.retention.ms": "60000"}, 3: {"log.retention.ms": "1000"}}
    assert delta.broker_configs == image.broker_configs
    assert image_from_log(snapshot_to_json(image), []) == image  # the snapshot round trip keeps them
    # deleting an entity's last key drops the entity
    emptied, _ = apply_entry(image, entry(2, broker_config_record(3, {"log.retention.ms": None})))
    assert emptied.broker_configs == {-1: {"log.retention.ms": "60000"}}
    # an entry without a broker_config record tells brokers nothing about them; a snapshot that differs does
    _, quiet = apply_entry(emptied, entry(3))
    assert quiet.broker_configs is None
    assert diff_images(emptied, image).broker_configs == image.broker_configs
    assert diff_images(MetadataImage(), emptied).broker_configs == {-1: {"log.retention.ms": "60000"}}


@pytest.mark.parametrize("record, named", [
    (broker_config_record(-1, {"log.dirs": "/x"}), "log.dirs"),                     # read-only
    (broker_config_record(-1, {"log.retention.msx": "1"}), "log.retention.msx"),    # unknown
    (broker_config_record(-1, {"log.retention.ms": "banana"}), "log.retention.ms"),  # invalid value
    (broker_config_record(-1, {"log.segment.bytes": "5"}), "log.segment.bytes"),    # an invalid topic default
    (broker_config_record(-2, {"log.retention.ms": "1"}), "-2"),                    # no such entity
    ({"type": "broker_config", "broker": 1, "configs": {"log.retention.ms": 5}}, "strings"),
])
def test_the_image_refuses_a_broker_config_record_that_is_not_dynamic_or_not_valid(record, named) -> None:
    with pytest.raises(MetadataCorrupt) as info:
        apply_entry(MetadataImage(), entry(0, record))
    assert named in str(info.value)
    snap = snapshot_to_json(MetadataImage(offset=0, epoch=1))
    snap["broker_configs"] = [{"broker": record["broker"], "configs": record["configs"]}]
    with pytest.raises(MetadataCorrupt):
        image_from_log(snap, [])


# -- the controller ---------------------------------------------------------------------------
async def test_the_controller_writes_one_entry_refuses_read_only_keys_and_validate_only_writes_nothing() -> None:
    h = Harness()
    c = await h.start()
    before = c.state.image.offset
    answer = await c.broker_requests.alter_broker_configs(broker=-1, configs={"log.retention.ms": "3600000",
                                                              "unclean.leader.election.enable": "TRUE"})
    assert answer == {"broker": -1,
                      "configs": {"log.retention.ms": "3600000", "unclean.leader.election.enable": "true"},
                      "metadata_offset": before + 1}
    assert h.store.entries[before + 1]["records"] == [broker_config_record(
        -1, {"log.retention.ms": "3600000", "unclean.leader.election.enable": "true"})]

    for configs, named in (({"log.dirs": "/elsewhere"}, "log.dirs"), ({"num.partitions": "3"}, "num.partitions")):
        with pytest.raises(ConfigError, match="Cannot update these configs dynamically") as info:
            await c.broker_requests.alter_broker_configs(broker=-1, configs=configs)
        assert named in str(info.value) and "restart" in str(info.value)
    with pytest.raises(ConfigError, match="log.retention.ms"):
        await c.broker_requests.alter_broker_configs(broker=-1, configs={"log.retention.ms": "-7"})
    assert c.state.image.offset == before + 1 and len(h.store.entries) == before + 2

    checked = await c.broker_requests.alter_broker_configs(broker=-1, configs={"log.retention.ms": None},
                                                           validate_only=True)
    assert checked["configs"] == {"unclean.leader.election.enable": "true"}
    assert c.state.image.offset == before + 1 and c.state.image.broker_configs[-1]["log.retention.ms"] == "3600000"

    # a broker id no broker has is allowed (as Kafka allows it); the same values again write nothing
    await c.broker_requests.alter_broker_configs(broker=42, configs={"min.insync.replicas": "2"})
    assert c.state.image.broker_configs[42] == {"min.insync.replicas": "2"} and c.state.image.offset == before + 2
    await c.broker_requests.alter_broker_configs(broker=42, configs={"min.insync.replicas": "2"})
    assert c.state.image.offset == before + 2
    # AlterConfigs replaces the entity's whole set
    replaced = await c.broker_requests.alter_broker_configs(broker=-1, configs={"log.retention.bytes": "1000"},
                                                            replace_all=True)
    assert replaced["configs"] == {"log.retention.bytes": "1000"} == dict(c.state.image.broker_configs[-1])


async def test_the_controller_reads_unclean_leader_election_from_the_log_when_it_elects() -> None:
    """It was read once, from the static config, when the controller was made."""
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [1, 2]})
    s = h.state("t")
    await c.broker_requests.alter_partition(topic="t", partition=0, leader=1, leader_epoch=s.leader_epoch,
                            partition_epoch=s.partition_epoch, isr=[1])
    await c.broker_requests.alter_broker_configs(broker=-1, configs={"unclean.leader.election.enable": "true"})
    del h.alive[1]
    await c._on_liveness(dict(h.alive))
    assert h.state("t").leader == 2  # the out-of-sync replica, as the dynamic default now allows
    # a topic override still wins over it: the last in-sync replica gone, the partition stays offline
    await c.topic_admin.alter_configs(name="t", configs={"unclean.leader.election.enable": "false"})
    h.alive[1] = ep(1)
    await c._on_liveness(dict(h.alive))
    del h.alive[2]
    await c._on_liveness(dict(h.alive))
    assert h.state("t").leader == -1 and h.state("t").isr == (2,)


# -- a broker applying them -------------------------------------------------------------------
class Broker:
    """Broker 1's topic and replica managers on real logs, with a static log.retention.hours."""

    def __init__(self, tmp_path, **settings) -> None:
        from kelp.broker.storage import LogManager
        from kelp.config.log_config import LogConfig

        self.config = BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path), "broker.id": 1,
                                                           "cluster.dir": str(tmp_path / "cluster"), **settings})
        self.topics = TopicManager(self.config, None)
        self.logs = LogManager([tmp_path], LogConfig.from_kafka(self.config.default_topic_config()),
                               config_for=self.topics.log_config_or_none)
        self.topics.logs = self.logs
        self.replicas = ReplicaManager(self.config, self.logs, self.topics)
        self.member = ClusterMember(SimpleNamespace(config=self.config, topics=self.topics))
        self.topics.cluster = self.member

    async def follow(self, h: Harness) -> None:
        """Apply everything the controller wrote, and wait for the logs' reconfiguration (a worker thread)."""
        self.member.metadata.apply(payload(entries_of(h.store), epoch=h.controller.state.epoch))
        if self.topics.reconfiguring is not None:
            await self.topics.reconfiguring

    def retention_ms(self, topic: str) -> int:
        return self.logs.get(topic, 0).config.retention_ms


async def test_a_default_change_reconfigures_the_logs_without_an_override_and_a_broker_value_beats_it(tmp_path) -> None:
    h = Harness(2)
    c = await h.start()
    await c.topic_admin.create_topic(name="plain", assignments={0: [1, 0]})
    await c.topic_admin.create_topic(name="pinned", assignments={0: [1, 0]}, configs={"retention.ms": "60000",
                                                                            "min.insync.replicas": "1"})
    b = Broker(tmp_path, **{"log.retention.hours": 2})
    b.member.state.registered = True
    await b.follow(h)
    assert (b.retention_ms("plain"), b.retention_ms("pinned")) == (2 * HOUR_MS, 60000)

    await c.broker_requests.alter_broker_configs(broker=-1, configs={"log.retention.ms": str(HOUR_MS),
                                                                     "min.insync.replicas": "2"})
    await b.follow(h)
    assert b.config["log.retention.ms"] == HOUR_MS
    assert b.retention_ms("plain") == HOUR_MS and b.retention_ms("pinned") == 60000  # the override is left alone
    assert b.replicas.get_partition("plain", 0).min_insync_replicas == 2  # read again, not kept from creation
    assert b.replicas.get_partition("pinned", 0).min_insync_replicas == 1
    assert b.topics.effective_configs("plain")["retention.ms"] == (str(HOUR_MS), True)
    assert b.logs.default_config.retention_ms == HOUR_MS  # logs of topics it does not know yet

    # this broker's own value beats the cluster-wide default; another broker's does nothing here
    await c.broker_requests.alter_broker_configs(broker=1, configs={"log.retention.ms": str(3 * HOUR_MS)})
    await c.broker_requests.alter_broker_configs(broker=0, configs={"log.retention.ms": str(5 * HOUR_MS)})
    await b.follow(h)
    assert b.retention_ms("plain") == 3 * HOUR_MS

    # deleting both falls back to the static value
    await c.broker_requests.alter_broker_configs(broker=1, configs={"log.retention.ms": None})
    await b.follow(h)
    assert b.retention_ms("plain") == HOUR_MS
    await c.broker_requests.alter_broker_configs(broker=-1, configs={"log.retention.ms": None})
    await b.follow(h)
    assert b.retention_ms("plain") == 2 * HOUR_MS and b.config["log.retention.ms"] is None
    assert b.replicas.get_partition("plain", 0).min_insync_replicas == 2  # still the default entity's


async def test_a_restarted_broker_gets_them_back_from_the_log_once_registered(tmp_path) -> None:
    h = Harness(2)
    c = await h.start()
    await c.topic_admin.create_topic(name="plain", assignments={0: [1, 0]})
    await c.broker_requests.alter_broker_configs(broker=-1, configs={"log.retention.ms": str(HOUR_MS)})
    await c.broker_requests.alter_broker_configs(broker=1, configs={"message.max.bytes": "5000"})

    # the new process replays the log: nothing applies before the controller registered it
    b = Broker(tmp_path / "entries")
    await b.follow(h)
    assert b.config["log.retention.ms"] is None and b.topics.get("plain") is None
    h.alive[1] = ep(1, incarnation=b.member.state.identity)
    await c._on_liveness(dict(h.alive))
    await b.follow(h)
    assert b.member.state.registered
    assert b.config["log.retention.ms"] == HOUR_MS and b.config["message.max.bytes"] == 5000
    assert b.retention_ms("plain") == HOUR_MS and b.logs.get("plain", 0).config.max_message_bytes == 5000

    # one that is further behind gets a snapshot: the same values
    s = Broker(tmp_path / "snapshot")
    s.member.state.registered = True
    s.member.metadata.apply(payload([], epoch=c.state.epoch, snapshot=snapshot_to_json(c.state.image)))
    if s.topics.reconfiguring is not None:
        await s.topics.reconfiguring
    assert s.config["log.retention.ms"] == HOUR_MS and s.retention_ms("plain") == HOUR_MS
