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


def java_string_hashcode(text: str) -> int:
    """Java's `String.hashCode()` as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _kafka_abs(n: int) -> int:
    # org.apache.kafka.common.utils.Utils.abs: MIN_VALUE -> 0, else abs.
    return 0 if n == -(1 << 31) else abs(n)


def partition_for_group(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition holding `group_id`'s offsets and metadata."""
    if num_partitions <= 0:
        raise ValueError(f"offsets.topic.num.partitions must be > 0, got {num_partitions}")
    return _kafka_abs(java_string_hashcode(group_id)) % num_partitions
