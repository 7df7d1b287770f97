"""The follower's hand-written FetchResponse v11 decoder reads what kafka-python's encoder writes, and its
records are views of the reply, not copies; a reply that does not parse is a bad reply naming where."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer import FetchResponse

from kelp.kafka_client.errors import BadResponse
from kelp.kafka_client.fetch_response import VERSION, decode_fetch_response
from kelp.kafka_client.framing import decode_response
from tests.support.kafka_wire import make_batch

P = FetchResponse.FetchableTopicResponse.PartitionData


def _encoded(correlation_id: int = 5) -> tuple[bytes, bytes]:
    batch = make_batch([(b"k", b"v" * 300)])
    resp = FetchResponse(
        throttle_time_ms=3, error_code=0, session_id=0,
        responses=[
            FetchResponse.FetchableTopicResponse(topic="alpha", partitions=[
                P(partition_index=0, error_code=0, high_watermark=10, last_stable_offset=9, log_start_offset=1,
                  aborted_transactions=None, preferred_read_replica=-1, records=batch),
                P(partition_index=4, error_code=6, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                  aborted_transactions=None, preferred_read_replica=-1, records=None),
            ]),
            FetchResponse.FetchableTopicResponse(topic="bêta", partitions=[
                P(partition_index=2, error_code=0, high_watermark=5, last_stable_offset=3, log_start_offset=0,
                  aborted_transactions=[P.AbortedTransaction(producer_id=7, first_offset=3)],
                  preferred_read_replica=2, records=batch + batch),
            ]),
        ])
    body = bytes(resp.encode(version=VERSION))
    return struct.pack(">i", correlation_id) + body, batch


def test_decodes_what_kafka_python_encodes_with_records_as_views_of_the_frame() -> None:
    frame, batch = _encoded()
    got = decode_fetch_response(frame)
    assert (got.correlation_id, got.throttle_time_ms, got.error_code, got.session_id) == (5, 3, 0, 0)
    assert [t.topic for t in got.responses] == ["alpha", "bêta"]
    rows = [(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
             p.aborted_transactions, p.preferred_read_replica, None if p.records is None else bytes(p.records))
            for t in got.responses for p in t.partitions]
    assert rows == [(0, 0, 10, 9, 1, None, -1, batch), (4, 6, -1, -1, -1, None, -1, None),
                    (2, 0, 5, 3, 0, [(7, 3)], 2, batch + batch)]
    records = got.responses[0].partitions[0].records
    assert isinstance(records, memoryview) and records.obj is frame  # no copy


@pytest.mark.parametrize("cut", [3, 15, 40, -1])
def test_a_short_or_long_frame_is_a_bad_reply_naming_where(cut: int) -> None:
    frame, _ = _encoded(correlation_id=9)
    broken = frame[:cut] if cut > 0 else frame + b"\0"
    with pytest.raises(ValueError, match="FetchResponse v11: .*offset"):
        decode_fetch_response(broken)
    if len(broken) >= 4:
        with pytest.raises(BadResponse, match="broker at b:1 sent a bad reply: FetchResponse v11"):
            decode_response(None, VERSION, broken, correlation_id=9, address="b:1",  # type: ignore[arg-type]
                            decoder=decode_fetch_response)
