"""The follower's hand-written FetchRequest v11 is byte for byte what kafka-python encodes."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import FetchRequest

from kelp.kafka_client.fetch_request import VERSION, FollowerFetch, FollowerFetchPartition
from kelp.kafka_client.framing import encode_request

FT = FetchRequest.FetchTopic
FP = FT.FetchPartition


def test_same_bytes_as_kafka_python_with_header_and_size_prefix() -> None:
    P = FollowerFetchPartition
    topics = [("alpha", [P(0, 3, 1234, 5, 4 << 20), P(7, -1, 0, -1, 1 << 20)]),
              ("bêta", [P(2, 9, 1 << 40, 1 << 39, 1)]),
              ("alpha", [P(1, 3, 99, 0, 4 << 20)])]  # a topic named again, as the rotation does
    ours = FollowerFetch(replica_id=2, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20, topics=topics)
    theirs = FetchRequest(
        replica_id=2, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[FT(topic=t, partitions=[FP(partition=p.partition, current_leader_epoch=p.current_leader_epoch,
                                           fetch_offset=p.fetch_offset, log_start_offset=p.log_start_offset,
                                           partition_max_bytes=p.partition_max_bytes, last_fetched_epoch=-1)
                                        for p in ps]) for t, ps in topics])
    got = encode_request(ours, VERSION, correlation_id=77, client_id="kelp-replica-2")  # type: ignore[arg-type]
    assert got == encode_request(theirs, VERSION, correlation_id=77, client_id="kelp-replica-2")
    decoded = FetchRequest.decode(got[4:], version=VERSION, header=True)
    assert [(t.topic, [p.fetch_offset for p in t.partitions]) for t in decoded.topics] == [
        ("alpha", [1234, 0]), ("bêta", [1 << 40]), ("alpha", [99])]


def test_only_v11_framed_with_its_header() -> None:
    req = FollowerFetch(replica_id=1, max_wait_ms=0, min_bytes=1, max_bytes=1, topics=[])
    with pytest.raises(ValueError, match="only FetchRequest v11"):
        req.encode(version=12)


def test_incremental_fetch_with_session_and_forgotten_partitions_same_bytes() -> None:
    P = FollowerFetchPartition
    topics = [("alpha", [P(4, 3, 10, 0, 1 << 20)])]
    forgotten = [("alpha", [1, 2]), ("gamma", [0])]
    ours = FollowerFetch(replica_id=3, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, topics=topics,
                         session_id=123456789, session_epoch=7, forgotten=forgotten)
    FG = FetchRequest.ForgottenTopic
    theirs = FetchRequest(
        replica_id=3, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=123456789,
        session_epoch=7, rack_id="",
        forgotten_topics_data=[FG(topic=t, partitions=ps) for t, ps in forgotten],
        topics=[FT(topic="alpha", partitions=[FP(partition=4, current_leader_epoch=3, fetch_offset=10,
                                                 log_start_offset=0, partition_max_bytes=1 << 20,
                                                 last_fetched_epoch=-1)])])
    got = encode_request(ours, VERSION, correlation_id=5, client_id="kelp-replica-3")  # type: ignore[arg-type]
    assert got == encode_request(theirs, VERSION, correlation_id=5, client_id="kelp-replica-3")
    decoded = FetchRequest.decode(got[4:], version=VERSION, header=True)
    assert (decoded.session_id, decoded.session_epoch) == (123456789, 7)
    assert [(f.topic, list(f.partitions)) for f in decoded.forgotten_topics_data] == forgotten
