"""Checking the records inside a compressed batch: bounded decompression and a walk of the record framing.

Why it exists: a compressed batch's CRC covers its compressed bytes, so a producer (or a bug, or an attacker)
can send a batch whose payload does not decompress, whose header's record count lies, or which inflates to
gigabytes (a zip bomb); stored unread, it is acknowledged and then breaks every consumer of the partition.
Kafka's `LogValidator.validateMessagesAndAssignOffsetsCompressed` iterates the records of every compressed batch
for this reason; `check_records` is that check, for any topic (and, on a compacted topic, for uncompressed
batches too: the walk also says whether every record has a key, Kafka's rule there). Decompression is streamed
with a bound (`max_bytes`) so a bomb costs at most the bound plus one codec step, never its declared size, and
the records are walked without building objects: lengths, offset deltas and the count against the header.

Pure functions on bytes (no I/O, no state); the broker runs them on its CPU pool for batches above a small size
(`broker.replica.leader`). Raises `CorruptRecordError` (does not decompress, framing broken, count or offset
deltas that lie), `RecordTooLargeError` (inflates past `max_bytes`) and `UnsupportedCompressionTypeError` (a
codec id Kafka does not have).
"""

from __future__ import annotations

import struct
import zlib
from typing import Callable

from kelp.errors import CorruptRecordError, RecordTooLargeError, UnsupportedCompressionTypeError

from .header import HEADER_SIZE, BatchInfo

__all__ = ["check_records", "decompress_bounded", "walk_records", "decompressed_limit"]

# Compressed input handed to a streaming decompressor per step: zstd can inflate a few bytes into one 128 KiB
# block and gzip ~1000x, so a step overshoots the bound by a few MiB at most.
_STEP = 256
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_I32 = struct.Struct(">i")


def decompressed_limit(max_message_bytes: int) -> int:
    """The most a batch may inflate to: 64 times `max.message.bytes` (a legitimately compressible batch of
    text inflates 5-20x), at least 64 MiB and at most 1 GiB (two CPU-pool workers hold at most twice it)."""
    return min(max(64 * max_message_bytes, 64 << 20), 1 << 30)


def _bomb(codec: str, max_bytes: int) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"the {codec} batch inflates past {max_bytes} bytes, the limit on a batch's decompressed size "
        "(64 x max.message.bytes, within 64 MiB..1 GiB); refused before storing it")


def _stream(codec: str, payload: memoryview, max_bytes: int,
            new: Callable[[], object]) -> bytes:
    """Feed `payload` to decompressor objects made by `new` (zlib/zstandard's API: decompress, eof, unused_data)
    `_STEP` bytes at a time, a new object per concatenated stream, stopping once past `max_bytes`."""
    out = bytearray()
    d: object = new()
    position = 0
    end = len(payload)
    pending = b""
    chunk: bytes | memoryview
    while position < end or pending:
        if pending:
            chunk, pending = pending, b""
        else:
            chunk = payload[position: position + _STEP]
            position += _STEP
        out += d.decompress(chunk)  # type: ignore[attr-defined]  # zlib's and zstandard's decompressobj
        if len(out) > max_bytes:
            raise _bomb(codec, max_bytes)
        if d.eof:  # type: ignore[attr-defined]  # both decompressobjs have eof
            pending = bytes(d.unused_data)  # type: ignore[attr-defined]  # another concatenated stream
            if pending or position < end:
                d = new()
    if not d.eof:  # type: ignore[attr-defined]  # both decompressobjs have eof
        raise ValueError("the compressed stream ends before its end marker (truncated)")
    return bytes(out)


def _lz4(payload: memoryview, max_bytes: int) -> bytes:
    import lz4.frame  # type: ignore[import-untyped]  # no stubs

    out = bytearray()
    data: bytes | memoryview = payload
    while True:
        d = lz4.frame.LZ4FrameDecompressor()
        out += d.decompress(data, max_length=max_bytes + 1 - len(out))
        if len(out) > max_bytes:
            raise _bomb("lz4", max_bytes)
        if not d.eof:
            if d.needs_input:
                raise ValueError("the lz4 frame ends before its end mark (truncated)")
            raise _bomb("lz4", max_bytes)  # output is pending past the bound
        data = d.unused_data
        if not data:
            return bytes(out)


