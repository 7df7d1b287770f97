"""The hand-written FetchResponse encoder matches kafka-python's schema for every served version."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import FetchResponse

from kelp.broker.kafka.fetch_encoder import encode_fetch_response
from tests.support.kafka_wire import make_batch


@pytest.mark.parametrize("version", range(4, 13))
def test_encoder_matches_schema(version: int) -> None:
    batch = make_batch([(b"k", b"v" * 100)])
    topics = [("alpha", [(0, 0, 10, 10, 0, batch, None), (1, 1, -1, -1, -1, b"", None)]),
              ("beta", [(2, 0, 5, 3, 2, batch + batch, [(7, 3), (9, 4)]), (3, 0, 5, 5, 0, b"", [])])]
    bufs, size = encode_fetch_response(version, throttle_time_ms=7, error_code=0, session_id=0, topics=topics)
    data = b"".join(bytes(b) for b in bufs)
    assert len(data) == size
    resp = FetchResponse.decode(data, version=version)
    assert resp.throttle_time_ms == 7
    got = [(t.topic, [(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                       p.log_start_offset if version >= 5 else None, bytes(p.records or b""))
                      for p in t.partitions]) for t in resp.responses]
    want = [(n, [(a, b, c, d, e if version >= 5 else None, bytes(r)) for a, b, c, d, e, r, _ in ps])
            for n, ps in topics]
    assert got == want
    # read_committed answers carry the aborted transactions (producer id, first offset); others null
    aborted = [[None if p.aborted_transactions is None else
                [(a.producer_id, a.first_offset) for a in p.aborted_transactions] for p in t.partitions]
               for t in resp.responses]
    assert aborted == [[None, None], [[(7, 3), (9, 4)], []]]
    assert all(p.records is not None for t in resp.responses for p in t.partitions)
