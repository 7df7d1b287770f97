"""The RecordBatch v2 codec: validation errors a producer can act on, in-place offset
assignment that keeps the CRC valid, and round-trips through kafka-python's reader."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecordsBuilder

from kelp.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
)
from kelp.records import build, compression, header, record, validation


def _batch(n: int = 3, **kwargs) -> bytes:
    return build.build_batch([record.Record(b"k%d" % i, b"v%d" % i, timestamp=1000 + i) for i in range(n)], **kwargs)


def test_parse_reports_each_batch_header() -> None:
    data = _batch(3) + _batch(2, producer_id=7, producer_epoch=1, base_sequence=40)
    first, second = validation.parse_batches(data)
    assert (first.position, first.record_count, first.last_offset_delta) == (0, 3, 2)
    assert first.max_timestamp == 1002 and first.base_timestamp == 1000
    assert second.position == first.size and second.end == len(data)
    assert (second.producer_id, second.producer_epoch, second.base_sequence) == (7, 1, 40)
    assert second.last_sequence == 41 and second.has_producer_id and not first.has_producer_id


def test_crc_mismatch_is_corrupt_and_names_the_batch() -> None:
    data = bytearray(_batch(3) + _batch(1))
    data[len(data) - 1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=r"CRC mismatch in batch at byte \d+"):
        validation.parse_batches(data)


def test_truncated_batch_is_corrupt() -> None:
    data = _batch(3)
    with pytest.raises(CorruptRecordError, match="truncated"):
        validation.parse_batches(data[:-5])
    with pytest.raises(CorruptRecordError, match="truncated"):
        validation.parse_batches(data[:10])


def test_magic_v0_v1_message_sets_are_refused_clearly() -> None:
    builder = MemoryRecordsBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=1, key=b"k", value=b"v")
    builder.close()
    with pytest.raises(UnsupportedForMessageFormatError, match="magic 1.*RecordBatch v2"):
        validation.parse_batches(builder.buffer())


def test_batch_over_the_limit_names_size_and_limit() -> None:
    data = _batch(50)
    with pytest.raises(RecordTooLargeError, match=rf"{len(data)} bytes, over the limit of 100 bytes"):
        validation.parse_batches(data, max_batch_bytes=100)


def test_negative_record_count_and_bad_length_are_corrupt() -> None:
    data = bytearray(_batch(1))
    struct.pack_into(">i", data, 57, -1)
    with pytest.raises(CorruptRecordError):
        validation.parse_batches(data)  # count sits inside the CRC: either check catches it
    short = bytearray(_batch(1))
    struct.pack_into(">i", short, 8, 10)
    with pytest.raises(CorruptRecordError, match="length 10"):
        validation.parse_batches(short)


def test_empty_record_set_is_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        validation.parse_batches(b"")


def test_assign_offsets_rewrites_in_place_and_keeps_crc_valid() -> None:
    buf = bytearray(_batch(3) + _batch(2))
    batches = validation.parse_batches(buf)
    next_offset = header.assign_offsets(buf, batches, base_offset=100, leader_epoch=9)
    assert next_offset == 105
    again = validation.parse_batches(buf)  # CRC still valid
    assert [(b.base_offset, b.partition_leader_epoch) for b in again] == [(100, 9), (103, 9)]
    assert [r.offset for r in record.iter_records(buf)] == [100, 101, 102, 103, 104]


def test_set_log_append_time_recomputes_crc() -> None:
    buf = bytearray(_batch(2))
    (info,) = validation.parse_batches(buf)
    header.set_log_append_time(buf, info, 123456)
    (after,) = validation.parse_batches(buf)
    assert after.timestamp_type == header.LOG_APPEND_TIME and after.max_timestamp == 123456
    assert DefaultRecordBatch(buf).validate_crc()
    assert [r.timestamp for r in record.iter_records(buf)] == [123456, 123456]


@pytest.mark.parametrize("codec", compression.available_compressions())
def test_build_and_iterate_round_trip(codec: str) -> None:
    records = [
        record.Record(b"key", b"value" * 50, headers=(("h1", b"x"), ("h2", None)), timestamp=5),
        record.Record(None, b"no key" * 50, timestamp=7),
        record.Record(b"tombstone", None, timestamp=6),
    ]
    data = build.build_batch(records, compression=codec, base_offset=40)
    (info,) = validation.parse_batches(data)
    assert info.base_offset == 40 and info.record_count == 3 and info.max_timestamp == 7
    if codec != "none":
        assert info.compression_name == codec
    back = list(record.iter_records(data))
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in back] == [
        (40, b"key", b"value" * 50, (("h1", b"x"), ("h2", None)), 5),
        (41, None, b"no key" * 50, (), 7),
        (42, b"tombstone", None, (), 6),
    ]


def test_keep_offsets_preserves_gaps() -> None:
    data = build.build_batch(
        [record.Record(b"a", b"1", timestamp=1, offset=10), record.Record(b"b", b"2", timestamp=2, offset=14)],
        base_offset=10, keep_offsets=True,
    )
    assert [r.offset for r in record.iter_records(data)] == [10, 14]
    assert validation.parse_batches(data)[0].last_offset == 14


def test_records_have_keys() -> None:
    keyed = _batch(2)
    keyless = build.build_batch([(b"k", b"v"), (None, b"v")])
    assert record.records_have_keys(keyed, validation.parse_batches(keyed)[0])
    assert not record.records_have_keys(keyless, validation.parse_batches(keyless)[0])


def test_unknown_compression_is_refused() -> None:
    with pytest.raises(InvalidRecordError, match="unknown compression"):
        build.build_batch([(b"k", b"v")], compression="brotli")


def test_scan_valid_prefix_stops_at_damage_without_raising() -> None:
    good = _batch(2, base_offset=0) + _batch(2, base_offset=2)
    damaged = bytearray(good + _batch(1, base_offset=4))
    damaged[-3] ^= 1
    result = validation.scan_valid_prefix(damaged)
    assert result.valid_end == len(good) and "CRC" in (result.error or "")
    torn = validation.scan_valid_prefix(good + _batch(1)[:30])
    assert torn.valid_end == len(good) and torn.incomplete
    backwards = validation.scan_valid_prefix(good + _batch(1, base_offset=1))
    assert backwards.valid_end == len(good) and "backwards" in (backwards.error or "")


def test_whole_batches_end_cuts_at_batch_boundaries() -> None:
    first, second = _batch(2, base_offset=0), _batch(2, base_offset=2)
    data = first + second
    assert header.whole_batches_end(data) == len(data)
    assert header.whole_batches_end(data[:-1]) == len(first)
    assert header.whole_batches_end(data, max_offset=2) == len(first)
    assert header.whole_batches_end(data[:20]) == 0


@pytest.mark.parametrize("seed", range(5))
def test_random_batches_round_trip_and_any_flipped_byte_is_caught(seed: int) -> None:
    import os
    import random

    rng = random.Random(seed)
    records = [
        record.Record(
            None if rng.random() < 0.2 else os.urandom(rng.randint(0, 20)),
            None if rng.random() < 0.1 else os.urandom(rng.randint(0, 500)),
            headers=tuple((f"h{i}", os.urandom(rng.randint(0, 5))) for i in range(rng.randint(0, 3))),
            timestamp=rng.randint(0, 2**40),
        )
        for _ in range(rng.randint(1, 50))
    ]
    data = build.build_batch(records, compression=rng.choice(compression.available_compressions()),
                           base_offset=rng.randint(0, 2**40))
    (info,) = validation.parse_batches(data)
    back = list(record.iter_records(data))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in back] == [(r.key, r.value, r.headers, r.timestamp)
                                                                        for r in records]
    assert [r.offset for r in back] == list(range(info.base_offset, info.base_offset + len(records)))
    assert info.max_timestamp == max(r.timestamp for r in records)
    # Every byte after the CRC field is covered: flipping one is always detected.
    for _ in range(20):
        damaged = bytearray(data)
        damaged[rng.randrange(header.ATTRIBUTES_AT, len(data))] ^= 1 << rng.randrange(8)
        with pytest.raises(CorruptRecordError):
            validation.parse_batches(damaged)
