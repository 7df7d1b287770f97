"""Unit tests of the broker core without a process: config, topic names, producer state."""

from __future__ import annotations

import pytest

from kelp.broker.replica.producer_state import ProducerStateManager
from kelp.broker.topic_manager import TopicManager, validate_topic_name
from kelp.config.broker import BrokerConfig, validate_topic_configs
from kelp.errors import (
    ConfigError,
    InvalidProducerEpochError,
    InvalidTopicError,
    OutOfOrderSequenceError,
    UnknownTopicOrPartitionError,
)


def test_config_precedence_file_env_flags(tmp_path) -> None:
    f = tmp_path / "broker.yaml"
    f.write_text("num.partitions: 2\nlog:\n  retention:\n    hours: 5\nport: 1111\n")
    cfg = BrokerConfig.load(file=f, env={"KELP_NUM_PARTITIONS": "3", "KELP_LOG_DIRS": "/a,/b"},
                            overrides={"port": 0})
    assert cfg["num.partitions"] == 3  # env over file
    assert cfg["port"] == 0  # flag over file
    assert [str(d) for d in cfg.log_dirs] == ["/a", "/b"]
    assert cfg.retention_ms() == 5 * 3_600_000
    assert cfg.default_topic_config()["retention.ms"] == str(5 * 3_600_000)


def test_listeners_sets_host_and_port() -> None:
    cfg = BrokerConfig.load(env={}, overrides={"listeners": "PLAINTEXT://0.0.0.0:19092"})
    assert (cfg["host"], cfg["port"]) == ("0.0.0.0", 19092)
    cfg = BrokerConfig.load(env={}, overrides={"listeners": "PLAINTEXT://:9093", "port": 0})
    assert cfg["port"] == 0  # an explicit port flag wins


@pytest.mark.parametrize("key,value,needle", [
    ("num.partitions", "many", "'num.partitions'"),
    ("auto.create.topics.enable", "perhaps", "'auto.create.topics.enable'"),
    ("log.retention.bytes", "-7", "'log.retention.bytes'"),
    ("no.such.key", "1", "'no.such.key'"),
])
def test_config_errors_name_the_key(key: str, value: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        BrokerConfig.load(env={}, overrides={key: value})
    assert needle in str(err.value)


def test_topic_config_validation() -> None:
    assert validate_topic_configs({"retention.ms": "1000", "cleanup.policy": "delete,compact"}) == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete"}
    with pytest.raises(ConfigError, match="'segment.bytes' for topic 't'"):
        validate_topic_configs({"segment.bytes": "-1"}, topic="t")
    with pytest.raises(ConfigError, match="unknown topic config 'retention.mss'"):
        validate_topic_configs({"retention.mss": "1"}, topic="t")


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad name", "bad/name", "é"])
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_valid_topic_names() -> None:
    for name in ["a", "A.b_c-1", "a" * 249, "__consumer_offsets"]:
        assert validate_topic_name(name) == name


async def test_auto_create_respects_config(tmp_path) -> None:
    cfg = BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path), "auto.create.topics.enable": "false"})
    tm = TopicManager(cfg, None)
    with pytest.raises(UnknownTopicOrPartitionError, match="auto.create.topics.enable is false"):
        await tm.ensure_topic("x")
    with pytest.raises(InvalidTopicError):
        await tm.ensure_topic("x y")


