"""RecordBatch v2 to columns and back, for the `kelp` data source: one pass per batch, no record objects.

Why: a Spark reader hands Arrow batches to the JVM, so what it needs from a
fetch is columns (keys, values, offsets, timestamps, headers), not one
Python object per record. `decode_columns` walks each batch once with the
varint reader inlined for the common one-byte case, appending straight into
the column lists; `encode_batch` builds one batch per (topic, partition)
chunk for the writer.

The wire layout (Kafka's RecordBatch v2, also `kelp.records`): a 61-byte
header, then, possibly compressed, per record: length (varint), attributes
(int8), timestamp delta (varlong), offset delta (varint), key length and key,
value length and value, header count and headers (varint-length strings).
Lengths of -1 mean null. Control batches (transaction markers) are skipped,
as a consumer skips them. Reading read_committed, `AbortedFilter` also skips
the batches of aborted transactions, from the fetch response's
`aborted_transactions`, as Kafka's consumer does.

What it must never do: I/O, or import pyspark (the reader imports this on
executors, where only the decode runs).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from crc32c import crc32c

from kelp.control_records import read_marker
from kelp.errors import CorruptRecordError
from kelp.records.compression import COMPRESSION_CODECS
from kelp.records.header import HEADER_SIZE, BatchInfo, iter_headers

__all__ = ["Columns", "AbortedFilter", "decode_columns", "encode_batch"]


class AbortedFilter:
    """Which batches of one read_committed fetch belong to aborted transactions (Kafka's consumer rule,
    `CompletedFetch.nextFetchedBatch`): an aborted transaction (producer id, first offset) of the fetch
    response's `aborted_transactions` becomes active once a batch reaching its first offset is met; a
    transactional batch of an active producer is skipped; that producer's ABORT marker ends it."""

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        self._pending = sorted(aborted, key=lambda a: a[1])
        self._active: set[int] = set()

    def skips(self, data: bytes | bytearray | memoryview, info: BatchInfo) -> bool:
        while self._pending and self._pending[0][1] <= info.last_offset:
            self._active.add(self._pending.pop(0)[0])
        if info.is_control:
            marker = read_marker(data, info)
            if marker is not None and not marker.commit:
                self._active.discard(info.producer_id)
            return True
        return info.is_transactional and info.producer_id in self._active


@dataclass(slots=True)
class Columns:
    """The decoded records of one fetch, column by column (timestamps in ms)."""

    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]]] | None = None

    def __len__(self) -> int:
        return len(self.offsets)


def _decompress(codec: int, payload: bytes) -> bytes:
    from kafka import codec as codecs

    # kafka-python's stubs leave most decoders unannotated (their result is Any); each returns bytes.
    decoded: bytes
    if codec == 1:
        decoded = codecs.gzip_decode(payload)
    elif codec == 2:
        decoded = codecs.snappy_decode(payload)
    elif codec == 3:
        decoded = codecs.lz4_decode(payload)
    elif codec == 4:
        decoded = codecs.zstd_decode(payload)
    else:
        raise CorruptRecordError(f"unknown compression codec {codec}")
    return decoded


