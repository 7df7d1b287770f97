"""Partition choice for keyed records, identical to Kafka's Java client.

Why: a record produced through Kelp's HTTP API (or the CLI) with key K must
land in the same partition a Kafka client would pick for K, or per-key order
breaks between producers. Kafka's default partitioner is
`(murmur2(key) & 0x7fffffff) % partitions`; kafka-python ships the same
murmur2, which we reuse rather than re-implement.

Keyless records are spread round-robin by the caller's `RoundRobin`
(Kafka's "sticky" partitioner is a batching optimisation; spreading is what
users observe and rely on).

This module must never do I/O.
"""

from __future__ import annotations

import itertools
import random

from kafka.partitioner.default import murmur2

__all__ = ["partition_for_key", "RoundRobin", "murmur2"]


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null `key`."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, got {num_partitions}")
    return (murmur2(bytes(key)) & 0x7FFFFFFF) % num_partitions


class RoundRobin:
    """Spreads keyless records over partitions, starting at a random one."""

    def __init__(self) -> None:
        self._counter = itertools.count(random.randrange(1 << 16))

    def next(self, num_partitions: int) -> int:
        return next(self._counter) % num_partitions
