"""The hand-written ProduceRequest decoder agrees with kafka-python and hands out writable views."""

from __future__ import annotations

import pytest
from kafka.protocol.producer import ProduceRequest

from kelp.broker.kafka.produce_decoder import decode_produce_request
from kelp.records.build import build_batch
from kelp.records.record import Record

T = ProduceRequest.TopicProduceData


@pytest.mark.parametrize("version", range(3, 10))
def test_decoder_matches_kafka_python(version: int) -> None:
    b1 = build_batch([Record(b"k", b"v" * 300)])
    b2 = build_batch([Record(None, b"w")] * 3)
    req = ProduceRequest(
        version=version, transactional_id="txn-ü" if version % 2 else None, acks=-1, timeout_ms=1234,
        topic_data=[
            T(name="orders", partition_data=[T.PartitionProduceData(index=0, records=b1),
                                             T.PartitionProduceData(index=3, records=None)]),
            T(name="t" * 200, partition_data=[T.PartitionProduceData(index=1, records=b2)]),
        ],
    )
    frame = bytearray(req.encode(version=version))
    ours = decode_produce_request(memoryview(frame), version)
    theirs = ProduceRequest.decode(bytes(frame), version=version)
    assert (ours.transactional_id, ours.acks, ours.timeout_ms) == (theirs.transactional_id, -1, 1234)
    got = [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
           for t in ours.topic_data]
    want = [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in theirs.topic_data]
    assert got == want
    view = ours.topic_data[0].partition_data[0].records
    assert not view.readonly
    view[0] = 0x7F  # in place: the frame itself changes
    assert frame.find(bytes(view[:8])) >= 0


@pytest.mark.parametrize("version", [3, 9])
def test_truncated_or_padded_bodies_are_refused(version: int) -> None:
    req = ProduceRequest(version=version, transactional_id=None, acks=1, timeout_ms=1,
                         topic_data=[T(name="t", partition_data=[T.PartitionProduceData(index=0, records=b"x" * 70)])])
    frame = bytes(req.encode(version=version))
    with pytest.raises(ValueError, match="truncated"):
        decode_produce_request(memoryview(bytearray(frame[:-5])), version)
    with pytest.raises(ValueError, match="trailing"):
        decode_produce_request(memoryview(bytearray(frame + b"\x00")), version)
