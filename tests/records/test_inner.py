"""The check of a compressed batch's records (`kelp.records.inner`), attacked with poison pills per codec.

Each batch here passes every header check (size, magic, CRC, count vs last offset delta); only decompressing
and walking its records finds what is wrong. Before this check a plain topic stored them all.
"""

from __future__ import annotations

import struct

import pytest

from kelp.errors import CorruptRecordError, RecordTooLargeError, UnsupportedCompressionTypeError
from kelp.records.build import build_batch
from kelp.records.inner import check_records, decompressed_limit, walk_records
from kelp.records.validation import parse_batches
from tests.support.poison import CODECS, bomb, garbage, good_batch, lying_count, repack

LIMIT = 1 << 20


def _check(batch: bytes, limit: int = LIMIT) -> None:
    [info] = parse_batches(batch)
    check_records(batch, info, limit)


@pytest.mark.parametrize("codec", CODECS)
def test_good_batches_of_every_codec_pass(codec: str) -> None:
    _check(good_batch(codec, 50))
    mixed = build_batch([(None, None), (b"k", b""), (b"k" * 100, b"v" * 1000)], compression=codec)
    assert parse_batches(mixed)[0].compression_name == codec
    _check(mixed)  # null key and value, empty value


@pytest.mark.parametrize("codec", CODECS)
def test_a_payload_that_does_not_decompress_is_corrupt_naming_the_codec(codec: str) -> None:
    with pytest.raises(CorruptRecordError, match=f"{codec} batch at byte 0 do not decompress"):
        _check(garbage(codec))


@pytest.mark.parametrize("codec", CODECS)
def test_a_truncated_payload_is_corrupt(codec: str) -> None:
    good = good_batch(codec, 50)
    with pytest.raises(CorruptRecordError):
        _check(repack(good, good[61:-7]))


@pytest.mark.parametrize("codec", CODECS)
def test_a_header_record_count_that_lies_is_corrupt(codec: str) -> None:
    with pytest.raises(CorruptRecordError, match="declares 4 records, the payload holds 3"):
        _check(lying_count(codec))
    with pytest.raises(CorruptRecordError, match="remain after the 2 records"):
        _check(repack(good_batch(codec), count=2))


@pytest.mark.parametrize("codec", CODECS)
def test_a_zip_bomb_is_refused_naming_the_limit(codec: str) -> None:
    batch = bomb(codec, 8 << 20)
    assert len(batch) < 64 << 10  # a small batch ...
    with pytest.raises(RecordTooLargeError, match=f"inflates past {LIMIT} bytes"):
        _check(batch)  # ... that would inflate to 8 MiB


def test_unknown_codec_id_is_unsupported_compression_type() -> None:
    batch = bytearray(good_batch("gzip"))
    struct.pack_into(">h", batch, 21, 5)  # attributes: codec id 5
    [info] = parse_batches(repack(bytes(batch)))
    with pytest.raises(UnsupportedCompressionTypeError, match="codec id 5"):
        check_records(repack(bytes(batch)), info, LIMIT)


def test_snappy_raw_as_librdkafka_and_xerial_framed_as_the_java_client_are_both_read() -> None:
    import cramjam
    from kafka.codec import snappy_decode

    good = good_batch("snappy", 20)
    assert good[61:69] == b"\x82SNAPPY\x00"  # kafka-python frames snappy as snappy-java does
    raw = snappy_decode(good[61:])
    _check(repack(good, bytes(cramjam.snappy.compress_raw(raw))))  # librdkafka's raw snappy
    blocks = [raw[: len(raw) // 2], raw[len(raw) // 2:]]
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(
        struct.pack(">i", len(c)) + c for c in (bytes(cramjam.snappy.compress_raw(b)) for b in blocks))
    _check(repack(good, framed))
    with pytest.raises(CorruptRecordError, match="xerial"):
        _check(repack(good, framed + struct.pack(">i", 1 << 20)))


def test_record_framing_that_lies_is_refused() -> None:
    # one record: length 8 | attributes | ts delta 0 | offset delta | key -1 | value -1 | 0 headers
    def record(offset_delta: int, length: int = 6) -> bytes:
        return bytes([length * 2, 0, 0, offset_delta * 2, 1, 1, 0])

    walk_records(record(0) + record(1), 2)
    with pytest.raises(ValueError, match="offset delta 0 .expected 1"):
        walk_records(record(0) + record(0), 2)
    with pytest.raises(ValueError, match="declares 7 bytes but its fields take 6"):
        walk_records(record(0, 7) + b"\x00", 1)
    with pytest.raises(ValueError, match="header key length -1"):
        walk_records(bytes([16, 0, 0, 0, 1, 1, 2, 1, 1]), 1)


def test_the_limit_derives_from_max_message_bytes_within_bounds() -> None:
    assert decompressed_limit(1 << 20) == 64 << 20
    assert decompressed_limit(1000) == 64 << 20
    assert decompressed_limit(8 << 20) == 512 << 20
    assert decompressed_limit(100 << 20) == 1 << 30


@pytest.mark.parametrize("codec", (*CODECS, "none"))
def test_the_walk_says_whether_every_record_has_a_key(codec: str) -> None:
    keyed = build_batch([(b"k", b"v" * 100), (b"k2", b"v" * 100)], compression=codec)
    keyless = build_batch([(b"k", b"v" * 100), (None, b"v" * 100)], compression=codec)
    assert check_records(keyed, parse_batches(keyed)[0], LIMIT) is True
    assert check_records(keyless, parse_batches(keyless)[0], LIMIT) is False
