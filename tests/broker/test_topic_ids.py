"""Topics by id on the wire, as Kafka serves them (KIP-516; issue 31 item 2): Fetch v13+ and DeleteTopics v6.

A client that names a topic by id must reach that topic and no other: after the topic is deleted and re-created
under the same name, the old id is UNKNOWN_TOPIC_ID — never the new topic's records, never its deletion.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from kafka.protocol.admin import DeleteTopicsRequest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from kelp.broker.kafka.fetch_encoder import encode_fetch_response
from kelp.errors import ErrorCode
from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import produce
from tests.support.kafka_wire import make_batch

ZERO = uuid.UUID(int=0)


def fetch_by_id(*ids: uuid.UUID, replica_id: int = -1) -> FetchRequest:
    T = FetchRequest.FetchTopic
    return FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                        replica_state=FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=-1),
                        topics=[T(topic_id=i, partitions=[T.FetchPartition(
                            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                            log_start_offset=-1, partition_max_bytes=1 << 20)]) for i in ids])


def delete(*states: tuple[str | None, uuid.UUID]) -> DeleteTopicsRequest:
    S = DeleteTopicsRequest.DeleteTopicState
    return DeleteTopicsRequest(topics=[S(name=n, topic_id=i) for n, i in states], topic_names=[], timeout_ms=5000)


@pytest.mark.parametrize("version", range(13, 19))
def test_the_encoder_names_topics_by_id_from_v13(version: int) -> None:
    batch = make_batch([(b"k", b"v" * 10)])
    a, b = uuid.uuid4(), uuid.uuid4()
    topics = [(a.bytes, [(0, 0, 3, 3, 0, batch, None)]), (b.bytes, [(1, ErrorCode.UNKNOWN_TOPIC_ID, -1, -1, -1, b"",
                                                                       None)])]
    bufs, size = encode_fetch_response(version, topics=topics)
    data = b"".join(bytes(x) for x in bufs)
    resp = FetchResponse.decode(data, version=version)
    assert len(data) == size
    assert [(t.topic_id, [(p.partition_index, p.error_code, bytes(p.records or b"")) for p in t.partitions])
            for t in resp.responses] == [(a, [(0, 0, batch)]), (b, [(1, ErrorCode.UNKNOWN_TOPIC_ID, b"")])]
    with pytest.raises(ValueError, match="16-byte id"):
        encode_fetch_response(version, topics=[("by-name", [])])


async def test_a_fetch_by_id_reaches_that_topic_and_an_old_id_reaches_nothing(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path) as b:
        topics = b.parts.topics
        await topics.create_topic("t", 1, 1)
        await b.call(produce("t"), 9)
        old = uuid.UUID(hex=topics.get("t").topic_id)
        for version in range(13, 19):
            resp = await b.call(fetch_by_id(old, uuid.uuid4()), version)
            got = {t.topic_id: t.partitions[0] for t in resp.responses}
            assert got[old].error_code == ErrorCode.NONE and got[old].records, f"v{version}"
            unknown = [p for i, p in got.items() if i != old]
            assert [p.error_code for p in unknown] == [ErrorCode.UNKNOWN_TOPIC_ID]
        await topics.delete_topic("t")
        await topics.create_topic("t", 1, 1)
        new = uuid.UUID(hex=topics.get("t").topic_id)
        assert new != old
        resp = await b.call(fetch_by_id(old), 13)
        assert [(t.topic_id, t.partitions[0].error_code) for t in resp.responses] == [(old, ErrorCode.UNKNOWN_TOPIC_ID)]
        resp = await b.call(fetch_by_id(new), 13)
        assert resp.responses[0].partitions[0].error_code == ErrorCode.NONE
        assert not resp.responses[0].partitions[0].records  # the new topic is empty: nothing of the old one


async def test_a_long_poll_by_an_id_whose_topic_was_recreated_meanwhile_gets_none_of_the_new_records(
        tmp_path: Path) -> None:
    """Found by a review of this issue: the id was resolved to a name once, the long poll read by name, so a topic
    deleted and re-created while a consumer waited answered the new topic's records under the old id."""
    async with InProcessBroker(tmp_path) as b:
        topics = b.parts.topics
        await topics.create_topic("t", 1, 1)
        await b.call(produce("t"), 9)
        old = uuid.UUID(hex=topics.get("t").topic_id)
        req = fetch_by_id(old)
        req.max_wait_ms, req.min_bytes = 5000, 1
        req.topics[0].partitions[0].fetch_offset = 1  # at the old topic's end: the fetch waits
        waiting = asyncio.create_task(b.call(req, 13))
        part = b.parts.replicas.get_partition("t", 0)
        for _ in range(10_000):  # until the fetch is parked on the partition (bounded: never a timed sleep)
            if part.waiters or waiting.done():
                break
            await asyncio.sleep(0)
        assert part.waiters and not waiting.done()
        await topics.delete_topic("t")
        await topics.create_topic("t", 1, 1)
        for _ in range(3):
            await b.call(produce("t"), 9)  # the new topic reaches offset 1 and more: the waiting fetch wakes
        resp = await asyncio.wait_for(waiting, 10)
        part = resp.responses[0].partitions[0]
        assert (resp.responses[0].topic_id, part.error_code) == (old, ErrorCode.UNKNOWN_TOPIC_ID)
        assert not part.records, "the re-created topic's records were answered under the old id"


async def test_delete_topics_v6_by_id_by_name_and_refusals(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path) as b:
        topics = b.parts.topics
        for name in ("a", "b", "c"):
            await topics.create_topic(name, 1, 1)
        a, bid = uuid.UUID(hex=topics.get("a").topic_id), uuid.UUID(hex=topics.get("b").topic_id)
        ghost = uuid.uuid4()
        resp = await b.call(delete(("b", ZERO), (None, a), (None, ghost), ("c", bid), (None, ZERO)), 6)
        got = [(r.name, r.topic_id, r.error_code) for r in resp.responses]
        assert got == [("b", bid, ErrorCode.NONE), ("a", a, ErrorCode.NONE),
                       (None, ghost, ErrorCode.UNKNOWN_TOPIC_ID), ("c", bid, ErrorCode.INVALID_REQUEST),
                       (None, None, ErrorCode.INVALID_REQUEST)]  # kafka-python decodes the zero id as None
        assert not topics.exists("a") and not topics.exists("b") and topics.exists("c")


async def test_delete_by_an_old_id_never_deletes_the_recreated_topic(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path) as b:
        topics = b.parts.topics
        await topics.create_topic("t", 1, 1)
        old = uuid.UUID(hex=topics.get("t").topic_id)
        await topics.delete_topic("t")
        await topics.create_topic("t", 1, 1)
        resp = await b.call(delete((None, old)), 6)
        assert [(r.topic_id, r.error_code) for r in resp.responses] == [(old, ErrorCode.UNKNOWN_TOPIC_ID)]
        assert topics.exists("t")
        # the race the controller closes: the id resolved to the name, the topic re-created before it deleted
        from kelp.errors import UnknownTopicIdError

        current = topics.get("t").topic_id
        with pytest.raises(UnknownTopicIdError):
            await topics.delete_topic("t", topic_id=old.hex)
        assert topics.get("t").topic_id == current
