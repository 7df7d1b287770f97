"""Which `__consumer_offsets` partition (and so which coordinator) owns a group.

Why: every Kafka client computes nothing here, but every broker must agree,
and Kafka's tooling expects the same mapping as Kafka itself:
`Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`, where
`hashCode` is Java's `String.hashCode` over UTF-16 code units and
`Utils.abs` maps Integer.MIN_VALUE to 0.

This module must never do I/O; it is pure arithmetic.
"""

from __future__ import annotations

__all__ = ["OFFSETS_TOPIC", "java_string_hashcode", "partition_for_group"]

OFFSETS_TOPIC = "__consumer_offsets"


# Hashes of recent names: a ListTransactions or a partition's resignation walks every transactional id, and the
# hash costs about a microsecond a character (10,000 ids were 213 ms of one loop step). Bounded: names up to
# 255 characters, 65,536 of them, forgotten all at once when full.
_HASHES: dict[str, int] = {}
_REMEMBERED_NAMES = 1 << 16
_REMEMBERED_LENGTH = 255


def java_string_hashcode(text: str) -> int:
    """Java's `String.hashCode()` as a signed 32-bit int."""
    remembered = _HASHES.get(text)
    if remembered is not None:
        return remembered
    h = 0
    if text.isascii():  # one UTF-16 unit a character
        for ch in text:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
    else:
        data = text.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    h = h - (1 << 32) if h & 0x80000000 else h
    if len(text) <= _REMEMBERED_LENGTH:
        if len(_HASHES) >= _REMEMBERED_NAMES:
            _HASHES.clear()
        _HASHES[text] = h
    return h


def _kafka_abs(n: int) -> int:
    # org.apache.kafka.common.utils.Utils.abs: MIN_VALUE -> 0, else abs.
    return 0 if n == -(1 << 31) else abs(n)


def partition_for_group(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition holding `group_id`'s offsets and metadata."""
    if num_partitions <= 0:
        raise ValueError(f"offsets.topic.num.partitions must be > 0, got {num_partitions}")
    return _kafka_abs(java_string_hashcode(group_id)) % num_partitions
