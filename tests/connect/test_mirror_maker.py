"""MirrorMaker 2 (Kafka 4.3.1, dedicated mode) mirrors one Kelp cluster to another: records, checkpoints,
offset syncs and translated consumer-group offsets.

Why: MirrorMaker 2 is how Kafka users copy topics between clusters and move consumers across: three Connect
connectors in one driver (`MirrorMaker mm2.properties`) — MirrorSourceConnector copies records (partition
for partition) and emits offset syncs, MirrorCheckpointConnector turns the source cluster's committed group
offsets into checkpoints and, with `sync.group.offsets.enabled`, into the group's committed offsets on the
target, MirrorHeartbeatConnector beats — with Connect's compacted internal topics on the target. Here a
source broker holds `RECORDS` keyed records in a 3-partition topic and a consumer group's offsets part-way
through two partitions and at the end of the third; MirrorMaker 2 runs to a second broker; the target must
then hold `src.orders` record for record (key, value, partition order), checkpoints of the group, offset syncs
on the source, and the group's offsets on the target translated as MirrorMaker translates them: never past
the source position (a consumer moved over skips nothing), exactly at the end of a partition, and part-way
to the newest offset sync at or below the position that MirrorMaker's sync store kept (KAFKA-14666 keeps an
exponentially thinning history, so a position far behind the newest sync translates to an earlier one).
"""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path

import pytest

from kelp import kafka_connect
from tests.connect.support import MirrorMakerProcess
from tests.support.broker_process import BrokerProcess
from tests.transactions.system_support import wait_until

RECORDS, PARTITIONS, TOPIC, GROUP = 5000, 3, "orders", "mm2-app"
# The group's position on the source, per partition: near the end of partition 0, part-way through 1, at the
# end of 2 (RECORDS // PARTITIONS + 1 records in partition 0, RECORDS // PARTITIONS in 1 and 2).
COMMITTED = {0: RECORDS // PARTITIONS - 10, 1: 1234, 2: RECORDS // PARTITIONS}
SETTINGS = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": 500, "transaction.state.log.num.partitions": 3}

pytestmark = [pytest.mark.clients, pytest.mark.timeout(240)]


def _read_all(bootstrap: str, topic: str, partitions: int, at_least: int, timeout: float = 60.0
              ) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """(key, value) per partition from offset 0 to the end, once at least `at_least` records in all arrived."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    out: dict[int, list[tuple[bytes | None, bytes | None]]] = {p: [] for p in range(partitions)}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        ended: set[int] = set()
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                if len(ended) == partitions and sum(map(len, out.values())) >= at_least:
                    break
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(msg.partition())
                continue
            ended.discard(msg.partition())
            out[msg.partition()].append((msg.key(), msg.value()))
    finally:
        c.close()
    return out


def _count(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{time.monotonic_ns()}"})
    try:
        meta = c.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return 0
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta.partitions)
    finally:
        c.close()


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset
                for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
    finally:
        c.close()


def _checkpoint(key: bytes, value: bytes) -> tuple[str, str, int, int, int]:
    """MirrorMaker's Checkpoint record: key (group, topic, partition), value (version, upstream offset,
    downstream offset, metadata) in Kafka's protocol types (int16-length strings, big-endian ints)."""
    (n,) = struct.unpack_from(">h", key, 0)
    group = key[2:2 + n].decode()
    (m,) = struct.unpack_from(">h", key, 2 + n)
    topic = key[4 + n:4 + n + m].decode()
    (partition,) = struct.unpack_from(">i", key, 4 + n + m)
    _version, upstream, downstream = struct.unpack_from(">hqq", value, 0)
    return group, topic, partition, upstream, downstream


