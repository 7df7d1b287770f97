"""A partition directory is its topic's by id, not by name (issue 31 items 2 and 4; KIP-516).

A broker restarted within its lease while its topic `t` was deleted and re-created (same name, new id) opened its
old `t-0` by name as the new topic's replica: it kept a prefix of the old topic's records, rejoined the ISR and
could serve them, losing the new topic's acknowledged records after a failover. Each log now stores its topic id
(`partition.metadata`, Kafka's format); a log of another id is set aside — deleted when that id's deletion is
recorded, kept as `-stray` otherwise — and the partition starts empty. Every path that brings partitions to a
broker (entries, a snapshot for a broker far behind, the whole image at registration, a re-created topic) makes
their logs in a worker thread, never on the event loop (item 4).
"""

from __future__ import annotations

import threading

import pytest

from kelp.broker.metadata.image import MetadataImage, snapshot_to_json
from kelp.broker.storage import Log, LogManager
from kelp.broker.storage.partition_metadata import PARTITION_METADATA, kafka_uuid, read_topic_id
from kelp.config.log_config import LogConfig
from kelp.records.build import build_batch
from kelp.records.record import Record
from tests.broker.test_replica_file_work_off_loop import record_threads
from tests.replication.test_controller import Harness, ep
from tests.replication.test_metadata_log_order import Broker, entries_of, payload

X, Y = "1" * 32, "2" * 32


def records(n: int) -> bytearray:
    return bytearray(build_batch([Record(b"k", b"old topic's record") for _ in range(n)], now_ms=1_700_000_000_000))


# -- the log manager ---------------------------------------------------------------------
def test_a_log_stores_its_topic_id_in_kafkas_format(tmp_path) -> None:
    logs = LogManager([tmp_path], LogConfig())
    lg = logs.get_or_create("t", 0, topic_id=X)
    text = (lg.directory / PARTITION_METADATA).read_text()
    assert text == f"version: 0\ntopic_id: {kafka_uuid(X)}\n" and len(kafka_uuid(X)) == 22
    logs.close_all()
    again = LogManager([tmp_path], LogConfig())
    assert again.get("t", 0).topic_id == X == read_topic_id(lg.directory)
    again.close_all()


def test_a_log_of_another_topic_id_never_serves_the_topic(tmp_path) -> None:
    logs = LogManager([tmp_path], LogConfig())
    old = logs.get_or_create("t", 0, topic_id=X)
    old.append_as_leader(records(3), leader_epoch=0)
    # re-created, its deletion recorded: the old log is deleted, the new one starts empty
    new = logs.get_or_create("t", 0, topic_id=Y, removed_ids={X: "t"})
    assert new is not old and new.topic_id == Y and new.log_end_offset == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t-0"]
    # another id again, no deletion recorded (a snapshot that simply lacks it): kept aside, never opened
    newer = logs.get_or_create("t", 0, topic_id=X)
    assert newer.log_end_offset == 0 and newer.topic_id == X
    strays = [p for p in tmp_path.iterdir() if p.name.endswith("-stray")]
    assert len(strays) == 1 and read_topic_id(strays[0]) == Y
    logs.close_all()
    reopened = LogManager([tmp_path], LogConfig())
    assert reopened.partitions() == [("t", 0)] and reopened.get("t", 0).topic_id == X  # the stray stays closed
    reopened.close_all()


def test_a_log_without_an_id_adopts_the_first_one_it_is_placed_for(tmp_path) -> None:
    """Written before ids were stored: adopted, as Kafka writes partition.metadata for a log that lacks it."""
    logs = LogManager([tmp_path], LogConfig())
    legacy = logs.get_or_create("t", 0)
    legacy.append_as_leader(records(2), leader_epoch=0)
    assert legacy.topic_id is None and not (legacy.directory / PARTITION_METADATA).exists()
    assert logs.get_or_create("t", 0, topic_id=X) is legacy and legacy.topic_id == X
    assert read_topic_id(legacy.directory) == X and legacy.log_end_offset == 2
    logs.close_all()


def test_a_damaged_partition_metadata_is_never_taken_for_no_id(tmp_path) -> None:
    logs = LogManager([tmp_path], LogConfig())
    logs.get_or_create("t", 0, topic_id=X).append_as_leader(records(1), leader_epoch=0)
    logs.close_all()
    (tmp_path / "t-0" / PARTITION_METADATA).write_text("version: 0\ntopic_id: ???\n")
    again = LogManager([tmp_path], LogConfig())
    fresh = again.get_or_create("t", 0, topic_id=X)
    assert fresh.log_end_offset == 0  # it matches no topic: set aside, not adopted
    assert any(p.name.endswith("-stray") for p in tmp_path.iterdir())
    again.close_all()


