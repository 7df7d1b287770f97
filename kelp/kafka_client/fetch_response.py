"""Hand-written FetchResponse v11 decoder whose records are views of the frame, never copies.

Why: a follower's fetch answer is the largest thing a broker reads (up to `replica.fetch.response.max.bytes`,
every partition it follows on one leader), and a follower reads one after another. kafka-python's generated
decoder copies each partition's records out of the frame and builds an object per field; the follower only
hands the records on to its log, which writes them as they are. Here the fixed-size fields are unpacked with
`struct` and each partition's records are a `memoryview` of the frame (the frame stays alive while one is
held). The result has the attributes the replica fetcher reads from kafka-python's response (`responses`,
`topic`, `partitions`, `partition_index`, `error_code`, `high_watermark`, `last_stable_offset`,
`log_start_offset`, `aborted_transactions`, `preferred_read_replica`, `records`);
`tests/kafka_client/test_fetch_response.py` checks it against kafka-python's decoder.

Only v11 (the version Kelp's followers send, non-flexible): a frame that does not parse as one raises
`ValueError` naming the offset, which the connection reports as a bad reply.

This module must never look inside record batches.
"""

from __future__ import annotations

import struct

__all__ = ["VERSION", "FetchAnswer", "TopicAnswer", "PartitionAnswer", "decode_fetch_response"]

VERSION = 11

_HEAD = struct.Struct(">iihi")  # correlation id (response header v0), throttle, error, session id
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PART = struct.Struct(">ihqqq")  # partition, error, high watermark, last stable offset, log start offset
_ABORTED = struct.Struct(">qq")  # producer id, first offset


class PartitionAnswer:
    __slots__ = ("partition_index", "error_code", "high_watermark", "last_stable_offset", "log_start_offset",
                 "aborted_transactions", "preferred_read_replica", "records")

    def __init__(self, partition_index: int, error_code: int, high_watermark: int, last_stable_offset: int,
                 log_start_offset: int, aborted_transactions: list[tuple[int, int]] | None,
                 preferred_read_replica: int, records: memoryview | None) -> None:
        self.partition_index = partition_index
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted_transactions = aborted_transactions  # (producer id, first offset) pairs; None: null
        self.preferred_read_replica = preferred_read_replica
        self.records = records  # None: null


class TopicAnswer:
    __slots__ = ("topic", "partitions")

    def __init__(self, topic: str, partitions: list[PartitionAnswer]) -> None:
        self.topic = topic
        self.partitions = partitions


class FetchAnswer:
    __slots__ = ("correlation_id", "throttle_time_ms", "error_code", "session_id", "responses")

    def __init__(self, correlation_id: int, throttle_time_ms: int, error_code: int, session_id: int,
                 responses: list[TopicAnswer]) -> None:
        self.correlation_id = correlation_id
        self.throttle_time_ms = throttle_time_ms
        self.error_code = error_code
        self.session_id = session_id
        self.responses = responses


def _need(frame: memoryview, pos: int, n: int, what: str) -> None:
    if n < 0 or pos + n > len(frame):
        raise ValueError(f"FetchResponse v{VERSION}: {what} of {n} bytes at offset {pos} runs past the "
                         f"{len(frame)}-byte frame")


def _array(view: memoryview, pos: int, what: str) -> tuple[int, int]:
    """(count, position after it) of the non-null array whose int32 count is at `pos`."""
    _need(view, pos, 4, f"the count of {what}")
    (count,) = _I32.unpack_from(view, pos)
    if count < 0:
        raise ValueError(f"FetchResponse v{VERSION}: null array of {what} at offset {pos}")
    return count, pos + 4


def decode_fetch_response(frame: bytes | bytearray | memoryview) -> FetchAnswer:
    """The FetchResponse v11 in `frame` (its size prefix removed, the response header first)."""
    view = memoryview(frame)
    _need(view, 0, _HEAD.size, "the header")
    correlation_id, throttle, error, session_id = _HEAD.unpack_from(view, 0)
    topic_count, pos = _array(view, _HEAD.size, "topics")
    topics: list[TopicAnswer] = []
    for _ in range(topic_count):
        _need(view, pos, 2, "a topic name length")
        (name_len,) = _I16.unpack_from(view, pos)
        pos += 2
        _need(view, pos, name_len, "a topic name")
        name = str(view[pos:pos + name_len], "utf-8")
        pos += name_len
        part_count, pos = _array(view, pos, f"partitions of topic '{name}'")
        parts: list[PartitionAnswer] = []
        for _ in range(part_count):
            _need(view, pos, _PART.size + 4, "a partition header")
            partition, perr, hw, lso, log_start = _PART.unpack_from(view, pos)
            pos += _PART.size
            (aborted_count,) = _I32.unpack_from(view, pos)
            pos += 4
            aborted: list[tuple[int, int]] | None = None
            if aborted_count >= 0:
                _need(view, pos, aborted_count * _ABORTED.size, "the aborted transactions")
                aborted = [_ABORTED.unpack_from(view, pos + i * _ABORTED.size) for i in range(aborted_count)]
                pos += aborted_count * _ABORTED.size
            _need(view, pos, 8, "the preferred read replica and records length")
            (preferred,) = _I32.unpack_from(view, pos)
            (records_len,) = _I32.unpack_from(view, pos + 4)
            pos += 8
            records: memoryview | None = None
            if records_len >= 0:
                _need(view, pos, records_len, f"the records of topic '{name}' partition {partition}")
                records = view[pos:pos + records_len]
                pos += records_len
            parts.append(PartitionAnswer(partition, perr, hw, lso, log_start, aborted, preferred, records))
        topics.append(TopicAnswer(name, parts))
    if pos != len(view):
        raise ValueError(f"FetchResponse v{VERSION}: {len(view) - pos} bytes left after the last topic "
                         f"(offset {pos} of {len(view)})")
    return FetchAnswer(correlation_id, throttle, error, session_id, topics)