def test_mirror_maker_2_mirrors_records_checkpoints_and_group_offsets(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: MirrorMaker 2 cannot run")
    from confluent_kafka import Consumer, Producer, TopicPartition

    kafka_connect.fetch()
    src = BrokerProcess(tmp_path / "src", settings=SETTINGS).start()
    dst = BrokerProcess(tmp_path / "dst", settings=SETTINGS).start()
    mm2: MirrorMakerProcess | None = None
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": src.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        p = Producer({"bootstrap.servers": src.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for i in range(RECORDS):
            p.produce(TOPIC, f"v-{i}".encode(), f"k-{i}".encode(), partition=i % PARTITIONS)
        assert p.flush(60) == 0
        app = Consumer({"bootstrap.servers": src.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
        app.commit(offsets=[TopicPartition(TOPIC, part, off) for part, off in COMMITTED.items()], asynchronous=False)
        app.close()

        mm2 = MirrorMakerProcess(tmp_path, {
            "clusters": "src, dst", "src.bootstrap.servers": src.bootstrap, "dst.bootstrap.servers": dst.bootstrap,
            "src->dst.enabled": "true", "dst->src.enabled": "false", "src->dst.topics": TOPIC,
            "src->dst.groups": GROUP, "tasks.max": 2, "replication.factor": 1,
            "checkpoints.topic.replication.factor": 1, "heartbeats.topic.replication.factor": 1,
            "offset-syncs.topic.replication.factor": 1, "offset.storage.replication.factor": 1,
            "status.storage.replication.factor": 1, "config.storage.replication.factor": 1,
            "refresh.topics.interval.seconds": 1, "refresh.groups.interval.seconds": 1,
            "emit.checkpoints.interval.seconds": 1, "emit.heartbeats.interval.seconds": 1,
            "sync.group.offsets.enabled": "true", "sync.group.offsets.interval.seconds": 1,
            "sync.topic.acls.enabled": "false", "offset.lag.max": 0,
        })
        mm2.start()
        remote = f"src.{TOPIC}"
        wait_until(f"{RECORDS} records in {remote} on the target", lambda: _count(dst.bootstrap, remote) >= RECORDS,
                 timeout=120, detail=mm2.log_tail)
        def translated() -> dict[int, int] | None:
            """The target group's offsets once MirrorMaker's sync store has the newest syncs (the partition whose
            position is its end translates exactly then)."""
            got = _committed(dst.bootstrap, GROUP, remote)
            done = got.get(2) == COMMITTED[2] and all(got.get(part, -1) > 0 for part in COMMITTED)
            return got if done else None

        moved = wait_until("the group's offsets translated on the target", translated, timeout=90,
                         detail=lambda: f"{_committed(dst.bootstrap, GROUP, remote)} {mm2.log_tail() if mm2 else ''}")
        assert all(0 < moved[part] <= off for part, off in COMMITTED.items()), (moved, COMMITTED)
        assert moved[2] == COMMITTED[2], (moved, COMMITTED)  # at the end of the partition: exact
        assert mm2.alive(), mm2.log_tail()
        mirrored = _read_all(dst.bootstrap, remote, PARTITIONS, RECORDS)
        original = _read_all(src.bootstrap, TOPIC, PARTITIONS, RECORDS)
        for part in range(PARTITIONS):
            assert mirrored[part] == original[part], f"partition {part} differs after {len(mirrored[part])} records"
        assert sum(map(len, mirrored.values())) == RECORDS

        checkpoints_topic = "src.checkpoints.internal"
        checkpoints = _read_all(dst.bootstrap, checkpoints_topic, 1, 1)[0]
        latest = {}
        for key, value in checkpoints:
            assert key is not None and value is not None
            group, topic, partition, upstream, downstream = _checkpoint(key, value)
            latest[(group, topic, partition)] = (upstream, downstream)
        # the newest checkpoint of each partition: the source position and the offset the target group got
        assert {(GROUP, remote, part): (off, moved[part]) for part, off in COMMITTED.items()}.items() \
            <= latest.items(), latest
        syncs = _count(src.bootstrap, "mm2-offset-syncs.dst.internal")
        assert syncs > 0, "no offset syncs on the source"
        assert _count(dst.bootstrap, "heartbeats") > 0, "MirrorHeartbeatConnector wrote no heartbeat"
        print(f"\nmirror maker 2: {RECORDS} records mirrored, {len(checkpoints)} checkpoints, {syncs} offset syncs, "
              f"group offsets {COMMITTED} translated to {moved}")
    finally:
        if mm2 is not None:
            mm2.kill()
        src.kill()
        dst.kill()