def test_producer_state_sequences() -> None:
    ps = ProducerStateManager("t", 0)
    assert ps.check(7, 0, 0, 4) is None  # unknown producer: accepted
    ps.update(7, 0, 0, 4, 100, 104, 1)
    dup = ps.check(7, 0, 0, 4)
    assert dup is not None and (dup.first_offset, dup.last_offset) == (100, 104)
    with pytest.raises(OutOfOrderSequenceError, match="expected 5"):
        ps.check(7, 0, 6, 6)
    for i in range(5, 11):
        assert ps.check(7, 0, i, i) is None
        ps.update(7, 0, i, i, 100 + i, 100 + i, 1)
    # (0..4) fell out of the last five batches: no longer a known duplicate, so a gap
    with pytest.raises(OutOfOrderSequenceError):
        ps.check(7, 0, 0, 4)
    assert ps.check(7, 0, 10, 10) is not None  # still cached
    # a new epoch must start at sequence 0; afterwards the old epoch is fenced
    with pytest.raises(OutOfOrderSequenceError, match="expected 0"):
        ps.check(7, 1, 3, 3)
    assert ps.check(7, 1, 0, 0) is None
    ps.update(7, 1, 0, 0, 200, 200, 1)
    with pytest.raises(InvalidProducerEpochError):
        ps.check(7, 0, 11, 11)


def test_producer_state_rebuilt_from_batches() -> None:
    from tests.support.kafka_wire import make_batch

    data = bytearray()
    for seq, count in ((0, 2), (2, 3)):
        b = bytearray(make_batch([(None, b"v")] * count, producer_id=9, producer_epoch=1, base_sequence=seq))
        b[0:8] = (seq).to_bytes(8, "big")  # base offset = sequence here
        data += b
    ps = ProducerStateManager("t", 0)
    assert ps.load_batches(data) == 2
    dup = ps.check(9, 1, 2, 4)
    assert dup is not None and (dup.first_offset, dup.last_offset) == (2, 4)
    assert ps.check(9, 1, 5, 5) is None


def test_broker_process_refuses_bad_config_naming_the_key(broker_factory) -> None:
    from tests.support.broker_process import BrokerStartError

    with pytest.raises(BrokerStartError) as err:
        broker_factory(settings={"log.segment.bytes": "huge"})
    assert "'log.segment.bytes'" in str(err.value) and "exited with code 2" in str(err.value)


def test_a_failed_checkpoint_write_is_an_error_naming_the_file(tmp_path, caplog, monkeypatch) -> None:
    import logging

    from kelp.broker.replica.manager import ReplicaManager
    from kelp.broker.storage import Log
    from kelp.broker.storage import checkpoint as checkpoint_module
    from kelp.config.log_config import LogConfig
    from kelp.records.build import build_batch
    from kelp.records.record import Record

    lg = Log.open(tmp_path / "t-0", LogConfig())
    lg.append_as_leader(build_batch([Record(b"k", b"v", timestamp=1)]), leader_epoch=0)
    lg.high_watermark = 1

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_module, "write_atomically", full_disk)
    with caplog.at_level(logging.DEBUG):
        assert ReplicaManager.write_checkpoints([lg]) == 0
    (record,) = [r for r in caplog.records if "checkpoint" in r.getMessage()]
    assert record.levelno == logging.ERROR
    assert str(tmp_path / "t-0" / "partition.checkpoint") in record.getMessage()
    assert "No space left on device" in record.getMessage()
    monkeypatch.undo()
    lg.close()
    assert ReplicaManager.write_checkpoints([lg]) == 1  # a closed log: nothing to keep, nothing logged


def test_producer_state_expires_producers_idle_past_the_expiration() -> None:
    ps = ProducerStateManager("t", 0)
    ps.update(1, 0, 0, 0, 0, 0, timestamp=1_000)
    ps.update(2, 0, 0, 0, 1, 1, timestamp=1_000)
    ps.update(2, 0, 1, 1, 2, 2, timestamp=5_000)  # producer 2 wrote again later
    assert ps.expire(now_ms=6_000, expiration_ms=2_000) == 1
    assert ps.last_sequence(1) is None and ps.last_sequence(2) == 1
    assert ps.check(1, 0, 7, 7) is None  # forgotten: any sequence is accepted as from a new producer
    with pytest.raises(OutOfOrderSequenceError):
        ps.check(2, 0, 7, 7)
    assert ps.expire(now_ms=7_000, expiration_ms=2_000) == 1 and len(ps) == 0