def decode_columns(data: bytes | bytearray | memoryview, start: int, end: int, *,
                   include_headers: bool = False, into: Columns | None = None,
                   aborted: AbortedFilter | None = None) -> tuple[Columns, int]:
    """Append the records with `start <= offset < end` from the complete batches of `data`, leaving out
    those of aborted transactions when given their filter (read_committed).

    Returns the columns and the offset to fetch next (past the last batch
    seen, so compacted gaps, control batches and aborted ones are stepped over).
    """
    cols = into if into is not None else Columns(headers=[] if include_headers else None)
    if include_headers and cols.headers is None:
        cols.headers = []
    keys, values, offsets = cols.keys, cols.values, cols.offsets
    timestamps, ts_types, headers = cols.timestamps, cols.timestamp_types, cols.headers
    next_offset = start
    view = memoryview(data)
    for info in iter_headers(view):
        skipped = aborted is not None and aborted.skips(view, info)  # sees every batch, as the consumer does
        batch_next = info.next_offset
        if batch_next <= start:
            continue
        if info.base_offset >= end:
            break
        next_offset = batch_next
        if skipped:
            continue
        if info.is_control or info.record_count == 0:
            continue
        body = view[info.position + HEADER_SIZE: info.end]
        buf = bytes(body) if info.compression == 0 else _decompress(info.compression, bytes(body))
        base_offset = info.base_offset
        base_ts = info.base_timestamp
        log_append = info.timestamp_type == 1
        ts_type = 1 if log_append else 0
        max_ts = info.max_timestamp
        pos = 0
        size = len(buf)
        try:
            for _ in range(info.record_count):
                # record length (zigzag varint): only used to find the record's end
                b = buf[pos]
                pos += 1
                if b & 0x80:
                    shift, v = 7, b & 0x7F
                    while True:
                        b = buf[pos]
                        pos += 1
                        v |= (b & 0x7F) << shift
                        if not b & 0x80:
                            break
                        shift += 7
                    rec_len = (v >> 1) ^ -(v & 1)
                else:
                    rec_len = (b >> 1) ^ -(b & 1)
                rec_end = pos + rec_len
                pos += 1  # attributes
                # timestamp delta
                b = buf[pos]
                pos += 1
                if b & 0x80:
                    shift, v = 7, b & 0x7F
                    while True:
                        b = buf[pos]
                        pos += 1
                        v |= (b & 0x7F) << shift
                        if not b & 0x80:
                            break
                        shift += 7
                    ts_delta = (v >> 1) ^ -(v & 1)
                else:
                    ts_delta = (b >> 1) ^ -(b & 1)
                # offset delta
                b = buf[pos]
                pos += 1
                if b & 0x80:
                    shift, v = 7, b & 0x7F
                    while True:
                        b = buf[pos]
                        pos += 1
                        v |= (b & 0x7F) << shift
                        if not b & 0x80:
                            break
                        shift += 7
                    off_delta = (v >> 1) ^ -(v & 1)
                else:
                    off_delta = (b >> 1) ^ -(b & 1)
                offset = base_offset + off_delta
                if offset < start or offset >= end:
                    pos = rec_end
                    continue
                # key
                b = buf[pos]
                pos += 1
                if b & 0x80:
                    shift, v = 7, b & 0x7F
                    while True:
                        b = buf[pos]
                        pos += 1
                        v |= (b & 0x7F) << shift
                        if not b & 0x80:
                            break
                        shift += 7
                    n = (v >> 1) ^ -(v & 1)
                else:
                    n = (b >> 1) ^ -(b & 1)
                if n < 0:
                    keys.append(None)
                else:
                    keys.append(buf[pos:pos + n])
                    pos += n
                # value
                b = buf[pos]
                pos += 1
                if b & 0x80:
                    shift, v = 7, b & 0x7F
                    while True:
                        b = buf[pos]
                        pos += 1
                        v |= (b & 0x7F) << shift
                        if not b & 0x80:
                            break
                        shift += 7
                    n = (v >> 1) ^ -(v & 1)
                else:
                    n = (b >> 1) ^ -(b & 1)
                if n < 0:
                    values.append(None)
                else:
                    values.append(buf[pos:pos + n])
                    pos += n
                offsets.append(offset)
                timestamps.append(max_ts if log_append else base_ts + ts_delta)
                ts_types.append(ts_type)
                if headers is not None:
                    headers.append(_headers(buf, pos, rec_end))
                pos = rec_end
        except IndexError as exc:
            raise CorruptRecordError(f"a record of the batch at offset {base_offset} runs past the batch") from exc
        if pos != size:
            raise CorruptRecordError(f"the batch at offset {base_offset} has {size - pos} bytes after its "
                                     f"{info.record_count} records")
    return cols, next_offset


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = v = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return (v >> 1) ^ -(v & 1), pos
        shift += 7


def _headers(buf: bytes, pos: int, end: int) -> list[tuple[str, bytes | None]]:
    count, pos = _varint(buf, pos)
    out: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        n, pos = _varint(buf, pos)
        name = buf[pos:pos + n].decode("utf-8")
        pos += n
        n, pos = _varint(buf, pos)
        if n < 0:
            out.append((name, None))
        else:
            out.append((name, buf[pos:pos + n]))
            pos += n
    if pos != end:
        raise CorruptRecordError("record headers do not end where the record does")
    return out


def _zigzag(n: int) -> bytes:
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_SMALL = [_zigzag(n) for n in range(-1, 1 << 14)]  # index n + 1: lengths and deltas below 16 KiB
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


def encode_batch(keys: Sequence[bytes | None], values: Sequence[bytes | None],
                 headers: Sequence[Sequence[tuple[str, bytes | None]]] | None, *,
                 compression: str = "none", timestamp_ms: int | None = None) -> bytes:
    """One RecordBatch v2 of the given rows, all stamped `timestamp_ms` (offsets from 0; the broker assigns them).

    Per record only byte strings are joined (varints of small numbers come
    from a table); the header and CRC32C are written once per batch.
    """
    count = len(values)
    if count == 0:
        raise ValueError("a record batch holds at least one record")
    small = _SMALL
    limit = len(small) - 1

    def varint(n: int) -> bytes:
        return small[n + 1] if n < limit else _zigzag(n)

    no_headers = small[1]  # zero headers
    parts: list[bytes] = []
    append = parts.append
    for i in range(count):
        key = keys[i]
        value = values[i]
        if headers is None or not headers[i]:
            tail = no_headers
        else:
            hs = [varint(len(headers[i]))]
            for name, hvalue in headers[i]:
                raw = name.encode("utf-8")
                hs += (varint(len(raw)), raw, small[0] if hvalue is None else varint(len(hvalue)), hvalue or b"")
            tail = b"".join(hs)
        # attributes 0, timestamp delta 0, offset delta i
        body = b"".join((b"\x00\x00", varint(i), small[0] if key is None else varint(len(key)), key or b"",
                         small[0] if value is None else varint(len(value)), value or b"", tail))
        append(varint(len(body)))
        append(body)
    records = b"".join(parts)
    code = COMPRESSION_CODECS[compression]
    if code:
        compressed = _compress(code, records)
        if len(compressed) < len(records):
            records = compressed
        else:
            code = 0
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    length = _BATCH_HEADER.size - 12 + len(records)
    header = bytearray(_BATCH_HEADER.pack(0, length, -1, 2, 0, code, count - 1, ts, ts, -1, -1, -1, count))
    crc = crc32c(records, crc32c(memoryview(header)[21:]))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + records


def _compress(code: int, data: bytes) -> bytes:
    from kafka import codec as codecs

    encode = {1: codecs.gzip_encode, 2: codecs.snappy_encode, 3: codecs.lz4_encode, 4: codecs.zstd_encode}[code]
    encoded: bytes = encode(data)
    return encoded