# -- the broker: a restart within its lease while the topic was re-created --------------------
async def test_a_broker_restarted_while_its_topic_was_recreated_starts_the_partition_empty(tmp_path) -> None:
    h = Harness(2)
    h.alive = {i: ep(i, incarnation=f"broker-{i}/first") for i in range(2)}
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [1, 0]})
    first = Broker(tmp_path)
    await first.member.metadata.receive(payload(entries_of(h.store), epoch=c.state.epoch))
    old_log = first.logs.get("t", 0)
    old_id = c.state.image.topics["t"].topic_id
    assert old_log.topic_id == old_id
    old_log.append_as_leader(records(5), leader_epoch=c.state.image.topics["t"].partition(0).leader_epoch)
    first.logs.close_all()  # broker 1 stops (or is killed); its lease has not expired yet

    await c.topic_admin.delete_topic(name="t")
    await c.topic_admin.create_topic(name="t", assignments={0: [1, 0]})
    new_id = c.state.image.topics["t"].topic_id
    assert new_id != old_id

    second = Broker(tmp_path)  # the new process opens its logs by name, as at every start
    m = second.member
    m.state.registered = False
    m.state.identity = "broker-1/second"
    h.alive[1] = ep(1, incarnation=m.state.identity)
    await c._on_liveness(dict(h.alive))  # the controller registers the new process
    with pytest.MonkeyPatch.context() as mp:
        opens = record_threads(mp, Log, "open")
        loop = threading.get_ident()
        await m.metadata.receive(payload(entries_of(h.store), epoch=c.state.epoch))
    assert m.state.registered
    served = second.logs.get("t", 0)
    assert served.topic_id == new_id and served.log_end_offset == 0, "the old topic's records serve the new one"
    assert second.replicas.get_partition("t", 0).log is served
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("t-")) == ["t-0"]  # the old one deleted
    assert opens and loop not in opens, "a log was opened on the event loop"
    second.logs.close_all()


async def test_a_snapshot_that_recreates_a_topic_without_its_tombstone_keeps_the_old_log_aside(tmp_path) -> None:
    """No deletion recorded (a snapshot that simply lacks the old topic): the old log is never deleted, never
    served — kept as `-stray` — and the partition starts empty. Its logs made in a worker thread."""
    h = Harness(2)
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [1, 0]})
    b = Broker(tmp_path)
    await b.member.metadata.receive(payload(entries_of(h.store), epoch=c.state.epoch))
    b.logs.get("t", 0).append_as_leader(records(4), leader_epoch=0)
    other = Harness(2)  # another history of the same name: a topic t with another id, no tombstone of ours
    oc = await other.start()
    await oc.topic_admin.create_topic(name="t", assignments={0: [1, 0]})
    foreign = snapshot_to_json(MetadataImage(offset=c.state.image.offset + 50, epoch=c.state.epoch,
                                             topics=oc.state.image.topics))
    with pytest.MonkeyPatch.context() as mp:
        opens = record_threads(mp, Log, "open")
        loop = threading.get_ident()
        await b.member.metadata.receive(payload([], epoch=c.state.epoch, snapshot=foreign))
    assert b.logs.get("t", 0).topic_id == oc.state.image.topics["t"].topic_id and b.logs.get("t", 0).log_end_offset == 0
    strays = [p for p in tmp_path.iterdir() if p.name.endswith("-stray")]
    assert len(strays) == 1 and read_topic_id(strays[0]) == c.state.image.topics["t"].topic_id
    assert opens and loop not in opens
    b.logs.close_all()


async def test_every_delivery_path_makes_logs_off_the_event_loop(tmp_path) -> None:
    """Entries that create a topic, a snapshot for a broker further behind than the retained entries, a topic
    deleted and re-created in one delivery, a reassignment that adds this broker: no log opened on the loop."""
    h = Harness(3)
    c = await h.start()
    b = Broker(tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        opens = record_threads(mp, Log, "open")
        loop = threading.get_ident()
        await c.topic_admin.create_topic(name="a", assignments={0: [1, 0], 1: [0, 1]})
        await b.member.metadata.receive(payload(entries_of(h.store), epoch=c.state.epoch))  # entries
        seen = c.state.image.offset
        await c.topic_admin.create_topic(name="s", assignments={0: [1, 2]})
        # A snapshot.
        await b.member.metadata.receive(payload([], epoch=c.state.epoch, snapshot=snapshot_to_json(c.state.image)))
        seen = c.state.image.offset
        await c.topic_admin.delete_topic(name="a")
        await c.topic_admin.create_topic(name="a", assignments={0: [1, 2]})
        await b.member.metadata.receive(payload(entries_of(h.store, seen), epoch=c.state.epoch))  # re-created
        seen = c.state.image.offset
        await c.topic_admin.create_topic(name="r", assignments={0: [0, 2]})
        await c.moves.reassign(topic="r", partition=0, replicas=[1, 2])
        await b.member.metadata.receive(payload(entries_of(h.store, seen), epoch=c.state.epoch))  # a move adds broker 1
        assert b.logs.get("r", 0) is not None and b.replicas.get_partition("r", 0) is not None
        assert b.logs.get("a", 0).topic_id == c.state.image.topics["a"].topic_id
        assert len(opens) >= 4 and loop not in opens, "a delivery opened a log on the event loop"
    b.logs.close_all()
