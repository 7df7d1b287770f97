"""Coordinator placement (Kafka's hash) and the `__consumer_offsets` record formats."""

from __future__ import annotations

import struct

import pytest

from kelp.broker.groups.offsets_log import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from kelp.broker.groups.placement import java_string_hashcode, partition_for_group


def test_java_hashcode_matches_java() -> None:
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("test") == 3556498
    assert java_string_hashcode("hello world") == 1794106052
    # The famous string whose hashCode is Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0.
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert partition_for_group("polygenelubricants", 50) == 0


def test_partition_for_group_is_abs_hash_mod_n() -> None:
    # "my-group".hashCode() is negative in Java; Kafka takes its absolute value.
    h = java_string_hashcode("my-group")
    assert partition_for_group("my-group", 50) == abs(h) % 50
    assert all(0 <= partition_for_group(f"g{i}", 7) < 7 for i in range(200))
    with pytest.raises(ValueError, match="offsets.topic.num.partitions"):
        partition_for_group("g", 0)


def test_offset_commit_key_and_value_bytes_follow_kafka() -> None:
    key = encode_offset_key("g", "t", 3)
    assert key == struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 3)
    value = encode_offset_value(OffsetValue(42, 5, "meta", 1234))
    assert value == struct.pack(">hqih", 3, 42, 5, 4) + b"meta" + struct.pack(">q", 1234)
    assert decode_key(key) == OffsetKey("g", "t", 3)
    back = decode_offset_value(value)
    assert (back.offset, back.leader_epoch, back.metadata, back.commit_timestamp) == (42, 5, "meta", 1234)


def test_offset_value_v1_written_by_old_kafka_is_read() -> None:
    v1 = struct.pack(">hqh", 1, 7, 0) + struct.pack(">qq", 100, 200)
    back = decode_offset_value(v1)
    assert (back.offset, back.commit_timestamp, back.expire_timestamp) == (7, 100, 200)


def test_group_metadata_round_trip() -> None:
    value = GroupValue("consumer", 7, "range", "m1", 99, [
        MemberValue("m1", "static-1", "client", "/127.0.0.1", 30000, 10000, b"sub", b"assign"),
        MemberValue("m2", None, "client2", "/127.0.0.2", 30000, 10000, b"", b""),
    ])
    key = encode_group_key("grp")
    assert decode_key(key) == GroupKey("grp")
    assert decode_group_value(encode_group_value(value)) == value


def test_unknown_versions_are_refused_with_the_version_named() -> None:
    with pytest.raises(ValueError, match="key version 9"):
        decode_key(struct.pack(">h", 9))
    with pytest.raises(ValueError, match="OffsetCommitValue version 8"):
        decode_offset_value(struct.pack(">h", 8))
