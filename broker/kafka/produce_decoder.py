"""Hand-written ProduceRequest decoder (v3-v9) that never copies record data.

Why: kafka-python's generated decoder copies every partition's records into
a new `bytes`; the log would then copy them once more to rewrite offsets.
Here each partition's records are a writable memoryview into the request
frame (which the request owns), so the log assigns offsets in place and
writes those very bytes. Layout: non-flexible v3-v8, flexible v9 (compact
strings/arrays/bytes, tagged fields skipped). `tests/broker/test_produce_decoder.py`
checks it against kafka-python's encoder.

This module must never look inside record batches.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["ProduceData", "PartitionData", "TopicData", "decode_produce_request"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


@dataclass(slots=True)
class PartitionData:
    index: int
    records: memoryview | None


@dataclass(slots=True)
class TopicData:
    name: str
    partition_data: list[PartitionData]


@dataclass(slots=True)
class ProduceData:
    """What the produce handler reads; attribute names follow kafka-python's ProduceRequest."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicData]


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)

    def need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise ValueError(f"truncated ProduceRequest: need {n} byte(s) at position {pos}, body is {self.end}")
        self.pos = pos + n
        return pos

    def i16(self) -> int:
        value: int = _I16.unpack_from(self.buf, self.need(2))[0]
        return value

    def i32(self) -> int:
        value: int = _I32.unpack_from(self.buf, self.need(4))[0]
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            b = self.buf[self.need(1)]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError(f"unsigned varint too long at position {self.pos}")

    def text(self, n: int) -> str:
        start = self.need(n)
        return bytes(self.buf[start : start + n]).decode("utf-8")

    def view(self, n: int) -> memoryview:
        start = self.need(n)
        return self.buf[start : start + n]

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.need(self.uvarint())


def decode_produce_request(body: memoryview, version: int) -> ProduceData:
    """Decode a ProduceRequest body; raises ValueError naming what is malformed."""
    if not 3 <= version <= 12:  # v10-12 have v9's layout (v10 KIP-951, v11-12 KIP-890: new errors, TV2)
        raise ValueError(f"ProduceRequest v{version} is not supported by this decoder")
    r = _Reader(body)
    flexible = version >= 9
    if flexible:
        n = r.uvarint() - 1
        txn = None if n < 0 else r.text(n)
    else:
        n = r.i16()
        txn = None if n < 0 else r.text(n)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(body, r.need(6))
    topics: list[TopicData] = []
    count = r.uvarint() - 1 if flexible else r.i32()
    for _ in range(max(count, 0)):
        if flexible:
            name = r.text(r.uvarint() - 1)
            pcount = r.uvarint() - 1
        else:
            name = r.text(r.i16())
            pcount = r.i32()
        parts: list[PartitionData] = []
        for _ in range(max(pcount, 0)):
            index = r.i32()
            size = r.uvarint() - 1 if flexible else r.i32()
            records = None if size < 0 else r.view(size)
            if flexible:
                r.skip_tags()
            parts.append(PartitionData(index, records))
        if flexible:
            r.skip_tags()
        topics.append(TopicData(name, parts))
    if flexible:
        r.skip_tags()
    if r.pos != r.end:
        raise ValueError(f"{r.end - r.pos} unexpected trailing byte(s) after the ProduceRequest body")
    return ProduceData(txn, acks, timeout_ms, topics)