def _raw_snappy_length(block: memoryview) -> int:
    """The uncompressed length a raw snappy block declares in its varint preamble."""
    result = shift = 0
    for i in range(min(5, len(block))):
        b = block[i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result
        shift += 7
    raise ValueError("a snappy block's length preamble is malformed")


def _snappy(payload: memoryview, max_bytes: int) -> bytes:
    """Raw snappy (librdkafka, kafka-python) or snappy-java's xerial framing (the Java client): each block's
    declared length is checked against the bound before it is inflated."""
    import cramjam

    blocks: list[memoryview] = []
    if bytes(payload[:8]) == _XERIAL_MAGIC:
        position = 16  # magic, version, compatible version
        while position < len(payload):
            if position + 4 > len(payload):
                raise ValueError("a xerial snappy block header is truncated")
            size = _I32.unpack_from(payload, position)[0]
            position += 4
            if size < 0 or position + size > len(payload):
                raise ValueError(f"a xerial snappy block declares {size} bytes past the payload's end")
            blocks.append(payload[position: position + size])
            position += size
    else:
        blocks.append(payload)
    out = bytearray()
    for block in blocks:
        if len(out) + _raw_snappy_length(block) > max_bytes:
            raise _bomb("snappy", max_bytes)
        out += bytes(cramjam.snappy.decompress_raw(bytes(block)))
    return bytes(out)


def decompress_bounded(codec: int, payload: memoryview, max_bytes: int) -> bytes:
    """The records section of a batch in `codec`, inflated; `RecordTooLargeError` past `max_bytes`; the codecs'
    own errors (ValueError, zlib.error, ZstdError, RuntimeError, cramjam's) for a payload that does not inflate."""
    if codec == 1:
        return _stream("gzip", payload, max_bytes, lambda: zlib.decompressobj(47))  # gzip or zlib header
    if codec == 2:
        return _snappy(payload, max_bytes)
    if codec == 3:
        return _lz4(payload, max_bytes)
    if codec == 4:
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        return _stream("zstd", payload, max_bytes, dctx.decompressobj)
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}: Kafka has 0..4")


def _varint(buf: bytes | memoryview, pos: int, max_len: int) -> tuple[int, int]:
    """A zigzag varint at `pos` of at most `max_len` bytes: (value, next position). IndexError past the end."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    for i in range(1, max_len):
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos + i + 1
        shift += 7
    raise ValueError(f"a varint at byte {pos} runs past {max_len} bytes")


def walk_records(buf: bytes | memoryview, record_count: int) -> bool:
    """Walk `record_count` v2 records in `buf` (DefaultRecord's framing): each one's length covers exactly its
    fields, lengths are in bounds, the i-th record's offset delta is i, header keys are not null, and no byte
    is left after the last record. True when every record has a key (a compacted topic's rule). Raises
    ValueError/IndexError naming the first thing wrong."""
    end = len(buf)
    pos = 0
    keyed = True
    for index in range(record_count):
        if pos >= end:
            raise ValueError(f"the header declares {record_count} records, the payload holds {index}")
        length, pos = _varint(buf, pos, 5)
        stop = pos + length
        if length < 1 or stop > end:
            raise ValueError(f"record {index} declares {length} bytes, {end - pos} remain")
        pos += 1  # attributes
        _, pos = _varint(buf, pos, 10)  # timestamp delta
        delta, pos = _varint(buf, pos, 5)
        if delta != index:
            raise ValueError(f"record {index} has offset delta {delta} (expected {index})")
        for field in ("key", "value"):
            size, pos = _varint(buf, pos, 5)
            if size < -1:
                raise ValueError(f"record {index} has a {field} length {size}")
            if size == -1 and field == "key":
                keyed = False
            pos += max(size, 0)
        headers, pos = _varint(buf, pos, 5)
        if headers < 0:
            raise ValueError(f"record {index} has a header count {headers}")
        for _ in range(headers):
            size, pos = _varint(buf, pos, 5)
            if size < 0:
                raise ValueError(f"record {index} has a header key length {size} (header keys are not null)")
            pos += size
            size, pos = _varint(buf, pos, 5)
            if size < -1:
                raise ValueError(f"record {index} has a header value length {size}")
            pos += max(size, 0)
        if pos != stop:
            raise ValueError(f"record {index} declares {length} bytes but its fields take {length + pos - stop}")
    if pos != end:
        raise ValueError(f"{end - pos} bytes remain after the {record_count} records the header declares")
    return keyed


def check_records(data: bytes | bytearray | memoryview, info: BatchInfo, max_bytes: int) -> bool:
    """Walk the records of the batch `info` of `data`, decompressing them first (at most `max_bytes`) when it is
    compressed; True when every record has a key.

    Raises `CorruptRecordError` naming the batch and codec, `RecordTooLargeError` naming the bound,
    `UnsupportedCompressionTypeError` for a codec id Kafka does not have."""
    payload = memoryview(data)[info.position + HEADER_SIZE: info.end]
    try:
        inflated = payload if info.compression == 0 else decompress_bounded(info.compression, payload, max_bytes)
        return walk_records(inflated, info.record_count)
    except (RecordTooLargeError, UnsupportedCompressionTypeError) as exc:
        raise type(exc)(f"batch at byte {info.position}: {exc}") from None
    except Exception as exc:  # the boundary with the codecs (their errors are many) and the walk's
        raise CorruptRecordError(
            f"the records of the {info.compression_name} batch at byte {info.position} do not "
            f"{'decompress or ' if info.compression else ''}decode: {type(exc).__name__}: {exc}") from None
