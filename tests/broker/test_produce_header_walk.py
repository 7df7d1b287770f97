"""A Produce reads each batch's 61-byte header once and checks its CRC once, from the handler to the log (issue 35).

Why: the write path read the same headers twice per batch (the leader's producer checks walked them, then the
log's validation walked and CRC-checked them again), and five times with a CRC check three times on a topic whose
`compression.type` names a codec (the rebuild's check, a walk before it, the rebuilt bytes checked again, then the
leader's and the log's walks). Now the leader walks the request's bytes once (`Log.validate`: sizes, magic, CRC,
the log's rules) and hands the `BatchInfo`s down: the idempotence check, the recompression, the offsets, the
segment's indexes and the producer state all use them. A rebuilt batch's header is read once, from the new bytes.

The counters sit on the one header decoder (`kelp.records.header.HEADER`, which `read_header` looks up on each
call) and the one CRC check (`kelp.records.validation.crc32c`), so any walk added anywhere on the path counts.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from kafka.protocol.producer import ProduceRequest

from kelp.errors import ErrorCode
from kelp.records import header, validation
from kelp.records.build import build_batch
from kelp.records.header import CRC_AT
from kelp.records.record import iter_records
from tests.authorization.harness import InProcessBroker

T = ProduceRequest.TopicProduceData
P = T.PartitionProduceData
N = 4  # partitions, one batch each (Produce v3+ carries one batch per partition)
PRODUCER_ID = 7000


class Counted:
    """`inner`'s calls counted; the rest of it as it was."""

    def __init__(self, inner: Any, method: str | None) -> None:
        self.inner, self.method, self.calls = inner, method, 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.inner(*args)

    def __getattr__(self, name: str) -> Any:
        if name == self.method:
            self.calls += 1
        return getattr(self.inner, name)


@pytest.fixture
async def b(tmp_path: Path) -> AsyncIterator[InProcessBroker]:
    async with InProcessBroker(tmp_path) as broker:
        await broker.parts.topics.create_topic("walk", N, 1)
        await broker.parts.topics.create_topic("walk-gzip", N, 1, {"compression.type": "gzip"})
        yield broker


def _value(partition: int, i: int) -> bytes:
    return b"v%d-%d " % (partition, i) + b"x" * 200  # gzip makes it smaller, so the rebuilt batch is gzip


def _batch(partition: int, *, sequence: int = 0) -> bytes:
    return build_batch([(b"k%d" % i, _value(partition, i)) for i in range(3)], producer_id=PRODUCER_ID + partition,
                       producer_epoch=0, base_sequence=sequence)


def _produce(topic: str, batches: list[bytes]) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        T(name=topic, partition_data=[P(index=p, records=data) for p, data in enumerate(batches)])])


async def _counted(b: InProcessBroker, monkeypatch: pytest.MonkeyPatch, request: ProduceRequest
                   ) -> tuple[list[tuple[int, int]], int, int]:
    """(error code, base offset) of each partition, header decodes and CRC checks the request cost."""
    headers = Counted(header.HEADER, "unpack_from")
    crcs = Counted(validation.crc32c, None)
    with monkeypatch.context() as m:
        m.setattr(header, "HEADER", headers)
        m.setattr(validation, "crc32c", crcs)
        answer = await b.call(request, 9)
    parts = answer.responses[0].partition_responses
    return [(p.error_code, p.base_offset) for p in parts], headers.calls, crcs.calls


async def test_one_header_read_and_one_crc_check_per_batch(b: InProcessBroker, monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    batches = [_batch(p) for p in range(N)]
    answers, reads, crcs = await _counted(b, monkeypatch, _produce("walk", batches))
    assert answers == [(ErrorCode.NONE, 0)] * N
    assert (reads, crcs) == (N, N)
    # The same batches again are duplicates (the idempotence check on the one walk's headers): acknowledged with
    # their first offsets, not stored twice, for the same one read and one CRC check each.
    answers, reads, crcs = await _counted(b, monkeypatch, _produce("walk", batches))
    assert answers == [(ErrorCode.NONE, 0)] * N
    assert (reads, crcs) == (N, N)
    answers, reads, crcs = await _counted(b, monkeypatch, _produce("walk", [_batch(p, sequence=3) for p in range(N)]))
    assert answers == [(ErrorCode.NONE, 3)] * N
    assert (reads, crcs) == (N, N)
    for p in range(N):
        log = b.parts.replicas.get_partition("walk", p).log
        assert log.log_end_offset == 6


async def test_a_rebuilt_batch_is_read_once_more_and_never_checked_again(b: InProcessBroker,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    batches = [_batch(p) for p in range(N)]
    answers, reads, crcs = await _counted(b, monkeypatch, _produce("walk-gzip", batches))
    assert answers == [(ErrorCode.NONE, 0)] * N
    # the request's header once, the rebuilt batch's once; the request's CRC checked once, the rebuilt one's
    # computed by the builder and never checked again
    assert (reads, crcs) == (2 * N, N)
    for p in range(N):
        log = b.parts.replicas.get_partition("walk-gzip", p).log
        stored = log.read(0, max_bytes=1 << 20)
        (info,) = validation.parse_batches(stored)  # what is stored passes the full check
        assert info.compression_name == "gzip" and info.producer_id == PRODUCER_ID + p and info.record_count == 3
        assert [r.value for r in iter_records(stored)] == [_value(p, i) for i in range(3)]


async def test_a_corrupt_retry_is_refused_before_the_idempotence_check(b: InProcessBroker,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's order (UnifiedLog.append: the records' checks, then the producer state): a retried batch whose
    bytes were damaged on the way is CORRUPT_MESSAGE, not acknowledged as the duplicate its header claims."""
    batches = [_batch(p) for p in range(N)]
    answers, _, _ = await _counted(b, monkeypatch, _produce("walk", batches))
    assert answers == [(ErrorCode.NONE, 0)] * N
    damaged = bytearray(batches[0])
    struct.pack_into(">I", damaged, CRC_AT, (struct.unpack_from(">I", damaged, CRC_AT)[0] + 1) % 2**32)
    answers, reads, crcs = await _counted(b, monkeypatch, _produce("walk", [bytes(damaged)]))
    assert answers == [(ErrorCode.CORRUPT_MESSAGE, -1)]
    assert (reads, crcs) == (1, 1)
